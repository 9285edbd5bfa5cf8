"""Compiled YAML per target: loads back, and only the train step asks for a GPU, spelled right."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import json_format
from kfp import components
from kfp.pipeline_spec import pipeline_spec_pb2

from gkeflow.components import yamlio
from gkeflow.pipelines.targets.compile import compile_all, stale_files
from tests.compile.customjob import custom_job_payload, strict_custom_job

#: The steps with train-model's GPU: the Keras candidate of model_type auto (the default)
#: and the trees (XGBoost trains on one GPU); the linear model, and train-model choosing
#: among them, run on CPUs.
GPU_TASK = "train-mlp"
GPU_TASKS = ("train-gbdt", "train-mlp")
#: kfp-kubernetes' volume steps: the KFP driver performs them, no pod runs.
VOLUME_STEPS = {"exec-createpvc", "exec-deletepvc"}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("compiled")
    return {p.name.split(".")[1]: p for p in compile_all(out, pipelines=["training"])}


def _documents(path: Path) -> list[dict]:
    return [d for d in yamlio.load_all(path.read_text()) if d is not None]


def _resources(spec: dict) -> dict[str, dict]:
    executors = spec["deploymentSpec"]["executors"]
    return {
        name.removeprefix("exec-"): executor["container"].get("resources", {})
        for name, executor in executors.items()
        if name not in VOLUME_STEPS
    }


def test_both_targets_load_back_with_kfp(compiled):
    for path in compiled.values():
        component = components.load_component_from_file(str(path))
        assert component.name == "gkeflow-training"
        assert "min_accuracy" in component.component_spec.inputs


def test_pipeline_spec_parses_strictly(compiled):
    for path in compiled.values():
        spec = _documents(path)[0]
        json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec(), ignore_unknown_fields=False)


def test_gke_train_step_requests_gpu_with_node_selector_and_toleration(compiled):
    from kfp.kubernetes import kubernetes_executor_config_pb2 as k8s

    spec, platform = _documents(compiled["gke"])
    resources = _resources(spec)
    for task in GPU_TASKS:
        assert resources[task]["accelerator"] == {
            "count": "1", "resourceCount": "1", "resourceType": "nvidia.com/gpu",
            "type": "nvidia.com/gpu",
        }
    for task, res in resources.items():
        if task not in GPU_TASKS:
            assert "accelerator" not in res, task
        assert res["cpuLimit"] and res["memoryLimit"] and res["resourceCpuRequest"]
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    configs = {
        name.removeprefix("exec-"): json_format.ParseDict(
            value, k8s.KubernetesExecutorConfig(), ignore_unknown_fields=False)
        for name, value in executors.items()
        if name not in VOLUME_STEPS
    }
    for task, other in configs.items():
        # Every step has a timeout; GPU scheduling settings only on the GPU step.
        assert other.active_deadline_seconds > 0, task
        if task not in GPU_TASKS:
            assert not other.node_selector.labels and not other.tolerations, task
    for task in GPU_TASKS:
        config = configs[task]
        assert dict(config.node_selector.labels) == {
            "cloud.google.com/gke-accelerator": "nvidia-tesla-t4"
        }
        assert [(t.key, t.operator, t.effect) for t in config.tolerations] == [
            ("nvidia.com/gpu", "Exists", "NoSchedule")
        ]


def test_vertex_is_one_document_with_nvidia_types_on_train_only(compiled):
    documents = _documents(compiled["vertex"])
    assert len(documents) == 1
    resources = _resources(documents[0])
    # Training has a timeout, so it runs as a CustomJob: the GPUs are the job's machines'.
    job = strict_custom_job(custom_job_payload(documents[0], GPU_TASK))
    machine = job.job_spec.worker_pool_specs[0].machine_spec
    assert machine.accelerator_type.name == "NVIDIA_TESLA_T4"
    assert job.job_spec.scheduling.timeout.total_seconds() == 6 * 3600
    for task, res in resources.items():
        assert "accelerator" not in res, task
    assert "nvidia.com/gpu" not in compiled["vertex"].read_text()
    assert "gke-accelerator" not in compiled["vertex"].read_text()


def test_ui_metadata_display_names_and_descriptions(compiled):
    spec = _documents(compiled["gke"])[0]
    assert spec["pipelineInfo"]["description"].startswith("Trains a TensorFlow classifier")
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert all(p.get("description") for p in params.values()), params
    tasks = spec["root"]["dag"]["tasks"]
    assert tasks["prepare-data"]["taskInfo"]["name"] == "Prepare data"
    assert not any(p.get("isOptional") and "defaultValue" not in p for p in params.values())


def test_no_runtime_pip_install(compiled):
    for path in compiled.values():
        text = path.read_text()
        assert "pip install" not in text and "packages_to_install" not in text


def test_committed_compiled_files_are_fresh():
    repo_compiled = Path(__file__).resolve().parents[2] / "compiled"
    assert stale_files(repo_compiled) == []


def test_stale_file_is_detected(tmp_path):
    compile_all(tmp_path)
    (tmp_path / "training.vertex.yaml").write_text("changed\n")
    assert stale_files(tmp_path) == [tmp_path / "training.vertex.yaml"]
