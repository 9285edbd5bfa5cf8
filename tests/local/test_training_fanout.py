"""The training pipeline compiled with fan-out preparation prepares many input files in
parallel pods (plan -> ParallelFor -> merge) and trains on the dataset one pod would have
written."""

from __future__ import annotations

import json

import pytest

from gkeflow.components.prepare.logic import prepare
from gkeflow.pipelines.local import run_local
from gkeflow.pipelines.preparation import PreparationSettings
from gkeflow.pipelines.training import build_training_pipeline
from tests.unit.test_prepare_fanout import make_inputs

pytestmark = pytest.mark.slow


def test_training_pipeline_fans_preparation_out(tmp_path):
    pattern = make_inputs(tmp_path / "in", files=4, rows=3_000)
    single = prepare(pattern, tmp_path / "single", "status")
    result = run_local({"data_uri": pattern, "label_column": "status", "prepare_groups": 3,
                        "epochs": 2, "min_accuracy": 0.0,
                        "registry_uri": f"sqlite:///{tmp_path / 'registry.db'}"},
                       tmp_path / "out",
                       pipeline=build_training_pipeline(
                           "local", preparation=PreparationSettings(fanout=True)))
    assert result.ok, result.error + "\n" + "\n".join(result.failed_step.error_lines())
    ran = {step.name for step in result.steps}
    assert {"plan-prepare", "merge-prepared", "train-model", "evaluate-model"} <= ran
    assert "prepare-data" not in ran
    plan = result.parameter_outputs("plan-prepare")
    assert len(plan["Output"]) == 3  # four files dealt into three groups
    merged = result.artifact_metadata("merge-prepared", "dataset")
    assert merged["rows_read"] == single.rows_read
    assert {name: merged[f"{name}_rows"] for name in single.split_rows} == single.split_rows
    evidence = json.loads(result.output_dir("evaluate-model", "evaluation").read_text())
    assert sum(evidence["data"]["test_class_counts"].values()) == single.split_rows["test"]
