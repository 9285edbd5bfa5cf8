"""The training pipeline really runs under kfp.local: it trains, evaluates against the
registry's champion, gates and registers."""

from __future__ import annotations

import json

import pytest

from gkeflow.components.register.local_registry import LocalRegistry
from gkeflow.components.train.exported import ExportedModel
from gkeflow.pipelines.targets.local import run_local

pytestmark = pytest.mark.slow

#: model_type auto (the default): each candidate in a step of its own, then train-model
#: choosing among them
STEPS = ["fingerprint-data", "prepare-data", "train-gbdt", "train-mlp", "train-linear",
         "train-model", "evaluate-model", "register-model"]


def _arguments(tmp_path, **overrides):
    return {"epochs": 8, "registry_uri": f"sqlite:///{tmp_path / 'registry.db'}", **overrides}


def _register_champion(tmp_path, model_dir) -> None:
    registry = LocalRegistry(tmp_path / "registry.db")
    registry.register("penguins-classifier", str(model_dir), {}, run_id="earlier-run")
    registry.set_alias("penguins-classifier", 1, "champion")


def test_pipeline_blesses_a_model_better_than_the_champion_and_registers_it(
        tmp_path, weak_penguins):
    _register_champion(tmp_path, weak_penguins)
    result = run_local(_arguments(tmp_path), tmp_path / "out")
    assert result.ok, result.error + "\n" + "\n".join(result.failed_step.error_lines())
    names = [s.name for s in result.steps]  # the candidates run in any order
    assert sorted(names) == sorted(STEPS) and names.index("train-model") == 5
    assert all(s.status == "SUCCESS" and s.duration_s > 0 for s in result.steps)

    dataset = result.artifact_metadata("prepare-data", "dataset")
    assert dataset["rows_read"] == 344
    assert dataset["train_rows"] + dataset["eval_rows"] + dataset["test_rows"] + \
        dataset["rejected_rows"] == 344
    assert dataset["train_shards"] >= 1
    # the shards sit next to the artifact: only their manifest passes through the store
    dataset_dir = result.output_dir("prepare-data", "dataset")
    assert (dataset_dir / "shards.json").exists() and not list(dataset_dir.rglob("*.tfrecord.gz"))
    assert result.output_dir("prepare-data", "report").read_text().startswith("# Data report")
    assert result.artifact_metadata("prepare-data", "rejected")["rows"] == \
        dataset["rejected_rows"]

    train_metrics = result.artifact_metadata("train-model", "metrics")
    assert {"train_loss", "train_accuracy", "eval_loss", "eval_accuracy"} <= set(train_metrics)

    metrics = result.artifact_metadata("evaluate-model", "metrics")
    assert metrics["accuracy"] >= 0.8 and metrics["passed"] == 1.0
    assert {"f1_macro", "log_loss", "roc_auc", "pr_auc", "ece",
            "slice_island_Biscoe_accuracy"} <= set(metrics)
    confusion = result.artifact_metadata("evaluate-model", "classification_metrics")
    categories = [a["displayName"] for a in confusion["confusionMatrix"]["annotationSpecs"]]
    assert categories == ["Adelie", "Chinstrap", "Gentoo"]
    assert 2 <= len(confusion["confidenceMetrics"]) <= 200
    # Unrounded thresholds: distinct and decreasing (rounded ones collapse to 0.0 on a
    # confident model; tests/unit/test_roc_thresholds.py recomputes each point's rates).
    roc_thresholds = [p["confidenceThreshold"] for p in confusion["confidenceMetrics"]]
    assert all(a > b for a, b in zip(roc_thresholds, roc_thresholds[1:], strict=False))
    assert result.parameter_outputs("evaluate-model") == {"Output": True}
    card = result.output_dir("evaluate-model", "model_card").read_text()
    assert card.startswith("# Model card: penguins-classifier\n\n## Decision: BLESSED")
    assert "champion penguins-classifier v1 (champion)" in card and "## Slices" in card
    evidence = json.loads(result.output_dir("evaluate-model", "evaluation").read_text())
    assert evidence["champion"]["version"] == 1 and "is no worse" in evidence["reasons"][-1]

    model = ExportedModel(result.output_dir("train-model", "model"))
    assert model.predict_rows([
        {"island": "Biscoe", "bill_length_mm": 49.0, "bill_depth_mm": 15.5,
         "flipper_length_mm": 225, "body_mass_g": 5400, "sex": "male", "year": 2009},
        {"island": "Dream", "bill_length_mm": None},
    ])[0] == "Gentoo"

    registered = result.parameter_outputs("register-model")
    versions = LocalRegistry(tmp_path / "registry.db").list(name="penguins-classifier")
    assert [v.version for v in versions] == [1, registered["model_version"]] == [1, 2]
    assert versions[1].uri == str(result.output_dir("train-model", "model"))
    assert versions[1].run_id and versions[1].metrics["accuracy"] == metrics["accuracy"]
    # Blessed against the champion, the new version takes the champion alias.
    assert [v.aliases for v in versions] == [(), ("champion",)]
    # The registered version as an output artifact, and its lineage.
    described = result.artifact_metadata("register-model", "registered_model")
    assert described["resourceName"] == registered["resource_name"] == (
        "local://penguins-classifier/versions/2")
    assert described["version"] == 2 and described["backend"] == "local"
    lineage = dict(versions[1].lineage)
    assert lineage.pop("training_key").startswith("sha256:")
    assert lineage == {"data_uri": "embedded://penguins", "pipeline_task": "register-model",
                       "pipeline_run_id": versions[1].run_id}


def test_gate_blocks_a_model_worse_than_the_champion(tmp_path, trained_penguins):
    _register_champion(tmp_path, trained_penguins[0])
    result = run_local(
        _arguments(tmp_path, epochs=1, learning_rate=1e-6, min_accuracy=0.0, model_type="mlp"),
        tmp_path / "out"
    )
    assert result.ok, result.error
    # one family asked for: train-model trains it, no candidate steps
    assert [s.name for s in result.steps] == ["fingerprint-data", "prepare-data", "train-model",
                                              "evaluate-model"]
    assert result.parameter_outputs("evaluate-model") == {"Output": False}
    assert result.artifact_metadata("evaluate-model", "metrics")["passed"] == 0.0
    reasons = result.artifact_metadata("evaluate-model", "evaluation")["reasons"]
    assert reasons[0] == "PASS accuracy " + reasons[0].split()[2] + " >= min_accuracy 0"
    assert reasons[-1].startswith("FAIL accuracy") and "beyond the tolerance 0.01" in reasons[-1]
    card = result.output_dir("evaluate-model", "model_card").read_text()
    assert "## Decision: NOT BLESSED" in card and reasons[-1][5:] in card
    assert [v.version for v in LocalRegistry(tmp_path / "registry.db").list()] == [1]


def test_failing_step_is_reported_with_its_error(tmp_path):
    result = run_local(_arguments(tmp_path, label_column="no_such_column"), tmp_path / "out")
    assert not result.ok
    assert result.failed_step.name == "prepare-data"
    assert "'no_such_column'" in result.failed_step.error_lines()[-1]
    assert [s.name for s in result.steps] == ["fingerprint-data", "prepare-data"]
