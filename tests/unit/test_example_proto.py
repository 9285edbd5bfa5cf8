"""The Example message built without TensorFlow reads every prepared block exactly as
TensorFlow's tf.train.Example does (numbers with NaN, words, indices, large values),
loading a split does not import TensorFlow, and a split read in batches that way holds what
tf.data reads."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest


def test_a_block_parses_the_same_as_tensorflow_s_example():
    import tensorflow as tf

    from gkeflow.components.prepare.example_proto import example_class
    from gkeflow.components.prepare.records import encode_block

    rng = np.random.default_rng(7)
    numeric = {"x": np.array([1.5, np.nan, -3.25e30, 0.0], np.float32),
               "y é": rng.normal(size=4).astype(np.float32)}
    categorical = {"c": ([b"red", "vert \u00e9".encode(), b""], np.array([2, 0, 1, 0])),
                   "big": ([b"a"], np.array([2**40, 0, 0, 0]))}
    record = encode_block(4, numeric, categorical)
    theirs = tf.train.Example.FromString(record).features.feature
    ours = example_class().FromString(record).features.feature
    assert set(ours) == set(theirs) and len(ours) == 7  # rows, 2 numeric, 2 x (words, codes)
    for key in theirs:
        assert ours[key].WhichOneof("kind") == theirs[key].WhichOneof("kind"), key
        assert np.array_equal(np.asarray(ours[key].float_list.value),
                              np.asarray(theirs[key].float_list.value), equal_nan=True), key
        assert list(ours[key].int64_list.value) == list(theirs[key].int64_list.value), key
        assert list(ours[key].bytes_list.value) == list(theirs[key].bytes_list.value), key


def test_loading_a_split_never_imports_tensorflow(prepared_penguins):
    dataset_dir, prepared = prepared_penguins
    schema = prepared.schema
    code = ("import sys; from pathlib import Path;"
            "from gkeflow.components.prepare.reader import load_split;"
            "from gkeflow.components.prepare.logic import Schema;"
            f"frame = load_split(Path({str(dataset_dir)!r}), 'train', "
            f"Schema.from_json({schema.to_json()!r}));"
            "print(len(frame), 'tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == [str(prepared.split_rows["train"]), "False"]


def _rows(batches) -> list[tuple]:
    rows = []
    for batch in batches:
        names = sorted(batch)
        for i in range(len(batch[names[0]])):
            rows.append(tuple(repr(batch[name][i]) for name in names))
    return rows


@pytest.mark.parametrize("batch_rows", [1, 37, 10_000])
def test_split_batches_without_tf_data_hold_what_tf_data_reads(prepared_penguins, tmp_path,
                                                                batch_rows):
    """Evaluation reads small test splits as protocol buffers: the same rows (a shard after
    another where tf.data interleaves them), the same types, the same batch sizes."""
    from gkeflow.components.prepare.logic import EMBEDDED_PENGUINS, prepare
    from gkeflow.components.prepare.reader import iter_split_batches, make_tf_dataset

    several = prepare(EMBEDDED_PENGUINS, tmp_path / "dataset", "species", rows_per_shard=40)
    for dataset_dir, schema in ((prepared_penguins[0], prepared_penguins[1].schema),
                                (tmp_path / "dataset", several.schema)):
        for split in ("train", "test"):
            ours = list(iter_split_batches(dataset_dir, split, schema, batch_rows))
            theirs = list(make_tf_dataset(dataset_dir, split, schema,
                                          batch_rows).as_numpy_iterator())
            sizes = [len(b[schema.label]) for b in ours]
            assert sizes == [len(b[schema.label]) for b in theirs]
            assert sum(sizes) > 0
            assert all(sizes[i] == batch_rows for i in range(len(sizes) - 1))
            for mine, tf_batch in zip(ours, theirs, strict=True):
                assert {k: v.dtype for k, v in mine.items()} == {
                    k: v.dtype for k, v in tf_batch.items()}
            assert sorted(_rows(ours)) == sorted(_rows(theirs))
    from gkeflow.components.prepare.records import split_files

    assert len(split_files(tmp_path / "dataset", "train")) > 1
