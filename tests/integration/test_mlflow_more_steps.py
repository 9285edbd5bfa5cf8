"""The steps around training in MLflow, against a real MLflow server in direct mode (a parent
run per pipeline run, a nested run per step): the data fingerprint, the deployment (done
and failed), the prediction report, and the sweep: every trial a nested run with its
hyperparameters and objective, whichever engine ran it, the best one marked."""

from __future__ import annotations

import json
import uuid

import pytest

from gkeflow.components.tracking.client import (
    ENV_PARENT_RUN_ID,
    ENV_RUN_ID,
    ENV_TRACKING_URI,
    ENV_TRAINING_RUN,
    PARENT_TAG,
    STEP_TAG,
    TASK_TAG,
)

pytest.importorskip("mlflow", reason="mlflow is not installed (pip install -e '.[dev]')")


@pytest.fixture
def parent(mlflow_server, monkeypatch):
    from gkeflow.components.tracking.direct import start_pipeline_run

    run_id = start_pipeline_run(mlflow_server.url, "more-steps",
                                f"local-training-{uuid.uuid4().hex[:8]}")
    monkeypatch.setenv(ENV_TRACKING_URI, mlflow_server.url)
    monkeypatch.setenv(ENV_PARENT_RUN_ID, run_id)
    monkeypatch.delenv(ENV_RUN_ID, raising=False)
    monkeypatch.delenv(ENV_TRAINING_RUN, raising=False)
    return run_id


def step_runs(mlflow_server, parent_run_id: str) -> dict[str, dict]:
    """The parent's nested runs by task tag, each as :meth:`MlflowServer.run` reads it."""
    experiment_id = mlflow_server.run(parent_run_id)["info"]["experiment_id"]
    found = mlflow_server.search_runs(experiment_id, f"tags.`{PARENT_TAG}` = '{parent_run_id}'")
    runs = [mlflow_server.run(r["info"]["run_id"]) for r in found]
    return {r["tags"][TASK_TAG]: r for r in runs}


def test_fingerprint_data_logs_both_fingerprints_and_what_was_hashed(parent, mlflow_server):
    from gkeflow.components.fingerprint.component import fingerprint_data
    from gkeflow.components.prepare.logic import EMBEDDED_PENGUINS

    data, code = fingerprint_data.python_func(data_uri=EMBEDDED_PENGUINS)
    run = step_runs(mlflow_server, parent)["fingerprint-data"]
    assert run["params"]["data_fingerprint"] == run["tags"]["gkeflow.data_fingerprint"] == data
    assert run["params"]["code_fingerprint"] == "(built-in model)" and code == ""
    assert run["metrics"]["sources"] == 1
    listed = json.loads(mlflow_server.artifact_bytes(run["info"]["run_id"],
                                                     "data/fingerprint.json"))
    assert listed["value"] == data and listed["sources_total"] == 1
    assert run["info"]["status"] == "FINISHED"


def _outcome():
    from gkeflow.components.deploy.logic import DeployOutcome

    return DeployOutcome("gke", "penguins", "team-a/penguins", "penguins-classifier", 4,
                         {"penguins-classifier@3": 90, "penguins-classifier@4": 10},
                         "servable: 5 sample rows answered", serving_image="tensorflow/"
                         "serving:2.19.0")


def test_deploy_logs_endpoint_split_image_version_and_outcome(parent, mlflow_server):
    from gkeflow.components.tracking.more_steps import track_deployment

    registered = {"modelName": "penguins-classifier", "version": 4}
    track_deployment(_outcome(), target="gke", registered=registered, traffic=10)
    run = step_runs(mlflow_server, parent)["deploy-model"]
    assert run["params"] == {"target": "gke", "model_name": "penguins-classifier",
                             "model_version": "4", "requested_traffic": "10",
                             "endpoint": "penguins", "serving_image": "tensorflow/serving:2.19.0"}
    assert run["tags"]["gkeflow.deploy.outcome"] == "deployed"
    assert run["tags"]["gkeflow.deploy.traffic_split"] == (
        "penguins-classifier@3 90%, penguins-classifier@4 10%")
    assert run["metrics"] == {"traffic_percent": 10.0, "versions_serving": 2.0}
    assert mlflow_server.artifacts(run["info"]["run_id"]) == ["deployment/deployment.json"]
    assert run["info"]["status"] == "FINISHED"


def test_a_failed_deploy_is_a_failed_run_naming_the_error(parent, mlflow_server, tmp_path):
    from kfp.dsl import Artifact, Markdown, Model

    from gkeflow.components.deploy.component import deploy_model

    registered = Artifact(uri=str(tmp_path / "registered"))
    registered.metadata.update({"modelName": "penguins-classifier", "version": 0})
    with pytest.raises(Exception, match="names no model and version"):
        deploy_model.python_func(
            model=Model(uri=str(tmp_path / "model")),
            evaluation=Artifact(uri=str(tmp_path / "evaluation")),
            registered_model=registered, deployment=Artifact(uri=str(tmp_path / "d")),
            summary=Markdown(uri=str(tmp_path / "s")), target="local", traffic=10)
    run = step_runs(mlflow_server, parent)["deploy-model"]
    assert run["tags"]["gkeflow.deploy.outcome"] == "failed"
    assert "names no model and version" in run["tags"]["gkeflow.deploy.error"]
    assert run["info"]["status"] == "FAILED"


