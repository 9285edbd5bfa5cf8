"""Every accelerator, count and capacity of the catalogue that ``train-model`` can take:
the sweep's trials take it too, or the sweep alone is refused in one line naming it (never
training with it), on GKE and Vertex AI."""

from __future__ import annotations

import json

import pytest

from gkeflow.components import yamlio
from gkeflow.components.sweep.vizier import build_job, validate_job
from gkeflow.pipelines.compute import accelerators as acc
from gkeflow.pipelines.compute.engines.vizier import tuning_spec
from gkeflow.pipelines.compute.profiles import (
    SCHEDULING,
    ComputeError,
    ComputeProfile,
    PipelineUnfit,
)
from gkeflow.pipelines.definitions.sweep import TRIAL_STEP, resolve_sweep_compute
from gkeflow.pipelines.definitions.training import resolve_compute
from gkeflow.pipelines.settings.sweep_config import default_sweep
from tests.compile.customjob import custom_job_payload, strict_custom_job
from tests.integration.conftest import gkeflow

RESERVATION = "projects/my-project/zones/us-central1-a/reservations/gpus"


def _trial(accelerator: str, count: int, scheduling: str, replicas: int) -> ComputeProfile:
    return ComputeProfile(
        accelerator=accelerator, accelerator_count=count, scheduling=scheduling,
        replicas=replicas, timeout_s=3600 if scheduling == "flex-start" else 0,
        reservation=RESERVATION if scheduling == "reservation" else "")


def _on_demand(accelerator: str, count: int) -> bool:
    """Whether some machine with ``count`` x ``accelerator`` is sold on demand (the
    catalogue's own table, not the validation under test)."""
    return any("standard" in acc.consumption_of(shape)
               for shape in acc.shapes_for(accelerator, count))


CASES = [(name, count, scheduling, replicas)
         for name in acc.runnable() for count in acc.valid_counts(name)
         for scheduling in SCHEDULING for replicas in (1, 2)]


@pytest.mark.parametrize("target", ["gke", "vertex"])
def test_trials_take_what_training_takes_or_the_sweep_alone_is_refused(target):
    checked = refused = 0
    for accelerator, count, scheduling, replicas in CASES:
        trial = _trial(accelerator, count, scheduling, replicas)
        try:
            resolve_compute(target, {TRIAL_STEP: trial})
        except ComputeError:
            continue  # training refuses it too: the usual validation error
        checked += 1
        case = f"{accelerator} x {count} {scheduling} replicas {replicas} on {target}"
        unfit = (target == "vertex" and scheduling != "standard"
                 and not _on_demand(accelerator, count))
        if not unfit:
            profiles = resolve_sweep_compute(target, {TRIAL_STEP: trial})
            fitted = profiles[TRIAL_STEP]
            assert fitted.replicas == 1, case
            assert fitted.scheduling == ("standard" if target == "vertex" else scheduling), case
            continue
        refused += 1
        with pytest.raises(PipelineUnfit) as raised:
            resolve_sweep_compute(target, {TRIAL_STEP: trial})
        message = str(raised.value)
        assert "\n" not in message, case
        assert message.startswith("sweep on vertex: its trials cannot take train-model's "), case
        assert f"scheduling {scheduling}" in message and "not offered on demand" in message
        assert "use scheduling=" not in message, case  # what the trials cannot take
        assert "sweep.engine: vizier" in message, case
    assert checked > 100
    assert (refused > 0) == (target == "vertex")


def test_vizier_trials_take_every_capacity_training_takes_on_vertex():
    for accelerator, count, scheduling, replicas in CASES:
        trial = _trial(accelerator, count, scheduling, replicas)
        try:
            resolve_compute("vertex", {TRIAL_STEP: trial})
        except ComputeError:
            continue
        fitted = resolve_sweep_compute("vertex", {TRIAL_STEP: trial}, "vizier")[TRIAL_STEP]
        assert fitted == trial.with_overrides(replicas=1)  # a tuning trial: one machine
        spec = json.loads(tuning_spec(default_sweep(), fitted))
        job = validate_job(build_job(spec, display_name="t", image="i", dataset_uri="gs://b/d",
                                     schema_uri="gs://b/s", output_uri="gs://b/o",
                                     run_id="r"))
        machine = job.trial_job_spec.worker_pool_specs[0].machine_spec
        strategy = job.trial_job_spec.scheduling.strategy.name
        assert strategy == {"spot": "SPOT", "flex-start": "FLEX_START"}.get(
            scheduling, "STANDARD")
        if scheduling == "reservation":
            assert machine.reservation_affinity.reservation_affinity_type.name == (
                "SPECIFIC_RESERVATION")
            assert list(machine.reservation_affinity.values) == [RESERVATION]
        else:
            assert not machine.reservation_affinity.values


B200_SPOT = ["--compute", "train-model.accelerator=nvidia-b200", "--compute",
             "train-model.accelerator_count=8", "--compute", "train-model.scheduling=spot"]


def _docs(path):
    return [d for d in yamlio.load_all(path.read_text()) if d]


def test_spot_b200_compiles_training_and_says_why_the_vertex_sweep_is_not(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "sweep.vertex.yaml").write_text("# compiled earlier for other settings\n")
    result = gkeflow("compile", "--output", str(out), *B200_SPOT, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert not (out / "sweep.vertex.yaml").exists()
    note = next(line for line in result.stdout.splitlines() if "sweep.vertex.yaml" in line)
    assert note.startswith(f"note: {out / 'sweep.vertex.yaml'} not written (removed the one "
                           "an earlier compile wrote): sweep on vertex: its trials cannot take "
                           "train-model's scheduling spot")
    assert "a4-highgpu-8g is not offered on demand" in note
    job = strict_custom_job(custom_job_payload(_docs(out / "training.vertex.yaml")[0]))
    assert job.job_spec.scheduling.strategy.name == "SPOT"
    assert job.job_spec.worker_pool_specs[0].machine_spec.accelerator_type.name == "NVIDIA_B200"
    gke_sweep = json.dumps(_docs(out / "sweep.gke.yaml"))
    assert '"cloud.google.com/gke-spot"' in gke_sweep and "nvidia-b200" in gke_sweep
    (out / "sweep.vertex.yaml").write_text("# compiled earlier\n")
    check = gkeflow("compile", "--check", "--output", str(out), *B200_SPOT, cwd=tmp_path)
    assert check.returncode == 1
    assert f"stale: {out / 'sweep.vertex.yaml'}" in check.stdout


def test_plan_agrees_with_compile(tmp_path):
    vertex = gkeflow("plan", "--pipeline", "sweep", "--target", "vertex", *B200_SPOT,
                     cwd=tmp_path)
    assert vertex.returncode == 1
    error = vertex.stderr.strip()
    assert error.startswith("Error: sweep on vertex: its trials cannot take train-model's "
                            "scheduling spot") and "\n" not in error
    assert "Traceback" not in vertex.stderr
    for args in (["--pipeline", "sweep", "--target", "gke"], ["--target", "vertex"]):
        result = gkeflow("plan", *args, *B200_SPOT, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
    (tmp_path / "gkeflow.yaml").write_text(
        "sweep:\n  engine: vizier\n  parameters:\n"
        "    learning_rate: {type: loguniform, min: 0.0001, max: 0.1}\n")
    vizier = gkeflow("plan", "--pipeline", "sweep", "--target", "vertex", *B200_SPOT,
                     cwd=tmp_path)
    assert vizier.returncode == 0, vizier.stderr
