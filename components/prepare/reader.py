"""Reading a prepared dataset back with TensorFlow: the training and evaluation input
pipeline (:func:`make_tf_dataset`) and a whole split as a DataFrame (:func:`load_split`).

Apart from :mod:`~gkeflow.components.prepare.records` (the format, written without
TensorFlow) so that preparing data never imports TensorFlow: the slim image's steps
(prepare, fingerprint, the launchers) use the writer, only the CPU and GPU images' steps
read through here.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from gkeflow.components.prepare.records import (
    BLOCK_ROWS,
    ROWS_FEATURE,
    dictionary_key,
    split_files,
    value_key,
)
from gkeflow.components.prepare.schema import Schema
from gkeflow.components.prepare.shard_store import gcs_records, is_gcs, process_client

#: :func:`permute_rows` (the per-epoch shuffle of cached, preprocessed rows) permutes rows
#: within windows of this many blocks, so a batch mixes rows of several blocks.
SHUFFLE_WINDOW_BLOCKS = 4


def _epoch_seeds(seed: int):
    """Pairs of int64 seeds, a different sequence every time the dataset is iterated (each
    epoch) and the same sequences for the same ``seed``."""
    import tensorflow as tf

    return tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).batch(2)


def permute_rows(dataset, seed: int, window_rows: int = SHUFFLE_WINDOW_BLOCKS * BLOCK_ROWS):
    """Rows of a dataset of row-major tensors (tuples or dicts sharing their first
    dimension) regrouped into windows of ``window_rows`` and permuted within each window,
    by a permutation that changes every epoch (seeded, reproducible)."""
    import tensorflow as tf

    def permute(window, pair):
        first = tf.nest.flatten(window)[0]
        order = tf.random.experimental.stateless_shuffle(tf.range(tf.shape(first)[0]), pair)
        return tf.nest.map_structure(lambda t: tf.gather(t, order), window)

    windows = dataset.rebatch(window_rows)
    return tf.data.Dataset.zip(windows, _epoch_seeds(seed)).map(
        permute, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

def wanted_columns(schema, columns: Sequence[str] | None):
    """The schema's columns named in ``columns`` (all when None), in schema order."""
    unknown = sorted(set(columns or ()) - {c.name for c in schema.columns})
    if unknown:
        raise ValueError(f"columns {unknown} are not in the schema")
    return [c for c in schema.columns if columns is None or c.name in columns]


