"""The training pipeline really runs under kfp.local: it trains, evaluates, gates and registers."""

from __future__ import annotations

import pytest

from components.register.local_registry import LocalRegistry
from components.train.logic import ExportedModel
from pipelines.local import run_local

pytestmark = pytest.mark.slow

STEPS = ["prepare-data", "train-model", "evaluate-model", "register-model"]


def _arguments(tmp_path, **overrides):
    return {"epochs": 8, "registry_uri": f"sqlite:///{tmp_path / 'registry.db'}", **overrides}


def test_pipeline_trains_evaluates_and_registers(tmp_path):
    result = run_local(_arguments(tmp_path), tmp_path / "out")
    assert result.ok, result.error + "\n" + "\n".join(result.failed_step.error_lines())
    assert [s.name for s in result.steps] == STEPS
    assert all(s.status == "SUCCESS" and s.duration_s > 0 for s in result.steps)

    dataset = result.artifact_metadata("prepare-data", "dataset")
    assert dataset["rows_read"] == 344
    assert dataset["train_rows"] + dataset["eval_rows"] + dataset["test_rows"] + \
        dataset["rejected_rows"] == 344
    assert dataset["train_shards"] >= 1
    assert result.output_dir("prepare-data", "report").read_text().startswith("# Data report")
    assert result.artifact_metadata("prepare-data", "rejected")["rows"] == \
        dataset["rejected_rows"]

    train_metrics = result.artifact_metadata("train-model", "metrics")
    assert {"train_loss", "train_accuracy", "eval_loss", "eval_accuracy"} <= set(train_metrics)

    metrics = result.artifact_metadata("evaluate-model", "metrics")
    assert metrics["accuracy"] >= 0.8 and metrics["passed"] == 1.0
    confusion = result.artifact_metadata("evaluate-model", "classification_metrics")
    categories = [a["displayName"] for a in confusion["confusionMatrix"]["annotationSpecs"]]
    assert categories == ["Adelie", "Chinstrap", "Gentoo"]
    assert (result.output_dir("evaluate-model", "report")).read_text().startswith(
        "# Evaluation: PASSED")

    model = ExportedModel(result.output_dir("train-model", "model"))
    assert model.predict_rows([
        {"island": "Biscoe", "bill_length_mm": 49.0, "bill_depth_mm": 15.5,
         "flipper_length_mm": 225, "body_mass_g": 5400, "sex": "male", "year": 2009},
        {"island": "Dream", "bill_length_mm": None},
    ])[0] == "Gentoo"

    registered = result.parameter_outputs("register-model")
    versions = LocalRegistry(tmp_path / "registry.db").list(name="penguins-classifier")
    assert [v.version for v in versions] == [registered["model_version"]] == [1]
    assert versions[0].uri == str(result.output_dir("train-model", "model"))
    assert versions[0].run_id and versions[0].metrics["accuracy"] == metrics["accuracy"]


def test_unreachable_min_accuracy_registers_nothing(tmp_path):
    result = run_local(
        _arguments(tmp_path, epochs=1, learning_rate=1e-6, min_accuracy=1.0), tmp_path / "out"
    )
    assert result.ok, result.error
    assert [s.name for s in result.steps] == STEPS[:3]
    assert result.parameter_outputs("evaluate-model") == {"Output": False}
    assert LocalRegistry(tmp_path / "registry.db").list() == []


def test_failing_step_is_reported_with_its_error(tmp_path):
    result = run_local(_arguments(tmp_path, label_column="no_such_column"), tmp_path / "out")
    assert not result.ok
    assert result.failed_step.name == "prepare-data"
    assert "label column 'no_such_column' not found" in result.failed_step.error_lines()[-1]
    assert [s.name for s in result.steps] == ["prepare-data"]
