"""New GPU families and consumption options compiled for both targets, and through the CLI."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from google.protobuf import json_format
from kfp.kubernetes import kubernetes_executor_config_pb2 as k8s
from kfp.pipeline_spec import pipeline_spec_pb2

from gkeflow.components import yamlio
from gkeflow.pipelines.cli.main import main
from gkeflow.pipelines.compute.profiles import ComputeProfile
from gkeflow.pipelines.targets.compile import compile_pipeline
from tests.compile.customjob import custom_job_payload, strict_custom_job

#: The step that gets train-model's compute: the Keras candidate of model_type auto (the
#: default), beside the trees and the linear model.
TRAIN_STEP = "train-mlp"


def _train(**fields) -> dict[str, ComputeProfile]:
    return {"train-model": ComputeProfile(**{"cpu": "8", "memory": "32G", **fields})}


def _compiled(tmp_path, target: str, compute) -> tuple[dict, dict]:
    path = compile_pipeline("training", target, tmp_path, compute=compute)
    docs = [d for d in yamlio.load_all(path.read_text()) if d]
    json_format.ParseDict(docs[0], pipeline_spec_pb2.PipelineSpec(), ignore_unknown_fields=False)
    executors = {}
    if len(docs) > 1:
        executors = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
        for config in executors.values():
            json_format.ParseDict(config, k8s.KubernetesExecutorConfig(),
                                  ignore_unknown_fields=False)
    return docs[0], executors.get(f"exec-{TRAIN_STEP}", {})


@pytest.mark.parametrize(
    ("fields", "vertex_type"),
    [
        ({"accelerator": "nvidia-b200", "accelerator_count": 8, "scheduling": "spot"},
         "NVIDIA_B200"),
        ({"accelerator": "NVIDIA_RTX_PRO_6000", "accelerator_count": 1}, "NVIDIA_RTX_PRO_6000"),
        ({"accelerator": "nvidia-tesla-p4", "accelerator_count": 2}, "NVIDIA_TESLA_P4"),
        ({"accelerator": "nvidia-h100-80gb", "accelerator_count": 8}, "NVIDIA_H100_80GB"),
    ],
)
def test_new_families_compile_for_both_targets(tmp_path, fields, vertex_type):
    spec, _ = _compiled(tmp_path / "vertex", "vertex", _train(**fields))
    payload = custom_job_payload(spec)
    if payload:  # spot: the step runs as a CustomJob, whose machines carry the GPUs
        machine = strict_custom_job(payload).job_spec.worker_pool_specs[0].machine_spec
        assert (machine.accelerator_type.name, machine.accelerator_count) == (
            vertex_type, fields["accelerator_count"])
    else:
        resources = spec["deploymentSpec"]["executors"][f"exec-{TRAIN_STEP}"]["container"][
            "resources"]
        assert (resources["accelerator"]["resourceType"],
                resources["accelerator"]["resourceCount"]) == (
            vertex_type, str(fields["accelerator_count"]))
    assert (payload is not None) == (fields.get("scheduling") == "spot")
    spec, executor = _compiled(tmp_path / "gke", "gke", _train(**fields))
    resources = spec["deploymentSpec"]["executors"][f"exec-{TRAIN_STEP}"]["container"]["resources"]
    assert resources["accelerator"]["resourceType"] == "nvidia.com/gpu"
    label = executor["nodeSelector"]["labels"]["cloud.google.com/gke-accelerator"]
    assert label == {"NVIDIA_RTX_PRO_6000": "nvidia-rtx-pro-6000"}.get(
        fields["accelerator"], fields["accelerator"])


def test_flex_start_reservation_and_queue_reach_the_gke_pod(tmp_path):
    _, flex = _compiled(tmp_path / "a", "gke", _train(
        accelerator="nvidia-h200-141gb", accelerator_count=8, scheduling="flex-start",
        timeout_s="1d", max_wait="2h", queue="team-a"))
    assert flex["nodeSelector"]["labels"] == {
        "cloud.google.com/gke-accelerator": "nvidia-h200-141gb",
        "cloud.google.com/gke-flex-start": "true"}
    assert {"key": "cloud.google.com/gke-flex-start", "operator": "Equal", "value": "true",
            "effect": "NoSchedule"} in flex["tolerations"]
    assert flex["podMetadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "team-a",
                                             "gkeflow-step": TRAIN_STEP,
                                             "app.kubernetes.io/managed-by": "gkeflow"}
    assert flex["activeDeadlineSeconds"] == "86400"

    _, reserved = _compiled(tmp_path / "b", "gke", _train(
        accelerator="nvidia-b200", accelerator_count=8, scheduling="reservation",
        reservation="projects/shared-proj/reservations/b200-pool"))
    assert reserved["nodeSelector"]["labels"] == {
        "cloud.google.com/gke-accelerator": "nvidia-b200",
        "cloud.google.com/reservation-name": "b200-pool",
        "cloud.google.com/reservation-affinity": "specific",
        "cloud.google.com/reservation-project": "shared-proj"}
    assert [t["key"] for t in reserved["tolerations"]] == ["nvidia.com/gpu"]
    # no queue, no Kueue label: only the label the GPU alert selects
    assert reserved["podMetadata"]["labels"] == {"app.kubernetes.io/managed-by": "gkeflow",
                                                 "gkeflow-step": TRAIN_STEP}

    _, spot = _compiled(tmp_path / "c", "gke", _train(spot=True))
    assert spot["nodeSelector"]["labels"] == {"cloud.google.com/gke-spot": "true"}


@pytest.mark.parametrize(
    ("accelerator", "message"),
    [
        ("nvidia-h200-141gb", "train-model: a3-ultragpu-8g is not offered on demand: use "
                              "scheduling=spot, flex-start or reservation"),
        ("nvidia-b200", "train-model: a4-highgpu-8g is not offered on demand: use "
                        "scheduling=spot, flex-start or reservation"),
    ],
)
def test_on_demand_h200_or_b200_is_refused_naming_what_works(tmp_path, accelerator, message):
    args = ["--compute", f"train-model.accelerator={accelerator}",
            "--compute", "train-model.accelerator_count=8"]
    for command in (["compile", "--output", str(tmp_path)], ["plan"]):
        result = CliRunner().invoke(main, command + args)
        assert result.exit_code == 1, result.output
        assert message in " ".join(result.output.split())
        assert "Traceback" not in result.output
    assert not list(tmp_path.iterdir())


def test_a_vertex_reservation_reaches_the_custom_job_and_a_bare_name_is_refused(tmp_path):
    full = "projects/shared-proj/zones/us-central1-b/reservations/b200-pool"
    spec, _ = _compiled(tmp_path / "v", "vertex", _train(
        accelerator="nvidia-b200", accelerator_count=8, cpu="200", memory="1500G",
        scheduling="reservation", reservation=full))
    machine = strict_custom_job(custom_job_payload(spec)).job_spec.worker_pool_specs[0]\
        .machine_spec
    affinity = machine.reservation_affinity
    assert affinity.reservation_affinity_type.name == "SPECIFIC_RESERVATION"
    assert affinity.key == "compute.googleapis.com/reservation-name"
    assert list(affinity.values) == [full]
    for command in (["compile", "--target", "vertex", "--output", str(tmp_path / "o")],
                    ["plan", "--target", "vertex"]):
        result = CliRunner().invoke(main, command + [
            "--compute", "train-model.accelerator=nvidia-b200",
            "--compute", "train-model.accelerator_count=8",
            "--compute", "train-model.scheduling=reservation",
            "--compute", "train-model.reservation=b200-pool"])
        assert result.exit_code == 1, result.output
        assert "projects/PROJECT/zones/ZONE/reservations/NAME" in result.output
        assert "Traceback" not in result.output
    assert not (tmp_path / "o").exists()


def test_plan_prints_capacity_nodes_and_total_gpus():
    result = CliRunner().invoke(main, [
        "plan", "--wide", "--target", "gke", "--compute", "train-model.accelerator=nvidia-b200",
        "--compute", "train-model.accelerator_count=8", "--compute", "train-model.replicas=2",
        "--compute", "train-model.scheduling=reservation",
        "--compute", "train-model.reservation=b200-pool", "--compute", "train-model.queue=ml"])
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if "train-model" in line)
    for text in ("reservation b200-pool", "2 x 8", " 16 ", " ml ", "a4-highgpu-8g"):
        assert text in row, (text, row)
    assert "capacity" in result.output and "nodes" in result.output