def make_tf_dataset(
    dataset_dir: Path,
    split: str,
    schema,
    batch_size: int,
    shuffle_seed: int | None = None,
    columns: Sequence[str] | None = None,
    drop_remainder: bool = False,
):
    """A ``tf.data.Dataset`` of batches ``{column: tensor}`` over one prepared split.

    Numeric columns are float32 (NaN = missing), categorical ones strings ("" = missing).
    Rows are stored in a pseudo-random order within each block (prepare orders them by
    their row hash), so a sorted input file does not give sorted batches. With
    ``shuffle_seed`` the rows come in a fresh order at every pass (epoch), deterministic
    for a given seed: shards and blocks are shuffled, and the rows of each block are
    permuted by a permutation drawn for that block and pass. The permutation moves numbers
    and dictionary codes, not strings, so it costs one integer or float gather per column;
    the strings are looked up once, as without shuffling. Without a seed, blocks come in
    file order.

    Args:
        dataset_dir: The ``dataset`` directory written by prepare.
        split: "train", "eval" or "test".
        schema: The dataset's :class:`~gkeflow.components.prepare.logic.Schema`.
        batch_size: Rows per batch.
        shuffle_seed: Seed for shuffling; None keeps the order.
        columns: Columns to read; default all columns of the schema.
    """
    import tensorflow as tf

    files = split_files(dataset_dir, split)
    wanted = wanted_columns(schema, columns)
    spec = {ROWS_FEATURE: tf.io.FixedLenFeature([1], tf.int64)}
    # RaggedFeature without partitions parses a list straight into a dense 1-D tensor
    # (VarLenFeature would build a SparseTensor's indices first)
    for column in wanted:
        if column.type == "numeric":
            spec[value_key(column.name)] = tf.io.RaggedFeature(tf.float32,
                                                               row_splits_dtype=tf.int64)
        else:
            spec[value_key(column.name)] = tf.io.RaggedFeature(tf.int64,
                                                               row_splits_dtype=tf.int64)
            spec[dictionary_key(column.name)] = tf.io.RaggedFeature(
                tf.string, row_splits_dtype=tf.int64)

    def parse_block(record):
        parsed = tf.io.parse_single_example(record, spec)
        block = {}
        for column in wanted:
            values = parsed[value_key(column.name)]
            if column.type != "numeric":
                values = tf.gather(parsed[dictionary_key(column.name)], values)
            block[column.name] = values
        return block

    def parse_permuted(record, pair):
        """A block with its rows in a fresh order: numbers and dictionary codes are
        permuted, then the strings looked up once (as without shuffling)."""
        parsed = tf.io.parse_single_example(record, spec)
        rows = tf.shape(parsed[value_key(wanted[0].name)])[0]
        order = tf.random.experimental.stateless_shuffle(tf.range(rows), pair)
        block = {}
        for column in wanted:
            values = tf.gather(parsed[value_key(column.name)], order)
            if column.type != "numeric":
                values = tf.gather(parsed[dictionary_key(column.name)], values)
            block[column.name] = values
        return block

    if not files:
        signature = {
            c.name: tf.TensorSpec([None], tf.float32 if c.type == "numeric" else tf.string)
            for c in wanted
        }
        return tf.data.Dataset.from_generator(lambda: iter(()), output_signature=signature)
    names = tf.data.Dataset.from_tensor_slices(files)
    if shuffle_seed is not None:
        names = names.shuffle(len(files), seed=shuffle_seed, reshuffle_each_iteration=True)
    # shards are decompressed in parallel: GZIP inflation is the costliest part of reading
    records = names.interleave(
        record_dataset_fn(files),
        cycle_length=min(len(files), max(2, os.cpu_count() or 2)),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    if shuffle_seed is None:
        blocks = records.map(parse_block, num_parallel_calls=tf.data.AUTOTUNE,
                             deterministic=True)
    else:
        records = records.shuffle(256, seed=shuffle_seed, reshuffle_each_iteration=True)
        blocks = tf.data.Dataset.zip(records, _epoch_seeds(shuffle_seed)).map(
            parse_permuted, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return blocks.rebatch(batch_size, drop_remainder=drop_remainder).prefetch(tf.data.AUTOTUNE)


def record_dataset_fn(files: Sequence[str]):
    """A function ``file tensor -> tf.data.Dataset`` of the raw records of one shard, for
    ``Dataset.interleave``: TFRecordDataset for local shards, a streamed Cloud Storage
    download for ``gs://`` ones (all shards of a split live in one place)."""
    import tensorflow as tf

    if files and is_gcs(str(files[0])):
        def from_gcs(uri):
            return tf.data.Dataset.from_generator(
                lambda u: gcs_records(u.decode("utf-8"), process_client()),
                args=(uri,),
                output_signature=tf.TensorSpec([], tf.string),
            )
        return from_gcs
    return lambda f: tf.data.TFRecordDataset(f, compression_type="GZIP", buffer_size=1 << 20)


def split_records(dataset_dir: Path, split: str):
    """The raw records (blocks) of one split, shard after shard in file order, checksums
    verified; local shards and ``gs://`` ones alike."""
    from gkeflow.components.prepare.shard_store import iter_records

    for name in split_files(dataset_dir, split):
        if is_gcs(str(name)):
            yield from gcs_records(str(name), process_client())
            continue
        with open(name, "rb") as handle:
            yield from iter_records(iter(lambda h=handle: h.read(1 << 20), b""), str(name))


def _block_columns(example, record: bytes, columns) -> dict[str, np.ndarray]:
    """One block's columns as stored: numbers float32 (NaN missing), categories bytes
    (b"" missing), parsed as a protocol buffer without TensorFlow."""
    features = example.FromString(record).features.feature
    block = {}
    for column in columns:
        if column.type == "numeric":
            block[column.name] = np.asarray(features[value_key(column.name)].float_list.value,
                                            np.float32)
        else:
            codes = np.asarray(features[value_key(column.name)].int64_list.value, np.int64)
            words = np.asarray(features[dictionary_key(column.name)].bytes_list.value,
                               dtype=object)
            block[column.name] = words[codes] if codes.size else np.zeros(0, object)
    return block


def iter_split_batches(dataset_dir: Path, split: str, schema: Schema, batch_rows: int,
                       columns: Sequence[str] | None = None):
    """Batches ``{column: values}`` of one split, shard after shard in file order, in the
    types :func:`make_tf_dataset` gives (numbers float32 with NaN, categories bytes with
    b""; that one interleaves the shards), read block by block as protocol buffers: no
    tf.data graph to build, which for a split of a few thousand rows costs more than
    reading it (seconds per thousand columns). Holds one batch and one block at a time."""
    from gkeflow.components.prepare.example_proto import example_class

    wanted = wanted_columns(schema, columns)
    example = example_class()
    pending: list[dict[str, np.ndarray]] = []
    held = 0
    for record in split_records(dataset_dir, split):
        block = _block_columns(example, record, wanted)
        pending.append(block)
        held += len(block[wanted[0].name]) if wanted else 0
        if held < batch_rows:
            continue
        joined = {c.name: np.concatenate([b[c.name] for b in pending]) for c in wanted}
        start = 0
        while held - start >= batch_rows:
            yield {name: values[start:start + batch_rows] for name, values in joined.items()}
            start += batch_rows
        held -= start
        pending = [{name: values[start:] for name, values in joined.items()}] if held else []
    if held:
        yield {c.name: np.concatenate([b[c.name] for b in pending]) for c in wanted}


def load_split(dataset_dir: Path, split: str, schema: Schema,
               max_rows: int | None = None) -> pd.DataFrame:
    """Read one split into a DataFrame: numeric columns float64 (NaN for missing),
    categorical columns text (None for missing), in the schema's column order; with
    ``max_rows``, its first blocks up to that many rows (a sample for statistics).

    Each block is one ``tf.train.Example`` parsed as a protocol buffer, with no tf.data
    graph (building one costs seconds per thousand columns, reading the rows here costs
    milliseconds) and without importing TensorFlow (:mod:`.example_proto`)."""
    from gkeflow.components.prepare.example_proto import example_class

    example = example_class()
    columns: dict[str, list[np.ndarray]] = {c.name: [] for c in schema.columns}
    read = 0
    for record in split_records(dataset_dir, split):
        if max_rows is not None and read >= max_rows:
            break
        block = _block_columns(example, record, schema.columns)
        for name, values in block.items():
            columns[name].append(values)
        if schema.columns:
            read += len(columns[schema.columns[0].name][-1])
    data = {}
    for column in schema.columns:
        parts = columns[column.name]
        if column.type == "numeric":
            values = np.concatenate(parts)[:max_rows] if parts else np.zeros(0, np.float32)
            # float32 -> its shortest decimal -> float64: 39.1 reads back as 39.1
            data[column.name] = values.astype(str).astype(np.float64)
        else:
            values = np.concatenate(parts)[:max_rows] if parts else np.zeros(0, object)
            data[column.name] = pd.Series(
                [v.decode("utf-8") if v else None for v in values], dtype=object
            )
    return pd.DataFrame(data)
