"""`submit --target vertex` puts the run into tracking.<env>.vertex_experiments' experiment,
through the Vertex ML Metadata calls aiplatform's ``PipelineJob.submit(experiment=...)``
makes, against the fake Vertex AI server (bodies parsed with aiplatform_v1 types, 404 and
409 as the service answers them)."""

from __future__ import annotations

import json

import pytest
import requests

from gkeflow.components import yamlio
from gkeflow.pipelines.definitions.operations import select
from gkeflow.pipelines.targets.submit import submit
from gkeflow.pipelines.targets.transport import RemoteError
from gkeflow.pipelines.targets.vertex import VertexBackend
from tests.integration.conftest import FAST, config_dict, gkeflow

PARENT = "projects/my-project/locations/us-central1"
STORE = f"{PARENT}/metadataStores/default"
EXPERIMENT = f"{STORE}/contexts/penguins-prod"
TRACKING = {"prod": {"vertex_experiments": {"experiment": "penguins-prod"}}}


def _submit(server, make_config, tmp_path, dry_run=False, **kwargs):
    config = make_config(None, server.url, tracking=TRACKING)
    backend = VertexBackend(config.targets.vertex, policy=FAST, dry_run=dry_run)
    return submit(config, "training", "vertex", environment="prod", overrides={},
                  workdir=tmp_path / "w", backend=backend, version="gabc", dry_run=dry_run,
                  **kwargs)


def _no_sleep(monkeypatch):
    monkeypatch.setattr("gkeflow.pipelines.targets.vertex_experiments.time.sleep",
                        lambda s: None)


def test_the_fake_answers_metadata_calls_as_vertex_does(vertex_server):
    url = f"{vertex_server.url}/v1"
    assert requests.get(f"{url}/{STORE}", timeout=5).status_code == 404
    created = requests.post(f"{url}/{PARENT}/metadataStores?metadataStoreId=default", json={},
                            timeout=5)
    assert created.status_code == 200 and created.json()["done"] is True
    body = {"displayName": "e", "schemaTitle": "system.Experiment"}
    assert requests.post(f"{url}/{STORE}/contexts?contextId=e", json=body,
                         timeout=5).status_code == 200
    again = requests.post(f"{url}/{STORE}/contexts?contextId=e", json=body, timeout=5)
    assert again.status_code == 409 and again.json()["error"]["status"] == "ALREADY_EXISTS"
    missing = requests.post(f"{url}/{STORE}/contexts/e:addContextChildren",
                            json={"childContexts": [f"{STORE}/contexts/nope"]}, timeout=5)
    assert missing.status_code == 404 and missing.json()["error"]["status"] == "NOT_FOUND"
    unknown = requests.post(f"{url}/{STORE}/contexts?contextId=f",
                            json={**body, "experiment": "x"}, timeout=5)
    assert unknown.status_code == 400 and "experiment" in unknown.json()["error"]["message"]
    assert len(vertex_server.violations) == 1
    vertex_server.violations.clear()


def test_a_tracked_submit_lands_in_the_experiment(vertex_server, make_config, tmp_path,
                                                  monkeypatch):
    _no_sleep(monkeypatch)
    submission, _ = _submit(vertex_server, make_config, tmp_path)
    contexts = vertex_server.metadata.contexts
    experiment = contexts[EXPERIMENT]
    assert (experiment.schema_title, experiment.display_name, experiment.schema_version) == (
        "system.Experiment", "penguins-prod", "0.0.1")
    assert dict(experiment.metadata) == {"experiment_deleted": False}
    job_id = submission.run_id.rsplit("/", 1)[-1]
    assert vertex_server.metadata.experiment_runs(EXPERIMENT) == [f"{STORE}/contexts/{job_id}"]
    assert contexts[f"{STORE}/contexts/{job_id}"].schema_title == "system.PipelineRun"
    # The experiment exists before the run is created: a refused one costs no run.
    writes = [r.path for r in vertex_server.requests if r.method == "POST"]
    assert writes.index(f"/v1/{STORE}/contexts") < writes.index(f"/v1/{PARENT}/pipelineJobs")
    assert writes[-1] == f"/v1/{EXPERIMENT}:addContextChildren"
    assert any(n.startswith("tracking: run added to Vertex AI experiment 'penguins-prod'")
               and "/experiments/penguins-prod?project=my-project" in n
               for n in submission.notes)


