"""TPU training jobs through the same launchers as GPU ones: the GKE JobSet launcher against
the fake Kubernetes API (every JobSet validated against the vendored CRD), the Vertex AI
CustomJob launcher against the strict fake of the jobs API (bodies parsed as aiplatform_v1).
Launch and follow, re-attach after a killed launcher, delete or cancel on SIGTERM."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from gkeflow.components.cloud.follow import Cancelled
from gkeflow.components.scaleout import jobset as js
from gkeflow.components.scaleout import vertex_launcher as vl
from gkeflow.components.scaleout.jobset_launcher import launch
from gkeflow.pipelines.compute.engines import gke, vertex
from gkeflow.pipelines.definitions.training import DEFAULT_COMPUTE
from tests.integration import soak
from tests.integration.fake_kube import FakeKube, KubeFaults
from tests.integration.fake_vertex_jobs import FakeVertexJobs
from tests.integration.kube_helpers import NAME, NS, api_for, fast_policy, publisher

MULTI_HOST = DEFAULT_COMPUTE["train-model"].with_overrides(accelerator="tpu-v6e",
                                                           topology="4x4", scheduling="spot")
SINGLE_HOST = DEFAULT_COMPUTE["train-model"].with_overrides(accelerator="tpu-v5e",
                                                            topology="2x2")


def tpu_manifest() -> dict:
    return js.finish(gke.jobset_template(MULTI_HOST, "gkeflow-gpu:test"), NAME, NS, "",
                     ["--dataset", "gs://b/d"])


def run_jobset(kube, output, window_s=0.01, lines=None):
    echo = lines.append if lines is not None else (lambda _: None)
    return launch(api_for(kube), tpu_manifest(), str(output), policy=fast_policy(),
                  window_s=window_s, echo=echo)


def test_a_tpu_jobset_is_created_followed_and_deleted(tmp_path):
    output = str(tmp_path / "model")
    with FakeKube(running_looks=2, on_complete=publisher(tmp_path, output)) as kube:
        run_jobset(kube, output)
    [created] = kube.created  # validated against the CRD by the fake
    job = created["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert job["parallelism"] == 4
    assert job["template"]["spec"]["containers"][0]["resources"]["limits"][
        "google.com/tpu"] == "4"
    assert kube.deleted == [NAME] and kube.deleted_states == ["Completed"]


def test_a_restarted_launcher_reattaches_to_its_tpu_jobset(tmp_path):
    output = str(tmp_path / "model")
    lines: list[str] = []
    with FakeKube(running_looks=3, on_complete=publisher(tmp_path, output)) as kube:
        kube.add_jobset(tpu_manifest())  # created by the attempt that was killed
        run_jobset(kube, output, lines=lines)
    assert kube.created == []
    assert any("re-attaching" in line for line in lines)
    assert kube.deleted_states == ["Completed"]


def test_sigterm_deletes_the_running_tpu_jobset(tmp_path):
    with FakeKube(outcome="Running") as kube:
        timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
        timer.start()
        try:
            with pytest.raises(Cancelled):
                run_jobset(kube, tmp_path / "m", window_s=0.05)
        finally:
            timer.cancel()
    assert kube.deleted == [NAME] and kube.deleted_states == ["Running"]


TWO_SLICES = MULTI_HOST.with_overrides(replicas=2)


def test_a_two_slice_jobset_survives_503s_a_lost_create_and_dropped_watches(tmp_path):
    """Multislice (Keras on JAX): one JobSet of two slices, created once although the create
    is answered 503 and then lost, followed through cut watches, deleted when it ended."""
    output = str(tmp_path / "model")
    manifest = js.finish(gke.jobset_template(TWO_SLICES, "gkeflow-tpu:test"), NAME, NS, "",
                         ["--dataset", "gs://b/d"])
    faults = (KubeFaults().script("503", times=2, method="POST").script("lost", method="POST")
              .script("cut", times=2, resource="watch"))
    with FakeKube(running_looks=3, on_complete=publisher(tmp_path, output),
                  faults=faults) as kube:
        launch(api_for(kube), manifest, output, policy=fast_policy(), window_s=0.01,
               echo=lambda _: None)
    assert faults.injected == {"503": 2, "lost": 1, "cut": 2}
    [created] = kube.created  # validated against the CRD by the fake; never a second one
    [replicated] = created["spec"]["replicatedJobs"]
    assert replicated["replicas"] == 2 and replicated["template"]["spec"]["parallelism"] == 4
    env = {e["name"] for e in
           replicated["template"]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert {"MEGASCALE_COORDINATOR_ADDRESS", "MEGASCALE_NUM_SLICES",
            "MEGASCALE_SLICE_ID"} <= env
    assert kube.deleted == [NAME] and kube.deleted_states == ["Completed"]


def tpu_payload() -> dict:
    return vertex.custom_job_payload(SINGLE_HOST, {"image": "gcr.io/p/gpu:1",
                                                   "command": ["python"], "args": []},
                                     "train-model")


def run_custom_job(fake, tmp_path):
    job_client, pipeline_client = vl.clients(soak.LOCATION, fake.url)
    try:
        return vl.run_custom_job(job_client, pipeline_client, soak.PROJECT, soak.LOCATION,
                                 tpu_payload(), f"{soak.PARENT}/pipelineJobs/run-1",
                                 "train-model", str(tmp_path / "gcp_resources"), poll_s=0.01,
                                 echo=lambda _: None, policy=fast_policy())
    finally:
        assert fake.violations == []  # every request the launcher sent was valid


def test_a_tpu_custom_job_is_created_with_its_machine_and_topology(tmp_path):
    with FakeVertexJobs(running_looks=2) as fake:
        run_custom_job(fake, tmp_path)
    [created] = fake.created  # an aiplatform_v1.CustomJob parsed from the request
    [pool] = created.job_spec.worker_pool_specs
    assert (pool.machine_spec.machine_type, pool.machine_spec.tpu_topology) == (
        "ct5lp-hightpu-4t", "2x2")
    assert pool.machine_spec.accelerator_count == 0


def test_a_running_tpu_custom_job_of_an_earlier_attempt_is_followed(tmp_path):
    from google.cloud import aiplatform_v1 as v1

    key = vl.launch_key(f"{soak.PARENT}/pipelineJobs/run-1", "train-model")
    with FakeVertexJobs() as fake:
        earlier = fake.add_job(soak.PARENT, v1.CustomJob(
            display_name="train-model", labels={vl.LAUNCH_LABEL: key}), "JOB_STATE_RUNNING")
        job = run_custom_job(fake, tmp_path)
    assert fake.created == [] and earlier in str(job)
