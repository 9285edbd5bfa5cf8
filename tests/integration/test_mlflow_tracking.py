"""MLflow tracking inside the steps, against a real MLflow server: each step logging into
the run Kubeflow Pipelines' MLflow plugin gives it (simulated plugin variables), direct mode
(parent run and nested runs), and a server that goes away or errors mid-step."""

from __future__ import annotations

import json

import pytest

from gkeflow.components.tracking.client import (
    ENV_EXPERIMENT_ID,
    ENV_PARENT_RUN_ID,
    ENV_RUN_ID,
    ENV_TRACKING_URI,
    PARENT_TAG,
    open_step_run,
)

pytest.importorskip("mlflow", reason="mlflow is not installed (pip install -e '.[dev]')")

MODEL_NAME = "penguins-classifier"


@pytest.fixture
def plugin_run(mlflow_server, monkeypatch):
    """A run made as the plugin makes one, and its variables in this process's environment
    (KFP sets them in the task's container)."""

    def make(task: str) -> str:
        experiment_id, run_id = mlflow_server.create_run("kfp-plugin", **{
            "mlflow.runName": task})
        monkeypatch.setenv(ENV_TRACKING_URI, mlflow_server.url)
        monkeypatch.setenv(ENV_EXPERIMENT_ID, experiment_id)
        monkeypatch.setenv(ENV_RUN_ID, run_id)
        monkeypatch.delenv(ENV_PARENT_RUN_ID, raising=False)
        return run_id

    return make


def test_prepare_data_logs_fingerprint_and_split_counts(plugin_run, mlflow_server, tmp_path):
    from kfp.dsl import Artifact, Dataset, Markdown

    from gkeflow.components.prepare.component import prepare_data
    from gkeflow.components.prepare.logic import EMBEDDED_PENGUINS

    run_id = plugin_run("prepare-data")
    dataset = Dataset(uri=str(tmp_path / "dataset"))
    prepare_data.python_func(
        data_uri=EMBEDDED_PENGUINS, label_column="species", dataset=dataset,
        schema=Artifact(uri=str(tmp_path / "schema")),
        report=Markdown(uri=str(tmp_path / "report")),
        rejected=Dataset(uri=str(tmp_path / "rejected")),
        data_fingerprint="sha256:0123abcd")

    run = mlflow_server.run(run_id)
    assert run["tags"]["gkeflow.data_fingerprint"] == "sha256:0123abcd"
    assert run["params"]["data_fingerprint"] == "sha256:0123abcd"
    assert run["params"]["label_column"] == "species"
    for split in ("train", "eval", "test"):
        assert run["metrics"][f"{split}_rows"] == dataset.metadata[f"{split}_rows"]
    assert run["metrics"]["rows_read"] == 344
    assert mlflow_server.artifacts(run_id) == ["data/preparation.json"]
    summary = json.loads(mlflow_server.artifact_bytes(run_id, "data/preparation.json"))
    assert summary["classes"] == ["Adelie", "Chinstrap", "Gentoo"]
    assert run["info"]["status"] == "RUNNING"  # the plugin ends its runs, not the step


def test_train_model_logs_curves_per_epoch_and_the_saved_model(plugin_run, mlflow_server,
                                                               trained_penguins):
    from gkeflow.components.tracking.steps import track_training
    from gkeflow.components.train.logic import TrainParams
    from gkeflow.components.train.mlflow_model import save_mlflow_model

    model_dir, result = trained_penguins
    run_id = plugin_run("train-model")
    track_training(result, TrainParams(epochs=8), model_dir, writer=save_mlflow_model)

    run = mlflow_server.run(run_id)
    assert run["params"]["epochs"] == "8"
    assert run["params"]["hidden_units"] == ",".join(map(str, TrainParams().hidden_units))
    for name, values in result.history.items():
        history = mlflow_server.metric_history(run_id, name)
        assert [step for step, _ in history] == list(range(1, len(values) + 1)), name
        assert [value for _, value in history] == pytest.approx(values), name
    assert run["metrics"]["epochs_run"] == result.epochs_run
    # an MLflow model (MLmodel, signature, input example) holding the SavedModel
    artifacts = mlflow_server.artifacts(run_id, "model")
    expected = sorted(f"model/data/saved_model/{p.relative_to(model_dir).as_posix()}"
                      for p in model_dir.rglob("*") if p.is_file())
    assert set(expected) <= set(artifacts) and "model/MLmodel" in artifacts
    assert "model/input_example.json" in artifacts
    assert run["tags"]["gkeflow.model_logged"] == "true"