def test_a_second_submit_reuses_the_experiment(vertex_server, make_config, tmp_path,
                                               monkeypatch):
    _no_sleep(monkeypatch)
    first, _ = _submit(vertex_server, make_config, tmp_path)
    second, _ = _submit(vertex_server, make_config, tmp_path)
    assert len(vertex_server.calls("POST", r"/contexts$")) == 1
    assert len(vertex_server.calls("POST", r"/metadataStores$")) == 1
    runs = vertex_server.metadata.experiment_runs(EXPERIMENT)
    assert [r.rsplit("/", 1)[-1] for r in runs] == sorted(
        s.run_id.rsplit("/", 1)[-1] for s in (first, second))


def test_creates_whose_answers_are_lost_make_one_experiment_and_one_run(
        vertex_server, make_config, tmp_path, monkeypatch):
    _no_sleep(monkeypatch)
    for path in (r"/metadataStores$", r"/contexts$", r":addContextChildren$"):
        vertex_server.inject("POST", path, status=503, after=True)
    submission, _ = _submit(vertex_server, make_config, tmp_path)
    assert len(vertex_server.calls("POST", r"/contexts$")) == 1  # read back, not re-created
    assert len(vertex_server.calls("POST", r":addContextChildren$")) == 2
    (run,) = vertex_server.metadata.experiment_runs(EXPERIMENT)
    assert vertex_server.metadata.contexts[run].parent_contexts == [EXPERIMENT]
    assert run.endswith(submission.run_id.rsplit("/", 1)[-1])
    assert [c for c in vertex_server.metadata.contexts.values()
            if c.schema_title == "system.Experiment"] == [vertex_server.metadata.contexts[
                EXPERIMENT]]


def test_a_context_that_is_no_experiment_is_refused_before_the_run(vertex_server, make_config,
                                                                   tmp_path):
    url = f"{vertex_server.url}/v1"
    requests.post(f"{url}/{PARENT}/metadataStores?metadataStoreId=default", json={}, timeout=5)
    requests.post(f"{url}/{STORE}/contexts?contextId=penguins-prod",
                  json={"schemaTitle": "system.PipelineRun"}, timeout=5)
    with pytest.raises(RemoteError, match="is a system.PipelineRun, not an experiment; choose "
                                          "another tracking.vertex_experiments.experiment"):
        _submit(vertex_server, make_config, tmp_path)
    assert vertex_server.jobs == {}


def test_a_run_without_its_context_in_time_goes_on_with_a_warning(vertex_server, make_config,
                                                                  tmp_path):
    submission, _ = _submit(vertex_server, make_config, tmp_path, experiment_wait_s=0)
    assert vertex_server.metadata.experiment_runs(EXPERIMENT) == []
    assert len(vertex_server.jobs) == 1
    assert ("warning: run not added to Vertex AI experiment 'penguins-prod': Vertex AI had "
            "not made its run context after 0s; the run goes on") in submission.notes


def test_the_dry_run_plans_the_experiment_calls_and_sends_nothing(vertex_server, make_config,
                                                                  tmp_path):
    submission, backend = _submit(vertex_server, make_config, tmp_path, dry_run=True)
    planned = [(p.method, p.url.split("/v1/", 1)[1].split("?")[0]) for p in backend.planned]
    assert planned == [("GET", STORE), ("GET", EXPERIMENT), ("POST", f"{STORE}/contexts"),
                       ("POST", f"{PARENT}/pipelineJobs"),
                       ("GET", submission.run_id),
                       ("POST", f"{EXPERIMENT}:addContextChildren")]
    assert vertex_server.requests == []
    assert ("tracking: Vertex AI experiment 'penguins-prod' (the run is submitted into it; its "
            "parameters and metrics appear in the experiment's comparison)") in submission.notes
    assert len([n for n in submission.notes if "Vertex AI experiment" in n]) == 1


