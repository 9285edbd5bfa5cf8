"""What the model takes: input names, raw columns as model inputs, label indices, and the
tf.data pipelines that stream a prepared split's shards into training batches."""

from __future__ import annotations

import json
import keyword
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd

from gkeflow.components.prepare.logic import Schema


def input_names(schema: Schema) -> dict[str, str]:
    """Column name -> the model input's name (letters, digits and '_'; unique)."""
    names: dict[str, str] = {}
    for column in schema.features:
        base = re.sub(r"[^A-Za-z0-9_]+", "_", column.name).strip("_").lower() or "feature"
        if not base[0].isalpha():
            base = f"f_{base}"
        if keyword.iskeyword(base):  # a serving signature's names are Python parameters
            base = f"{base}_"
        name, n = base, 2
        while name in names.values():
            name, n = f"{base}_{n}", n + 1
        names[column.name] = name
    return names


def column_to_input(values: pd.Series, kind: str) -> np.ndarray:
    """One raw column as the model takes it: float32 with NaN, or text with '' for missing."""
    if kind == "numeric":
        return pd.to_numeric(values, errors="coerce").to_numpy("float32")
    return values.astype(object).where(values.notna(), "").astype(str).to_numpy(object)


def to_model_inputs(frame: pd.DataFrame, schema: Schema) -> dict[str, np.ndarray]:
    """Raw feature arrays keyed by the model's input names."""
    names = input_names(schema)
    inputs: dict[str, np.ndarray] = {}
    for column in schema.features:
        values = frame[column.name] if column.name in frame else pd.Series([None] * len(frame))
        inputs[names[column.name]] = column_to_input(values, column.type)
    return inputs


def encode_labels(frame: pd.DataFrame, schema: Schema) -> np.ndarray:
    index = {label: i for i, label in enumerate(schema.label_vocabulary)}
    labels = frame[schema.label].astype(str)
    unknown = sorted(set(labels) - set(index))
    if unknown:
        raise ValueError(
            f"label values {unknown} are not in the schema's label vocabulary "
            f"{schema.label_vocabulary}"
        )
    return labels.map(index).to_numpy("int32")


def split_rows(dataset_dir: Path) -> dict[str, int]:
    """Rows per split, as prepare_data recorded them in ``stats.json``."""
    path = Path(dataset_dir) / "stats.json"
    if not path.exists():
        raise FileNotFoundError(f"no stats.json in {dataset_dir}; was it written by prepare_data?")
    return {k: int(v) for k, v in json.loads(path.read_text())["split_rows"].items()}


#: ``cache_dataset="auto"`` keeps preprocessed splits in memory up to this many bytes, or a
#: quarter of the machine's memory if that is less.
CACHE_BUDGET_BYTES = 2 * 2**30


#: Splits whose preprocessed rows take at most this many bytes are read whole, preprocessed
#: in one call and batched from memory (:func:`memory_split_dataset`), when the table is
#: wide enough for it to pay.
IN_MEMORY_BYTES = 256 * 2**20
#: Tables with more features than this are the wide ones: the tf.data graph that parses and
#: preprocesses a split costs about 2 ms per column (300 x 2,000: 3.8 s a split, read whole
#: 0.4 s), under half a second below this width, where the streamed pipeline is kept.
WIDE_COLUMNS = 256


def read_whole(rows: int, input_dim: int, columns: int) -> bool:
    """Whether a wide table's splits (``rows`` rows, ``input_dim`` preprocessed values a
    row, ``columns`` features) are read whole (:func:`memory_split_dataset`)."""
    return columns > WIDE_COLUMNS and rows * (input_dim + 1) * 4 <= IN_MEMORY_BYTES


