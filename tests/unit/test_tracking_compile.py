"""tracking.<env>.mlflow compiled into the GKE and Vertex AI pipelines: the tracked steps get
the server, the experiment, the run's page and the run-id placeholders; credentials only by
reference; the registry defaults to the server's MLflow Model Registry."""

from __future__ import annotations

import json

import pytest
import yaml

from gkeflow.components import yamlio
from gkeflow.pipelines.definitions.operations import notifications_key, select
from gkeflow.pipelines.settings.config import GkeflowConfig
from gkeflow.pipelines.targets.compile import compile_pipeline

TRACKED = {"exec-fingerprint-data", "exec-prepare-data", "exec-train-model",
           "exec-train-gbdt", "exec-train-mlp", "exec-train-linear",  # model_type auto's
           "exec-evaluate-model", "exec-register-model"}
TARGETS = {"vertex": {"project": "my-project", "region": "us-central1",
                      "pipeline_root": "gs://my-bucket/root",
                      "service_account": "runner@my-project.iam.gserviceaccount.com"},
           "gke": {"host": "https://kfp.example.com"}}
TOKEN = "t0ken-value-never-compiled"
EXIT = "exec-end-tracking"


def _config(mlflow: dict | None, **extra) -> GkeflowConfig:
    tracking = {"default": {"mlflow": mlflow}} if mlflow else {}
    return GkeflowConfig.model_validate({"targets": TARGETS, "tracking": tracking, **extra})


MLFLOW = {"experiment": "penguins", "tracking_uri": "https://mlflow.example.com",
          "credentials": {"token_env": "TEAM_TOKEN", "gke_secret": "mlflow-credentials",
                          "vertex_secret": "projects/my-project/secrets/mlflow-token"}}


def _compiled(tmp_path, config, target: str, pipeline: str = "training"):
    path = compile_pipeline(pipeline, target, tmp_path / target, config=select(config))
    text = path.read_text()
    return text, list(yamlio.load_all(text))


def _env(executor: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in executor["container"].get("env", [])}


@pytest.mark.parametrize("target", ["gke", "vertex"])
def test_tracked_steps_carry_the_settings_and_no_secret_value(tmp_path, monkeypatch, target):
    monkeypatch.setenv("TEAM_TOKEN", TOKEN)
    text, docs = _compiled(tmp_path, _config(MLFLOW), target)
    assert TOKEN not in text
    executors = docs[0]["deploymentSpec"]["executors"]
    carrying = {name for name, executor in executors.items()
                if _env(executor).get("GKEFLOW_MLFLOW_TRACKING_URI")} - {EXIT}
    # on Vertex AI train-model is the CustomJob launcher, which hands the run to the job
    assert carrying == TRACKED
    for name in carrying:
        env, args = _env(executors[name]), executors[name]["container"]["args"]
        assert env["GKEFLOW_MLFLOW_EXPERIMENT"] == "penguins"
        assert env["GKEFLOW_MLFLOW_TARGET"] == target
        run_args = ["--gkeflow_pipeline_run_id", "{{$.pipeline_job_uuid}}",
                    "--gkeflow_pipeline_run_name", "{{$.pipeline_job_name}}"]
        # Kubeflow Pipelines resolves these placeholders only as input values
        assert (args[-4:] == run_args) == (target == "vertex")
        assert not any(key.startswith("MLFLOW_") for key in env)
    url = _env(executors["exec-evaluate-model"])["GKEFLOW_MLFLOW_RUN_URL"]
    if target == "gke":
        assert url == "https://kfp.example.com/#/runs/details/{run_id}"
        platform = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
        for name in carrying:
            assert {f["name"]: f["fieldPath"] for f in platform[name]["fieldPathAsEnv"]} == {
                "GKEFLOW_PIPELINE_RUN_ID": "metadata.labels['pipeline/runid']",
                "GKEFLOW_PIPELINE_RUN_NAME":
                    "metadata.annotations['pipelines.kubeflow.org/run_name']"}
            (secret,) = platform[name]["secretAsEnv"]
            assert secret["secretName"] == "mlflow-credentials" and secret["optional"]
            # its name only, for a JobSet launcher to give its pods the same references
            assert _env(executors[name])["GKEFLOW_MLFLOW_GKE_SECRET"] == "mlflow-credentials"
            # not MLflow's own names, which KFP's plugin sets in the same pod
            assert {k["envVar"] for k in secret["keyToEnv"]} == {
                "GKEFLOW_MLFLOW_TRACKING_TOKEN", "GKEFLOW_MLFLOW_TRACKING_USERNAME",
                "GKEFLOW_MLFLOW_TRACKING_PASSWORD"}
    else:
        assert len(docs) == 1
        assert url.startswith("https://console.cloud.google.com/vertex-ai/locations/")
        assert _env(executors["exec-register-model"])["GKEFLOW_MLFLOW_TOKEN_SECRET"] == (
            "projects/my-project/secrets/mlflow-token")
        # with the candidates of model_type auto, train-model (a plain step) only chooses
        # and logs the chosen run; trained as one family, train-model is the CustomJob
        # launcher, which hands the run to the job
        assert "vertex_launcher" not in json.dumps(executors["exec-train-model"])
        _, (one,) = _compiled(tmp_path / "one", _config(MLFLOW, candidates=["mlp"]), target)
        launcher = one["deploymentSpec"]["executors"]["exec-train-model"]["container"]
        assert "gkeflow.components.scaleout.vertex_launcher" in launcher["command"]
        from gkeflow.components.scaleout.vertex_launcher import parse_args

        parsed = parse_args([a.replace("{{$.", "x-") for a in launcher["args"]])
        assert parsed.gkeflow_pipeline_run_id == "x-pipeline_job_uuid}}"
        chief = json.loads(launcher["args"][1])["job_spec"]["worker_pool_specs"][0]
        assert "GKEFLOW_MLFLOW" not in json.dumps(chief), "handed on at run time only"
    registry = docs[0]["root"]["inputDefinitions"]["parameters"]["registry_uri"]
    assert registry["defaultValue"] == "mlflow+https://mlflow.example.com"


