"""A multi-worker run killed after a checkpoint commit resumes on EVERY worker from that commit.

Two loopback workers (the machinery of ``gkeflow run --compute train-model.replicas=2``) train
with checkpoints under the pipeline root; the whole job is killed (SIGKILL, as when nodes go
away) once the chief has committed an epoch; the restarted job's chief and worker both resume
at the committed epoch, even when a stray writer commits between the chief's read and the
worker's start, and finish with a model that meets the export contract.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gkeflow.components.prepare.logic import prepare
from gkeflow.components.scaleout import cluster, storage
from gkeflow.components.scaleout.local_workers import free_ports
from gkeflow.components.train.checkpoint import load_state
from gkeflow.components.train.exported import MODEL_METADATA_FILE, ExportedModel
from gkeflow.components.train.store import LocalStore, resolve_checkpoint_location
from tests.conftest import make_churn_csv

pytestmark = pytest.mark.slow

PARAMS = {"epochs": 3, "batch_size": 32, "early_stopping_patience": 0,
          "checkpoint_every_epochs": 1, "hidden_units": [16]}

FIRST_ATTEMPT = """
import json, sys
from gkeflow.components.scaleout.local_workers import run_local_workers
run_local_workers(sys.argv[1], sys.argv[1], json.loads(sys.argv[2]), 2, sys.argv[3], "run-1",
                  "train-model")
"""


def wait_for_commit(location: str, process, timeout_s: float = 300.0) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        state = load_state(location) if os.path.isdir(location) else None
        if state and state.epochs_completed >= 1:
            return
        if process.poll() is not None:
            pytest.fail("the first attempt ended before it was interrupted:\n"
                        + process.stdout.read()[-3000:])
        time.sleep(0.02)
    pytest.fail("no epoch committed in time")


def start_worker(index: int, hosts: list[str], dataset: str, root: str, output: str,
                 env: dict | None = None):
    env = {**(env or os.environ), cluster.HOSTS_ENV: ",".join(hosts),
           cluster.INDEX_ENV: str(index), "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
    env.pop("TF_CONFIG", None)
    return subprocess.Popen(
        [sys.executable, "-m", "gkeflow.components.scaleout.worker", "--dataset", dataset,
         "--schema", dataset, "--output", output, "--params", json.dumps(PARAMS),
         "--checkpoint-root", root, "--run-id", "run-1", "--task-name", "train-model"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def read_until(process, marker: str) -> list[str]:
    lines = []
    for line in process.stdout:
        lines.append(line)
        if marker in line:
            return lines
    pytest.fail(f"{marker!r} never came:\n" + "".join(lines)[-3000:])


def stray_commit(location: str) -> None:
    """What an earlier attempt still running would do: commit a newer checkpoint."""
    store = LocalStore(location)
    state, _ = store.read_state()
    copy = Path(location) / "model-99999-0000000-stray.keras"
    shutil.copyfile(Path(location) / state["model_file"], copy)
    store.commit({**state, "epochs_completed": state["epochs_completed"] + 1,
                  "model_file": copy.name}, None)


def test_both_workers_resume_at_the_committed_epoch(tmp_path):
    csv = make_churn_csv(tmp_path / "churn.csv", rows=8000, seed=5)
    prepare(str(csv), tmp_path / "dataset", "status")
    dataset, root = str(tmp_path / "dataset"), str(tmp_path / "root")
    location = resolve_checkpoint_location("", root, "run-1", "train-model")

    # attempt 1: `gkeflow run --compute train-model.replicas=2`'s two loopback workers,
    # killed (launcher and both workers at once) once the chief has committed an epoch
    first = subprocess.Popen(
        [sys.executable, "-c", FIRST_ATTEMPT, dataset, json.dumps(PARAMS), root],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    try:
        wait_for_commit(location, first)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(first.pid, signal.SIGKILL)
        first.communicate()
    committed = load_state(location).epochs_completed
    assert 1 <= committed < PARAMS["epochs"]

    # attempt 2: once the chief has read the resume point, a stray writer commits a newer
    # one; both workers must still resume where the chief does
    hosts = cluster.loopback_hosts(free_ports(2))
    output = str(tmp_path / "published")
    chief = start_worker(0, hosts, dataset, root, output)
    worker = start_worker(1, hosts, dataset, root, output)
    try:
        chief_log = read_until(chief, "sending it to the workers")
        stray_commit(location)
        worker_log = worker.communicate(timeout=600)[0]
        chief_log = "".join(chief_log) + chief.communicate(timeout=600)[0]
    finally:
        for process in (chief, worker):
            if process.poll() is None:
                process.kill()
    assert chief.returncode == 0, chief_log[-3000:]
    assert worker.returncode == 0, worker_log[-3000:]
    for log in (chief_log, worker_log):
        assert f"resuming from checkpoint: {committed} epochs completed" in log, log[-3000:]
        assert f"Epoch {committed}/" not in log  # no completed epoch is trained again
        assert f"Epoch {PARAMS['epochs']}/{PARAMS['epochs']}" in log
    summary = storage.published_summary(output)
    assert summary["workers"] == 2 and summary["epochs_run"] == PARAMS["epochs"]
    assert summary["strategy"] == "MultiWorkerMirroredStrategy over 2 workers"
    assert not os.path.exists(location)  # the chief removed its checkpoints after success

    model = ExportedModel(Path(output))
    metadata = json.loads((Path(output) / MODEL_METADATA_FILE).read_text())
    assert metadata["epochs_run"] == PARAMS["epochs"] and metadata["replicas"] == 2
    assert [f["name"] for f in metadata["features"]] == summary["features"]
    assert set(model.predict_rows([{"plan": "basic"}, {}])) <= set(model.label_vocabulary)


#: Loaded by every Python process started with this directory on PYTHONPATH: the chief dies
#: (as SIGKILL would: no clean-up) right after committing the checkpoint of the last epoch.
DIE_AFTER_LAST_COMMIT = """
import os
from pathlib import Path
from gkeflow.components.train import store as _store

