"""`gkeflow run` with gkeflow.yaml's preparation: {fanout: true} prepares many input files in
parallel pods (plan -> ParallelFor -> merge) and trains on the dataset one pod would have
written."""

from __future__ import annotations

import json

import pytest

from gkeflow.components.prepare.logic import prepare
from tests.cli.test_cli import gkeflow
from tests.unit.test_prepare_fanout import make_inputs

pytestmark = pytest.mark.slow


def test_run_fans_preparation_out_when_the_config_says_so(tmp_path):
    pattern = make_inputs(tmp_path / "in", files=4, rows=3_000)
    single = prepare(pattern, tmp_path / "single", "status")
    config = tmp_path / "team.yaml"
    config.write_text("preparation: {fanout: true, groups: 3, parallelism: 2}\n")
    out = tmp_path / "out"
    result = gkeflow("run", "--data", pattern, "--label", "status", "--config", str(config),
                     "--epochs", "2", "--min-accuracy", "0", "--output", str(out),
                     cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = next((out / "runs").glob("gkeflow-training-*"))
    assert not (run_dir / "prepare-data").exists()
    plan = json.loads((run_dir / "plan-prepare" / "executor_output.json").read_text())
    assert len(plan["parameterValues"]["Output"]) == 3  # four files dealt into three groups
    merged = json.loads((run_dir / "merge-prepared" / "executor_output.json").read_text())
    metadata = merged["artifacts"]["dataset"]["artifacts"][0]["metadata"]
    assert metadata["rows_read"] == single.rows_read
    assert {name: metadata[f"{name}_rows"] for name in single.split_rows} == single.split_rows
    evaluation = next(run_dir.glob("evaluate-model/evaluation*"))
    evidence = json.loads(evaluation.read_text())
    assert sum(evidence["data"]["test_class_counts"].values()) == single.split_rows["test"]
