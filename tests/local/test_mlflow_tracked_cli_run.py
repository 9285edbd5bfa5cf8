"""Done when: `gkeflow run --data ... --label ...` with tracking.mlflow in gkeflow.yaml makes
one parent run (tagged with the run's id and URL) and a nested run per step on a real MLflow
server, and registers the model in that server's registry with the champion alias (a second
identical run registers nothing new); a tracking server that cannot be reached leaves the
outcome of a run with its own registry unchanged, and refuses, before any step, a run whose
registry it is."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from gkeflow.components.tracking.client import PARENT_TAG
from gkeflow.components.tracking.direct import PIPELINE_RUN_TAG, RUN_URL_TAG
from tests.integration.conftest import gkeflow
from tests.integration.mlflow_server import free_port

pytestmark = pytest.mark.slow
pytest.importorskip("mlflow", reason="mlflow is not installed (pip install -e '.[dev]')")

#: The steps with a run of their own: model_type auto's candidates among them.
TRACKED = ["fingerprint-data", "prepare-data", "train-gbdt", "train-mlp", "train-linear",
           "train-model", "evaluate-model", "register-model"]
MODEL = "penguins-cli-registry"


def _penguins_csv(tmp_path):
    from pathlib import Path

    palmerpenguins = pytest.importorskip("palmerpenguins")
    data = tmp_path / "penguins.csv"
    shutil.copyfile(Path(palmerpenguins.__file__).parent / "data" / "penguins.csv", data)
    return data


def _write_config(tmp_path, uri: str, experiment: str, vertex_url: str = ""):
    path = tmp_path / "gkeflow.yaml"
    tracking = {"mlflow": {"experiment": experiment, "tracking_uri": uri,
                           "credentials": {"token_env": "TEAM_MLFLOW_TOKEN"}}}
    targets = {}
    if vertex_url:  # the same run also goes to Vertex AI Experiments (aiplatform SDK)
        tracking["vertex_experiments"] = {"experiment": experiment}
        targets["vertex"] = {"project": "my-project", "region": "us-central1",
                             "pipeline_root": "gs://my-bucket/root",
                             "service_account": "runner@my-project.iam.gserviceaccount.com",
                             "api_endpoint": vertex_url}
    path.write_text(yaml.safe_dump({"parameters": {"dev": {}}, "targets": targets,
                                    "tracking": {"dev": tracking}}))
    return path


def _run(tmp_path, config, data, *extra, env=None, before_any_step=False, cache=False):
    return gkeflow("run", "--data", str(data), "--label", "species", "--epochs", "2",
                   "--min-accuracy", "0", *(() if cache else ("--no-cache",)),
                   "--output", str(tmp_path / "out"),
                   "--config", str(config), *extra, cwd=tmp_path, timeout=600,
                   env={"TEAM_MLFLOW_TOKEN": "t0ken-value", **(env or {})},
                   before_any_step=before_any_step)


def test_gkeflow_run_tracks_a_parent_and_a_nested_run_per_step(tmp_path, mlflow_server):
    from tests.integration.fakes import FakeVertexServer

    with FakeVertexServer() as vertex:
        config = _write_config(tmp_path, mlflow_server.url, "penguins-cli", vertex.url)
        data = _penguins_csv(tmp_path)
        result = _run(tmp_path, config, data, "--env", "dev", "--model-name", MODEL,
                      cache=True)  # a fresh output folder: every step runs
    assert result.returncode == 0, result.stdout + result.stderr
    assert not vertex.violations, vertex.violations
    (run_context,) = [c for c in vertex.metadata.contexts.values()
                      if c.schema_title == "system.ExperimentRun"]
    logged = json.loads(type(run_context).to_json(run_context))["metadata"]
    assert logged["_params"]["label_column"] == "species" and logged["_params"]["epochs"] == 2
    assert 0 < logged["_metrics"]["accuracy"] <= 1 and logged["_state"] == "COMPLETE"
    assert "logged to Vertex AI experiment 'penguins-cli'" in result.stdout
    assert "tracking: MLflow experiment 'penguins-cli'" in result.stdout
    assert f"registry: MLflow Model Registry at {mlflow_server.url}" in result.stdout
    model = mlflow_server.api("registered-models/get", name=MODEL)["registered_model"]
    assert [(a["alias"], a["version"]) for a in model["aliases"]] == [("champion", "1")]
    assert "t0ken-value" not in result.stdout + result.stderr
    assert "View run" not in result.stdout + result.stderr  # MLflow's own lines stay out
    # `models list` reads the registry the run registered into: tracking.dev.mlflow's
    listed = gkeflow("models", "list", "--name", MODEL, "--env", "dev", "--config",
                     str(config), "--format", "json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert [(v["model"], int(v["version"])) for v in json.loads(listed.stdout)] == [(MODEL, 1)]

    experiment = mlflow_server.api("experiments/get-by-name", experiment_name="penguins-cli")
    runs = mlflow_server.search_runs(experiment["experiment"]["experiment_id"])
    parents = [r for r in runs if PARENT_TAG not in {t["key"] for t in
                                                     r["data"].get("tags", [])}]
    assert len(parents) == 1
    parent = mlflow_server.run(parents[0]["info"]["run_id"])
    assert parent["info"]["status"] == "FINISHED"
    assert parent["tags"][PIPELINE_RUN_TAG].startswith("local-training-")
    assert parent["tags"][RUN_URL_TAG] == (tmp_path / "out").resolve().as_uri()
    children = {r["info"]["run_name"]: r["info"]["run_id"] for r in runs
                if r["info"]["run_id"] != parent["info"]["run_id"]}
    assert sorted(children) == sorted(TRACKED)
    for run_id in children.values():
        assert mlflow_server.run(run_id)["tags"][PARENT_TAG] == parent["info"]["run_id"]
    evaluation = children["evaluate-model"]
    assert "accuracy" in mlflow_server.run(evaluation)["metrics"]
    files = mlflow_server.artifacts(evaluation)
    for name in ("model_card.md", "evaluation/confusion_matrix.json",
                 "evaluation/roc_curve.json"):
        assert name in files, files

    # A second identical run registers nothing new: unchanged, same as version 1. It takes
    # preparation and training from the first run's cache, as a user's second run does;
    # evaluation and registration run again.
    again = _run(tmp_path, config, data, "--env", "dev", "--model-name", MODEL, cache=True)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "✓ train-model cached" in again.stdout and "✓ register-model success" in again.stdout
    assert "Registered: unchanged: same as" in again.stdout
    # every step of the second run has its run; the cached ones say so and point at the runs
    # that made their outputs, whose figures they carry
    assert "tracking: served from cache, recorded as cached runs" in again.stdout
    second = [r for r in mlflow_server.search_runs(experiment["experiment"]["experiment_id"])
              if PARENT_TAG not in {t["key"] for t in r["data"].get("tags", [])}
              and r["info"]["run_id"] != parent["info"]["run_id"]]
    assert len(second) == 1
    steps2 = {r["info"]["run_name"]: mlflow_server.run(r["info"]["run_id"]) for r in
              mlflow_server.search_runs(experiment["experiment"]["experiment_id"],
                                        f"tags.`{PARENT_TAG}` = '{second[0]['info']['run_id']}'")}
    assert sorted(steps2) == sorted(TRACKED)
    trained = steps2["train-model"]
    assert trained["tags"]["gkeflow.cached"] == "true"
    assert trained["tags"]["gkeflow.cached_from"] == children["train-model"]
    assert trained["metrics"]["epochs_run"] == \
        mlflow_server.run(children["train-model"])["metrics"]["epochs_run"]
    assert steps2["prepare-data"]["tags"]["gkeflow.cached_from"] == children["prepare-data"]
    assert "gkeflow.cached" not in steps2["evaluate-model"]["tags"]
    versions = mlflow_server.api("model-versions/search", filter=f"name='{MODEL}'")
    assert [v["version"] for v in versions["model_versions"]] == ["1"]
    model = mlflow_server.api("registered-models/get", name=MODEL)["registered_model"]
    assert [(a["alias"], a["version"]) for a in model["aliases"]] == [("champion", "1")]
    # the cached run's own pipeline run reads as the first one did in the compare view: its
    # parameters and headline metrics, and the dataset it trained on
    first, cached_parent = (mlflow_server.run(parent["info"]["run_id"]),
                            mlflow_server.run(second[0]["info"]["run_id"]))
    for key in ("data_uri", "label", "task", "data_fingerprint"):
        assert cached_parent["params"][key] == first["params"][key], key
    assert {k for k in first["params"] if k.startswith("train.")} <= set(
        cached_parent["params"])
    assert cached_parent["metrics"]["rows_read"] == first["metrics"]["rows_read"]
    for run_id in (parent["info"]["run_id"], second[0]["info"]["run_id"],
                   children["prepare-data"]):
        (used,) = mlflow_server.api("runs/get", run_id=run_id)["run"]["inputs"][
            "dataset_inputs"]
        assert used["dataset"]["name"] == data.name
        assert used["dataset"]["digest"] == first["params"]["data_fingerprint"].split(
            ":", 1)[-1][:36]
        assert json.loads(used["dataset"]["source"]) == {"uri": str(data)}
        assert {"key": "mlflow.data.context", "value": "training"} in used["tags"]

    # a new model name takes training from the cache and registers: its version's run is
    # the run that trained the model, in the pipeline's experiment, with its signature
    other = f"{MODEL}-again"
    third = _run(tmp_path, config, data, "--env", "dev", "--model-name", other, cache=True)
    assert third.returncode == 0, third.stdout + third.stderr
    assert "✓ train-model cached" in third.stdout
    (version,) = mlflow_server.api("model-versions/search",
                                   filter=f"name='{other}'")["model_versions"]
    assert version["run_id"] == children["train-model"]
    assert version["source"] == f"runs:/{children['train-model']}/model"
    trained_in = mlflow_server.run(version["run_id"])["info"]["experiment_id"]
    assert trained_in == experiment["experiment"]["experiment_id"]
    mlmodel = yaml.safe_load(mlflow_server.artifact_bytes(version["run_id"], "model/MLmodel"))
    inputs = json.loads(mlmodel["signature"]["inputs"])
    assert {column["name"] for column in inputs} >= {"island", "bill_length_mm"}

    # A prediction run reads the model from the same registry and is tracked the same way.
    scored = gkeflow("run", "--pipeline", "prediction", "--env", "dev", "--data", str(data),
                     "--model", f"{MODEL}@champion", "--output", str(tmp_path / "scores"),
                     "--config", str(config), cwd=tmp_path, timeout=600,
                     env={"TEAM_MLFLOW_TOKEN": "t0ken-value"})
    assert scored.returncode == 0, scored.stdout + scored.stderr
    assert f"with {MODEL}@1" in " ".join(scored.stdout.split())
    runs = mlflow_server.search_runs(experiment["experiment"]["experiment_id"],
                                     f"tags.`{PIPELINE_RUN_TAG}` LIKE 'local-prediction-%'")
    (prediction,) = runs
    assert prediction["info"]["status"] == "FINISHED"
    steps = {run["info"]["run_name"]: run["info"]["run_id"] for run in mlflow_server.search_runs(
        experiment["experiment"]["experiment_id"],
        f"tags.`{PARENT_TAG}` = '{prediction['info']['run_id']}'")}
    assert sorted(steps) == ["predict-batch", "report-predictions"]
    assert mlflow_server.run(steps["predict-batch"])["metrics"]["rows_scored"] > 0
    report = mlflow_server.run(steps["report-predictions"])["metrics"]
    assert report["rows"] == mlflow_server.run(steps["predict-batch"])["metrics"]["rows_scored"]


@pytest.mark.parametrize("pipeline", ["sweep", "prediction"])
def test_sweep_and_prediction_check_the_mlflow_registry_before_any_step(tmp_path, pipeline):
    uri = f"http://127.0.0.1:{free_port()}"
    config = _write_config(tmp_path, uri, "nowhere")
    label = ("--label", "species") if pipeline == "sweep" else ()
    result = gkeflow("run", "--pipeline", pipeline, "--env", "dev", "--data",
                     str(_penguins_csv(tmp_path)), *label, "--config", str(config),
                     "--output", str(tmp_path / "out"), cwd=tmp_path,
                     env={"TEAM_MLFLOW_TOKEN": "t"}, before_any_step=True)
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(errors) == 1, result.stderr
    assert f"tracking.dev.mlflow's server {uri}, which cannot be reached" in errors[0]


def test_an_unreachable_server_leaves_the_run_unchanged(tmp_path):
    config = _write_config(tmp_path, f"http://127.0.0.1:{free_port()}", "nowhere")
    registry = f"registry_uri=sqlite:///{tmp_path / 'registry.db'}"
    result = _run(tmp_path, config, _penguins_csv(tmp_path), "--env", "dev",
                  "--param", registry, env={"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
                       "MLFLOW_HTTP_REQUEST_TIMEOUT": "2"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "register-model" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr
    assert [line for line in result.stdout.splitlines()
            if line.startswith("mlflow: ") and "parent" in line], result.stdout


def test_an_unreachable_registry_is_refused_before_any_step(tmp_path):
    uri = f"http://127.0.0.1:{free_port()}"
    config = _write_config(tmp_path, uri, "nowhere")
    result = _run(tmp_path, config, _penguins_csv(tmp_path), "--env", "dev",
                  before_any_step=True)
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(errors) == 1, result.stderr
    assert f"tracking.dev.mlflow's server {uri}, which cannot be reached" in errors[0]
    assert "--param registry_uri=URI" in errors[0]
    assert "prepare-data" not in result.stdout


def test_a_missing_credentials_variable_is_one_line(tmp_path):
    config = _write_config(tmp_path, "http://127.0.0.1:1", "e")
    result = gkeflow("run", "--env", "dev", "--config", str(config), "--output",
                     str(tmp_path / "out"), cwd=tmp_path,
                     env={"TEAM_MLFLOW_TOKEN": ""})
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "$TEAM_MLFLOW_TOKEN" in errors[0], result.stderr
