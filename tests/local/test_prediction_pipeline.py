"""`gkeflow run` trains and registers; `gkeflow run --pipeline prediction` then scores new
rows with the champion under kfp.local, as a user runs them."""

from __future__ import annotations

import csv

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from gkeflow.pipelines.cli.main import main

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trained_output(penguins_run):
    """The session's `gkeflow run` on penguins (tests/conftest.py), shared with the scale-out
    test instead of training another model."""
    output, printed = penguins_run
    assert "Registered: penguins-classifier version 1" in printed
    return output


def _new_rows(path, rows: int = 120) -> pd.DataFrame:
    import palmerpenguins

    frame = palmerpenguins.load_penguins().sample(rows, random_state=3).drop(columns="species")
    frame.insert(0, "id", [f"n{i}" for i in range(rows)])
    frame.to_csv(path, index=False)
    return frame


def test_train_then_score_new_rows_with_the_champion(trained_output, tmp_path):
    from gkeflow.components.register.local_registry import LocalRegistry
    from gkeflow.components.train.exported import ExportedModel
    from gkeflow.components.train.inputs import to_model_inputs

    registry = LocalRegistry(trained_output / "registry.db")
    registry.set_alias("penguins-classifier", 1, "champion")
    frame = _new_rows(tmp_path / "new rows.csv")
    result = CliRunner().invoke(main, [
        "run", "--pipeline", "prediction", "--data", str(tmp_path / "new rows.csv"),
        "--model", "penguins-classifier@champion", "--output", str(trained_output),
        "--param", "key_column=id"])
    assert result.exit_code == 0, result.output
    assert "Rows:        120 read, 120 scored, 0 rejected" in result.output
    assert "alias 'champion' -> version 1" in result.output
    path = next(line.split(":", 1)[1].strip() for line in result.output.splitlines()
                if line.startswith("Predictions:"))
    out = pq.read_table(path).to_pandas()
    assert out["id"].tolist() == frame["id"].tolist()
    assert set(out["model_version"]) == {1}
    # the exported model itself, called on the same rows, gives the same answers
    model = ExportedModel(registry.get("penguins-classifier", 1).uri)
    from gkeflow.components.predict.resolve import training_profile
    from gkeflow.components.prepare.logic import Schema

    schema: Schema = training_profile(model.model_dir).schema
    own = model.predict_proba(to_model_inputs(frame, schema))
    probs = out[[f"probability_{c}" for c in model.label_vocabulary]].to_numpy()
    np.testing.assert_allclose(probs, own, rtol=1e-5, atol=1e-6)
    assert out["predicted_class"].tolist() == [model.label_vocabulary[i]
                                               for i in own.argmax(axis=1)]


def test_damaged_rows_are_set_aside_and_drift_fails_the_run(trained_output, tmp_path):
    frame = _new_rows(tmp_path / "rows.csv", rows=40)
    frame["bill_length_mm"] = frame["bill_length_mm"].astype(object)
    frame.loc[frame.index[:3], "bill_length_mm"] = "broken"
    frame.loc[frame.index[3:], "island"] = "Atlantis"  # 37 of 40 rows: a new category
    frame.to_csv(tmp_path / "rows.csv", index=False)
    args = ["run", "--pipeline", "prediction", "--data", str(tmp_path / "rows.csv"),
            "--output", str(trained_output)]
    failed = CliRunner().invoke(main, args)
    assert failed.exit_code == 1
    assert "FAILED: step predict-batch" in failed.output
    assert "schema drift above max_drift=30% in 'island'" in failed.output
    assert "Traceback" not in failed.output
    passed = CliRunner().invoke(main, [*args, "--param", "max_drift=1.0"])
    assert passed.exit_code == 0, passed.output
    assert "40 read, 37 scored, 3 rejected" in passed.output
    rejected_path = next(line.split(":", 1)[1].strip() for line in passed.output.splitlines()
                         if line.startswith("Rejected:"))
    with open(rejected_path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["reason"] for r in rows] == ["column 'bill_length_mm': not a number"] * 3
    report_dir = next(line.split(":", 1)[1].strip() for line in passed.output.splitlines()
                      if line.startswith("Report:"))
    with open(report_dir) as handle:
        report = handle.read()
    assert report.startswith("# Predictions\n\n37 rows scored")
    assert "`Atlantis` (37)" in report and "**FAILED**" not in report


def test_the_gke_pipeline_scores_the_model_the_launcher_imported(trained_output, tmp_path):
    """GKE shape: resolve-model -> dsl.importer -> predict-batch (model_files), so the KFP
    launcher, not the step, fetches the registered files (minio:// on a standard install)."""
    from gkeflow.pipelines.definitions.prediction import build_prediction_pipeline
    from gkeflow.pipelines.targets.local import run_local

    frame = _new_rows(tmp_path / "rows.csv", rows=40)
    result = run_local(
        {"data_uri": str(tmp_path / "rows.csv"), "key_column": "id",
         "registry_uri": f"sqlite:///{trained_output / 'registry.db'}"},
        tmp_path / "out", pipeline=build_prediction_pipeline("gke"))
    assert result.ok, result.error + "\n" + "\n".join(result.failed_step.error_lines())
    assert {"resolve-model", "importer", "predict-batch"} <= {s.name for s in result.steps}
    scored = result.artifact_metadata("predict-batch", "predictions")
    assert scored["rows_scored"] == len(frame)
    log = result.log_path.read_text()
    assert "penguins-classifier version 1" in log


def test_data_without_the_models_inputs_is_refused_before_any_step(trained_output, tmp_path):
    """The README's first prediction on other data: the registry's only model is named and
    refused from its exported metadata, before any step runs."""
    (tmp_path / "loans.csv").write_text("income,amount,term\n50000,1000,12\n20000,5000,36\n")
    result = CliRunner().invoke(main, ["run", "--pipeline", "prediction", "--data",
                                       str(tmp_path / "loans.csv"), "--output",
                                       str(trained_output)])
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("Error: the registry's only model penguins-classifier@")
    assert "loans.csv lacks: " in result.stderr and "island" in result.stderr
    assert "predict-batch" not in result.output