def test_without_a_tracking_uri_nothing_is_compiled_in(tmp_path):
    plain, _ = _compiled(tmp_path / "plain", _config(None), "gke")
    plugin_only, _ = _compiled(tmp_path / "plugin", _config({"experiment": "penguins"}), "gke")
    assert "GKEFLOW_MLFLOW" not in plain and plain == plugin_only
    assert "kubeflow://" in plain


def test_sweep_and_prediction_default_to_the_mlflow_registry_and_track(tmp_path):
    for pipeline, steps in (("sweep", ("exec-evaluate-model", "exec-select-best-trial",
                                       "exec-train-model", "exec-fingerprint-data")),
                            ("prediction", ("exec-predict-batch", "exec-report-predictions"))):
        _, docs = _compiled(tmp_path / pipeline, _config(MLFLOW), "gke", pipeline)
        registry = docs[0]["root"]["inputDefinitions"]["parameters"]["registry_uri"]
        assert registry["defaultValue"] == "mlflow+https://mlflow.example.com", pipeline
        for step in steps:
            env = _env(docs[0]["deploymentSpec"]["executors"][step])
            assert env["GKEFLOW_MLFLOW_PIPELINE"] == docs[0]["pipelineInfo"]["name"], step


def test_environments_tracked_apart_compile_apart():
    config = GkeflowConfig.model_validate({
        "targets": TARGETS, "parameters": {"prod": {}},
        "tracking": {"prod": {"mlflow": MLFLOW}}})
    assert notifications_key(select(config, "default")) == ""
    assert "mlflow.example.com" in notifications_key(select(config, "prod"))


@pytest.mark.parametrize("credentials, fragment", [
    ({"gke_secret": "Not_A_Name"}, "not a Kubernetes Secret name"),
    ({"vertex_secret": "t0ken-value"}, "never the token itself"),
])
def test_credential_references_are_checked_without_echoing_values(tmp_path, credentials,
                                                                 fragment):
    from gkeflow.pipelines.settings.config import ConfigError, load_config

    path = tmp_path / "gkeflow.yaml"
    path.write_text(yaml.safe_dump({"tracking": {"default": {"mlflow": {
        "experiment": "e", "credentials": credentials}}}}))
    with pytest.raises(ConfigError, match=fragment) as refused:
        load_config(path)
    assert "t0ken-value" not in str(refused.value)


