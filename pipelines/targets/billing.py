"""What a run really cost: Google's Cloud Billing export to BigQuery, read by the labels each
run's resources carry.

- **GKE**: with GKE cost allocation on, the export carries each pod's Kubernetes labels as
  ``k8s-label/<key>``; Kubeflow Pipelines labels every pod of a run ``pipeline/runid``.
- **Vertex AI**: Vertex AI Pipelines labels a run and what its components create (CustomJobs
  among them) ``vertex-ai-pipelines-run-billing-id`` with the run's billing id, which the
  PipelineJob's own labels give (https://cloud.google.com/vertex-ai/docs/pipelines/
  understand-pipeline-cost-labels).

The query sums ``cost`` and the ``credits`` amounts (negative) of the rows carrying the run's
label, per step where a row carries gkeflow's step label (``gkeflow-step``: the CustomJobs
gkeflow launches), else per SKU. Columns read: ``labels``, ``cost``, ``credits``,
``currency``, ``sku.description``, ``usage_start_time``, ``usage_end_time``,
``export_time`` (the standard and detailed usage cost export schemas).

What the export can say, and how sure it is:

- **Which export.** GKE's cost allocation labels (``k8s-label/...``) are only in the
  *detailed* usage cost export (``gcp_billing_export_resource_v1_<ACCOUNT>``); for a GKE run
  the standard table (``gcp_billing_export_v1_<ACCOUNT>``) is refused with that reason.
- **How fresh.** Google gives no delivery or latency guarantee for the export. A second
  query reads its newest ``export_time``; a run's actual cost is *partial* until the export
  has been written past the run's end plus ``billing.settle_hours``.
- **A bounded scan.** The tables are partitioned by ingestion day (``_PARTITIONTIME``); a
  row is written after its usage, so ``DATE(_PARTITIONTIME) >= DATE(@since)`` keeps every
  row of the run, late ones included, and reads no older partition.
- **Allocated, not priced.** GKE allocates a node's cost to pods by their resource requests;
  gkeflow's estimate prices whole nodes (and Vertex AI machines): the two differ in kind.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

RUN_LABELS = {"gke": "k8s-label/pipeline/runid",
              "vertex": "vertex-ai-pipelines-run-billing-id"}
STEP_LABELS = {"gke": "k8s-label/gkeflow-step", "vertex": "gkeflow-step"}
VERTEX_BILLING_LABEL = RUN_LABELS["vertex"]
ENABLE_EXPORT = ("turn on Cloud Billing's detailed usage cost export to BigQuery (console: "
                 "Billing > Billing export > BigQuery export), then set billing.export_table "
                 "in gkeflow.yaml to PROJECT.DATASET.gcp_billing_export_resource_v1_<ACCOUNT> "
                 "(docs/costs.md)")
QUERY = """\
SELECT
  IFNULL((SELECT l.value FROM UNNEST(e.labels) AS l WHERE l.key = @step_key LIMIT 1), '')
    AS step,
  e.sku.description AS sku,
  SUM(e.cost) AS cost,
  SUM(IFNULL((SELECT SUM(c.amount) FROM UNNEST(e.credits) AS c), 0)) AS credits,
  ANY_VALUE(e.currency) AS currency,
  MIN(e.usage_start_time) AS first_usage,
  MAX(e.usage_end_time) AS last_usage
FROM `{table}` AS e
WHERE DATE(e._PARTITIONTIME) >= DATE(@since)
  AND e.usage_start_time >= @since
  AND EXISTS (SELECT 1 FROM UNNEST(e.labels) AS l WHERE l.key = @run_key AND l.value = @run_value)
GROUP BY step, sku
ORDER BY step, sku"""
FRESHNESS_QUERY = """\
SELECT MAX(e.export_time) AS latest
FROM `{table}` AS e
WHERE DATE(e._PARTITIONTIME) >= DATE(@since)"""
#: Table-name prefixes of the two exports that carry resource labels.
DETAILED_PREFIX, STANDARD_PREFIX = "gcp_billing_export_resource_v1_", "gcp_billing_export_v1_"


def export_kind(table: str) -> str:
    """``detailed``, ``standard`` or ``unknown`` (a renamed table or a view), by its name."""
    name = table.rsplit(".", 1)[-1]
    if name.startswith(DETAILED_PREFIX):
        return "detailed"
    if name.startswith(STANDARD_PREFIX):
        return "standard"
    return "unknown"


def check_export(table: str, target: str) -> str:
    """Refuse the standard export for a GKE run (BillingError naming the fix); a note when
    the table's name does not say which export it is ("" otherwise)."""
    kind = export_kind(table)
    if target == "gke" and kind == "standard":
        raise BillingError(
            f"billing.export_table {table} is Cloud Billing's standard usage cost export, which "
            "has no GKE cost allocation labels (Google puts them only in the detailed usage "
            "cost export): turn on the detailed export (Billing > Billing export > BigQuery "
            "export > Detailed usage cost) and set billing.export_table to PROJECT.DATASET."
            f"{DETAILED_PREFIX}<ACCOUNT>")
    if target == "gke" and kind == "unknown":
        return (f"{table} is not named like an export table ({DETAILED_PREFIX}...): GKE's "
                "cost allocation labels are only in the detailed usage cost export")
    return ""


class BillingError(RuntimeError):
    """The export cannot be read; the message names the fix."""


@dataclass(frozen=True)
class BilledLine:
    """One step (or, unlabelled, one SKU) of a run's bill."""

    step: str
    sku: str
    cost: float
    credits: float
    currency: str

    @property
    def net(self) -> float:
        return round(self.cost + self.credits, 6)


