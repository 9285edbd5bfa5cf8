"""The feature preprocessor in TensorFlow alone, for models trained on another Keras backend.

It computes exactly what :func:`~gkeflow.components.train.models.build_preprocessor` does
(missing numerics -> the train mean, standardised, plus a missing-indicator; categories
one-hot with the out-of-vocabulary bucket first), but as a ``tf.Module``: the JAX backend
cannot build Keras layers that call TensorFlow, while tf.data and the exported serving
function need TensorFlow. Nothing here is trained.
"""

from __future__ import annotations

from gkeflow.components.prepare.logic import Schema
from gkeflow.components.train.models import FeatureStats


def build_tf_preprocessor(schema: Schema, stats: FeatureStats, input_names: dict[str, str]):
    """Raw feature dict -> dense float32 vector, as a ``tf.Module`` (call it like a model).

    ``output_dim`` is the vector's length."""
    import tensorflow as tf

    class FeaturePreprocessor(tf.Module):
        def __init__(self):
            super().__init__(name="preprocessor")
            self.output_dim = 0
            self._steps = []  # (input name, kind, mean, std | lookup table, width)
            self.tables = []  # tracked: the lookup tables are saved with the module
            for column in schema.features:
                name = input_names[column.name]
                if column.type == "numeric":
                    mean, std = stats.numeric[column.name]
                    self._steps.append((name, "numeric", float(mean),
                                        float(std) if std > 0 else 1.0))
                    self.output_dim += 2
                    continue
                vocabulary = stats.vocabularies[column.name] or ["<none>"]
                table = tf.lookup.StaticHashTable(
                    tf.lookup.KeyValueTensorInitializer(
                        tf.constant(vocabulary, tf.string),
                        tf.range(1, len(vocabulary) + 1, dtype=tf.int64)),
                    default_value=0)  # index 0: out of vocabulary, as StringLookup
                self.tables.append(table)
                self._steps.append((name, "categorical", table, len(vocabulary) + 1))
                self.output_dim += len(vocabulary) + 1

        def __call__(self, features):
            encoded = []
            for step in self._steps:
                values = features[step[0]]
                if step[1] == "numeric":
                    _, _, mean, std = step
                    x = tf.cast(tf.reshape(values, (-1, 1)), tf.float32)
                    missing = tf.math.is_nan(x)
                    filled = tf.where(missing, tf.constant(mean, tf.float32), x)
                    encoded += [(filled - mean) / std, tf.cast(missing, tf.float32)]
                else:
                    _, _, table, width = step
                    ids = table.lookup(tf.reshape(tf.cast(values, tf.string), (-1,)))
                    encoded.append(tf.one_hot(ids, width, dtype=tf.float32))
            return tf.concat(encoded, axis=1) if len(encoded) > 1 else encoded[0]

    return FeaturePreprocessor()