def should_cache(setting: str, rows: int, input_dim: int) -> bool:
    """Cache the preprocessed train/eval batches when asked, or (``auto``) when they fit."""
    if setting != "auto":
        return setting == "on"
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = 4 * CACHE_BUDGET_BYTES
    return rows * (input_dim + 1) * 4 <= min(CACHE_BUDGET_BYTES, memory // 4)


def label_encoder(schema: Schema, label_scaling=None):
    """Label tensor -> what the model learns: the class index, or for regression the
    standardised value (:func:`~gkeflow.components.train.regression.scale_label`)."""
    if label_scaling is not None:
        from gkeflow.components.train.regression import scale_label

        return lambda values: scale_label(values, label_scaling)
    import tensorflow as tf

    return tf.keras.layers.StringLookup(vocabulary=schema.label_vocabulary,
                                        num_oov_indices=0, dtype="string")


def make_split_dataset(dataset_dir: Path, split: str, schema: Schema, batch_size: int,
                       preprocessor, seed: int | None = None, shuffle: bool = False,
                       cache: bool = False, drop_remainder: bool = False, workers: int = 1,
                       label_scaling=None):
    """Batches ``(dense features, label index)`` streamed from a prepared split's shards;
    for regression ``(dense features, standardised label)`` by ``label_scaling``
    (:class:`~gkeflow.components.train.regression.LabelScaling`).

    Reads the TFRecord column blocks in parallel (shards interleaved, blocks parsed in
    parallel), then preprocesses whole batches and prefetches. With ``shuffle`` every epoch
    sees the rows in a fresh order (seeded: shards and blocks shuffled, each block's rows
    permuted). ``cache`` keeps the preprocessed rows in memory after the first epoch (for
    splits that fit), in blocks that are shuffled every epoch after the cache, and whose
    rows are permuted within windows of several blocks, so cached batches change too.
    With several ``workers`` each reads its own shards when there are enough of them and
    rows are not shuffled, else every worker reads all and keeps its share of the batches.
    """
    import tensorflow as tf

    from gkeflow.components.prepare.reader import BLOCK_ROWS, make_tf_dataset, permute_rows

    names = input_names(schema)
    labels = label_encoder(schema, label_scaling)
    columns = [c.name for c in schema.features] + [schema.label]
    shuffle_cached = cache and shuffle
    dataset = make_tf_dataset(dataset_dir, split, schema,
                              BLOCK_ROWS if shuffle_cached else batch_size,
                              shuffle_seed=seed if shuffle and not cache else None,
                              columns=columns, drop_remainder=drop_remainder and not shuffle_cached)

    def to_model(batch):
        features = {names[c.name]: batch[c.name] for c in schema.features}
        return preprocessor(features), labels(batch[schema.label])

    dataset = dataset.map(to_model, num_parallel_calls=tf.data.AUTOTUNE,
                          deterministic=seed is not None)
    if cache:
        dataset = dataset.cache()
    if shuffle_cached:
        blocks = dataset.shuffle(1024, seed=seed, reshuffle_each_iteration=True)
        dataset = permute_rows(blocks, seed or 0).rebatch(batch_size,
                                                          drop_remainder=drop_remainder)
    options = tf.data.Options()
    options.deterministic = seed is not None
    if workers > 1:
        from gkeflow.components.prepare.records import split_files

        policy = tf.data.experimental.AutoShardPolicy
        files = split_files(dataset_dir, split)
        # tf.data cannot shard streamed gs:// shards by file (no file reader op to rewrite)
        enough = len(files) >= workers and not str(files[0] if files else "").startswith("gs://")
        # the per-epoch row shuffle draws its seeds from a non-file source, which FILE
        # sharding cannot split: shuffled splits are sharded by batch (DATA)
        options.experimental_distribute.auto_shard_policy = (
            policy.FILE if enough and not shuffle else policy.DATA)
    return dataset.with_options(options).prefetch(tf.data.AUTOTUNE)


def memory_split_dataset(dataset_dir: Path, split: str, schema: Schema, batch_size: int,
                         preprocessor, seed: int | None = None, shuffle: bool = False,
                         drop_remainder: bool = False, label_scaling=None):
    """Batches ``(dense features, label)`` as :func:`make_split_dataset` gives them, for a
    wide table's split small enough to hold (:func:`read_whole`): read whole as protocol
    buffers, preprocessed in one call, then batched from memory (with ``shuffle``, every row
    in a fresh seeded order each epoch). No tf.data graph parses or preprocesses the columns,
    which costs seconds per thousand columns and per split."""
    import tensorflow as tf

    from gkeflow.components.prepare.reader import load_split

    frame = load_split(dataset_dir, split, schema)
    features = {name: tf.constant(values) for name, values in
                to_model_inputs(frame, schema).items()}
    dense = preprocessor(features)
    labels = label_encoder(schema, label_scaling)(tf.constant(column_to_input(
        frame[schema.label], "numeric" if label_scaling is not None else "categorical")))
    dataset = tf.data.Dataset.from_tensor_slices((dense, labels))
    if shuffle:
        dataset = dataset.shuffle(len(frame), seed=seed, reshuffle_each_iteration=True)
    options = tf.data.Options()
    options.deterministic = seed is not None
    return dataset.batch(batch_size, drop_remainder=drop_remainder).with_options(
        options).prefetch(tf.data.AUTOTUNE)
