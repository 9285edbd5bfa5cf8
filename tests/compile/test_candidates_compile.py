"""gkeflow.yaml's ``candidates:`` compiles one step per family, side by side, for both
targets: each on its own compute, train-model taking their outputs; one family, one
train-model step."""

from __future__ import annotations

import pytest

from gkeflow.components import yamlio
from gkeflow.pipelines.settings.config import GkeflowConfig
from gkeflow.pipelines.targets.compile import compile_pipeline


def _tasks(path):
    spec = next(iter(yamlio.load_all(path.read_text())))
    return spec, spec["root"]["dag"]["tasks"]


@pytest.mark.parametrize("target", ["gke", "vertex"])
def test_the_configured_candidates_are_parallel_steps_train_model_chooses_from(tmp_path,
                                                                                target):
    config = GkeflowConfig.model_validate({"candidates": ["wide_deep", "gbdt"]})
    spec, tasks = _tasks(compile_pipeline("training", target, tmp_path, config=config))
    assert {"train-wide-deep", "train-gbdt", "train-model"} <= set(tasks)
    assert "train-mlp" not in tasks and "train-linear" not in tasks
    for step, family in (("train-wide-deep", "wide_deep"), ("train-gbdt", "gbdt")):
        inputs = tasks[step]["inputs"]["parameters"]
        assert inputs["family"]["runtimeValue"]["constant"] == family
        assert inputs["pipeline_candidates"]["runtimeValue"]["constant"] == "wide_deep,gbdt"
        # side by side: each depends on preparation, not on the other
        assert not {"train-wide-deep", "train-gbdt"} & set(tasks[step]["dependentTasks"])
    chooser = tasks["train-model"]
    assert chooser["inputs"]["artifacts"]["wide_deep_candidate"]["taskOutputArtifact"] == {
        "outputArtifactKey": "candidate", "producerTask": "train-wide-deep"}
    assert set(chooser["dependentTasks"]) >= {"train-wide-deep", "train-gbdt"}


def test_one_configured_family_compiles_one_training_step(tmp_path):
    config = GkeflowConfig.model_validate({"candidates": ["gbdt"]})
    _, tasks = _tasks(compile_pipeline("training", "gke", tmp_path, config=config))
    assert not [task for task in tasks if task.startswith("train-") and task != "train-model"]
    assert "gbdt_candidate" not in tasks["train-model"]["inputs"].get("artifacts", {})
