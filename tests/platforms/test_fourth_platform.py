"""A platform the suite does not ship, declared in this one module: registering it is all it
takes for the training pipeline to compile for it and for a plan to be made, since no module
compares a platform's name (the grep of issue 64's "done when" is the test below too)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gkeflow.pipelines.compute.costing import run_cost
from gkeflow.pipelines.compute.engines import training_engine
from gkeflow.pipelines.compute.plan import plan, target_notes
from gkeflow.pipelines.definitions.training import resolve_compute
from gkeflow.pipelines.settings import platforms
from gkeflow.pipelines.settings.platforms import Platform, Unsupported
from gkeflow.pipelines.targets.compile import compile_pipeline

REPO = Path(__file__).resolve().parents[2]
#: A Kubernetes platform that runs no Kueue queue and prices like GKE.
ACME = Platform("acme", "Acme Kubernetes", kubernetes=True, training_engine="jobset",
                unsupported={Unsupported.QUEUE: "queue (Kueue) is not installed on acme"})


@pytest.fixture()
def acme():
    platforms.register(ACME)
    yield ACME
    platforms.unregister(ACME.name)


def test_a_registered_fourth_platform_compiles_the_training_pipeline_and_plans(acme, tmp_path):
    path = compile_pipeline("training", acme.name, tmp_path)
    text = path.read_text()
    assert "gkeflow-training" in text and "nvidia.com/gpu" in text  # a Kubernetes pod spec
    profiles = resolve_compute(acme.name)
    rows = plan(profiles, acme.name, {})
    # model_type auto's candidates side by side, then train-model choosing
    assert [row.step for row in rows][:6] == ["fingerprint-data", "prepare-data", "train-gbdt",
                                              "train-mlp", "train-linear", "train-model"]
    train = next(row for row in rows if row.step == "train-mlp")
    assert train.accelerator.startswith("nvidia.com/gpu")
    queued = {step: p.with_overrides(queue="team-a") for step, p in profiles.items()}
    assert any(note.startswith("queue (Kueue) is not installed on acme")
               for note in target_notes(queued, acme.name))
    cost = run_cost(profiles, acme.name, "us-central1")
    assert cost.ceiling_usd is not None  # priced from Compute Engine's rows, as GKE is
    # the engine it declares runs multi-node training: a JobSet, as on GKE
    two = profiles["train-model"].with_overrides(replicas=2)
    assert training_engine(acme.name, two).name == "gke"
    assert training_engine(acme.name, profiles["train-model"]) is None


def test_no_module_compares_a_platform_name():
    """issue 64's check: platform names are compared only in settings/platforms.py."""
    pattern = re.compile(r'[=!]= ?"(gke|vertex|local)"|in \("(gke|vertex|local)"')
    found = [f"{path.relative_to(REPO)}:{number}: {line.strip()}"
             for folder in ("compute", "definitions", "cli", "settings")
             for path in sorted((REPO / "pipelines" / folder).rglob("*.py"))
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if pattern.search(line)]
    assert found == [], found
    assert re.search(r"class Platform\b", (REPO / "pipelines/settings/platforms.py").read_text())
