"""`gkeflow runs cost RUN`: the actual cost of a run from the Cloud Billing export to
BigQuery (a strict fake of jobs.query over rows shaped like the export's schema) beside the
list-price estimate, on the fake KFP and Vertex AI servers."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from tests.cli.test_cost_cli import write_cache
from tests.integration.conftest import TOKEN, gkeflow
from tests.integration.fake_billing_export import FakeBillingExport, export_row
from tests.integration.test_runs import kfp_runs, vertex_runs  # noqa: F401
from tests.integration.test_runs_cost import finished  # noqa: F401

TABLE = "my-project.billing.gcp_billing_export_resource_v1_0123AB_4567CD_89EF01"
NOW = dt.datetime.now(dt.UTC)


def _cost(tmp_path, write_config, data, run_id, target, server, *extra):
    if server is not None:
        data = {**data, "billing": {"export_table": TABLE, "api_endpoint": server.url}}
    return gkeflow("runs", "cost", run_id, "--target", target, "--config",
                   str(write_config(data)), *extra, cwd=tmp_path,
                   env={"GKEFLOW_TEST_KFP_TOKEN": TOKEN, "COLUMNS": "200"})


def test_gke_actual_cost_sums_the_runs_rows_and_credits_beside_the_estimate(
        finished, write_config, tmp_path):  # noqa: F811
    data, runs = finished
    write_cache(tmp_path)
    run = runs["gke"]
    key = "k8s-label/pipeline/runid"
    rows = [
        export_row(labels={key: run, "k8s-label/gkeflow-step": "train-model"}, cost=2.5,
                   credits=(-0.5,), start=NOW),
        export_row(labels={key: run}, cost=0.75, sku="N1 Predefined Instance Core", start=NOW),
        export_row(labels={key: run}, cost=0.25, sku="N1 Predefined Instance Core", start=NOW),
        export_row(labels={key: "another-run"}, cost=99.0, start=NOW),  # not this run
        export_row(labels={key: run}, cost=50.0, start=NOW - dt.timedelta(days=30)),  # too old
        # written three days after its usage: in a later partition, still the run's
        export_row(labels={key: run}, cost=0.5, sku="Late row", start=NOW,
                   exported=dt.timedelta(days=3)),
    ]
    with FakeBillingExport(TABLE, rows) as server:
        server.fail_next = 1  # one transient 503: the client retries
        result = _cost(tmp_path, write_config, data, run, "gke", server, "--output", "json")
        assert result.returncode == 0, result.stderr
        assert not server.violations, server.violations
    report = json.loads(result.stdout)
    assert report["actual_usd"] == pytest.approx(2.5 - 0.5 + 0.75 + 0.25 + 0.5)
    assert report["label"] == {"key": key, "value": run} and report["export"] == "detailed"
    # the newest row was written three days after the run: past its end + 24 h, complete
    assert report["complete"] is True and report["actual_status"] == "complete"
    assert any("allocates each node's cost to pods by their resource requests" in note
               for note in report["notes"])
    steps = {row["step"]: row for row in report["steps"]}
    assert steps["train-model"]["actual_usd"] == pytest.approx(2.0)
    assert steps[None]["actual_usd"] == pytest.approx(1.5)  # the rows with no step label
    assert steps["train-model"]["estimated_usd"] is not None
    assert report["estimated_usd"] is not None and report["gpu_duty_cycle_pct"] is None
    query, freshness = server.queries[-2:]
    params = {p["name"]: p["parameterValue"]["value"] for p in query["queryParameters"]}
    assert params["run_value"] == run and params["run_key"] == key
    # both queries bound the partitions they scan (the fake applies the bound)
    for sent in (query, freshness):
        assert "WHERE DATE(e._PARTITIONTIME) >= DATE(@since)" in sent["query"]
    assert "MAX(e.export_time)" in freshness["query"]

    with FakeBillingExport(TABLE, rows) as server:
        table = _cost(tmp_path, write_config, data, run, "gke", server)
    assert table.returncode == 0, table.stderr
    assert "actual (Cloud Billing export, credits included): $3.50 USD\n" in table.stdout
    assert "export: complete" in table.stdout
    assert "  train-model: actual $2.00, estimate $" in table.stdout
    assert "    N1 Predefined Instance Core: $1.00" in table.stdout
    assert "note: GKE's figure allocates each node's cost to pods by their resource " \
           "requests" in table.stdout


def test_an_export_not_yet_past_the_runs_end_gives_a_partial_figure(
        finished, write_config, tmp_path):  # noqa: F811
    data, runs = finished
    run, key = runs["gke"], "k8s-label/pipeline/runid"
    rows = [export_row(labels={key: run}, cost=1.25, start=NOW)]  # written 3 h after usage
    with FakeBillingExport(TABLE, rows) as server:
        result = _cost(tmp_path, write_config, data, run, "gke", server, "--output", "json")
        table = _cost(tmp_path, write_config, data, run, "gke", server)
    report = json.loads(result.stdout)
    assert report["actual_usd"] == pytest.approx(1.25) and report["complete"] is False
    assert report["actual_status"].startswith("partial: the export's newest rows were written ")
    assert "no latency guarantee" in report["actual_status"]
    assert "actual (Cloud Billing export, credits included): $1.25 USD (partial)" in \
        table.stdout


def test_the_standard_export_is_refused_for_a_gke_run_with_the_reason(
        finished, write_config, tmp_path):  # noqa: F811
    data, runs = finished
    standard = "my-project.billing.gcp_billing_export_v1_0123AB_4567CD_89EF01"
    with FakeBillingExport(standard, []) as server:
        config = {**data, "billing": {"export_table": standard, "api_endpoint": server.url}}
        result = gkeflow("runs", "cost", runs["gke"], "--target", "gke", "--config",
                         str(write_config(config)), cwd=tmp_path,
                         env={"GKEFLOW_TEST_KFP_TOKEN": TOKEN})
        assert not server.queries  # refused before any query is paid for
        vertex = gkeflow("runs", "cost", runs["vertex"], "--target", "vertex", "--config",
                         str(write_config(config)), "--output", "json", cwd=tmp_path,
                         env={"GKEFLOW_TEST_KFP_TOKEN": TOKEN})
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "standard usage cost export, which has no GKE cost allocation labels" in \
        result.stderr and "gcp_billing_export_resource_v1_<ACCOUNT>" in result.stderr
    # a Vertex AI run's label is in the standard export too
    assert vertex.returncode == 0, vertex.stderr
    assert json.loads(vertex.stdout)["export"] == "standard"


def test_vertex_actual_cost_is_read_by_the_runs_billing_id(
        finished, vertex_runs, write_config, tmp_path):  # noqa: F811
    data, runs = finished
    job = vertex_runs.jobs[runs["vertex"]]
    billing_id = job.labels["vertex-ai-pipelines-run-billing-id"]
    key = "vertex-ai-pipelines-run-billing-id"
    rows = [export_row(labels={key: billing_id, "gkeflow-step": "train-model"}, cost=7.0,
                       service="Vertex AI", sku="Training/Pipelines on A2 Instance Core",
                       start=NOW),
            export_row(labels={key: billing_id}, cost=0.03, service="Vertex AI",
                       sku="Pipelines run execution fee", start=NOW)]
    with FakeBillingExport(TABLE, rows) as server:
        result = _cost(tmp_path, write_config, data, runs["vertex"], "vertex", server,
                       "--output", "json")
        assert result.returncode == 0, result.stderr
        assert not server.violations, server.violations
    report = json.loads(result.stdout)
    assert report["actual_usd"] == pytest.approx(7.03)
    assert {row["step"]: row["actual_usd"] for row in report["steps"]}["train-model"] == 7.0


def test_no_rows_yet_says_why_and_what_to_turn_on(finished, write_config, tmp_path):  # noqa: F811
    data, runs = finished
    with FakeBillingExport(TABLE, []) as server:
        result = _cost(tmp_path, write_config, data, runs["gke"], "gke", server)
    assert result.returncode == 0, result.stderr
    assert "actual (Cloud Billing export, credits included): missing (no row of the export " \
           "carries the run's label yet (partial: the export's newest rows were written " \
           "never" in result.stdout
    assert "--enable-cost-allocation" not in result.stdout  # too early to blame the cluster
    # once the export has been written a day past the run's end, the missing label is the
    # cluster's: cost allocation is off
    later = [export_row(labels={"k8s-label/pipeline/runid": "another-run"}, cost=1.0,
                        start=NOW, exported=dt.timedelta(days=2))]
    with FakeBillingExport(TABLE, later) as server:
        result = _cost(tmp_path, write_config, data, runs["gke"], "gke", server)
    assert "no row carries the run's label: turn on GKE cost allocation" in result.stdout
    assert "--enable-cost-allocation" in result.stdout


@pytest.mark.parametrize("fault, message", [
    (None, "no billing export in"),
    ("table", "billing.export_table my-project.billing.other was not found"),
    ("deny", "no permission to query"),
])
def test_a_missing_or_unreadable_export_is_one_line_naming_the_fix(
        finished, write_config, tmp_path, fault, message):  # noqa: F811
    data, runs = finished
    if fault is None:
        result = _cost(tmp_path, write_config, data, runs["gke"], "gke", None)
        assert "turn on Cloud Billing's detailed usage cost export to BigQuery" in result.stderr
    else:
        with FakeBillingExport(TABLE, []) as server:
            server.deny = fault == "deny"
            table = "my-project.billing.other" if fault == "table" else TABLE
            data = {**data, "billing": {"export_table": table, "api_endpoint": server.url}}
            result = gkeflow("runs", "cost", runs["gke"], "--target", "gke", "--config",
                             str(write_config(data)), cwd=tmp_path,
                             env={"GKEFLOW_TEST_KFP_TOKEN": TOKEN})
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert message in result.stderr
