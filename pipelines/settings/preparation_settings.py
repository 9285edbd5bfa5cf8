"""``preparation:`` in gkeflow.yaml: one pod or fan-out (kept free of kfp imports, so that
reading the configuration stays light; the stage itself is
:mod:`gkeflow.pipelines.definitions.preparation`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

#: Group pods running at once by default (a compile-time constant of dsl.ParallelFor).
MAX_PARALLEL = 8


class PreparationSettings(BaseModel):
    """``preparation:`` in gkeflow.yaml.

    Attributes:
        fanout: Prepare in parallel pods (plan, one pod per group, merge) instead of one.
        groups: Default of the ``prepare_groups`` pipeline parameter: the most groups
            (1-100); each group is a run of whole input files (or a bq:// row range).
        parallelism: Group pods running at once (compiled into the pipeline).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    fanout: bool = False
    groups: int = Field(8, ge=1, le=100)
    parallelism: int = Field(MAX_PARALLEL, ge=1, le=100)