def test_the_cli_names_the_experiment(vertex_server, tmp_path, write_config):
    path = write_config(config_dict(None, vertex_server.url, tracking=TRACKING))
    result = gkeflow("submit", "--target", "vertex", "--env", "prod", "--config", str(path),
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "tracking: Vertex AI experiment 'penguins-prod'" in text
    assert "tracking: run added to Vertex AI experiment 'penguins-prod'" in text
    (run,) = vertex_server.metadata.experiment_runs(EXPERIMENT)
    assert run.rsplit("/", 1)[-1] in text  # the run the CLI printed


def test_a_vertex_schedule_with_an_email_says_its_runs_are_not_in_the_experiment(
        vertex_server, make_config, tmp_path):
    from gkeflow.pipelines.targets.schedule import apply

    nightly = {"name": "nightly", "target": "vertex", "cron": "0 2 * * *",
               "environment": "prod",
               "notifications": {"when": "always", "email": {"recipients": ["a@example.com"]}}}
    config = make_config(None, vertex_server.url, schedules=[nightly], tracking=TRACKING)
    result = apply(config, workdir=tmp_path, version="g1", backends={
        "vertex": VertexBackend(config.targets.vertex, policy=FAST)})
    (warning,) = [a for a in result.actions if a.kind == "warning"]
    assert warning.schedule == "nightly" and "not in Vertex AI experiment 'penguins-prod'" in (
        warning.detail) and "email" in warning.detail
    assert len(vertex_server.schedules) == 1 and vertex_server.metadata.contexts == {}


def test_a_vertex_schedule_refuses_a_context_that_is_no_experiment(vertex_server, make_config,
                                                                   tmp_path):
    from google.cloud import aiplatform_v1

    from gkeflow.pipelines.targets.schedule import apply

    vertex_server.metadata.contexts[EXPERIMENT] = aiplatform_v1.Context(
        name=EXPERIMENT, schema_title="system.PipelineRun", schema_version="0.0.1")
    vertex_server.metadata.stores[STORE] = aiplatform_v1.MetadataStore(name=STORE)
    nightly = {"name": "nightly", "target": "vertex", "cron": "0 2 * * *",
               "environment": "prod"}
    config = make_config(None, vertex_server.url, schedules=[nightly], tracking=TRACKING)
    with pytest.raises(RemoteError, match="not an experiment"):
        apply(config, workdir=tmp_path, version="g1", backends={
            "vertex": VertexBackend(config.targets.vertex, policy=FAST)})
    assert vertex_server.schedules == {}


def test_a_refused_association_is_a_warning_not_a_failed_submit(vertex_server, make_config,
                                                                tmp_path, monkeypatch):
    _no_sleep(monkeypatch)
    vertex_server.inject("POST", r":addContextChildren$", status=403, count=1,
                         message="Permission 'aiplatform.contexts.update' denied")
    submission, _ = _submit(vertex_server, make_config, tmp_path)
    assert len(vertex_server.jobs) == 1
    (note,) = [n for n in submission.notes if n.startswith("warning: run not added")]
    assert "HTTP 403" in note or "403" in note
    assert "aiplatform.contexts.update" in note and note.endswith("; the run goes on")
    assert vertex_server.metadata.experiment_runs(EXPERIMENT) == []


# --------------------------------------------------- runs outside Vertex AI (aiplatform SDK)


def _local_run(vertex_server, make_config, run_id="local-training-20260101-120000-ab12cd",
               succeeded=True):
    from gkeflow.pipelines.targets.vertex_experiment_runs import log_experiment_run

    config = make_config(None, vertex_server.url)
    return log_experiment_run(VertexBackend(config.targets.vertex, policy=FAST),
                              "penguins-prod", run_id,
                              {"epochs": 2, "data_uri": "embedded://penguins", "deploy": False,
                               "thresholds": ""},
                              {"accuracy": 0.95, "log_loss": 0.2, "passed": True,
                               "roc_auc": float("nan")}, succeeded)


def test_a_local_run_is_logged_as_an_experiment_run(vertex_server, make_config):
    line = _local_run(vertex_server, make_config)
    assert line.startswith("tracking: run local-training-20260101-120000-ab12cd logged to "
                           "Vertex AI experiment 'penguins-prod'")
    contexts = vertex_server.metadata.contexts
    assert contexts[EXPERIMENT].schema_title == "system.Experiment"
    (name,) = vertex_server.metadata.experiment_runs(EXPERIMENT)
    run = contexts[name]
    assert run.schema_title == "system.ExperimentRun"
    assert name.endswith("/penguins-prod-local-training-20260101-120000-ab12cd")
    metadata = json.loads(type(run).to_json(run))["metadata"]
    assert metadata["_params"] == {"epochs": 2, "data_uri": "embedded://penguins",
                                   "deploy": "false", "thresholds": ""}
    assert metadata["_metrics"] == {"accuracy": 0.95, "log_loss": 0.2, "passed": 1}
    assert metadata["_state"] == "COMPLETE"


def test_a_failed_run_is_marked_failed_and_a_repeat_adds_no_second_run(vertex_server,
                                                                       make_config):
    _local_run(vertex_server, make_config, succeeded=False)
    (name,) = vertex_server.metadata.experiment_runs(EXPERIMENT)
    state = json.loads(type(vertex_server.metadata.contexts[name]).to_json(
        vertex_server.metadata.contexts[name]))["metadata"]["_state"]
    assert state == "FAILED"
    _local_run(vertex_server, make_config, succeeded=False)  # the same run again
    assert len(vertex_server.metadata.experiment_runs(EXPERIMENT)) == 1
    # a create carried out whose answer was lost: found again and in the experiment, once
    vertex_server.inject("POST", r"/contexts$", status=503, count=1, after=True)
    _local_run(vertex_server, make_config, run_id="local-training-2")
    runs = vertex_server.metadata.experiment_runs(EXPERIMENT)
    assert [name.rsplit("/", 1)[-1] for name in runs] == [
        "penguins-prod-local-training-2", "penguins-prod-local-training-20260101-120000-ab12cd"]


def test_a_vertex_api_that_is_away_is_one_warning_line(make_config):
    from tests.integration.mlflow_server import free_port

    class Away:
        url = f"http://127.0.0.1:{free_port()}"

    line = _local_run(Away, make_config)
    assert line.startswith("warning: run not logged to Vertex AI experiment 'penguins-prod'")
    assert line.endswith("the run's outcome is unchanged") and "\n" not in line


def test_gke_steps_add_to_one_experiment_run_of_their_pipeline_run(vertex_server):
    import threading

    from gkeflow.components.tracking.pipeline_run import ARG_RUN_ID, ENV_RUN_ID_FIELD
    from gkeflow.components.tracking.vertex_run import (
        ENV_ENDPOINT,
        ENV_EXPERIMENT,
        ENV_LOCATION,
        ENV_PROJECT,
        log_step,
    )

    # on GKE the run id comes from the pod's label (an unresolved argument is ignored)
    env = {ENV_EXPERIMENT: "penguins-prod", ENV_PROJECT: "my-project",
           ENV_LOCATION: "us-central1", ENV_ENDPOINT: vertex_server.url,
           ENV_RUN_ID_FIELD: "5f0c3a9e-0d6c-4e4e-9a53-7f1b1d2c3e4f"}
    argv = ["executor", ARG_RUN_ID, "{{$.pipeline_job_uuid}}"]
    logged: list[bool] = []
    steps = [("prepare-data", {"data_uri": "gs://b/d.csv"}, {"rows_read": 344}),
             ("train-model", {"epochs": 2}, {"final_accuracy": 0.9})]
    threads = [threading.Thread(target=lambda s=s: logged.append(log_step(*s, environ=env,
                                                                          argv=argv)))
               for s in steps]  # two steps starting at once
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert logged == [True, True]
    assert log_step("evaluate-model", {"decision": "blessed"}, {"accuracy": 0.95},
                    environ=env, argv=argv)
    (name,) = vertex_server.metadata.experiment_runs(EXPERIMENT)
    assert name.endswith("/penguins-prod-5f0c3a9e-0d6c-4e4e-9a53-7f1b1d2c3e4f")
    metadata = json.loads(type(vertex_server.metadata.contexts[name]).to_json(
        vertex_server.metadata.contexts[name]))["metadata"]
    assert metadata["_params"] == {"prepare-data.data_uri": "gs://b/d.csv",
                                   "train-model.epochs": 2,
                                   "evaluate-model.decision": "blessed"}
    assert metadata["_metrics"] == {"rows_read": 344, "final_accuracy": 0.9, "accuracy": 0.95}


def test_a_gke_step_without_the_settings_logs_nothing(vertex_server):
    from gkeflow.components.tracking.vertex_run import log_step

    assert not log_step("prepare-data", {"a": 1}, {}, environ={}, argv=["x"])
    assert vertex_server.requests == []


TENSORBOARD = "projects/my-project/locations/us-central1/tensorboards/77"


def test_a_gke_train_step_writes_its_curves_to_the_experiment_s_tensorboard(
        vertex_server, make_config, tmp_path):
    """Compiled for GKE with a TensorBoard behind the experiment, train-model alone gets it;
    from that environment the step's curves land epoch by epoch in the run's time series
    (no point written twice when a step is retried), and its log_step links the run."""
    from gkeflow.components.tracking.pipeline_run import ARG_RUN_ID, ENV_RUN_ID_FIELD
    from gkeflow.components.tracking.vertex_curves import open_writer
    from gkeflow.components.tracking.vertex_run import ENV_TENSORBOARD, log_step
    from gkeflow.pipelines.targets.compile import compile_pipeline

    config = make_config(vertex_server.url, vertex_server.url, tracking={"default": {
        "vertex_experiments": {"experiment": "penguins-prod", "tensorboard": TENSORBOARD}}})
    spec = next(yamlio.load_all(compile_pipeline("training", "gke", tmp_path,
                                                 config=select(config)).read_text()))
    envs = {name.removeprefix("exec-"): {e["name"]: e["value"] for e in
                                         executor["container"].get("env", [])}
            for name, executor in spec["deploymentSpec"]["executors"].items()}
    assert [step for step, env in envs.items() if ENV_TENSORBOARD in env] == ["train-model"]
    # a sweep's trials would share the run's one TensorBoard run: none of them writes there
    sweep = next(yamlio.load_all(compile_pipeline("sweep", "gke", tmp_path,
                                                  config=select(config)).read_text()))
    assert not [name for name, executor in sweep["deploymentSpec"]["executors"].items()
                if ENV_TENSORBOARD in {e["name"] for e in executor.get("container", {}).get(
                    "env", [])}]
    env = {**envs["train-model"], ENV_RUN_ID_FIELD: "run-5f0c"}
    assert env[ENV_TENSORBOARD] == TENSORBOARD
    argv = ["executor", ARG_RUN_ID, "{{$.pipeline_job_uuid}}"]  # unresolved: the label wins

    vertex_server.tensorboard.instances.add(TENSORBOARD)
    lines: list[str] = []
    writer = open_writer(env, argv, lines.append)
    for epoch, (loss, accuracy) in enumerate([(0.9, 0.6), (0.5, 0.8), (0.3, 0.9)], start=1):
        assert writer.write(epoch, {"loss": loss, "accuracy": accuracy}, wall_time=100 + epoch)
    again = open_writer(env, argv, lines.append)  # a retried step: the same run and series
    assert again.write(4, {"loss": 0.25, "accuracy": 0.92}, wall_time=110)
    assert log_step("train-model", {"epochs": 4}, {"final_accuracy": 0.92}, environ=env,
                    argv=argv)
    assert not lines and not vertex_server.violations, (lines, vertex_server.violations)
    run = f"{TENSORBOARD}/experiments/penguins-prod/runs/run-5f0c"  # the run id, as the SDK
    curves = vertex_server.tensorboard.curves(run)
    assert sorted(curves) == ["accuracy", "loss"]
    assert curves["loss"] == [(1, 101.0, 0.9), (2, 102.0, 0.5), (3, 103.0, 0.3),
                              (4, 110.0, 0.25)]
    run_context = f"{PARENT}/metadataStores/default/contexts/penguins-prod-run-5f0c"
    (link,) = vertex_server.metadata.context_artifacts[run_context]
    assert vertex_server.metadata.artifacts[link].metadata["resourceName"] == run
    assert vertex_server.metadata.contexts[EXPERIMENT].metadata[
        "backing_tensorboard_resource"] == TENSORBOARD


def test_a_tensorboard_the_service_does_not_have_is_one_line_and_training_goes_on(
        vertex_server):
    from gkeflow.components.tracking.vertex_curves import (
        ENV_CURVES_EXPERIMENT,
        ENV_CURVES_RUN,
        open_writer,
    )
    from gkeflow.components.tracking.vertex_run import ENV_ENDPOINT, ENV_TENSORBOARD

    lines: list[str] = []
    writer = open_writer({ENV_TENSORBOARD: TENSORBOARD, ENV_CURVES_EXPERIMENT: "e",
                          ENV_CURVES_RUN: "r", ENV_ENDPOINT: vertex_server.url}, [],
                         lines.append)
    assert writer.write(1, {"loss": 1.0}) is False and writer.write(2, {"loss": 0.5}) is False
    assert len(lines) == 1 and lines[0].startswith("vertex experiments: curves not written")
    assert open_writer({}, []) is None  # no TensorBoard: no writer, nothing said


@pytest.mark.parametrize("tensorboard, says", [
    ("tensorboards/77", "not a TensorBoard instance"),
    ("projects/other/locations/us-central1/tensorboards/77", "in other/us-central1"),
])
def test_a_tensorboard_vertex_ai_cannot_back_the_experiment_is_refused(
        make_config, tensorboard, says):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=says):
        make_config(None, "http://127.0.0.1:1", tracking={"default": {"vertex_experiments": {
            "experiment": "penguins-prod", "tensorboard": tensorboard}}})
