"""A GKE sweep with ``engine: ray``: one launcher step whose RayJob passes the vendored
KubeRay CRD and KubeRay's own validation once finished as the launcher finishes it, sized
from the trial compute; the Ray cluster priced in plan; what it cannot run refused."""

from __future__ import annotations

import json

import pytest
from google.protobuf import json_format
from kfp import compiler
from kfp.pipeline_spec import pipeline_spec_pb2

from gkeflow.components import yamlio
from gkeflow.components.sweep import rayjob as rj
from gkeflow.components.sweep.rayjob_launcher import driver_args
from gkeflow.pipelines.compute.profiles import ComputeError, ComputeProfile
from gkeflow.pipelines.definitions.sweep import build_sweep_pipeline, resolve_sweep_compute
from gkeflow.pipelines.settings.sweep_config import parse_sweep
from tests.integration.fake_rayjob import operator_refusal, validate_rayjob

SWEEP = parse_sweep({"engine": "ray", "max_trials": 6, "parallel_trials": 4,
                     "scheduler": "median",
                     "parameters": {"learning_rate": {"type": "loguniform", "min": 1e-4,
                                                      "max": 1e-1}}})
L4_SPOT = ComputeProfile(cpu="6", memory="24G", accelerator="nvidia-l4", accelerator_count=1,
                         scheduling="spot", timeout_s=1800)


def _compile(tmp_path, compute=None, sweep=SWEEP) -> dict:
    path = tmp_path / "sweep.yaml"
    compiler.Compiler().compile(build_sweep_pipeline("gke", compute, sweep), str(path))
    return [d for d in yamlio.load_all(path.read_text()) if d][0]


def test_the_compiled_rayjob_is_valid_for_kuberay_and_sized_from_the_trials(tmp_path):
    spec = _compile(tmp_path, {"train-model": L4_SPOT})
    json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec(), ignore_unknown_fields=False)
    tasks = spec["root"]["dag"]["tasks"]
    assert "tune-on-kuberay" in tasks and "train-model" not in tasks
    assert not any("parameterIterator" in t for t in tasks.values()), "no ParallelFor"
    inputs = tasks["tune-on-kuberay"]["inputs"]["parameters"]
    template = json.loads(inputs["rayjob_template"]["runtimeValue"]["constant"])
    assert inputs["scheduler"]["runtimeValue"]["constant"] == "median"
    resources = json.loads(inputs["trial_resources"]["runtimeValue"]["constant"])
    assert resources["gpus_per_trial"] == 1.0
    finished = rj.finish(template, rj.rayjob_name("run", "tune-on-kuberay"), "ns",
                         driver_args("gs://b/d", "gs://b/s", "gs://b/o", [{"trial_id": "t"}],
                                     {}, resources), "run", "tune-on-kuberay")
    validate_rayjob(finished)
    assert operator_refusal(finished) == ""
    [group] = finished["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert group["replicas"] == 4, "one worker per trial in flight"
    worker = group["template"]["spec"]
    assert worker["containers"][0]["resources"]["limits"] == {
        "cpu": "6", "memory": "24G", "nvidia.com/gpu": "1"}
    assert worker["nodeSelector"]["cloud.google.com/gke-spot"] == "true"
    assert worker["containers"][0]["image"].endswith("gkeflow-gpu:0.1.0")
    # 6 trials, 4 at once: two waves of a trial's 30 minutes, plus the hour allowed for the
    # nodes (KubeRay's clock starts at Initializing, before the cluster exists)
    assert finished["spec"]["activeDeadlineSeconds"] == 3600 + 3600
    # the Ray cluster goes when the Ray job ends, whether or not the launcher is there
    assert finished["spec"]["shutdownAfterJobFinishes"] is True
    assert finished["spec"]["ttlSecondsAfterFinished"] == 0
    executor = spec["deploymentSpec"]["executors"]["exec-tune-on-kuberay"]["container"]
    assert executor["image"].endswith("/gkeflow:0.1.0"), "the launcher runs in the slim image"
    assert "accelerator" not in executor.get("resources", {})


def test_plan_prices_the_ray_cluster_with_the_run():
    profiles = resolve_sweep_compute("gke", {"train-model": L4_SPOT}, "ray", sweep=SWEEP)
    assert {"tune-on-kuberay", "ray-head", "train-model"} <= set(profiles)
    assert "select-best-trial" not in profiles and "tune-with-ray" not in profiles
    workers, head = profiles["train-model"], profiles["ray-head"]
    assert (workers.replicas, workers.timeout_s) == (4, 3600)
    assert (head.cpu, head.memory, head.timeout_s) == ("2", "8G", 3600)
    # the launcher outlives the RayJob's deadline (the sweep's plus provisioning) by the
    # allowance
    assert profiles["tune-on-kuberay"].timeout_s == 3600 + 3600 + 3600
    from gkeflow.pipelines.compute.costing import run_cost

    cost = run_cost(profiles, "gke", "us-central1")
    steps = {step.step: step for step in cost.steps}
    assert steps["train-model"].nodes == 4 and steps["train-model"].usd_per_hour is not None
    assert steps["ray-head"].usd_per_hour is not None, "the head is priced too"


@pytest.mark.parametrize(("target", "compute", "says"), [
    ("vertex", None, "a vertex sweep cannot use it: set sweep.engine vizier"),
    ("gke", {"train-model": ComputeProfile(accelerator="tpu-v5-lite-podslice",
                                           topology="2x2")},
     "sweep.engine ray on GKE runs each trial on a GPU or CPU pod"),
])
def test_what_a_ray_sweep_cannot_run_is_refused_in_one_line(target, compute, says):
    with pytest.raises(ComputeError, match=says) as refused:
        build_sweep_pipeline(target, compute, SWEEP)
    assert "\n" not in str(refused.value)
