"""Dry runs count a compiled pipeline's steps through its groups: an exit handler (tracking,
notifications) or a condition is not a step, what runs inside it is."""

from __future__ import annotations

from pathlib import Path

from gkeflow.components import yamlio
from gkeflow.pipelines.targets.submit import step_count

ROOT = Path(__file__).resolve().parents[2]


def test_steps_inside_an_exit_handler_and_a_condition_are_counted():
    spec = {
        "components": {
            "comp-exit-handler-1": {"dag": {"tasks": {
                "prepare": {"componentRef": {"name": "comp-prepare"}},
                "train": {"componentRef": {"name": "comp-train"}},
                "condition-1": {"componentRef": {"name": "comp-condition-1"}}}}},
            "comp-condition-1": {"dag": {"tasks": {
                "register": {"componentRef": {"name": "comp-register"}}}}},
            "comp-prepare": {"executorLabel": "exec-prepare"},
            "comp-train": {"executorLabel": "exec-train"},
            "comp-register": {"executorLabel": "exec-register"},
            "comp-end-tracking": {"executorLabel": "exec-end-tracking"},
        },
        "root": {"dag": {"tasks": {
            "exit-handler-1": {"componentRef": {"name": "comp-exit-handler-1"}},
            "end-tracking": {"componentRef": {"name": "comp-end-tracking"}}}}},
    }
    assert step_count(spec) == 4


def test_the_compiled_training_pipeline_counts_every_step():
    spec = next(yamlio.load_all((ROOT / "compiled" / "training.vertex.yaml").read_text()))
    executors = spec["deploymentSpec"]["executors"]
    # one task per executor here: no component runs twice in the training pipeline
    assert step_count(spec) == len(executors) >= 5
