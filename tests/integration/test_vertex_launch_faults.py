"""The three Vertex AI launchers (CustomJob, HyperparameterTuningJob, BatchPredictionJob)
against a strict fake JobService over real HTTP that fails the way Vertex AI does: 503
bursts, 429s, dropped connections, create answers lost after the job was made, hung reads,
jobs that are still cancelling, and SIGTERM from the pipeline's cancellation."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from google.cloud import aiplatform_v1 as v1

from gkeflow.components.cloud import follow as fl
from gkeflow.components.cloud.retry import RetryPolicy
from gkeflow.components.predict.vertex_batch import launch_label
from gkeflow.components.scaleout import vertex_launcher as vl
from tests.integration import soak
from tests.integration.fake_vertex_jobs import FakeVertexJobs
from tests.integration.faults import Faults

ROOT = Path(__file__).resolve().parents[2]
LAUNCHERS = soak.LAUNCHERS
COLLECTION = {"customjob": "customJobs", "tuning": "hyperparameterTuningJobs",
              "batch": "batchPredictionJobs"}
KIND = {"customjob": "CustomJob", "tuning": "HyperparameterTuningJob",
        "batch": "BatchPredictionJob"}


def fast(budget_s: float = 10.0, call_timeout_s: float = 0.5) -> RetryPolicy:
    return RetryPolicy(call_timeout_s=call_timeout_s, budget_s=budget_s, initial_s=0.01,
                       maximum_s=0.05)


def earlier_job(launcher: str):
    """A job of this step as an earlier attempt would have made it (same label)."""
    if launcher == "customjob":
        key = vl.launch_key(f"{soak.PARENT}/pipelineJobs/run-1", "train-model")
        return v1.CustomJob(display_name="train-model", labels={vl.LAUNCH_LABEL: key})
    if launcher == "tuning":
        return v1.HyperparameterTuningJob(display_name="s", labels={"gkeflow-run": "run-1"})
    body = soak.batch_body()
    return v1.BatchPredictionJob(display_name="b", labels={
        "gkeflow-launch": launch_label("run-1", body["model"])})


def launch(launcher, fake, tmp_path, policy=None, **kwargs):
    lines: list[str] = []
    resources = tmp_path / "gcp_resources"
    try:
        job = soak.run_launcher(launcher, fake, policy or fast(), poll_s=0.01,
                                echo=lines.append, gcp_resources_path=str(resources), **kwargs)
    finally:
        assert fake.violations == []  # every request the launcher sent was valid
    return job, lines, resources


def named_job(resources: Path) -> str:
    [resource] = json.loads(resources.read_text())["resources"]
    return resource["resourceUri"].split("/v1/", 1)[1]


def job_name(job) -> str:
    return job["name"] if isinstance(job, dict) else getattr(job, "job_name", None) or job.name


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_transient_errors_on_every_call_are_retried(launcher, tmp_path):
    collection = COLLECTION[launcher]
    faults = (Faults().script("503", times=2, method="GET", path_contains=f"/{collection}")
              .script("429", times=2, method="POST", path_contains=collection)
              .script("503", times=3, method="GET", path_contains=f"/{collection}/")
              .script("500", method="GET", path_contains=f"/{collection}/")
              .script("502", method="GET", path_contains=f"/{collection}/")
              .script("504", method="GET", path_contains=f"/{collection}/")
              .script("reset", method="GET", path_contains=f"/{collection}/")
              .script("503", times=2, method="GET", path_contains="/pipelineJobs/"))
    with FakeVertexJobs(running_looks=3, faults=faults) as fake:
        job, lines, resources = launch(launcher, fake, tmp_path)
    assert len(fake.created) == 1 and fake.cancelled == [] and fake.violations == []
    expected = 13 if launcher == "customjob" else 11  # only the CustomJob reads its pipeline
    assert faults.total == expected
    assert named_job(resources) == job_name(job) == next(iter(fake.jobs))
    assert sum("retrying in" in line for line in lines) == expected


@pytest.mark.parametrize("kind", ["lost", "hang"])
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_lost_create_answer_never_makes_a_second_job(launcher, kind, tmp_path):
    faults = Faults(hang_s=1.0).script(kind, method="POST", path_contains=COLLECTION[launcher])
    with FakeVertexJobs(faults=faults) as fake:
        job, lines, resources = launch(launcher, fake, tmp_path)
    assert len(fake.created) == 1 and len(fake.jobs) == 1 and fake.cancelled == []
    assert named_job(resources) == job_name(job)
    assert any("the create's answer was lost" in line for line in lines)


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_hung_reads_time_out_and_are_retried(launcher, tmp_path):
    faults = Faults(hang_s=1.0).script("hang", times=3, method="GET",
                                       path_contains=f"/{COLLECTION[launcher]}/")
    started = time.monotonic()
    with FakeVertexJobs(running_looks=2, faults=faults) as fake:
        launch(launcher, fake, tmp_path, policy=fast(call_timeout_s=0.3))
    assert faults.injected["hang"] == 3 and len(fake.created) == 1 and fake.cancelled == []
    assert time.monotonic() - started >= 0.9  # three calls abandoned after their timeout


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_job_still_cancelling_is_waited_out_before_its_replacement(launcher, tmp_path):
    with FakeVertexJobs(cancelling_looks=3) as fake:
        earlier = fake.add_job(soak.PARENT, earlier_job(launcher), "JOB_STATE_CANCELLING")
        job, lines, _ = launch(launcher, fake, tmp_path)
    assert fake.states_at_create == [[f"{earlier}=JOB_STATE_CANCELLED"]]
    assert job_name(job) != earlier and fake.cancelled == []
    assert any("still stopping" in line for line in lines)


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_running_job_of_an_earlier_attempt_is_followed_not_duplicated(launcher, tmp_path):
    with FakeVertexJobs() as fake:
        earlier = fake.add_job(soak.PARENT, earlier_job(launcher), "JOB_STATE_RUNNING")
        job, _, resources = launch(launcher, fake, tmp_path)
    assert fake.created == [] and job_name(job) == earlier == named_job(resources)


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_the_jobs_own_failure_ends_in_one_line_without_a_cancel(launcher, tmp_path):
    with FakeVertexJobs(outcome="JOB_STATE_FAILED", error_message="replica 0 ran out of "
                        "memory") as fake:
        with pytest.raises(fl.JobFailed) as info:
            launch(launcher, fake, tmp_path)
    message = str(info.value)
    assert f"{KIND[launcher]} projects/" in message and "replica 0 ran out of memory" in message
    assert "\n" not in message and fake.cancelled == []


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_job_cancelled_by_someone_else_is_reported(launcher, tmp_path):
    with FakeVertexJobs(outcome="JOB_STATE_CANCELLED") as fake:
        with pytest.raises(fl.JobFailed, match="cancelled by someone else"):
            launch(launcher, fake, tmp_path)
    assert fake.cancelled == []


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_giving_up_cancels_the_job_and_says_so(launcher, tmp_path):
    faults = Faults().script("503", times=10**6, method="GET",
                             path_contains=f"/{COLLECTION[launcher]}/")
    with FakeVertexJobs(faults=faults) as fake:
        with pytest.raises(fl.GaveUp) as info:
            launch(launcher, fake, tmp_path, policy=fast(budget_s=0.3))
    [name] = fake.jobs
    message = str(info.value)
    assert message.startswith(f"gave up following {KIND[launcher]} {name} after")
    assert message.endswith(f"stopped {KIND[launcher]} {name}") and "HTTP 503" in message
    assert fake.cancelled == [name] and fake.jobs[name].state.name == "JOB_STATE_CANCELLING"


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_giving_up_says_in_one_line_why_the_job_could_not_be_cancelled(launcher, tmp_path):
    faults = Faults().script("503", times=10**6, path_contains=f"/{COLLECTION[launcher]}/")
    with FakeVertexJobs(faults=faults) as fake:
        with pytest.raises(fl.GaveUp) as info:
            launch(launcher, fake, tmp_path, policy=fast(budget_s=0.3))
    [name] = fake.jobs
    message = str(info.value)
    assert f"could not stop {KIND[launcher]} {name}" in message and "\n" not in message
    assert "curl -X POST" in message and message.endswith(f"/v1/{name}:cancel")
    assert fake.cancelled == [] and fake.jobs[name].state.name != "JOB_STATE_CANCELLED"


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_an_error_that_is_not_transient_cancels_the_job(launcher, tmp_path):
    faults = Faults()
    with FakeVertexJobs(running_looks=10**6, faults=faults) as fake:
        def forbid_reads_soon():
            time.sleep(0.2)
            faults.script("403", method="GET", path_contains=f"/{COLLECTION[launcher]}/")
        faults_thread = threading.Thread(target=forbid_reads_soon)
        faults_thread.start()
        try:
            with pytest.raises(fl.GaveUp, match="HTTP 403.*stopped"):
                launch(launcher, fake, tmp_path, deadline_s=60)
        finally:
            faults_thread.join()
    assert fake.cancelled == list(fake.jobs)


class _EarlySigterm(Exception):
    """SIGTERM arrived before the launcher handled it."""


@pytest.fixture
def sigterm_guard():
    """Turn a SIGTERM that arrives outside the launcher into a test failure, not the end of
    the test process."""
    def early(signum, frame):
        raise _EarlySigterm()

    previous = signal.signal(signal.SIGTERM, early)
    yield
    signal.signal(signal.SIGTERM, previous)


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_sigterm_while_a_create_hangs_cancels_the_job_that_create_made(launcher, tmp_path,
                                                                       sigterm_guard):
    faults = Faults(hang_s=2.0).script("hang", method="POST", path_contains=COLLECTION[launcher])
    timer = threading.Timer(0.6, os.kill, (os.getpid(), signal.SIGTERM))
    with FakeVertexJobs(faults=faults) as fake:
        timer.start()
        try:
            with pytest.raises(fl.Cancelled) as info:
                launch(launcher, fake, tmp_path, policy=fast(call_timeout_s=5.0))
        finally:
            timer.cancel()
    [name] = fake.jobs
    assert str(info.value) == f"cancelled (SIGTERM); stopped {KIND[launcher]} {name}"
    assert fake.cancelled == [name]


_SCRIPT = """
import sys
from gkeflow.components.cloud.follow import run_cli
from gkeflow.components.cloud.retry import RetryPolicy
from tests.integration.soak import run_launcher

