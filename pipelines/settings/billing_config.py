"""``billing:`` in gkeflow.yaml: where Google's Cloud Billing export to BigQuery is, for
`gkeflow runs cost RUN` (what a run really cost; docs/costs.md).

Example::

    billing:
      export_table: my-project.billing.gcp_billing_export_resource_v1_0123AB_4567CD_89EF01

The detailed usage cost table (``gcp_billing_export_resource_v1_*``) or, for Vertex AI runs
only, the standard one (``gcp_billing_export_v1_*``): GKE's cost allocation labels are only
in the detailed export. Imports
nothing from gkeflow: the root model in :mod:`gkeflow.pipelines.settings.config` attaches it.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

_TABLE = re.compile(r"^[a-z][a-z0-9:.-]{4,61}[a-z0-9]"  # project
                    r"\.[A-Za-z0-9_]{1,1024}"  # dataset
                    r"\.[A-Za-z0-9_$-]{1,1024}$")  # table


class BillingSettings(BaseModel):
    """The billing export: its table, and how far back a run's costs are looked for."""

    model_config = ConfigDict(extra="forbid")

    #: PROJECT.DATASET.TABLE of the export (backticks allowed).
    export_table: str
    #: Days before a run's start the query reads from (usage that started before the run's
    #: own start, such as a node brought up for it); the scan starts at that day's partition.
    lookback_days: int = Field(2, ge=0, le=400)
    #: Hours after a run's end before its actual cost counts as complete: Google gives no
    #: latency guarantee for the export, so until it has been written this far past the
    #: run's end, the figure is marked partial.
    settle_hours: int = Field(24, ge=0, le=24 * 14)
    #: The BigQuery API (a local emulator in tests); default Google's.
    api_endpoint: str | None = None

    @field_validator("export_table")
    @classmethod
    def _table(cls, value: str) -> str:
        value = value.strip().strip("`")
        if not _TABLE.match(value):
            raise ValueError("not PROJECT.DATASET.TABLE (e.g. my-project.billing."
                             "gcp_billing_export_resource_v1_0123AB_4567CD_89EF01)")
        return value