def test_gke_steps_carry_the_vertex_experiment_and_on_vertex_only_the_exit_task(tmp_path):
    config = GkeflowConfig.model_validate({"targets": TARGETS, "tracking": {"default": {
        "vertex_experiments": {"experiment": "penguins"}}}})
    _, gke = _compiled(tmp_path, config, "gke")
    executors = gke[0]["deploymentSpec"]["executors"]
    carrying = {name for name, executor in executors.items()
                if _env(executor).get("GKEFLOW_VERTEX_EXPERIMENT") == "penguins"}
    assert carrying == TRACKED | {EXIT}
    env = _env(executors["exec-evaluate-model"])
    assert (env["GKEFLOW_VERTEX_PROJECT"], env["GKEFLOW_VERTEX_LOCATION"]) == (
        "my-project", "us-central1")
    assert "GKEFLOW_MLFLOW_TRACKING_URI" not in env
    platform = gke[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert {f["name"] for f in platform["exec-evaluate-model"]["fieldPathAsEnv"]} == {
        "GKEFLOW_PIPELINE_RUN_ID", "GKEFLOW_PIPELINE_RUN_NAME"}
    _, vertex = _compiled(tmp_path / "v", config, "vertex")
    executors = vertex[0]["deploymentSpec"]["executors"]
    # Vertex AI runs are submitted into the experiment; the exit task adds scheduled ones
    assert {name for name, executor in executors.items()
            if _env(executor).get("GKEFLOW_VERTEX_EXPERIMENT")} == {EXIT}


def _exit_handler(doc: dict) -> tuple[str, dict]:
    """The exit task of the compiled pipeline: (its executor, its task spec)."""
    (task,) = [t for t in doc["root"]["dag"]["tasks"].values()
               if t.get("triggerPolicy", {}).get("strategy") == "ALL_UPSTREAM_TASKS_COMPLETED"]
    executor = doc["components"][task["componentRef"]["name"]]["executorLabel"]
    return executor, task


@pytest.mark.parametrize("target", ["gke", "vertex"])
def test_a_tracked_run_ends_in_an_exit_task_that_carries_the_settings(tmp_path, monkeypatch,
                                                                     target):
    monkeypatch.setenv("TEAM_TOKEN", TOKEN)
    text, docs = _compiled(tmp_path, _config(MLFLOW), target)
    assert TOKEN not in text
    executor, task = _exit_handler(docs[0])
    assert executor == EXIT and task["taskInfo"]["name"] == "End tracking"
    inputs = task["inputs"]["parameters"]
    assert inputs["target"]["runtimeValue"]["constant"] == target
    assert inputs["run_id"]["runtimeValue"]["constant"] == "{{$.pipeline_job_uuid}}"
    assert inputs["status"]["taskFinalStatus"]["producerTask"] == "exit-handler-1"
    env = _env(docs[0]["deploymentSpec"]["executors"][EXIT])
    assert env["GKEFLOW_MLFLOW_TRACKING_URI"] == "https://mlflow.example.com"
    assert env["GKEFLOW_MLFLOW_EXPERIMENT"] == "penguins"
    if target == "gke":
        platform = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"][EXIT]
        (secret,) = platform["secretAsEnv"]
        assert secret["secretName"] == "mlflow-credentials"
    else:
        assert env["GKEFLOW_MLFLOW_TOKEN_SECRET"] == "projects/my-project/secrets/mlflow-token"


def test_with_a_webhook_the_notify_task_ends_the_tracking_too(tmp_path):
    notify = {"default": {"when": "always", "webhook": {
        "vertex_secret": "projects/my-project/secrets/hook"}}}
    config = _config(MLFLOW, notifications=notify)
    _, docs = _compiled(tmp_path, config, "vertex")
    executor, _ = _exit_handler(docs[0])
    assert executor == "exec-notify-run"
    env = _env(docs[0]["deploymentSpec"]["executors"][executor])
    assert env["GKEFLOW_MLFLOW_TRACKING_URI"] == "https://mlflow.example.com"
    assert EXIT not in docs[0]["deploymentSpec"]["executors"]


def test_untracked_and_local_pipelines_get_no_exit_task(tmp_path):
    _, docs = _compiled(tmp_path / "plain", _config(None), "vertex")
    assert EXIT not in docs[0]["deploymentSpec"]["executors"]
    from gkeflow.pipelines.definitions.tracking_tasks import ends_tracking

    tracking = _config(MLFLOW).tracking["default"]
    assert not ends_tracking(tracking, "local")
    assert ends_tracking(tracking, "gke") and ends_tracking(tracking, "vertex")


def test_a_gke_steps_secret_credentials_reach_mlflow_unless_the_plugin_gave_its_own():
    from gkeflow.components.tracking.pipeline_run import load_credentials

    direct = {"GKEFLOW_MLFLOW_TRACKING_USERNAME": "u", "GKEFLOW_MLFLOW_TRACKING_PASSWORD": "p"}
    load_credentials(direct)
    assert (direct["MLFLOW_TRACKING_USERNAME"], direct["MLFLOW_TRACKING_PASSWORD"]) == ("u", "p")
    plugin = {"GKEFLOW_MLFLOW_TRACKING_TOKEN": "ours", "MLFLOW_TRACKING_TOKEN": "plugin's"}
    load_credentials(plugin)
    assert plugin["MLFLOW_TRACKING_TOKEN"] == "plugin's"
