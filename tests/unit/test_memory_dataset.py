"""A small split of a wide table, read whole and preprocessed once, gives the model the same
rows and labels as the streamed tf.data pipeline, for classification and regression,
shuffled afresh every epoch (seeded) and batched as asked."""

from __future__ import annotations

import numpy as np
import pytest

from gkeflow.components.prepare.logic import prepare
from gkeflow.components.train.inputs import (
    input_names,
    make_split_dataset,
    memory_split_dataset,
    read_whole,
)
from gkeflow.components.train.models import training_stats
from gkeflow.components.train.regression import label_scaling
from gkeflow.components.train.tf_features import build_tf_preprocessor


def _arrays(dataset) -> tuple[np.ndarray, np.ndarray]:
    features, labels = zip(*((x.numpy(), y.numpy()) for x, y in dataset), strict=True)
    return np.concatenate(features), np.concatenate(labels)


def _sorted_rows(features: np.ndarray, labels: np.ndarray) -> np.ndarray:
    rows = np.column_stack([features, labels.reshape(len(labels), -1)])
    rows = np.nan_to_num(rows, nan=-1e30)
    return rows[np.lexsort(rows.T[::-1])]


@pytest.fixture(scope="module")
def regression_data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("memory")
    rng = np.random.default_rng(3)
    size = rng.uniform(20, 160, 300)
    with open(folder / "flats.csv", "w") as out:
        out.write("size,district,price\n")
        for i, value in enumerate(size):
            district = ["north", "south", ""][i % 3]
            out.write(f"{value:.1f},{district},{1000 * value + rng.normal(0, 500):.0f}\n")
    prepared = prepare(str(folder / "flats.csv"), folder / "dataset", "price")
    return folder / "dataset", prepared.schema


def _both(dataset_dir, schema, split, scaling=None, **options):
    stats = training_stats(schema, dataset_dir, 16)
    preprocessor = build_tf_preprocessor(schema, stats, input_names(schema))
    streamed = make_split_dataset(dataset_dir, split, schema, 16, preprocessor,
                                  label_scaling=scaling, **options)
    held = memory_split_dataset(dataset_dir, split, schema, 16, preprocessor,
                                label_scaling=scaling, **options)
    return streamed, held


@pytest.mark.parametrize("split", ["train", "eval"])
def test_classification_rows_and_labels_are_those_streamed(prepared_penguins, split):
    dataset_dir, prepared = prepared_penguins
    streamed, held = _both(dataset_dir, prepared.schema, split)
    theirs, ours = _arrays(streamed), _arrays(held)
    assert ours[0].shape == theirs[0].shape and ours[0].shape[0] == prepared.split_rows[split]
    assert ours[1].dtype == theirs[1].dtype
    np.testing.assert_array_equal(_sorted_rows(*ours), _sorted_rows(*theirs))


def test_regression_labels_are_scaled_as_streamed(regression_data):
    dataset_dir, schema = regression_data
    scaling = label_scaling(dataset_dir, schema, "none")
    streamed, held = _both(dataset_dir, schema, "train", scaling)
    theirs, ours = _arrays(streamed), _arrays(held)
    assert ours[1].shape == theirs[1].shape and ours[1].shape[1] == 1
    np.testing.assert_allclose(_sorted_rows(*ours), _sorted_rows(*theirs), rtol=1e-6)


def test_shuffled_batches_change_every_epoch_and_repeat_with_the_seed(prepared_penguins):
    dataset_dir, prepared = prepared_penguins
    _, held = _both(dataset_dir, prepared.schema, "train", seed=5, shuffle=True,
                    drop_remainder=True)
    first, second = _arrays(held), _arrays(held)
    _, again = _both(dataset_dir, prepared.schema, "train", seed=5, shuffle=True,
                     drop_remainder=True)
    rows = prepared.split_rows["train"]
    assert len(first[0]) == rows - rows % 16  # whole batches only
    assert not np.array_equal(first[0], second[0])  # a fresh order each epoch
    np.testing.assert_array_equal(first[0], _arrays(again)[0])  # the same for the seed


def test_only_wide_tables_that_fit_are_read_whole():
    assert read_whole(10_000, 4_000, 2_000)
    assert not read_whole(10_000, 40, 20)  # narrow: streamed
    assert not read_whole(10_000_000, 4_000, 2_000)  # too large to hold


def test_a_wide_table_trains_from_memory_and_serves_raw_features(tmp_path, capsys):
    """Over WIDE_COLUMNS features, train() reads its splits whole (said in its log); the
    exported model still takes the raw columns; cache_dataset=off streams them."""
    from gkeflow.components.prepare.reader import load_split
    from gkeflow.components.train.exported import ExportedModel
    from gkeflow.components.train.inputs import WIDE_COLUMNS, to_model_inputs
    from gkeflow.components.train.logic import TrainParams, train

    rng = np.random.default_rng(1)
    columns = WIDE_COLUMNS + 20
    x = rng.normal(size=(160, columns))
    with open(tmp_path / "wide.csv", "w") as out:
        out.write(",".join([f"c{i}" for i in range(columns)] + ["y"]) + "\n")
        for row in x:
            out.write(",".join(f"{v:.3f}" for v in row) + f",{'ab'[int(row[0] > 0)]}\n")
    prepared = prepare(str(tmp_path / "wide.csv"), tmp_path / "dataset", "y")
    for cache, said in (("auto", "read into memory and preprocessed once"),
                        ("off", "streamed from TFRecord shards")):
        model_dir = tmp_path / f"model-{cache}"
        train(tmp_path / "dataset", prepared.schema, model_dir,
              TrainParams(epochs=2, cache_dataset=cache, seed=3))
        log = capsys.readouterr().out
        assert f"input pipeline: {prepared.split_rows['train']} train rows {said}" in log
        test = load_split(tmp_path / "dataset", "test", prepared.schema)
        probabilities = ExportedModel(model_dir).predict_proba(
            to_model_inputs(test, prepared.schema))
        assert probabilities.shape == (len(test), 2)
        np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)