class Fake:
    url = sys.argv[2]

policy = RetryPolicy(call_timeout_s=2, budget_s=20, initial_s=0.05, maximum_s=0.2)
sys.exit(run_cli(lambda: run_launcher(sys.argv[1], Fake, policy, poll_s=0.05,
                                      echo=lambda line: print(line, flush=True),
                                      gcp_resources_path=sys.argv[3])))
"""


def launcher_command(launcher: str, url: str, resources: Path) -> list[str]:
    if launcher == "customjob":
        return [sys.executable, "-m", "gkeflow.components.scaleout.vertex_launcher",
                "--payload", json.dumps(soak.custom_job_payload()), "--project", soak.PROJECT,
                "--location", soak.LOCATION, "--pipeline_job",
                f"{soak.PARENT}/pipelineJobs/run-1", "--gcp_resources", str(resources),
                "--api_endpoint", url, "--poll", "0.05", "--call-timeout", "2",
                "--retry-budget", "20"]
    return [sys.executable, "-c", _SCRIPT, launcher, url, str(resources)]


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_sigterm_cancels_the_job_with_retries_and_ends_in_one_line(launcher, tmp_path):
    collection = COLLECTION[launcher]
    faults = Faults().script("503", times=2, method="POST", path_contains=":cancel")
    resources = tmp_path / "gcp_resources"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("GKEFLOW_DEBUG", None)
    with FakeVertexJobs(running_looks=10**6, faults=faults) as fake:
        process = subprocess.Popen(launcher_command(launcher, fake.url, resources), cwd=ROOT,
                                   env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True)
        try:
            deadline = time.monotonic() + 60
            while not (resources.exists() and fake.looks and max(fake.looks.values()) >= 2):
                assert process.poll() is None, process.communicate()
                assert time.monotonic() < deadline, "the launcher never followed a job"
                time.sleep(0.05)
            process.send_signal(signal.SIGTERM)
            out, err = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
    [name] = fake.jobs
    assert name.split("/")[-2] == collection and named_job(resources) == name
    assert process.returncode == 143, (out, err)
    assert err.strip() == f"error: cancelled (SIGTERM); stopped {KIND[launcher]} {name}"
    assert "Traceback" not in out + err and "retrying" in out
    assert fake.cancelled == [name] and faults.injected["503"] == 2


def test_batch_deadline_gives_up_and_cancels(tmp_path):
    with FakeVertexJobs(running_looks=10**6) as fake:
        with pytest.raises(fl.GaveUp, match=r"did not end within the deadline of 0\.2s.*"
                                            r"stopped BatchPredictionJob"):
            launch("batch", fake, tmp_path, deadline_s=0.2)
    assert fake.cancelled == list(fake.jobs)


def test_customjob_that_cannot_read_its_pipeline_job_creates_nothing(tmp_path):
    faults = Faults().script("503", times=10**6, path_contains="/pipelineJobs/")
    with FakeVertexJobs(faults=faults) as fake:
        with pytest.raises(fl.GaveUp, match="could not read the pipeline job.*no CustomJob "
                                            "was created"):
            launch("customjob", fake, tmp_path, policy=fast(budget_s=0.2))
    assert fake.jobs == {}


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_job_deleted_by_someone_else_ends_the_step_in_one_line(launcher, tmp_path):
    with FakeVertexJobs(running_looks=10**6) as fake:
        def delete_once_followed():
            deadline = time.monotonic() + 30
            while not (fake.looks and max(fake.looks.values()) >= 2):
                if time.monotonic() > deadline:
                    return
                time.sleep(0.01)
            with fake._lock:
                fake.jobs.clear()

        deleter = threading.Thread(target=delete_once_followed)
        deleter.start()
        try:
            with pytest.raises(fl.JobFailed, match="was deleted by someone else while it ran"):
                launch(launcher, fake, tmp_path, deadline_s=30)
        finally:
            deleter.join()
    assert len(fake.created) == 1 and fake.cancelled == []