def test_evaluate_model_logs_metrics_slices_matrix_curves_and_card(
        plugin_run, mlflow_server, prepared_penguins, trained_penguins, tmp_path):
    from kfp.dsl import HTML, Artifact, ClassificationMetrics, Dataset, Markdown, Metrics, Model

    from gkeflow.components.evaluate.component import evaluate_model

    run_id = plugin_run("evaluate-model")
    dataset_dir, _ = prepared_penguins
    outputs = {name: cls(uri=str(tmp_path / name)) for name, cls in [
        ("metrics", Metrics), ("classification_metrics", ClassificationMetrics),
        ("model_card", Markdown), ("evaluation", Artifact), ("plots", HTML)]}
    blessed = evaluate_model.python_func(
        dataset=Dataset(uri=str(dataset_dir)),
        schema=Artifact(uri=str(dataset_dir / "schema.json")),
        model=Model(uri=str(trained_penguins[0])), min_accuracy=0.8,
        positive_class="Chinstrap", **outputs)

    run = mlflow_server.run(run_id)
    logged = outputs["metrics"].metadata
    for name in ("accuracy", "f1_macro", "log_loss", "slice_island_Biscoe_accuracy"):
        assert run["metrics"][name] == pytest.approx(logged[name], abs=1e-6), name
    assert run["tags"]["gkeflow.gate.decision"] == ("blessed" if blessed else "rejected")
    assert run["params"]["min_accuracy"] == "0.8"
    files = mlflow_server.artifacts(run_id)
    assert {"evaluation/confusion_matrix.json", "evaluation/confusion_matrix.png",
            "evaluation/roc_curve.json", "evaluation/roc_curve.png", "evaluation/slices.json",
            "evaluation/evaluation.json", "model_card.md"} == set(files)
    matrix = json.loads(mlflow_server.artifact_bytes(run_id, "evaluation/confusion_matrix.json"))
    evidence = json.loads((tmp_path / "evaluation").read_text())
    assert matrix["labels"] == ["Adelie", "Chinstrap", "Gentoo"]
    assert matrix["matrix"] == evidence["challenger"]["confusion_matrix"]
    roc = json.loads(mlflow_server.artifact_bytes(run_id, "evaluation/roc_curve.json"))
    assert roc["positive_class"] == "Chinstrap" and roc["fpr"][0] == 0 and roc["tpr"][-1] == 1
    assert mlflow_server.artifact_bytes(run_id, "evaluation/roc_curve.png")[:8] == \
        b"\x89PNG\r\n\x1a\n"
    slices = json.loads(mlflow_server.artifact_bytes(run_id, "evaluation/slices.json"))
    assert {"island"} <= {s["column"] for s in slices}
    card = mlflow_server.artifact_bytes(run_id, "model_card.md").decode()
    assert card == (tmp_path / "model_card").read_text()


def test_register_model_tags_the_decision_and_the_version(plugin_run, mlflow_server,
                                                          trained_penguins, tmp_path):
    from kfp.dsl import Artifact, Metrics, Model

    from gkeflow.components.register.component import register_model

    run_id = plugin_run("register-model")
    metrics = Metrics(uri=str(tmp_path / "metrics"))
    metrics.metadata.update({"accuracy": 0.97, "passed": 1.0})
    kwargs = dict(model=Model(uri=str(trained_penguins[0])), metrics=metrics,
                  model_name=MODEL_NAME, pipeline_run_id="run-7",
                  registry_uri=f"sqlite:///{tmp_path / 'registry.db'}")
    outputs = register_model.python_func(
        registered_model=Artifact(uri=str(tmp_path / "registered")), **kwargs)

    tags = mlflow_server.run(run_id)["tags"]
    assert tags["gkeflow.gate.decision"] == "blessed"
    assert tags["gkeflow.registry.action"] == "registered"
    assert tags["gkeflow.registered_model.name"] == MODEL_NAME
    assert tags["gkeflow.registered_model.version"] == str(outputs.model_version)

    retry_run = plugin_run("register-model")  # a retry of the task: same version, said so
    register_model.python_func(registered_model=Artifact(uri=str(tmp_path / "again")),
                               **kwargs)
    tags = mlflow_server.run(retry_run)["tags"]
    assert tags["gkeflow.registry.action"] == "already-registered"
    assert tags["gkeflow.registered_model.version"] == str(outputs.model_version)


