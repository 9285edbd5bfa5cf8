"""Scale-out building blocks without a cluster: TF_CONFIG from host names and index, JobSet
names and manifests, JobSet states, Vertex AI machine and scheduling choices, the runner of
local worker processes."""

from __future__ import annotations

import json
import re

import pytest

from gkeflow.components.scaleout import cluster
from gkeflow.components.scaleout import jobset as js
from gkeflow.components.scaleout.worker import train_params
from gkeflow.components.train.devices import is_chief, workers_in_tf_config
from gkeflow.pipelines.compute.engines import gke, training_engine, vertex
from gkeflow.pipelines.compute.profiles import ComputeError, ComputeProfile
from gkeflow.pipelines.definitions.training import DEFAULT_COMPUTE
from tests.integration.fake_kube import validate_jobset

TRAIN = DEFAULT_COMPUTE["train-model"]


def test_jobset_host_names_follow_the_jobset_naming_scheme():
    assert cluster.jobset_hosts("js", 3) == [
        "js-worker-0-0.js:2222", "js-worker-0-1.js:2222", "js-worker-0-2.js:2222"]
    assert cluster.jobset_hosts("js", 1, subdomain="net", port=1)[0] == "js-worker-0-0.net:1"
    with pytest.raises(ValueError, match="replicas must be >= 1"):
        cluster.jobset_hosts("js", 0)


