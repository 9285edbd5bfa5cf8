"""train logic: a real Keras model trains, exports, and serves raw rows with missing values."""

from __future__ import annotations

import json

import numpy as np
import pytest

from components.train.logic import ExportedModel, TrainParams, input_names


def test_training_learns_and_logs_metrics(trained_penguins):
    _, result = trained_penguins
    assert 1 <= result.best_epoch <= result.epochs_run <= 8
    assert len(result.history["loss"]) == result.epochs_run
    assert result.metrics["train_accuracy"] > 0.85
    assert result.metrics["eval_accuracy"] > 0.85
    assert result.metrics["eval_loss"] == min(result.history["val_loss"])
    assert len(result.epoch_examples_per_s) == result.epochs_run
    assert result.examples_per_s > 0


def test_exported_model_predicts_raw_rows_with_missing_values(trained_penguins):
    model_dir, _ = trained_penguins
    model = ExportedModel(model_dir)
    rows = [
        {"island": "Biscoe", "bill_length_mm": 48.0, "bill_depth_mm": 15.0,
         "flipper_length_mm": 222, "body_mass_g": 5300, "sex": "male", "year": 2008},
        {"island": "Torgersen", "bill_length_mm": 38.0, "bill_depth_mm": 19.0,
         "flipper_length_mm": 185, "body_mass_g": 3600, "sex": "female", "year": 2007},
        {"island": "Dream"},  # everything else missing
        {"island": "Atlantis", "bill_length_mm": None, "sex": None},  # unseen category
    ]
    predictions = model.predict_rows(rows)
    assert predictions[:2] == ["Gentoo", "Adelie"]
    assert all(p in model.label_vocabulary for p in predictions)


def test_probabilities_are_finite_and_normalised(trained_penguins):
    model_dir, _ = trained_penguins
    model = ExportedModel(model_dir)
    inputs = {
        f["input"]: (np.array([np.nan, 1.0], dtype="float32") if f["type"] == "numeric"
                     else np.array(["", "x"], dtype=object))
        for f in model.metadata["features"]
    }
    probs = model.predict_proba(inputs)
    assert probs.shape == (2, 3)
    assert np.isfinite(probs).all()
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)


def test_model_metadata_describes_the_signature(trained_penguins):
    model_dir, _ = trained_penguins
    metadata = json.loads((model_dir / "gkeflow_model.json").read_text())
    assert metadata["framework"] == "tensorflow"
    assert metadata["label_vocabulary"] == ["Adelie", "Chinstrap", "Gentoo"]
    assert {"name": "island", "input": "island", "type": "categorical"} in metadata["features"]


def test_input_names_are_safe_and_unique():
    from components.prepare.logic import ColumnSchema, Schema

    schema = Schema("y", ["a", "b"], [
        ColumnSchema("Delta 15 N (o/oo)", "numeric", "feature", True),
        ColumnSchema("delta-15-n-o-oo", "numeric", "feature", True),
        ColumnSchema("3rd", "categorical", "feature", True),
        ColumnSchema("y", "categorical", "label", False),
    ])
    names = input_names(schema)
    assert names == {"Delta 15 N (o/oo)": "delta_15_n_o_oo", "delta-15-n-o-oo": "delta_15_n_o_oo_2",
                     "3rd": "f_3rd"}


@pytest.mark.parametrize("field, value", [("epochs", 0), ("batch_size", 0), ("learning_rate", 0.0)])
def test_bad_hyperparameters_are_rejected(field, value):
    with pytest.raises(ValueError, match=field):
        TrainParams(**{field: value})


def test_missing_model_dir_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no SavedModel"):
        ExportedModel(tmp_path)