def test_direct_mode_makes_a_parent_run_and_one_nested_run_per_task(mlflow_server,
                                                                     monkeypatch):
    from gkeflow.components.tracking.direct import end_pipeline_run, start_pipeline_run

    url = "http://localhost:8080/#/runs/details/run-direct-1"
    parent = start_pipeline_run(mlflow_server.url, "gkeflow-direct", "run-direct-1",
                                pipeline_name="training-pipeline", run_url=url)
    assert parent
    # a resubmission of the same pipeline run finds the same parent
    assert start_pipeline_run(mlflow_server.url, "gkeflow-direct", "run-direct-1") == parent
    tags = mlflow_server.run(parent)["tags"]
    assert tags["gkeflow.pipeline_run_id"] == "run-direct-1"
    assert tags["gkeflow.run_url"] == url and tags["gkeflow.pipeline"] == "training-pipeline"

    monkeypatch.setenv(ENV_TRACKING_URI, mlflow_server.url)
    monkeypatch.setenv(ENV_PARENT_RUN_ID, parent)
    monkeypatch.delenv(ENV_RUN_ID, raising=False)
    step = open_step_run("train-model", task="trial-1")
    step.log_metrics({"loss": 0.5}, step=1)
    step.finish()
    other = open_step_run("train-model", task="trial-2")
    other.finish("FAILED")
    retried = open_step_run("train-model", task="trial-1")  # a retry reopens its run
    assert retried.run_id == step.run_id and retried.run_id != other.run_id

    nested = mlflow_server.run(step.run_id)
    assert nested["tags"][PARENT_TAG] == parent
    assert nested["tags"]["mlflow.runName"] == "trial-1"
    assert nested["tags"]["gkeflow.step"] == "train-model"
    assert nested["info"]["status"] == "RUNNING"
    assert mlflow_server.run(other.run_id)["info"]["status"] == "FAILED"
    retried.finish()
    assert mlflow_server.run(step.run_id)["info"]["status"] == "FINISHED"
    experiment_id = nested["info"]["experiment_id"]
    children = mlflow_server.search_runs(experiment_id, f"tags.`{PARENT_TAG}` = '{parent}'")
    assert len(children) == 2

    end_pipeline_run(mlflow_server.url, parent, succeeded=True)
    assert mlflow_server.run(parent)["info"]["status"] == "FINISHED"


def test_no_tracking_without_a_run(monkeypatch):
    for name in (ENV_TRACKING_URI, ENV_RUN_ID, ENV_PARENT_RUN_ID):
        monkeypatch.delenv(name, raising=False)
    assert not open_step_run("evaluate-model").enabled
    monkeypatch.setenv(ENV_TRACKING_URI, "http://127.0.0.1:9")  # a URI alone opens no run
    tracker = open_step_run("evaluate-model")
    assert not tracker.enabled and tracker.calls == 0


def test_a_refused_call_is_skipped_and_tracking_goes_on(plugin_run, mlflow_server,
                                                        trained_penguins, capsys):
    """The plugin logged ``epochs`` already, with another value: MLflow refuses the params,
    the curves and the model are logged all the same."""
    from gkeflow.components.tracking.client import Tracker
    from gkeflow.components.tracking.steps import track_training
    from gkeflow.components.train.logic import TrainParams

    model_dir, result = trained_penguins
    run_id = plugin_run("train-model")
    mlflow_server.api("runs/log-parameter", {"run_id": run_id, "key": "epochs",
                                             "value": "twenty"})
    capsys.readouterr()
    track_training(result, TrainParams(epochs=8), model_dir)
    lines = [line for line in capsys.readouterr().out.splitlines()
             if line.startswith("mlflow:")]
    assert len(lines) == 1 and "refused logging parameters" in lines[0]
    run = mlflow_server.run(run_id)
    assert run["params"]["epochs"] == "twenty"
    assert len(mlflow_server.metric_history(run_id, "loss")) == result.epochs_run
    assert "model/saved_model.pb" in mlflow_server.artifacts(run_id, "model")  # no writer

    from mlflow import MlflowClient

    tracker = Tracker(MlflowClient(tracking_uri=mlflow_server.url), run_id)
    tracker.log_metrics({"slice_région_a?b/../c": 1.0, "/lead": 2.0})
    assert {"slice_région_a_b/_/c", "lead"} <= set(mlflow_server.run(run_id)["metrics"])
    assert tracker.enabled


def test_without_matplotlib_the_evaluation_is_logged_as_json_only(
        plugin_run, mlflow_server, prepared_penguins, trained_penguins, monkeypatch):
    import sys

    from gkeflow.components.evaluate.logic import evaluate
    from gkeflow.components.prepare.logic import Schema
    from gkeflow.components.tracking.plots import have_matplotlib
    from gkeflow.components.tracking.steps import track_evaluation

    dataset_dir, _ = prepared_penguins
    result = evaluate(dataset_dir, Schema.load(dataset_dir / "schema.json"),
                      trained_penguins[0], min_accuracy=0.8)
    run_id = plugin_run("evaluate-model")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as in the images: not installed
    assert not have_matplotlib()
    track_evaluation(result, "# card")
    files = mlflow_server.artifacts(run_id)
    assert "evaluation/confusion_matrix.json" in files and "evaluation/roc_curve.json" in files
    assert not [f for f in files if f.endswith(".png")]