def test_each_pod_builds_its_tf_config_from_the_hosts_and_its_completion_index():
    hosts = cluster.jobset_hosts("js", 2)
    configs = [cluster.tf_config_from_env({cluster.HOSTS_ENV: ",".join(hosts),
                                           cluster.COMPLETION_INDEX_ENV: str(i)})
               for i in range(2)]
    for index, config in enumerate(configs):
        parsed = json.loads(config)
        assert parsed == {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": index}}
        assert workers_in_tf_config(config) == 2
    assert [is_chief(c) for c in configs] == [True, False]
    # a local worker names its index explicitly; an existing TF_CONFIG (Vertex AI) is kept
    local = cluster.tf_config_from_env({cluster.HOSTS_ENV: "127.0.0.1:1,127.0.0.1:2",
                                        cluster.INDEX_ENV: "1"})
    assert json.loads(local)["task"]["index"] == 1
    assert cluster.tf_config_from_env({"TF_CONFIG": "{}", cluster.HOSTS_ENV: "a:1"}) == "{}"
    assert cluster.tf_config_from_env({}) == ""


def test_a_worker_without_an_index_or_outside_the_cluster_is_a_clear_error():
    with pytest.raises(ValueError, match="JOB_COMPLETION_INDEX"):
        cluster.tf_config_from_env({cluster.HOSTS_ENV: "a:1,b:1"})
    with pytest.raises(ValueError, match="outside 0..1"):
        cluster.tf_config(["a:1", "b:1"], 2)


def test_jobset_name_is_stable_per_run_and_task_and_keeps_host_names_dns_labels():
    name = js.jobset_name("run-1", "train-model")
    assert name == js.jobset_name("run-1", "train-model")
    assert name != js.jobset_name("run-1", "train-model-2") != js.jobset_name("run-2",
                                                                               "train-model")
    longest_host = cluster.jobset_hosts(name, 1000)[-1].split(".")[0]
    assert len(longest_host) <= 63 and re.fullmatch(r"[a-z0-9-]+", longest_host)


def test_finished_manifest_is_valid_and_leaves_the_template_untouched():
    template = gke.jobset_template(TRAIN.with_overrides(replicas=4), "img:1")
    before = json.dumps(template, sort_keys=True)
    manifest = js.finish(template, "gkeflow-train-x", "ns", "sa", ["--a", "b"],
                         run_id="0f1e/run id", task_name="train-model")
    validate_jobset(manifest)
    assert json.dumps(template, sort_keys=True) == before
    assert manifest["metadata"]["labels"]["gkeflow/run-id"] == "0f1e-run-id"
    env = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"][0]["env"]
    hosts = [e["value"] for e in env if e["name"] == cluster.HOSTS_ENV]
    assert hosts == [",".join(cluster.jobset_hosts("gkeflow-train-x", 4))]
    assert js.replicas_of(manifest) == 4


def test_cpu_only_jobset_pods_have_no_gpu_settings_and_keep_ephemeral_storage():
    profile = ComputeProfile(cpu="4", memory="16G", replicas=2, ephemeral_storage="50Gi")
    pod = gke.jobset_template(profile, "img")["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"]["spec"]
    assert "nodeSelector" not in pod and "tolerations" not in pod
    assert pod["containers"][0]["resources"]["limits"] == {
        "cpu": "4", "memory": "16G", "ephemeral-storage": "50Gi"}


@pytest.mark.parametrize(("status", "expected"), [
    ({}, "Running"),
    ({"conditions": [{"type": "Completed", "status": "True"}]}, "Completed"),
    ({"conditions": [{"type": "Failed", "status": "False"}]}, "Running"),
    ({"conditions": [{"type": "Failed", "status": "True", "message": "m"}]}, "Failed"),
    ({"terminalState": "Failed"}, "Failed"),
])
def test_jobset_state(status, expected):
    assert js.state({"metadata": {"name": "x"}, "status": status})[0] == expected


def test_vertex_machines_and_scheduling():
    assert vertex.machine_type(TRAIN) == "n1-standard-8"
    assert vertex.machine_type(ComputeProfile(cpu="3", memory="10G")) == "n1-standard-4"
    with pytest.raises(ComputeError, match="no n1-standard machine"):
        vertex.machine_type(ComputeProfile(cpu="200", memory="10G"))
    assert vertex.scheduling(ComputeProfile()) == {
        "timeout": "604800s", "restart_job_on_worker_restart": False, "strategy": "STANDARD"}
    flex = vertex.scheduling(ComputeProfile(scheduling="flex-start", max_wait="30m",
                                            replicas=2, timeout_s=3600))
    assert flex == {"timeout": "3600s", "restart_job_on_worker_restart": True,
                    "strategy": "FLEX_START", "max_wait_duration": "1800s"}


def test_which_engine_runs_the_training_step():
    plain = TRAIN.with_overrides(timeout_s=0)
    assert training_engine("vertex", plain) is None
    assert training_engine("vertex", plain.with_overrides(scheduling="spot")).name == "vertex"
    assert training_engine("vertex", TRAIN).name == "vertex"  # a timeout needs a CustomJob
    assert training_engine("gke", TRAIN) is None  # one pod honours spot and timeout itself
    assert training_engine("gke", TRAIN.with_overrides(replicas=2)).name == "gke"
    assert training_engine("local", TRAIN.with_overrides(replicas=2)).name == "local"
    launcher = training_engine("gke", TRAIN.with_overrides(replicas=2)).launcher_profile(TRAIN)
    assert not launcher.uses_gpu and launcher.retries == TRAIN.retries


def test_worker_params_reject_unknown_keys():
    assert train_params({"epochs": 2, "hidden_units": "8,4"}).hidden_units == (8, 4)
    with pytest.raises(ValueError, match="unknown training parameter"):
        train_params({"epoch": 2})


def test_reservation_reaches_every_jobset_pod_and_the_custom_job():
    from tests.compile.customjob import strict_custom_job

    profile = TRAIN.with_overrides(replicas=2, scheduling="reservation",
                                   reservation="projects/shared-proj/reservations/t4-pool")
    template = gke.jobset_template(profile, "img")
    validate_jobset(js.finish(template, "gkeflow-train-r", "ns", "", []))
    pod = template["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-accelerator": "nvidia-tesla-t4",
        "cloud.google.com/reservation-name": "t4-pool",
        "cloud.google.com/reservation-affinity": "specific",
        "cloud.google.com/reservation-project": "shared-proj"}
    container = {"image": "img", "command": ["python3"], "args": ["{{$}}"]}
    job = strict_custom_job(vertex.custom_job_payload(profile, container, "train-model"))
    affinity = job.job_spec.worker_pool_specs[0].machine_spec.reservation_affinity
    assert affinity.reservation_affinity_type.name == "SPECIFIC_RESERVATION"
    assert list(affinity.values) == ["projects/shared-proj/reservations/t4-pool"]
    assert job.job_spec.worker_pool_specs[0].container_spec.args == ["{{$.json_escape[1]}}"]
    assert vertex.boot_disk_gb(profile) == 100
    assert vertex.boot_disk_gb(profile.with_overrides(ephemeral_storage="500Gi")) == 537


def test_host_names_and_tf_config_for_any_replicas_of_the_replicated_job():
    """Two Jobs of three pods: hosts <jobset>-worker-<jobIndex>-<podIndex>, Job 0 first; each
    pod's index from its Job's index (label, through the downward API) and completion index."""
    template = gke.jobset_template(TRAIN.with_overrides(replicas=3), "img:1")
    template["spec"]["replicatedJobs"][0]["replicas"] = 2
    manifest = js.finish(template, "gkeflow-train-x", "ns", "", ["--a"])
    validate_jobset(manifest)
    assert js.replicas_of(manifest) == 6
    container = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"][0]
    env = {e["name"]: e for e in container["env"]}
    hosts = env[cluster.HOSTS_ENV]["value"].split(",")
    assert hosts == [f"gkeflow-train-x-worker-{job}-{pod}.gkeflow-train-x:2222"
                     for job in range(2) for pod in range(3)]
    assert env[cluster.JOB_INDEX_ENV]["valueFrom"] == {"fieldRef": {
        "fieldPath": "metadata.labels['jobset.sigs.k8s.io/job-index']"}}
    assert env[cluster.PODS_PER_JOB_ENV]["value"] == "3"
    seen = {}
    for job in range(2):
        for pod in range(3):  # what Kubernetes gives pod <job>-<pod>
            config = json.loads(cluster.tf_config_from_env({
                cluster.HOSTS_ENV: ",".join(hosts), cluster.JOB_INDEX_ENV: str(job),
                cluster.PODS_PER_JOB_ENV: "3", cluster.COMPLETION_INDEX_ENV: str(pod)}))
            index = config["task"]["index"]
            # the pod's own host name is the host at its index
            assert hosts[index].startswith(f"gkeflow-train-x-worker-{job}-{pod}.")
            seen[index] = (job, pod)
    assert sorted(seen) == list(range(6))


def test_the_workers_run_as_their_own_service_account():
    template = gke.jobset_template(TRAIN.with_overrides(replicas=2), "img")
    pod = template["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "gkeflow-worker"
    custom = gke.jobset_template(TRAIN.with_overrides(
        replicas=2, worker_service_account="team-a.trainer"), "img")
    assert custom["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "serviceAccountName"] == "team-a.trainer"
    for bad in ("", "Trainer", "sa@project.iam.gserviceaccount.com", "a" * 254):
        with pytest.raises(ComputeError, match="worker_service_account must name"):
            TRAIN.with_overrides(worker_service_account=bad)


def test_the_launcher_deadline_covers_provisioning_plus_the_jobsets_own():
    profile = TRAIN.with_overrides(replicas=2, timeout_s="2h")
    job = gke.jobset_template(profile, "img")["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert job["activeDeadlineSeconds"] == 7200  # the training deadline travels with it
    launcher = gke.ENGINE.launcher_profile(profile)
    assert launcher.timeout_s == 7200 + gke.PROVISIONING_ALLOWANCE_S
    assert launcher.cpu == "1" and launcher.accelerator_count == 0
    flex = profile.with_overrides(scheduling="flex-start", max_wait="3h")
    assert gke.ENGINE.launcher_profile(flex).timeout_s == 7200 + 3 * 3600
    assert gke.ENGINE.launcher_profile(profile.with_overrides(timeout_s=0)).timeout_s == 0
    assert "deadline 2h (launcher 3h)" in gke.ENGINE.describe(profile)


def test_the_workers_account_is_set_and_checked_in_gkeflow_yaml(tmp_path):
    from gkeflow.pipelines.settings.config import ConfigError, load_config

    path = tmp_path / "gkeflow.yaml"
    path.write_text("compute:\n  train-model: {replicas: 2, worker_service_account: trainer}\n")
    profiles = load_config(path).compute_overrides(DEFAULT_COMPUTE)
    assert profiles["train-model"].worker_service_account == "trainer"
    path.write_text("compute:\n  train-model: {worker_service_account: Trainer_SA}\n")
    with pytest.raises(ConfigError, match="compute.train-model: worker_service_account must "
                                          "name a Kubernetes service account"):
        load_config(path).compute_overrides(DEFAULT_COMPUTE)


def test_local_processes_report_codes_and_logs_and_none_outlives_a_failed_start(tmp_path):
    import os
    import sys
    from pathlib import Path

    from gkeflow.components.scaleout.local_workers import run_processes

    env = dict(os.environ)
    echoed: list[str] = []
    codes, logs = run_processes([([sys.executable, "-c", "print('chief')"], env),
                                 ([sys.executable, "-c", "print('w'); raise SystemExit(3)"],
                                  env)], echo=echoed.append, timeout_s=60)
    assert codes == [0, 3] and logs == [["chief"], ["w"]] and echoed == ["chief"]

    def running(token: str) -> list[str]:
        found = []
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                if token.encode() in cmdline.read_bytes():
                    found.append(cmdline.parent.name)
            except OSError:  # it ended meanwhile
                pass
        return found

    token = f"gkeflow-test-{tmp_path.name}-{os.getpid()}"
    first = [sys.executable, "-c", "import time; time.sleep(60)", token]
    with pytest.raises(FileNotFoundError):
        run_processes([(first, env), ([str(tmp_path / "no-such-program")], env)])
    assert running(token) == [], "the first process outlived the failed start"
