"""Compiled sweep YAML: ParallelFor bounded by parallel_trials, a GPU on trial training only,
Vertex single-document, engine: vizier compiled to one tuning step without a GPU."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2

from gkeflow.components import yamlio
from gkeflow.pipelines.compute.profiles import ComputeError
from gkeflow.pipelines.definitions.sweep import (
    build_sweep_pipeline,
    resolve_sweep_compute,
    sweep_plan,
)
from gkeflow.pipelines.settings.sweep_config import expand_trials, parse_sweep
from gkeflow.pipelines.targets.compile import compile_pipeline

REPO = Path(__file__).resolve().parents[2]
SWEEP = {"max_trials": 6, "parallel_trials": 3,
         "parameters": {"learning_rate": {"type": "loguniform", "min": 1e-4, "max": 1e-1}}}


def _docs(path: Path) -> list[dict]:
    return [d for d in yamlio.load_all(path.read_text()) if d is not None]


def _compile(tmp_path, target: str, raw=SWEEP) -> list[dict]:
    from kfp import compiler

    path = tmp_path / f"sweep.{target}.yaml"
    compiler.Compiler().compile(build_sweep_pipeline(target, sweep=parse_sweep(raw)), str(path))
    return _docs(path)


def _gpu_executors(spec: dict) -> set[str]:
    return {name for name, e in spec["deploymentSpec"]["executors"].items()
            if "accelerator" in e.get("container", {}).get("resources", {})}


def _loop(spec: dict) -> tuple[str, dict, dict]:
    name, task = next((n, t) for n, t in spec["root"]["dag"]["tasks"].items()
                      if "parameterIterator" in t)
    return name, task, spec["components"][task["componentRef"]["name"]]


@pytest.mark.parametrize("target", ["gke", "vertex"])
def test_trials_fan_out_bounded_with_a_gpu_on_training_only(tmp_path, target):
    docs = _compile(tmp_path, target)
    spec = docs[0]
    json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec(), ignore_unknown_fields=False)
    loop_name, loop, body = _loop(spec)
    assert loop["iteratorPolicy"]["parallelismLimit"] == 3
    assert list(body["dag"]["tasks"]) == ["train-model"]
    trial = body["dag"]["tasks"]["train-model"]["inputs"]["parameters"]
    assert trial["task_name"]["componentInputParameter"].endswith("loop-item")
    assert trial["task_name"]["parameterExpressionSelector"] == (
        'parseJson(string_value)["trial_id"]')
    assert trial["continue_on_error"]["runtimeValue"]["constant"] is True
    assert "componentInputParameter" in trial["epochs"]  # untuned: the pipeline's parameter
    assert _gpu_executors(spec) == {"exec-train-model"}
    accelerator = spec["deploymentSpec"]["executors"]["exec-train-model"]["container"][
        "resources"]["accelerator"]
    trials = spec["root"]["inputDefinitions"]["parameters"]["trials"]["defaultValue"]
    assert [t["trial_id"] for t in trials] == [f"trial-{i:03d}" for i in range(6)]
    assert trials == [{**t} for t in expand_trials(parse_sweep(SWEEP))]
    tasks = spec["root"]["dag"]["tasks"]
    select = tasks["select-best-trial"]["inputs"]
    assert select["parameters"]["reports"]["taskOutputParameter"]["producerTask"] == loop_name
    assert select["artifacts"]["models"]["taskOutputArtifact"]["producerTask"] == loop_name
    assert tasks["evaluate-model"]["inputs"]["artifacts"]["model"]["taskOutputArtifact"] == {
        "outputArtifactKey": "best_model", "producerTask": "select-best-trial"}
    if target == "gke":
        assert accelerator["resourceType"] == "nvidia.com/gpu" and len(docs) == 2
        platform = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
        gpu_config = platform["exec-train-model"]
        assert gpu_config["nodeSelector"]["labels"] == {
            "cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}
        assert not any("nodeSelector" in c and "cloud.google.com/gke-accelerator" in
                       c["nodeSelector"].get("labels", {})
                       for name, c in platform.items() if name != "exec-train-model")
    else:
        assert accelerator["resourceType"] == "NVIDIA_TESLA_T4" and len(docs) == 1


def test_vizier_engine_runs_one_tuning_step_on_vertex_and_parallel_for_on_gke(tmp_path):
    raw = {**SWEEP, "engine": "vizier"}
    spec = _compile(tmp_path, "vertex", raw)[0]
    tasks = spec["root"]["dag"]["tasks"]
    assert "tune-with-vizier" in tasks and "select-best-trial" not in tasks
    assert not any("parameterIterator" in t for t in tasks.values())
    assert _gpu_executors(spec) == set()  # the trials' GPUs are in the tuning job
    tuning = yamlio.load(tasks["tune-with-vizier"]["inputs"]["parameters"]["spec"][
        "runtimeValue"]["constant"])
    assert tuning["machineSpec"] == {"machineType": "n1-standard-8",
                                     "acceleratorType": "NVIDIA_TESLA_T4",
                                     "acceleratorCount": 1}
    assert (tuning["maxTrialCount"], tuning["parallelTrialCount"]) == (6, 3)
    gke = _compile(tmp_path, "gke", raw)[0]
    assert "select-best-trial" in gke["root"]["dag"]["tasks"]


def test_plan_figures_and_compute_validation():
    sweep = parse_sweep(SWEEP)
    profiles = resolve_sweep_compute("gke")
    assert sweep_plan(sweep, profiles) == {"trials": 6, "parallel_trials": 3,
                                           "gpus_per_trial": 1, "max_gpus_at_once": 3}
    two = profiles["train-model"].with_overrides(accelerator_count=2, memory="52G", cpu="14")
    assert sweep_plan(sweep, {"train-model": two})["max_gpus_at_once"] == 6
    with pytest.raises(ComputeError, match="unknown step"):
        resolve_sweep_compute("gke", {"train-trials": profiles["train-model"]})


def test_committed_sweep_files_are_fresh(tmp_path):
    for target in ("gke", "vertex"):
        fresh = compile_pipeline("sweep", target, tmp_path)
        assert (REPO / "compiled" / fresh.name).read_text() == fresh.read_text()


def test_a_sweep_over_the_trees_settings_wires_each_trial_s_values(tmp_path):
    """gbdt_* searched: each trial's train-model takes them from its loop item; the trees'
    settings not searched keep train-model's own defaults."""
    raw = {"algorithm": "grid", "max_trials": 4, "parameters": {
        "gbdt_max_depth": {"type": "int", "min": 2, "max": 3},
        "gbdt_learning_rate": {"type": "choice", "values": [0.05, 0.2]}}}
    spec = _compile(tmp_path, "gke", raw)[0]
    _name, _loop_task, body = _loop(spec)
    trial = body["dag"]["tasks"]["train-model"]["inputs"]["parameters"]
    for name in ("gbdt_max_depth", "gbdt_learning_rate"):
        assert trial[name]["parameterExpressionSelector"] == f'parseJson(string_value)["{name}"]'
    assert "gbdt_rounds" not in trial  # not searched: the component's default
    trials = spec["root"]["inputDefinitions"]["parameters"]["trials"]["defaultValue"]
    assert [(t["gbdt_max_depth"], t["gbdt_learning_rate"]) for t in trials] == [
        (2, 0.05), (2, 0.2), (3, 0.05), (3, 0.2)]
