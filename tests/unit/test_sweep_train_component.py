"""train_model's body as a sweep trial: its summary, and an error reported, not raised."""

from __future__ import annotations

import json

import pytest


def _artifacts(tmp_path, dataset_dir):
    from kfp.dsl import Artifact, Dataset, Metrics, Model

    return dict(dataset=Dataset(uri=str(dataset_dir)),
                schema=Artifact(uri=str(dataset_dir / "schema.json")),
                model=Model(uri=str(tmp_path / "model")),
                metrics=Metrics(uri=str(tmp_path / "metrics")),
                tensorboard=Artifact(uri=str(tmp_path / "tb")))


def test_a_trial_reports_its_eval_metrics_or_its_error(prepared_penguins, tmp_path):
    from gkeflow.components.train.component import train_model

    dataset_dir, _ = prepared_penguins
    ok = json.loads(train_model.python_func(
        **_artifacts(tmp_path / "ok", dataset_dir), epochs=1, hidden_units="8",
        model_type="mlp", task_name="trial-004", continue_on_error=True))
    assert ok["trial_id"] == "trial-004" and ok["status"] == "succeeded" and not ok["error"]
    assert 0 <= ok["metrics"]["eval_accuracy"] <= 1 and ok["metrics"]["eval_loss"] > 0
    assert ok["model_uri"] == str(tmp_path / "ok" / "model")

    failed = json.loads(train_model.python_func(
        **_artifacts(tmp_path / "bad", dataset_dir), epochs=1, hidden_units="0",
        model_type="mlp", task_name="trial-005", continue_on_error=True))
    assert failed["status"] == "failed" and failed["metrics"] == {}
    assert "units" in failed["error"]
    with pytest.raises(ValueError, match="units"):  # the training pipeline still fails loudly
        train_model.python_func(**_artifacts(tmp_path / "loud", dataset_dir), epochs=1,
                                hidden_units="0", model_type="mlp")
