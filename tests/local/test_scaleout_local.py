"""`gkeflow run --compute train-model.replicas=2`: two worker processes on loopback train with
MultiWorkerMirroredStrategy inside the real kfp.local pipeline; evaluation reads the chief's
model; the summary and the model metadata name the strategy and the worker count."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from gkeflow.components.train.exported import ExportedModel
from gkeflow.pipelines.cli.main import main


@pytest.mark.slow
def test_run_with_two_local_workers(penguins_run):
    out, output = penguins_run  # `gkeflow run ... --compute train-model.replicas=2`
    assert "Training:  MultiWorkerMirroredStrategy over 2 workers" in output
    [run_dir] = (out / "runs").glob("gkeflow-training-*")
    executor = json.loads((run_dir / "train-model" / "executor_output.json").read_text())
    model = executor["artifacts"]["model"]["artifacts"][0]["metadata"]
    assert model["strategy"] == "MultiWorkerMirroredStrategy over 2 workers"
    assert model["workers"] == 2 and model["engine"] == "local processes"
    metrics = executor["artifacts"]["metrics"]["artifacts"][0]["metadata"]
    assert metrics["workers"] == 2 and metrics["examples_per_s"] > 0
    exported = ExportedModel(run_dir / "train-model" / "model")
    assert exported.predict_rows([{"island": "Biscoe", "bill_length_mm": 45.0}])
    assert not list((run_dir / "train-model" / "model").glob("_GKEFLOW_COMPLETE*"))
    assert (run_dir / "evaluate-model").is_dir() and (run_dir / "register-model").is_dir()


def test_an_accelerator_this_machine_lacks_is_said_before_any_step(penguins_run):
    import glob

    _, output = penguins_run  # ... --compute train-model.accelerator=nvidia-l4
    note = "note: train-model asks for 1 x nvidia-l4, but this machine has no GPU"
    if glob.glob("/dev/nvidia[0-9]*"):
        assert note not in output
        return
    assert note in output
    assert output.index(note) < output.index("prepare-data started")


def test_invalid_replicas_is_a_short_error_before_any_step(tmp_path):
    result = CliRunner().invoke(main, ["run", "--output", str(tmp_path / "o"),
                                       "--compute", "train-model.replicas=0"])
    assert result.exit_code != 0
    assert "replicas must be >= 1" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "o" / "runs").exists()


def test_workers_that_fail_leave_no_folder_behind(tmp_path, monkeypatch):
    import tempfile

    from gkeflow.components.scaleout.local_workers import WorkersFailed, run_local_workers

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    missing = str(tmp_path / "no-dataset")
    with pytest.raises(WorkersFailed, match="worker 0 of 2 exited with"):
        run_local_workers(missing, missing, {"epochs": 1}, 2, str(tmp_path / "root"),
                          "run-1", "train-model", timeout_s=300)
    assert not list(tmp_path.glob("gkeflow-local-workers-*"))