_commit = _store.LocalStore.commit


def _dying_commit(self, state, token):
    result = _commit(self, state, token)
    if (Path(self.directory) == Path(os.environ["GKEFLOW_TEST_SHARED_CHECKPOINTS"])
            and state["epochs_completed"] == int(os.environ["GKEFLOW_TEST_LAST_EPOCH"])):
        os._exit(137)
    return result


_store.LocalStore.commit = _dying_commit
"""


def test_both_workers_killed_after_the_last_commit_resume_and_export(tmp_path):
    """Preemption during export: every epoch is committed, no model published. The retried
    job trains nothing, restores the best weights on every worker and publishes the model."""
    csv = make_churn_csv(tmp_path / "churn.csv", rows=4000, seed=7)
    prepare(str(csv), tmp_path / "dataset", "status")
    dataset, root = str(tmp_path / "dataset"), str(tmp_path / "root")
    location = resolve_checkpoint_location("", root, "run-1", "train-model")
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(DIE_AFTER_LAST_COMMIT)
    dying = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(hook), os.environ.get("PYTHONPATH", "")]),
        "GKEFLOW_TEST_SHARED_CHECKPOINTS": location,
        "GKEFLOW_TEST_LAST_EPOCH": str(PARAMS["epochs"])}
    output = str(tmp_path / "published")

    hosts = cluster.loopback_hosts(free_ports(2))
    first = [start_worker(i, hosts, dataset, root, output, env=dying) for i in range(2)]
    try:
        first[0].wait(timeout=600)
    finally:
        for process in first:
            if process.poll() is None:
                process.kill()
            process.communicate()
    assert first[0].returncode == 137
    assert load_state(location).epochs_completed == PARAMS["epochs"]
    assert storage.published_summary(output) is None

    hosts = cluster.loopback_hosts(free_ports(2))
    second = [start_worker(i, hosts, dataset, root, output) for i in range(2)]
    logs = [p.communicate(timeout=600)[0] for p in second]
    for process, log in zip(second, logs, strict=True):
        assert process.returncode == 0, log[-3000:]
        assert f"resuming from checkpoint: {PARAMS['epochs']} epochs completed" in log
        assert "Epoch " not in log, "no epoch is trained again"
    summary = storage.published_summary(output)
    assert summary["workers"] == 2 and summary["epochs_run"] == PARAMS["epochs"]
    metadata = json.loads((Path(output) / MODEL_METADATA_FILE).read_text())
    assert metadata["restored_best_weights"] is True
    assert not os.path.exists(location)
    assert ExportedModel(Path(output)).predict_rows([{"plan": "basic"}])


def start_pod(env_of_pod: dict[str, str], dataset: str, root: str, output: str):
    """A JobSet pod of the mixed-capacity layout, as Kubernetes starts it: its index from the
    env gkeflow writes into the manifest plus what the Job controller sets."""
    env = {**os.environ, **env_of_pod, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
    env.pop("TF_CONFIG", None)
    env.pop(cluster.INDEX_ENV, None)
    return subprocess.Popen(
        [sys.executable, "-m", "gkeflow.components.scaleout.worker", "--dataset", dataset,
         "--schema", dataset, "--output", output, "--params", json.dumps(PARAMS),
         "--checkpoint-root", root, "--run-id", "run-1", "--task-name", "train-model"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        start_new_session=True)


def mixed_pod_envs(hosts: list[str]) -> list[dict[str, str]]:
    """The env of the chief's pod (replicated job ``chief``) and the Spot worker's pod
    (replicated job ``worker``) of a 2-replica mixed-capacity JobSet, read from the
    manifest gkeflow builds, with loopback hosts in place of the pods' DNS names."""
    from gkeflow.components.scaleout import jobset as js
    from gkeflow.pipelines.compute.engines.gke import jobset_template
    from gkeflow.pipelines.definitions.training import DEFAULT_COMPUTE

    profile = DEFAULT_COMPUTE["train-model"].with_overrides(
        replicas=2, scheduling="spot", chief_scheduling="standard")
    manifest = js.finish(jobset_template(profile, "img"), "js", "ns", "", [])
    envs = []
    for job in manifest["spec"]["replicatedJobs"]:
        container = job["template"]["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
        env[cluster.HOSTS_ENV] = ",".join(hosts)
        env[cluster.JOB_INDEX_ENV] = "0"  # the downward API's job index
        env[cluster.COMPLETION_INDEX_ENV] = "0"  # one pod per Job here
        envs.append(env)
    return envs


def test_a_spot_worker_lost_under_an_on_demand_chief_resumes_at_the_committed_epoch(tmp_path):
    """Mixed capacity: only the Spot worker is preempted (SIGKILL) after a commit; the JobSet
    fails and stops the chief (SIGTERM); the retried JobSet's chief and worker both resume at
    the committed epoch and publish the model."""
    csv = make_churn_csv(tmp_path / "churn.csv", rows=8000, seed=11)
    prepare(str(csv), tmp_path / "dataset", "status")
    dataset, root = str(tmp_path / "dataset"), str(tmp_path / "root")
    location = resolve_checkpoint_location("", root, "run-1", "train-model")
    output = str(tmp_path / "published")

    chief_env, worker_env = mixed_pod_envs(cluster.loopback_hosts(free_ports(2)))
    first = [start_pod(chief_env, dataset, root, output),
             start_pod(worker_env, dataset, root, output)]
    try:
        wait_for_commit(location, first[0])
        os.killpg(first[1].pid, signal.SIGKILL)  # the Spot node goes away
        first[1].communicate()
        os.killpg(first[0].pid, signal.SIGTERM)  # the failed JobSet stops the chief
        first[0].communicate(timeout=120)
    finally:
        for process in first:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
    committed = load_state(location).epochs_completed
    assert 1 <= committed <= PARAMS["epochs"]
    assert storage.published_summary(output) is None

    chief_env, worker_env = mixed_pod_envs(cluster.loopback_hosts(free_ports(2)))
    second = [start_pod(chief_env, dataset, root, output),
              start_pod(worker_env, dataset, root, output)]
    logs = [process.communicate(timeout=600)[0] for process in second]
    for process, log in zip(second, logs, strict=True):
        assert process.returncode == 0, log[-3000:]
        assert f"resuming from checkpoint: {committed} epochs completed" in log, log[-3000:]
    summary = storage.published_summary(output)
    assert summary["workers"] == 2 and summary["epochs_run"] == PARAMS["epochs"]
