"""Direct MLflow tracking as a compiled pipeline carries it (Vertex AI, Kubeflow Pipelines
without the plugin), run whole under kfp.local: the steps get only what the compiled
pipeline gives them (environment variables and the run-id arguments, no plugin variables,
no parent run handed down), find or create the run's one parent run and open a nested run
each; the model goes to the tracking server's MLflow Model Registry by default."""

from __future__ import annotations

import pytest

from gkeflow.components.tracking.client import (
    ENV_EXPERIMENT_ID,
    ENV_PARENT_RUN_ID,
    ENV_RUN_ID,
    ENV_TRACKING_URI,
    PARENT_TAG,
)
from gkeflow.components.tracking.pipeline_run import (
    PIPELINE_RUN_TAG,
    RUN_URL_TAG,
    TARGET_TAG,
)
from gkeflow.pipelines.definitions.operations import Operations
from gkeflow.pipelines.settings.tracking_config import TrackingSettings
from gkeflow.pipelines.targets.local import run_local

pytestmark = pytest.mark.slow
pytest.importorskip("mlflow", reason="mlflow is not installed (pip install -e '.[dev]')")

#: The steps with a run of their own: model_type auto's candidates among them.
TRACKED = ["fingerprint-data", "prepare-data", "train-gbdt", "train-mlp", "train-linear",
           "train-model", "evaluate-model", "register-model"]
MODEL = "penguins-compiled-direct"


def test_a_compiled_style_run_makes_one_parent_and_a_nested_run_per_step(
        tmp_path, monkeypatch, mlflow_server):
    from gkeflow.pipelines.definitions.training import build_training_pipeline

    for name in (ENV_TRACKING_URI, ENV_PARENT_RUN_ID, ENV_RUN_ID, ENV_EXPERIMENT_ID):
        monkeypatch.delenv(name, raising=False)
    tracking = TrackingSettings.model_validate({"mlflow": {
        "experiment": "compiled-direct", "tracking_uri": mlflow_server.url}})
    pipeline = build_training_pipeline("local", operations=Operations(
        "local", tracking=tracking, link_template="http://kfp.example/#/runs/details/{run_id}"))
    assert pipeline.component_spec.inputs["registry_uri"].default == (
        "mlflow://" + mlflow_server.url.split("://", 1)[1])

    result = run_local({"epochs": 2, "min_accuracy": 0.0, "model_name": MODEL},
                       tmp_path / "out", enable_caching=False, pipeline=pipeline)
    assert result.ok, result.error

    experiment = mlflow_server.api("experiments/get-by-name",
                                   experiment_name="compiled-direct")["experiment"]
    # MLflow 3 opens it in the model-training view, not the GenAI one
    kinds = {t["key"]: t["value"] for t in experiment.get("tags", [])}
    assert kinds.get("mlflow.experimentKind") == "custom_model_development"
    parents = mlflow_server.search_runs(experiment["experiment_id"],
                                        f"tags.`{PIPELINE_RUN_TAG}` != ''")
    assert len(parents) == 1
    parent = parents[0]
    tags = parent["data"]["tags"]
    tags = {t["key"]: t["value"] for t in tags} if isinstance(tags, list) else tags
    run_id = tags[PIPELINE_RUN_TAG]
    assert run_id and "{{" not in run_id
    assert tags[RUN_URL_TAG] == f"http://kfp.example/#/runs/details/{run_id}"
    assert tags[TARGET_TAG] == "local"
    assert parent["info"]["status"] == "FINISHED"
    parent_id = parent["info"]["run_id"]
    children = {run["info"]["run_name"]: run["info"]["run_id"] for run in
                mlflow_server.search_runs(experiment["experiment_id"],
                                          f"tags.`{PARENT_TAG}` = '{parent_id}'")}
    assert sorted(children) == sorted(TRACKED)
    for step, child in children.items():
        assert mlflow_server.run(child)["info"]["status"] == "FINISHED", step
    evaluation = mlflow_server.run(children["evaluate-model"])
    assert evaluation["metrics"]["accuracy"] == pytest.approx(
        result.artifact_metadata("evaluate-model", "metrics")["accuracy"], abs=1e-6)
    # model_type auto: each candidate in a run of its own, the MLP's curves epoch by epoch,
    # the trees' round by round; train-model's run has every candidate's eval metric
    assert [step for step, _ in
            mlflow_server.metric_history(children["train-mlp"], "loss")] == [1, 2]
    assert mlflow_server.metric_history(children["train-gbdt"], "val_loss")
    assert mlflow_server.run(children["train-linear"])["tags"][
        "gkeflow.candidate_status"] == "succeeded"
    chosen = mlflow_server.run(children["train-model"])
    assert {"final_candidate_gbdt_eval_loss", "final_candidate_mlp_eval_loss",
            "final_candidate_linear_eval_loss"} <= set(chosen["metrics"])
    registered = mlflow_server.run(children["register-model"])["tags"]
    assert registered["gkeflow.registry.backend"] == "mlflow"
    model = mlflow_server.api("registered-models/get", name=MODEL)["registered_model"]
    assert [(a["alias"], a["version"]) for a in model["aliases"]] == [("champion", "1")]
    # the parent carries the pipeline's parameters and headline figures: MLflow's compare
    # view of two pipeline runs is not empty
    whole = mlflow_server.run(parent_id)
    assert whole["params"]["label"] == "species" and whole["params"]["task"] == "classification"
    assert whole["params"]["train.epochs"] == "2" and "train.model_type" in whole["params"]
    assert whole["metrics"]["test_accuracy"] == pytest.approx(evaluation["metrics"]["accuracy"])
    assert whole["metrics"]["registered_version"] == 1
    assert whole["tags"]["gkeflow.gate.decision"] == "blessed"
    assert whole["tags"]["gkeflow.registered_model.version"] == "1"
    # one model, linked: the version is the MLflow model train-model logged, in its run
    version = mlflow_server.api("model-versions/get", name=MODEL, version="1")["model_version"]
    assert version["run_id"] == children["train-model"]
    assert version["source"] == f"runs:/{children['train-model']}/model"
    import urllib.error

    try:  # no second upload: the experiment of separate uploads is not even made
        uploads = mlflow_server.api("experiments/get-by-name",
                                    experiment_name="gkeflow-registered-models")
        assert not mlflow_server.search_runs(uploads["experiment"]["experiment_id"])
    except urllib.error.HTTPError as exc:
        assert exc.code == 404
    import mlflow
    import pandas as pd

    from gkeflow.components.prepare.logic import EMBEDDED_PENGUINS, resolve_source
    from gkeflow.components.train.exported import ExportedModel

    mlflow.set_tracking_uri(mlflow_server.url)
    mlflow.set_registry_uri(mlflow_server.url)
    loaded = mlflow.pyfunc.load_model(f"models:/{MODEL}@champion")
    rows = pd.read_csv(resolve_source(EMBEDDED_PENGUINS)).drop(columns=["species"]).head(20)
    rows["year"] = rows["year"].astype(float)  # the signature's numbers are doubles
    saved = ExportedModel(result.output_dir("train-model", "model"))
    expected = saved.predict_rows(rows.astype(object).where(rows.notna(), None)
                                  .to_dict("records"))
    assert list(loaded.predict(rows)["prediction"]) == expected
