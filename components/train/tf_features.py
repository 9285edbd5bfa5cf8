"""The feature preprocessor in TensorFlow alone: raw feature dict -> one dense float vector,
for every Keras backend (the JAX backend cannot build Keras layers that call TensorFlow,
while tf.data and the exported serving function need TensorFlow).

Without bins it computes exactly what :func:`~gkeflow.components.train.models.
build_preprocessor` does (missing numerics -> the train mean, standardised, plus a
missing-indicator; categories one-hot with the out-of-vocabulary bucket first, in the
schema's column order); with ``stats.edges`` each number's block goes on with its
piecewise-linear encoding over its bins (:mod:`~gkeflow.components.train.models`). The
numeric columns are handled as one ``[rows, columns]`` tensor: a table of 2,000 numeric
columns costs a handful of ops, not a layer per column. Nothing here is trained.
"""

from __future__ import annotations

import numpy as np

from gkeflow.components.prepare.logic import Schema
from gkeflow.components.train.models import FeatureStats


def build_tf_preprocessor(schema: Schema, stats: FeatureStats, input_names: dict[str, str]):
    """Raw feature dict -> dense float32 vector, as a ``tf.Module`` (call it like a model).

    ``output_dim`` is the vector's length."""
    import tensorflow as tf

    class FeaturePreprocessor(tf.Module):
        def __init__(self):
            super().__init__(name="preprocessor")
            self.numeric = [input_names[c.name] for c in schema.features
                            if c.type == "numeric"]
            means = [stats.numeric[c.name][0] for c in schema.features if c.type == "numeric"]
            stds = [stats.numeric[c.name][1] for c in schema.features if c.type == "numeric"]
            self.means = tf.constant(np.asarray(means, np.float32).reshape(1, -1))
            self.stds = tf.constant(np.asarray([s if s > 0 else 1.0 for s in stds],
                                               np.float32).reshape(1, -1))
            lefts, widths = _bins([stats.edges.get(c.name, ()) for c in schema.features
                                   if c.type == "numeric"])
            self.bins = lefts.shape[2]
            self.lefts, self.widths = tf.constant(lefts), tf.constant(widths)
            self.categorical = []  # (input name, lookup table, width)
            self.tables = []  # tracked: the lookup tables are saved with the module
            for column in schema.features:
                if column.type == "numeric":
                    continue
                vocabulary = stats.vocabularies[column.name] or ["<none>"]
                table = tf.lookup.StaticHashTable(
                    tf.lookup.KeyValueTensorInitializer(
                        tf.constant(vocabulary, tf.string),
                        tf.range(1, len(vocabulary) + 1, dtype=tf.int64)),
                    default_value=0)  # index 0: out of vocabulary, as StringLookup
                self.tables.append(table)
                self.categorical.append((input_names[column.name], table,
                                         len(vocabulary) + 1))
            self.per_numeric = per_numeric = 2 + self.bins
            self.output_dim = (per_numeric * len(self.numeric)
                               + sum(w for _, _, w in self.categorical))
            self.order = tf.constant(_schema_order(schema, [w for _, _, w in self.categorical],
                                                   per_numeric), tf.int32)

        def __call__(self, features):
            blocks = []
            if self.numeric:
                x = tf.stack([_column(features[name], tf.float32) for name in self.numeric],
                             axis=1)
                missing = tf.math.is_nan(x)
                filled = tf.where(missing, self.means + tf.zeros_like(x), x)
                scaled = (filled - self.means) / self.stds
                # per column: the value, its missing-indicator, then its bins' encoding
                parts = [scaled[:, :, None], tf.cast(missing, tf.float32)[:, :, None]]
                if self.bins:
                    parts.append(tf.clip_by_value(
                        (filled[:, :, None] - self.lefts) / self.widths, 0.0, 1.0))
                blocks.append(tf.reshape(tf.concat(parts, axis=2),
                                         (-1, self.per_numeric * len(self.numeric))))
            for name, table, width in self.categorical:
                ids = table.lookup(_column(features[name], tf.string))
                blocks.append(tf.one_hot(ids, width, dtype=tf.float32))
            joined = tf.concat(blocks, axis=1) if len(blocks) > 1 else blocks[0]
            return tf.gather(joined, self.order, axis=1)

    return FeaturePreprocessor()


def _column(value, dtype):
    """One feature's values as a ``[rows]`` tensor of ``dtype``, adding no operation where
    it is one already (a serving signature's input): the ops of a signature with thousands
    of inputs make its SavedModel slow to write and to read."""
    import tensorflow as tf

    value = tf.convert_to_tensor(value)
    if value.shape.rank != 1:
        value = tf.reshape(value, (-1,))
    return value if value.dtype == dtype else tf.cast(value, dtype)


def _bins(edges: list[tuple[float, ...]]) -> tuple[np.ndarray, np.ndarray]:
    """Each numeric column's bins as (left edges, widths), ``[1, columns, bins]``; a column
    with fewer bins than the most has bins that encode 0 everywhere (left +inf)."""
    most = max((len(e) - 1 for e in edges if len(e) >= 2), default=0)
    lefts = np.full((1, len(edges), most), np.float32(3e38), np.float32)
    widths = np.ones((1, len(edges), most), np.float32)
    for index, found in enumerate(edges):
        found = np.asarray(found, np.float64)
        if found.size >= 2:
            lefts[0, index, :found.size - 1] = found[:-1]
            widths[0, index, :found.size - 1] = np.maximum(np.diff(found), 1e-12)
    return lefts, widths


def _schema_order(schema: Schema, widths: list[int], per_numeric: int = 2) -> np.ndarray:
    """Where each output column of the schema-ordered layout sits in the computed one
    (every numeric column's block first, then the categorical blocks)."""
    numeric = sum(1 for c in schema.features if c.type == "numeric")
    order, next_numeric, next_block = [], 0, per_numeric * numeric
    blocks = iter(widths)
    for column in schema.features:
        if column.type == "numeric":
            order += list(range(per_numeric * next_numeric, per_numeric * (next_numeric + 1)))
            next_numeric += 1
        else:
            width = next(blocks)
            order += list(range(next_block, next_block + width))
            next_block += width
    return np.asarray(order, np.int32)
