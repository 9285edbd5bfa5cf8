"""What registration compares to pass an existing version on ("unchanged: same as version
N"): every pipeline parameter a training step reads that changes the model it trains (the
Keras backend, the trees' settings, the loss...) is in the training inputs, so a model
trained otherwise is registered as a version of its own."""

from __future__ import annotations

import re

import pytest

from gkeflow.components import yamlio
from gkeflow.pipelines.targets.compile import compile_pipeline

#: Parameters of training steps that do not change the trained model: where checkpoints
#: and shards go, how the run is tracked or scaled.
NOT_THE_MODEL = {"checkpoint_uri", "shard_root", "data_uri", "prepare_groups",
                 "max_rejected_fraction", "user_module"}


def _tasks(spec: dict):
    yield from spec["root"]["dag"]["tasks"].items()
    for component in spec["components"].values():
        yield from component.get("dag", {}).get("tasks", {}).items()


@pytest.mark.parametrize("pipeline", ["training", "sweep"])
def test_every_parameter_that_changes_the_model_is_in_the_training_inputs(tmp_path,
                                                                          pipeline):
    spec = next(yamlio.load_all(compile_pipeline(pipeline, "gke", tmp_path).read_text()))
    roots = set(spec["root"]["inputDefinitions"]["parameters"])
    inputs = next(task["inputs"]["parameters"]["training_inputs"]["runtimeValue"]["constant"]
                  for name, task in _tasks(spec) if name == "register-model")
    compared = set(re.findall(r"pipelinechannel--([a-z_]+)'\]\}\}", inputs))
    read = set()
    for name, task in _tasks(spec):
        if name.startswith("train-") or name == "run-sweep":
            for parameter in task["inputs"].get("parameters", {}).values():
                source = parameter.get("componentInputParameter", "")
                read.add(source.removeprefix("pipelinechannel--"))
    read &= roots
    assert {"backend", "gbdt_max_depth", "loss", "label_transform"} & read, read
    assert read - NOT_THE_MODEL <= compared, sorted(read - NOT_THE_MODEL - compared)
    assert "data=" in inputs and "code=" in inputs
