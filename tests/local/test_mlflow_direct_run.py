"""Direct MLflow tracking through a whole local run: the steps' own code (as kfp.local runs
it, from the component source) opens one nested run per step under the run's parent."""

from __future__ import annotations

import pytest

from gkeflow.components.tracking.client import (
    ENV_PARENT_RUN_ID,
    ENV_RUN_ID,
    ENV_TRACKING_URI,
    PARENT_TAG,
)
from gkeflow.components.tracking.direct import end_pipeline_run, start_pipeline_run
from gkeflow.pipelines.targets.local import run_local

pytestmark = pytest.mark.slow
pytest.importorskip("mlflow", reason="mlflow is not installed (pip install -e '.[dev]')")

TRACKED = ["prepare-data", "train-model", "evaluate-model", "register-model"]


def test_local_run_logs_a_nested_run_per_step(tmp_path, monkeypatch, mlflow_server):
    parent = start_pipeline_run(mlflow_server.url, "gkeflow-local", "local-run-1",
                                pipeline_name="training-pipeline")
    monkeypatch.setenv(ENV_TRACKING_URI, mlflow_server.url)
    monkeypatch.setenv(ENV_PARENT_RUN_ID, parent)
    monkeypatch.delenv(ENV_RUN_ID, raising=False)

    result = run_local({"epochs": 2, "min_accuracy": 0.0,
                        "registry_uri": f"sqlite:///{tmp_path / 'registry.db'}"},
                       tmp_path / "out", enable_caching=False)
    assert result.ok, result.error
    end_pipeline_run(mlflow_server.url, parent, succeeded=result.ok)

    experiment_id = mlflow_server.run(parent)["info"]["experiment_id"]
    children = {run["info"]["run_name"]: run["info"]["run_id"] for run in
                mlflow_server.search_runs(experiment_id, f"tags.`{PARENT_TAG}` = '{parent}'")}
    assert sorted(children) == sorted(TRACKED)
    for step, run_id in children.items():
        assert mlflow_server.run(run_id)["info"]["status"] == "FINISHED", step
    assert mlflow_server.run(parent)["info"]["status"] == "FINISHED"

    evaluation = mlflow_server.run(children["evaluate-model"])
    assert evaluation["metrics"]["accuracy"] == pytest.approx(
        result.artifact_metadata("evaluate-model", "metrics")["accuracy"], abs=1e-6)
    assert "model_card.md" in mlflow_server.artifacts(children["evaluate-model"])
    assert [step for step, _ in
            mlflow_server.metric_history(children["train-model"], "loss")] == [1, 2]
    assert "model/saved_model.pb" in mlflow_server.artifacts(children["train-model"], "model")
    fingerprint = mlflow_server.run(children["prepare-data"])["tags"]
    assert fingerprint["gkeflow.data_fingerprint"]
    registered = mlflow_server.run(children["register-model"])["tags"]
    assert registered["gkeflow.registry.action"] == "registered"
    assert registered["gkeflow.registered_model.version"] == "1"
