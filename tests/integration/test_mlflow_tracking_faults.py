"""A tracking server that goes away or errors never changes a step's outcome: one log line,
then no more tracking calls for the rest of the step, with bounded attempts per call."""

from __future__ import annotations

import re

import pytest

from gkeflow.components.tracking.client import (
    ENV_PARENT_RUN_ID,
    ENV_RUN_ID,
    ENV_TRACKING_URI,
    Limits,
    Tracker,
    open_step_run,
)
from gkeflow.components.tracking.steps import track_evaluation, track_preparation

pytest.importorskip("mlflow", reason="mlflow is not installed (pip install -e '.[dev]')")


@pytest.fixture
def no_backoff(monkeypatch):
    """MLflow's retries without their sleeps (the limits only ever lower these)."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")
    monkeypatch.delenv(ENV_PARENT_RUN_ID, raising=False)


@pytest.fixture
def evaluation(prepared_penguins, trained_penguins):
    from gkeflow.components.evaluate.logic import evaluate
    from gkeflow.components.prepare.logic import Schema

    dataset_dir, _ = prepared_penguins
    return evaluate(dataset_dir, Schema.load(dataset_dir / "schema.json"),
                    trained_penguins[0], min_accuracy=0.8)


def test_server_stopped_mid_step(tmp_path, monkeypatch, no_backoff, evaluation,
                                 prepared_penguins, trained_penguins, capsys):
    from kfp.dsl import HTML, Artifact, ClassificationMetrics, Dataset, Markdown, Metrics, Model

    from gkeflow.components.evaluate.component import evaluate_model
    from tests.integration.mlflow_server import start_or_skip

    server = start_or_skip(tmp_path / "mlflow")
    try:
        _, run_id = server.create_run("kfp-plugin")
        monkeypatch.setenv(ENV_TRACKING_URI, server.url)
        monkeypatch.setenv(ENV_RUN_ID, run_id)
        lines: list[str] = []
        tracker = open_step_run("evaluate-model", log=lines.append)
        tracker.log_params({"before": "the server stopped"})
        assert tracker.enabled and tracker.calls == 1
        assert server.run(run_id)["params"] == {"before": "the server stopped"}
    finally:
        server.stop()

    # mid-step: the rest of the evaluation's logging finds no server
    track_evaluation(evaluation, "# card", tracker=tracker)
    assert not tracker.enabled
    assert tracker.calls == 2  # the first failing call turned tracking off
    assert len(lines) == 1 and lines[0].startswith("mlflow: tracking off for the rest of")
    assert "logging metrics failed" in lines[0] and "\n" not in lines[0]

    # the whole step with its server gone: same decision and outputs, one line about it
    dataset_dir, _ = prepared_penguins
    outputs = {name: cls(uri=str(tmp_path / name)) for name, cls in [
        ("metrics", Metrics), ("classification_metrics", ClassificationMetrics),
        ("model_card", Markdown), ("evaluation", Artifact), ("plots", HTML)]}
    capsys.readouterr()
    blessed = evaluate_model.python_func(
        dataset=Dataset(uri=str(dataset_dir)),
        schema=Artifact(uri=str(dataset_dir / "schema.json")),
        model=Model(uri=str(trained_penguins[0])), min_accuracy=0.8, **outputs)
    out = capsys.readouterr().out
    assert blessed is evaluation.passed
    assert outputs["metrics"].metadata["accuracy"] == round(evaluation.metrics.accuracy, 6)
    assert [line for line in out.splitlines() if "mlflow" in line.lower()] == \
        [line for line in out.splitlines() if line.startswith("mlflow: tracking off")]
    assert sum(line.startswith("mlflow:") for line in out.splitlines()) == 1


def test_server_errors_are_retried_a_bounded_number_of_times(httpserver, monkeypatch,
                                                            no_backoff, prepared_penguins):
    """Every call answered 503: the first call is tried 1 + max_retries times, then the step
    sends nothing more."""
    httpserver.expect_request(re.compile(".*")).respond_with_data("overloaded", status=503)
    monkeypatch.setenv(ENV_TRACKING_URI, httpserver.url_for("").rstrip("/"))
    monkeypatch.setenv(ENV_RUN_ID, "0123456789abcdef")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "9")  # lowered to the step's cap
    lines: list[str] = []
    tracker = open_step_run("prepare-data", log=lines.append)
    assert tracker.limits.max_retries == Limits().max_retries

    track_preparation(prepared_penguins[1], "data.csv", "species", "sha256:1",
                      tracker=tracker)
    assert len(httpserver.log) == 1 + Limits().max_retries
    assert all(request.path.endswith("/runs/log-batch") for request, _ in httpserver.log)
    assert len(lines) == 1 and "503" in lines[0]


def test_tracking_stops_when_its_time_budget_is_spent(mlflow_server, monkeypatch):
    """Calls that each take long (a slow server) stop once the step's budget is spent."""
    from mlflow import MlflowClient

    _, run_id = mlflow_server.create_run("budget")
    now = [0.0]

    def clock() -> float:
        now[0] += 30.0  # each call seems to take 30 s
        return now[0]

    lines: list[str] = []
    tracker = Tracker(MlflowClient(tracking_uri=mlflow_server.url), run_id,
                      limits=Limits(budget_s=60), log=lines.append, clock=clock)
    for i in range(5):
        tracker.log_metrics({"m": float(i)}, step=i)
    assert tracker.calls == 2 and not tracker.enabled
    assert [step for step, _ in mlflow_server.metric_history(run_id, "m")] == [0, 1]
    assert len(lines) == 1 and "60 s of tracking spent" in lines[0]