def test_report_predictions_logs_its_figures_and_summary(parent, mlflow_server):
    from gkeflow.components.tracking.more_steps import track_prediction_report

    figures = {"rows": 344, "mean_top_probability": 0.93, "share_Adelie": 0.44}
    track_prediction_report(figures, "# Predictions\n")
    run = step_runs(mlflow_server, parent)["report-predictions"]
    assert run["metrics"] == figures
    assert mlflow_server.artifact_bytes(run["info"]["run_id"],
                                        "prediction/summary.md") == b"# Predictions\n"


TRIALS = [{"trial_id": "trial-000", "learning_rate": 0.01},
          {"trial_id": "trial-001", "learning_rate": 0.03},
          {"trial_id": "trial-002", "learning_rate": 0.3}]
REPORTS = [json.dumps({"trial_id": "trial-000", "status": "succeeded",
                       "metrics": {"eval_accuracy": 0.9}, "model_uri": "m0"}),
           json.dumps({"trial_id": "trial-001", "status": "succeeded",
                       "metrics": {"eval_accuracy": 0.95}, "model_uri": "m1"}),
           json.dumps({"trial_id": "trial-002", "status": "failed", "error": "NaN loss",
                       "model_uri": "m2"})]


def test_every_trial_is_a_nested_run_and_the_selection_logs_the_best(parent, mlflow_server):
    from gkeflow.components.sweep.logic import select
    from gkeflow.components.tracking.pipeline_run import open_step_run
    from gkeflow.components.tracking.sweep import track_selection

    # trial-000 trained in a train-model step (ParallelFor), which opened its own run
    trained = open_step_run("train-model", task="trial-000")
    trained.log_params({"learning_rate": 0.01, "epochs": 20})
    trained.finish()
    selection = select(TRIALS, REPORTS, "eval_accuracy", "maximize", ["learning_rate"])
    track_selection(selection, "tune-with-vizier", tuning_job="projects/p/hpt/1")

    runs = step_runs(mlflow_server, parent)
    assert set(runs) == {"trial-000", "trial-001", "trial-002", "tune-with-vizier"}
    assert runs["trial-000"]["info"]["run_id"] == trained.run_id, "its training run, reused"
    assert runs["trial-000"]["params"] == {"learning_rate": "0.01", "epochs": "20"}
    assert runs["trial-001"]["params"] == {"learning_rate": "0.03"}
    assert runs["trial-001"]["tags"][STEP_TAG] == "sweep-trial"
    for trial, value in (("trial-000", 0.9), ("trial-001", 0.95)):
        assert runs[trial]["metrics"] == {"eval_accuracy": value}
    assert runs["trial-002"]["metrics"] == {}
    assert {t: runs[t]["tags"]["gkeflow.sweep.best"] for t in ("trial-000", "trial-001",
                                                              "trial-002")} == {
        "trial-000": "false", "trial-001": "true", "trial-002": "false"}
    assert runs["trial-001"]["tags"]["gkeflow.sweep.rank"] == "1"
    assert runs["trial-002"]["tags"]["gkeflow.sweep.status"] == "failed"
    assert [runs[t]["info"]["status"] for t in ("trial-000", "trial-001", "trial-002")] == [
        "FINISHED", "FINISHED", "FAILED"]
    selecting = runs["tune-with-vizier"]
    assert selecting["metrics"] == {"best_eval_accuracy": 0.95, "trials_succeeded": 2,
                                    "trials_failed": 1}
    assert selecting["params"]["best_learning_rate"] == "0.03"
    assert selecting["params"]["tuning_job"] == "projects/p/hpt/1"
    assert selecting["tags"]["gkeflow.sweep.best_trial"] == "trial-001"
    table = json.loads(mlflow_server.artifact_bytes(selecting["info"]["run_id"],
                                                    "sweep/trials.json"))
    assert [row["trial_id"] for row in table["trials"]] == ["trial-001", "trial-000",
                                                            "trial-002"]


def test_the_fanout_preparation_logs_its_merged_counts(parent, mlflow_server, tmp_path):
    from kfp import dsl

    from gkeflow.components.prepare.fanout_component import (
        merge_prepared,
        plan_prepare,
        prepare_group,
    )
    from tests.unit.test_prepare_fanout import make_inputs

    def artifact(kind, name):
        made = kind(name=name, uri=str(tmp_path / name))
        (tmp_path / name).mkdir()
        return made

    source = make_inputs(tmp_path / "in", files=3, rows=900)
    plan = artifact(dsl.Artifact, "plan")
    groups = plan_prepare.python_func(data_uri=source, plan=plan, label_column="status",
                                      max_groups=3)
    parts = []
    for group in groups:
        part = artifact(dsl.Artifact, f"part-{group}")
        prepare_group.python_func(plan=plan, group=group, part=part)
        parts.append(part)
    dataset = artifact(dsl.Dataset, "dataset")
    merge_prepared.python_func(
        plan=plan, parts=parts, dataset=dataset, schema=dsl.Artifact(uri=str(tmp_path / "s")),
        report=dsl.Markdown(uri=str(tmp_path / "r.md")),
        rejected=dsl.Dataset(uri=str(tmp_path / "rej.csv")), data_fingerprint="sha256:abc")
    run = step_runs(mlflow_server, parent)["merge-prepared"]
    assert run["params"]["data_uri"] == source and run["params"]["label_column"] == "status"
    assert run["tags"]["gkeflow.data_fingerprint"] == "sha256:abc"
    metrics = run["metrics"]
    assert metrics["rows_read"] == dataset.metadata["rows_read"] == 900
    assert metrics["rows_read"] == metrics["rejected_rows"] + sum(
        value for key, value in metrics.items() if key.endswith("_rows")
        and key not in ("rows_read", "rejected_rows"))
    assert metrics["rejected_rows"] > 0
    assert run["info"]["status"] == "FINISHED"
