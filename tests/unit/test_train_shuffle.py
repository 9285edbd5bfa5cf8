"""A fresh row order every epoch: seeded, reproducible, every row once per epoch."""

from __future__ import annotations

import numpy as np
import pytest

from gkeflow.components.prepare.logic import prepare
from gkeflow.components.prepare.reader import make_tf_dataset
from gkeflow.components.train.inputs import make_split_dataset


@pytest.fixture(scope="module")
def churn(tmp_path_factory):
    """A sorted input (by customer id, hence by file position) over several blocks."""
    from tests.conftest import make_churn_csv

    root = tmp_path_factory.mktemp("shuffle")
    csv = make_churn_csv(root / "churn.csv", rows=40000, seed=5)
    result = prepare(str(csv), root / "dataset", "status")
    return root / "dataset", result.schema


def _epochs(dataset, n: int) -> list[list[np.ndarray]]:
    return [[b["customer_id"].numpy() for b in dataset] for _ in range(n)]


def test_reader_gives_every_epoch_a_fresh_row_order(churn):
    dataset_dir, schema = churn
    dataset = make_tf_dataset(dataset_dir, "train", schema, 256, shuffle_seed=3)
    first, second = _epochs(dataset, 2)
    assert not np.array_equal(first[0], second[0]), "two epochs' first batches are the same"
    # every row exactly once per epoch
    assert sorted(np.concatenate(first)) == sorted(np.concatenate(second))
    assert len(set(np.concatenate(first))) == len(np.concatenate(first))
    # the first batches of two epochs share few rows
    overlap = len(set(first[0]) & set(second[0]))
    assert overlap < len(first[0]) // 2
    # reproducible for a seed, different for another
    again = _epochs(make_tf_dataset(dataset_dir, "train", schema, 256, shuffle_seed=3), 2)
    assert all(np.array_equal(a, b) for a, b in zip(first, again[0], strict=True))
    assert all(np.array_equal(a, b) for a, b in zip(second, again[1], strict=True))
    other = _epochs(make_tf_dataset(dataset_dir, "train", schema, 256, shuffle_seed=4), 1)
    assert not np.array_equal(other[0][0], first[0])
    # categorical values are permuted with their rows: each id keeps its plan
    plans = {}
    for batch in make_tf_dataset(dataset_dir, "train", schema, 256, shuffle_seed=None):
        plans.update(zip(batch["customer_id"].numpy(), batch["plan"].numpy(), strict=True))
    for batch in dataset.take(3):
        for cid, plan in zip(batch["customer_id"].numpy(), batch["plan"].numpy(),
                             strict=True):
            assert plans[cid] == plan


@pytest.mark.parametrize("cache", [False, True])
def test_training_batches_differ_between_epochs(churn, cache):
    """What Keras sees: the preprocessed batches, cached or streamed, repeated or not."""
    import tensorflow as tf

    dataset_dir, schema = churn
    features = [c for c in schema.features]

    def identity(inputs):  # the customer id as the "feature", to follow rows
        return tf.stack([tf.cast(inputs[_name(c)], tf.float32) for c in features
                         if c.type == "numeric"], axis=1)

    from gkeflow.components.train.inputs import input_names

    names = input_names(schema)

    def _name(column):
        return names[column.name]

    dataset = make_split_dataset(dataset_dir, "train", schema, 128, identity, seed=9,
                                 shuffle=True, cache=cache)
    epoch = [np.concatenate([x.numpy() for x, _ in dataset]) for _ in range(2)]
    assert epoch[0].shape == epoch[1].shape
    assert not np.array_equal(epoch[0][:128], epoch[1][:128])
    # the same rows, in another order
    assert np.array_equal(np.sort(epoch[0], axis=0), np.sort(epoch[1], axis=0), equal_nan=True)
    repeated = iter(dataset.repeat())
    steps = -(-len(epoch[0]) // 128)
    first = np.concatenate([next(repeated)[0].numpy() for _ in range(steps)])
    second = np.concatenate([next(repeated)[0].numpy() for _ in range(steps)])
    assert not np.array_equal(first[:128], second[:128]), "repeat() gives the same order"