def test_a_run_the_step_opened_is_ended_even_past_the_budget(mlflow_server, monkeypatch):
    """Direct mode: a long upload spends the budget; the nested run is still ended."""
    from gkeflow.components.tracking.direct import start_pipeline_run

    parent = start_pipeline_run(mlflow_server.url, "budget-direct", "run-budget")
    monkeypatch.setenv(ENV_TRACKING_URI, mlflow_server.url)
    monkeypatch.setenv(ENV_PARENT_RUN_ID, parent)
    monkeypatch.delenv(ENV_RUN_ID, raising=False)
    tracker = open_step_run("train-model")
    assert tracker.owns_run and tracker.enabled
    tracker.spent_s = tracker.limits.budget_s  # as after an upload that took that long
    tracker.log_metrics({"skipped": 1.0})
    assert not tracker.enabled
    tracker.finish()
    run = mlflow_server.run(tracker.run_id)
    assert run["info"]["status"] == "FINISHED" and "skipped" not in run["metrics"]


def test_limits_from_the_environment_only_lower_the_defaults():
    limits = Limits.from_env({"MLFLOW_HTTP_REQUEST_TIMEOUT": "120",
                              "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
                              "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "x"})
    assert (limits.timeout_s, limits.max_retries, limits.backoff_factor) == \
        (Limits().timeout_s, 1, Limits().backoff_factor)


def test_an_unexpected_error_while_tracking_never_fails_the_step(mlflow_server, monkeypatch,
                                                                  capsys):
    """A result the tracking code cannot read (here: none at all) costs one line."""
    _, run_id = mlflow_server.create_run("unexpected")
    monkeypatch.setenv(ENV_TRACKING_URI, mlflow_server.url)
    monkeypatch.setenv(ENV_RUN_ID, run_id)
    monkeypatch.delenv(ENV_PARENT_RUN_ID, raising=False)
    track_evaluation(None, "# card")
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mlflow: tracking stopped in this step")


def test_a_tracking_uri_mlflow_cannot_use_turns_tracking_off(monkeypatch):
    monkeypatch.setenv(ENV_TRACKING_URI, "nosuchscheme://host/path")
    monkeypatch.setenv(ENV_RUN_ID, "0123")
    lines: list[str] = []
    tracker = open_step_run("prepare-data", log=lines.append)
    tracker.log_params({"a": 1})
    assert not tracker.enabled and len(lines) == 1 and lines[0].startswith("mlflow:")
