"""train logic: a real Keras model trains, exports, and serves raw rows with missing values."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gkeflow.components.train.exported import ExportedModel
from gkeflow.components.train.inputs import input_names
from gkeflow.components.train.logic import TrainParams


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
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=0, atol=1e-5)


def test_model_metadata_describes_the_signature(trained_penguins):
    model_dir, _ = trained_penguins
    metadata = json.loads((model_dir / "gkeflow_model.json").read_text())
    assert metadata["framework"] == "tensorflow"
    assert metadata["label_vocabulary"] == ["Adelie", "Chinstrap", "Gentoo"]
    assert {"name": "island", "input": "island", "type": "categorical"} in metadata["features"]


def test_input_names_are_safe_and_unique():
    from gkeflow.components.prepare.logic import ColumnSchema, Schema

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


def test_cache_auto_keeps_small_splits_and_streams_large_ones():
    from gkeflow.components.train.inputs import CACHE_BUDGET_BYTES, should_cache

    assert should_cache("auto", rows=100_000, input_dim=50)
    too_many_rows = CACHE_BUDGET_BYTES // (51 * 4) + 1
    assert not should_cache("auto", rows=too_many_rows, input_dim=50)
    assert should_cache("on", rows=too_many_rows, input_dim=50)
    assert not should_cache("off", rows=10, input_dim=5)
    with pytest.raises(ValueError, match="cache_dataset"):
        TrainParams(cache_dataset="sometimes")


def test_training_streams_the_prepared_shards(prepared_penguins, tmp_path):
    """The train split is read from its TFRecord shards, not from a table in memory."""
    from gkeflow.components.train.inputs import make_split_dataset
    from gkeflow.components.train.models import build_preprocessor, feature_stats_from_prepared

    dataset_dir, prepared = prepared_penguins
    schema = prepared.schema
    stats = feature_stats_from_prepared(schema, dataset_dir)
    assert stats is not None and set(stats.numeric) == {
        c.name for c in schema.features if c.type == "numeric"}
    preprocessor = build_preprocessor(schema, stats, input_names(schema))
    dataset = make_split_dataset(dataset_dir, "train", schema, 64, preprocessor, seed=1,
                                 shuffle=True)
    rows, labels = 0, set()
    for features, label in dataset:
        assert features.shape[1] == preprocessor.outputs[0].shape[-1]
        assert np.isfinite(features.numpy()).all()
        rows += int(features.shape[0])
        labels.update(label.numpy().tolist())
    assert rows == prepared.split_rows["train"]
    assert labels == {0, 1, 2}
    second_epoch = [lab.numpy().tolist() for _, lab in dataset.take(2)]
    first = [lab.numpy().tolist() for _, lab in make_split_dataset(
        dataset_dir, "train", schema, 64, preprocessor, seed=1, shuffle=True).take(2)]
    again = [lab.numpy().tolist() for _, lab in make_split_dataset(
        dataset_dir, "train", schema, 64, preprocessor, seed=1, shuffle=True).take(2)]
    assert first == again, "a seed gives the same order"
    assert second_epoch != first, "the next epoch gets a fresh order"


def test_tensorboard_logs_carry_epoch_throughput(prepared_penguins, tmp_path):
    import tensorflow as tf

    from gkeflow.components.train.logic import train

    dataset_dir, prepared = prepared_penguins
    result = train(dataset_dir, prepared.schema, tmp_path / "model",
                   TrainParams(epochs=2, early_stopping_patience=0),
                   tensorboard_dir=tmp_path / "tb")
    events = list((tmp_path / "tb" / "throughput").glob("events.out.tfevents.*"))
    assert events
    rates = [value.simple_value if value.HasField("simple_value")
             else float(tf.make_ndarray(value.tensor))
             for event in tf.compat.v1.train.summary_iterator(str(events[0]))
             for value in event.summary.value if value.tag == "examples_per_s"]
    assert len(rates) == 2 and all(r > 0 for r in rates)
    assert rates == pytest.approx(result.epoch_examples_per_s, rel=1e-4)
    assert (tmp_path / "tb" / "train").is_dir()  # Keras' own loss/accuracy curves
