"""Sweep trials are pipeline steps: what only a training engine gives (a JobSet's pods; a
CustomJob's machines, Spot, flex-start, reservation) stays with the training pipeline, and
plan and compile say so instead of promising it."""

from __future__ import annotations

import pytest

from gkeflow.pipelines.compute.profiles import ComputeProfile
from gkeflow.pipelines.definitions.sweep import resolve_sweep_compute
from gkeflow.pipelines.definitions.sweep_trials import TRIAL_STEP, fit_trial
from tests.integration.conftest import gkeflow

L4 = dict(accelerator="nvidia-l4", accelerator_count=1)


@pytest.mark.parametrize("target, profile, kept, said", [
    ("gke", ComputeProfile(**L4, replicas=2), {"replicas": 1}, "replicas 2 applies"),
    ("gke", ComputeProfile(**L4, spot=True), {"scheduling": "spot"}, ""),
    ("vertex", ComputeProfile(**L4, spot=True), {"scheduling": "standard"},
     "scheduling spot applies"),
    ("vertex", ComputeProfile(**L4, replicas=2, scheduling="flex-start", max_wait="2h"),
     {"replicas": 1, "scheduling": "standard", "max_wait": ""},
     "replicas 2 and scheduling flex-start apply"),
    ("vertex", ComputeProfile(**L4), {"scheduling": "standard"}, ""),
])
def test_trials_keep_what_a_pipeline_step_can_take(target, profile, kept, said):
    fitted, note = fit_trial(target, "kfp", profile)
    assert {field: getattr(fitted, field) for field in kept} == kept
    assert (said in note) if said else note == ""
    vizier = fit_trial(target, "vizier", profile)[0]  # CustomJobs: one machine each
    assert vizier == (profile.with_overrides(replicas=1) if target == "vertex" else fitted)


def test_the_sweep_resolves_with_the_fitted_trial():
    profiles = resolve_sweep_compute("vertex", {TRIAL_STEP: ComputeProfile(**L4, spot=True)})
    assert profiles[TRIAL_STEP].scheduling == "standard"


def test_compile_says_what_the_sweep_leaves_to_the_training_pipeline(tmp_path):
    result = gkeflow("compile", "--output", str(tmp_path / "out"), "--compute",
                     "train-model.accelerator=nvidia-l4", "--compute", "train-model.replicas=2",
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert ("note (gke): sweep trials run as pipeline steps, one machine each: train-model's "
            "replicas 2 applies to the training pipeline only") in result.stdout
    assert "note (gke): train-model launches a JobSet of 2 pods" in result.stdout
    sweep = (tmp_path / "out" / "sweep.gke.yaml").read_text()
    assert "jobset" not in sweep.lower()


def test_a_vizier_sweep_leaves_replicas_to_training_and_says_so(tmp_path):
    (tmp_path / "gkeflow.yaml").write_text(
        "sweep:\n  engine: vizier\n  parameters:\n"
        "    learning_rate: {type: loguniform, min: 0.0001, max: 0.1}\n")
    result = gkeflow("compile", "--output", str(tmp_path / "out"), "--compute",
                     "train-model.accelerator=nvidia-l4", "--compute", "train-model.replicas=2",
                     "--compute", "train-model.scheduling=spot", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert ("note (vertex): sweep trials run as Vertex AI tuning trials, one machine each: "
            "train-model's replicas 2 applies to the training pipeline only") in result.stdout
    assert (tmp_path / "out" / "sweep.vertex.yaml").exists()