@dataclass(frozen=True)
class Bill:
    """What the export holds for one run, and when the export was last written."""

    lines: list[BilledLine] = field(default_factory=list)
    first_usage: dt.datetime | None = None
    last_usage: dt.datetime | None = None
    #: The newest ``export_time`` in the scanned partitions (None: no row at all).
    export_latest: dt.datetime | None = None

    def complete_after(self, run_end: dt.datetime | None, settle: dt.timedelta) -> bool:
        """Whether the export has been written past ``run_end`` + ``settle`` (a run without
        an end, still running, is never complete)."""
        return (run_end is not None and self.export_latest is not None
                and self.export_latest >= run_end + settle)

    @property
    def currency(self) -> str:
        return ", ".join(sorted({line.currency for line in self.lines})) or "USD"

    @property
    def net(self) -> float:
        return round(sum(line.net for line in self.lines), 6)

    def per_step(self) -> dict[str, float]:
        """step -> net cost; rows with no step label under ``""``."""
        steps: dict[str, float] = {}
        for line in self.lines:
            steps[line.step] = round(steps.get(line.step, 0.0) + line.net, 6)
        return steps


def run_label(target: str, run_id: str, labels: dict[str, str]) -> tuple[str, str]:
    """(label key, value) the run's billed rows carry."""
    if target == "gke":
        return RUN_LABELS["gke"], run_id.rsplit("/", 1)[-1]
    value = labels.get(VERTEX_BILLING_LABEL, "")
    if not value:
        raise BillingError(f"the PipelineJob carries no {VERTEX_BILLING_LABEL} label, which "
                           "Vertex AI attaches to every run: check the run id")
    return VERTEX_BILLING_LABEL, value


def make_client(project: str, api_endpoint: str | None):
    """A BigQuery client billed to ``project``; a plain-http loopback endpoint (an emulator)
    needs no credentials, anything else uses Application Default Credentials."""
    from urllib.parse import urlsplit

    from google.cloud import bigquery

    options = {"api_endpoint": api_endpoint} if api_endpoint else None
    parts = urlsplit(api_endpoint or "")
    if parts.scheme == "http" and parts.hostname in ("127.0.0.1", "localhost", "::1"):
        from google.auth.credentials import AnonymousCredentials

        credentials = AnonymousCredentials()
    else:
        from gkeflow.pipelines.targets.credentials import google_credentials

        credentials = google_credentials("gkeflow runs cost")
    return bigquery.Client(project=project, credentials=credentials, client_options=options)


def read_bill(settings, target: str, run_key: str, run_value: str, since: dt.datetime,
              *, client=None, timeout_s: float = 120.0) -> Bill:
    """The export's rows of one run, summed per step (or SKU) with their credits, and the
    export's newest ``export_time``."""
    from google.cloud import bigquery

    table = settings.export_table
    project = table.split(".", 1)[0]
    client = client or make_client(project, settings.api_endpoint)
    config = bigquery.QueryJobConfig(query_parameters=[
        bigquery.ScalarQueryParameter("step_key", "STRING", STEP_LABELS[target]),
        bigquery.ScalarQueryParameter("run_key", "STRING", run_key),
        bigquery.ScalarQueryParameter("run_value", "STRING", run_value),
        bigquery.ScalarQueryParameter("since", "TIMESTAMP", since)])
    rows = _query(client, QUERY.format(table=table), config, table, project, timeout_s)
    fresh = bigquery.QueryJobConfig(query_parameters=[
        bigquery.ScalarQueryParameter("since", "TIMESTAMP", since)])
    latest = _query(client, FRESHNESS_QUERY.format(table=table), fresh, table, project,
                    timeout_s)
    lines = [BilledLine(row["step"] or "", row["sku"] or "", float(row["cost"] or 0.0),
                        float(row["credits"] or 0.0), row["currency"] or "USD")
             for row in rows]
    firsts = [row["first_usage"] for row in rows if row["first_usage"] is not None]
    lasts = [row["last_usage"] for row in rows if row["last_usage"] is not None]
    return Bill(lines, min(firsts, default=None), max(lasts, default=None),
                latest[0]["latest"] if latest else None)


def _query(client, sql: str, config, table: str, project: str, timeout_s: float) -> list:
    from google.api_core import exceptions as gexc

    try:
        return list(client.query_and_wait(sql, job_config=config, wait_timeout=timeout_s,
                                          api_timeout=timeout_s))
    except gexc.NotFound as exc:
        raise BillingError(f"billing.export_table {table} was not found ({_first(exc)}): "
                           f"{ENABLE_EXPORT}") from None
    except gexc.Forbidden as exc:
        raise BillingError(f"no permission to query {table} ({_first(exc)}): grant "
                           "roles/bigquery.dataViewer on its dataset and roles/bigquery.jobUser "
                           f"on project {project}") from None
    except gexc.BadRequest as exc:
        raise BillingError(f"BigQuery refused the billing query on {table}: {_first(exc)} "
                           "(is it a Cloud Billing export table?)") from None
    except (gexc.GoogleAPICallError, gexc.RetryError, TimeoutError) as exc:
        raise BillingError(f"BigQuery did not answer the billing query: {_first(exc)}; try "
                           "again") from None


def _first(exc) -> str:
    message = getattr(exc, "message", "") or str(exc)
    return message.splitlines()[0] if message else type(exc).__name__
