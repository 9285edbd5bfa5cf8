"""A gradient-boosted trees model as a SavedModel taking raw feature values: the same
``serve`` and ``serving_default`` signatures and ``gkeflow_model.json`` as a Keras model, so
evaluation, batch prediction, the model servers and every registry read it unchanged.

Inside the signature: categorical strings become their vocabulary index (a lookup table;
unknown or "" is missing), numbers pass as they are (NaN is missing), the trees are walked
(:func:`~gkeflow.components.train.trees.tree_margin`) and the margin becomes class
probabilities (sigmoid for two classes, softmax for more) or the label's value (``exp`` of
it under ``label_transform: log``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from gkeflow.components._atomic import publish_dir
from gkeflow.components.prepare.logic import Schema
from gkeflow.components.train.exported import (
    MODEL_METADATA_FILE,
    SERVING_SIGNATURE,
    raw_signature,
    schema_features,
)
from gkeflow.components.train.inputs import input_names
from gkeflow.components.train.trees import Forest, measure_intercept, read_forest, tree_margin

_ARRAYS = ("feature", "threshold", "left", "right", "default_left", "leaf", "category_row",
           "category_bits", "roots", "group", "intercept")


def build_tree_module(forest: Forest, schema: Schema, transform: str = "none"):
    """A ``tf.Module`` whose ``serve`` takes raw features and returns probabilities
    ``[rows, classes]`` or values ``[rows, 1]``."""
    import tensorflow as tf

    names = input_names(schema)
    signature = raw_signature(schema_features(schema))
    module = tf.Module(name="gkeflow_gbdt")
    module.forest_arrays = {name: tf.Variable(getattr(forest, name), trainable=False,
                                              name=name) for name in _ARRAYS}
    tables = {}
    for column in schema.features:
        if column.type != "numeric" and column.vocabulary:
            tables[column.name] = tf.lookup.StaticHashTable(
                tf.lookup.KeyValueTensorInitializer(
                    tf.constant(column.vocabulary, tf.string),
                    tf.range(len(column.vocabulary), dtype=tf.float32)),
                default_value=float("nan"))
    module.tables = list(tables.values())
    regression, classes = schema.regression, len(schema.label_vocabulary)

    @tf.function(input_signature=[signature])
    def serve(features):
        columns = []
        for column in schema.features:
            value = features[names[column.name]]
            if column.type == "numeric":
                columns.append(tf.cast(value, tf.float32))
            elif column.name in tables:
                columns.append(tables[column.name].lookup(value))
            else:  # no value seen in training: always missing
                columns.append(tf.fill(tf.shape(value), float("nan")))
        matrix = tf.stack(columns, axis=1)
        walked = Forest(**{**{k: module.forest_arrays[k] for k in _ARRAYS},
                           "depth": forest.depth, "groups": forest.groups})
        margin = tree_margin(walked, matrix, tf)
        if regression:
            return tf.math.exp(margin) if transform == "log" else margin
        if classes <= 2:
            positive = tf.math.sigmoid(margin)
            return tf.concat([1.0 - positive, positive], axis=1)
        return tf.nn.softmax(margin, axis=1)

    module.serve = serve
    return module


def export_trees(model_dir: Path, booster, matrix, schema: Schema, metadata: dict,
                 transform: str = "none") -> None:
    """Write the booster's trees as a raw-feature SavedModel with its metadata into
    ``model_dir``, which appears whole or not at all; ``matrix`` (a DMatrix of training
    rows) fixes the booster's intercept."""
    import tensorflow as tf

    forest = read_forest(booster, measure_intercept(booster, _head(matrix)))
    module = build_tree_module(forest, schema, transform)
    trees = {"trees": forest.trees, "depth": forest.depth, "nodes": int(forest.leaf.size)}
    with publish_dir(model_dir) as scratch:
        tf.saved_model.save(module, str(scratch), signatures={
            SERVING_SIGNATURE: module.serve, "serving_default": module.serve})
        (scratch / MODEL_METADATA_FILE).write_text(
            json.dumps({**metadata, "trees": trees}, indent=2))


def _head(matrix, rows: int = 256):
    """The first rows of a DMatrix (enough to read the intercept)."""
    count = matrix.num_row()
    return matrix.slice(np.arange(min(rows, count))) if count > rows else matrix
