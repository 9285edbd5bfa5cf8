"""--compute flags and gkeflow.yaml's compute: section: steps that must run every time keep
caching off, contradicting flags are refused whatever their order, and a compile that is
refused writes nothing."""

from __future__ import annotations

import pytest

from gkeflow.pipelines.compute.profiles import (
    NEVER_CACHED,
    ComputeError,
    ComputeProfile,
    apply_overrides,
)
from gkeflow.pipelines.settings.config import ConfigError, GkeflowConfig
from gkeflow.pipelines.targets.compile import compile_all

DEFAULTS = {step: ComputeProfile(caching=False) for step in NEVER_CACHED} | {
    "train-model": ComputeProfile(), "prepare-data": ComputeProfile()}


@pytest.mark.parametrize("step", sorted(NEVER_CACHED))
def test_a_step_that_must_run_every_time_cannot_be_cached(step):
    with pytest.raises(ComputeError, match=f"{step}: caching must stay off"):
        apply_overrides(DEFAULTS, [f"{step}.caching=true"])
    config = GkeflowConfig.model_validate({"compute": {step: {"caching": True}}})
    with pytest.raises(ConfigError, match=f"compute.{step}: caching must stay off"):
        config.compute_overrides(DEFAULTS)
    assert apply_overrides(DEFAULTS, [f"{step}.caching=false"])[step].caching is False
    assert apply_overrides(DEFAULTS, ["prepare-data.caching=false"])["prepare-data"].caching \
        is False


@pytest.mark.parametrize("flags", [
    ["train-model.spot=true", "train-model.scheduling=flex-start"],
    ["train-model.scheduling=flex-start", "train-model.spot=true"],
])
def test_contradicting_flags_are_refused_in_either_order(flags):
    with pytest.raises(ComputeError, match="spot: true contradicts scheduling: flex-start"):
        apply_overrides(DEFAULTS, flags)


def test_the_same_field_twice_keeps_the_last():
    profiles = apply_overrides(DEFAULTS, ["train-model.cpu=2", "train-model.cpu=6"])
    assert profiles["train-model"].cpu == "6"


def test_a_refused_compile_writes_nothing(tmp_path):
    from gkeflow.pipelines.definitions.training import DEFAULT_COMPUTE as STEP_COMPUTE

    compute = {**STEP_COMPUTE,
               "fingerprint-data": STEP_COMPUTE["fingerprint-data"].with_overrides(memory="1T")}
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "training.gke.yaml").write_text("old\n")
    with pytest.raises(ComputeError, match="memory 1T exceeds what Vertex AI Pipelines"):
        compile_all(tmp_path / "out", pipelines=["training"], compute=compute)
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["training.gke.yaml"]
    assert (tmp_path / "out" / "training.gke.yaml").read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no staging folder left
