"""A training step on a TPU compiles with the TPU image (``gkeflow-tpu``): in the GKE pod of a
single-host slice, in the JobSet of a multi-host slice and in the Vertex AI CustomJob; a GPU
or CPU training step keeps the GPU image. Profiles come from the same ``--compute`` overrides
the CLI takes (``apply_overrides``)."""

from __future__ import annotations

import json

import pytest

from gkeflow.components import yamlio
from gkeflow.components.images import CPU_IMAGE, GPU_IMAGE, TPU_IMAGE
from gkeflow.components.scaleout import jobset as js
from gkeflow.pipelines.compute.profiles import apply_overrides
from gkeflow.pipelines.definitions.training import DEFAULT_COMPUTE, step_images
from gkeflow.pipelines.targets.compile import compile_pipeline
from tests.compile.customjob import custom_job_payload, strict_custom_job
from tests.integration.fake_kube import validate_jobset

STEP = "train-model"


def _compile(tmp_path, target: str, *overrides: str) -> dict:
    profiles = apply_overrides(DEFAULT_COMPUTE, [f"{STEP}.{o}" for o in overrides])
    path = compile_pipeline("training", target, tmp_path, {STEP: profiles[STEP]})
    return next(d for d in yamlio.load_all(path.read_text()) if d)


def _executor_image(spec: dict, task: str = STEP) -> str:
    return spec["deploymentSpec"]["executors"][f"exec-{task}"]["container"]["image"]


def _training_image(spec: dict) -> str:
    """The image training runs in: the CustomJob's (Vertex AI runs the step as one) or the
    step's own."""
    payload = custom_job_payload(spec)
    if payload is None:
        return _executor_image(spec)
    return strict_custom_job(payload).job_spec.worker_pool_specs[0].container_spec.image_uri


def test_single_host_tpu_pod_on_gke_runs_in_the_tpu_image(tmp_path):
    spec = _compile(tmp_path, "gke", "accelerator=tpu-v6e", "topology=2x4")
    # the Keras candidate trains on the slice; the trees, the linear model and train-model
    # choosing among them run on CPU machines
    assert _executor_image(spec, "train-mlp") == TPU_IMAGE
    for step in ("train-gbdt", "train-linear", "train-model", "evaluate-model"):
        assert _executor_image(spec, step) != TPU_IMAGE, step


def test_multi_host_tpu_jobset_on_gke_runs_in_the_tpu_image(tmp_path):
    spec = _compile(tmp_path, "gke", "accelerator=tpu-v6e", "topology=4x4")
    template = spec["root"]["dag"]["tasks"][STEP]["inputs"]["parameters"]["jobset_template"]
    manifest = js.finish(json.loads(template["runtimeValue"]["constant"]), "gkeflow-train-x",
                         "ns", "", ["--x"])
    validate_jobset(manifest)
    [replicated] = manifest["spec"]["replicatedJobs"]
    [container] = replicated["template"]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == TPU_IMAGE
    assert _executor_image(spec) != TPU_IMAGE  # the launcher step stays small


def test_vertex_tpu_custom_job_runs_in_the_tpu_image(tmp_path):
    spec = _compile(tmp_path, "vertex", "accelerator=tpu-v6e", "topology=2x2")
    job = strict_custom_job(custom_job_payload(spec))
    [pool] = job.job_spec.worker_pool_specs
    assert pool.container_spec.image_uri == TPU_IMAGE
    assert (pool.machine_spec.machine_type, pool.machine_spec.tpu_topology) == (
        "ct6e-standard-4t", "2x2")


@pytest.mark.parametrize("target", ["gke", "vertex"])
def test_gpu_training_keeps_the_gpu_image_and_cpu_candidates_take_the_cpu_one(tmp_path, target):
    gpu = _compile(tmp_path / "gpu", target, "accelerator=nvidia-l4", "accelerator_count=2",
                   "replicas=2")
    cpu = _compile(tmp_path / "cpu", target, "accelerator=", "accelerator_count=0")
    if target == "vertex":
        [chief, _] = strict_custom_job(custom_job_payload(gpu)).job_spec.worker_pool_specs
        assert chief.container_spec.image_uri == GPU_IMAGE
    else:
        template = gpu["root"]["dag"]["tasks"][STEP]["inputs"]["parameters"]["jobset_template"]
        assert json.loads(template["runtimeValue"]["constant"])["spec"]["replicatedJobs"][0][
            "template"]["spec"]["template"]["spec"]["containers"][0]["image"] == GPU_IMAGE
    # model_type auto's candidates on CPUs run in the CPU image (TensorFlow, Keras and
    # XGBoost for CPUs), a smaller pull than the GPU image
    assert _training_image(cpu) == CPU_IMAGE
    assert TPU_IMAGE not in json.dumps(gpu) + json.dumps(cpu)


def test_plan_names_the_tpu_image_for_a_tpu_training_step_only():
    tpu = apply_overrides(DEFAULT_COMPUTE, [f"{STEP}.accelerator=tpu-v5e",
                                            f"{STEP}.topology=1x1"])
    assert step_images(tpu)[STEP] == TPU_IMAGE
    assert step_images(DEFAULT_COMPUTE)[STEP] == step_images()[STEP] == GPU_IMAGE
    assert TPU_IMAGE not in {image for step, image in step_images(tpu).items() if step != STEP}


def test_sweep_trials_on_a_single_host_slice_run_in_the_tpu_image(tmp_path):
    profiles = apply_overrides(DEFAULT_COMPUTE, [f"{STEP}.accelerator=tpu-v6e",
                                                 f"{STEP}.topology=2x2"])
    path = compile_pipeline("sweep", "gke", tmp_path, {STEP: profiles[STEP]})
    spec = next(d for d in yamlio.load_all(path.read_text()) if d)
    assert _executor_image(spec) == TPU_IMAGE
    assert _executor_image(spec, "evaluate-model") != TPU_IMAGE
