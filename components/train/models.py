"""Models: the feature preprocessor, the built-in tabular family, and bring-your-own models.

The *preprocessor* maps raw features (floats with NaN for missing, strings with "" for
missing) to one dense float vector; it has no trainable weights and runs in the tf.data
input pipeline during training, and inside the exported serving function. A number becomes
its standardised value and a missing-indicator and, with ``numeric_bins`` (default 16; up to
:data:`MAX_BINNED_COLUMNS` numeric columns), a piecewise-linear encoding over quantile bins
of the train split (Gorishniy et al., "On Embeddings for Numerical Features in Tabular Deep
Learning", 2022): bin ``t`` is 0 below it, 1 above it and the position inside it, so the
first layer sees thresholds as trees do. Categories are one-hot.

The *classifier* maps that vector to class probabilities. Built in: ``mlp`` and
``wide_deep``. A team's own model comes from a module exposing::

    def build_model(schema: Schema, hparams: dict) -> keras.Model

which receives ``hparams["input_dim"]`` (length of the dense vector),
``hparams["task"]`` and ``hparams["num_classes"]`` and must return a model taking one
input of shape ``(input_dim,)`` and returning ``(batch, num_classes)`` probabilities
(softmax) for classification, or ``(batch, 1)`` linear values for regression
(``num_classes`` is then 1; the label is standardised for training and restored at
serving, so the model needs no scaling of its own).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gkeflow.components.prepare.logic import Schema
from gkeflow.components.train.families import KERAS_MODEL_TYPES, MODEL_TYPES  # noqa: F401

#: Categories one-hot encoded per column when fitting on arrays (prepare_data keeps up to
#: 1000 in the schema).
MAX_CATEGORIES = 1000


@dataclass(frozen=True)
class FeatureStats:
    """What the preprocessor is fitted on: numeric means/stds and categorical vocabularies."""

    numeric: dict[str, tuple[float, float]]  # column -> (mean, std) over the train split
    vocabularies: dict[str, list[str]]  # column -> known values
    #: column -> bin edges (train-split quantiles) of its piecewise-linear encoding; empty:
    #: numbers are only standardised
    edges: dict[str, tuple[float, ...]] = field(default_factory=dict)


#: Up to this many numeric columns each also gets a piecewise-linear encoding; a wider
#: table's numbers are standardised only (its first layer would grow bins-fold).
MAX_BINNED_COLUMNS = 256


def binned_columns(schema: Schema) -> bool:
    """Whether the numeric columns of ``schema`` get a piecewise-linear encoding."""
    numeric = sum(1 for column in schema.features if column.type == "numeric")
    return 0 < numeric <= MAX_BINNED_COLUMNS


def training_stats(schema: Schema, dataset_dir: Path, bins: int) -> FeatureStats:
    """What train fits its preprocessor on: ``prepare_data``'s statistics (the train split
    itself when it recorded none) and, with ``bins``, each number's quantile bin edges."""
    from dataclasses import replace

    from gkeflow.components.prepare.reader import load_split
    from gkeflow.components.train.inputs import input_names, to_model_inputs

    stats = feature_stats_from_prepared(schema, dataset_dir)
    if stats is None:  # no statistics recorded: fit on the train split itself
        stats = feature_stats_from_arrays(
            schema, to_model_inputs(load_split(dataset_dir, "train", schema), schema),
            input_names(schema))
    if bins and binned_columns(schema):  # a piecewise-linear encoding too
        stats = replace(stats, edges=quantile_edges(schema, dataset_dir, bins))
    return stats


def quantile_edges(schema: Schema, dataset_dir: Path, bins: int,
                   max_rows: int = 50_000) -> dict[str, tuple[float, ...]]:
    """Each numeric column's bin edges: ``bins`` quantile bins of (at most ``max_rows`` of)
    the train split, repeated edges merged; a column with fewer than two distinct values
    gets none."""
    from gkeflow.components.prepare.reader import load_split

    frame = load_split(Path(dataset_dir), "train", schema, max_rows)
    edges = {}
    for column in schema.features:
        if column.type != "numeric":
            continue
        values = frame[column.name].to_numpy(np.float64)
        values = values[~np.isnan(values)]
        if values.size < 2:
            continue
        found = np.unique(np.quantile(values, np.linspace(0.0, 1.0, bins + 1)))
        if found.size >= 2:
            edges[column.name] = tuple(float(v) for v in found)
    return edges


def feature_stats_from_arrays(schema: Schema, train_inputs: dict[str, np.ndarray],
                              input_names: dict[str, str]) -> FeatureStats:
    """Fit on raw arrays (keyed by input name) of the train split."""
    numeric, vocabularies = {}, {}
    for column in schema.features:
        values = train_inputs[input_names[column.name]]
        if column.type == "numeric":
            present = values[~np.isnan(values)]
            numeric[column.name] = ((float(present.mean()), float(present.std()))
                                    if present.size else (0.0, 1.0))
        else:
            observed, counts = np.unique(values[values != ""].astype(str), return_counts=True)
            top = observed[np.argsort(-counts, kind="stable")][:MAX_CATEGORIES]
            vocabularies[column.name] = sorted(top.tolist())
    return FeatureStats(numeric, vocabularies)


def feature_stats_from_prepared(schema: Schema, dataset_dir: Path) -> FeatureStats | None:
    """Fit on what prepare_data recorded: ``stats.json`` (train split) and the schema.

    None when the dataset has no statistics for the train split.
    """
    import json

    path = Path(dataset_dir) / "stats.json"
    if not path.exists():
        return None
    train = json.loads(path.read_text()).get("splits", {}).get("train", {}).get("columns", {})
    numeric, vocabularies = {}, {}
    for column in schema.features:
        stats = train.get(column.name, {})
        if column.type == "numeric":
            if "mean" not in stats:
                return None
            if stats["mean"] is None:  # no value in the train split: as fitting on arrays
                numeric[column.name] = (0.0, 1.0)
                continue
            numeric[column.name] = (float(stats["mean"]), float(stats.get("std") or 1.0))
        else:
            vocabularies[column.name] = list(column.vocabulary)
    return FeatureStats(numeric, vocabularies)


def build_preprocessor(schema: Schema, stats: FeatureStats, input_names: dict[str, str]):
    """Raw feature dict -> dense float32 vector, fitted on the train split's statistics.

    Its own layers are named with a capital letter (``Norm_x``, ``OneHot_x``...): input
    names are lower case (:func:`~gkeflow.components.train.inputs.input_names`), so no
    column can take a layer's name."""
    import keras
    import tensorflow as tf

    class ImputeNormalize(keras.layers.Layer):
        """Missing values -> the train mean, standardise, append a missing-indicator."""

        def __init__(self, mean: float, std: float, **kwargs):
            super().__init__(dtype="float32", **kwargs)
            self.mean = float(mean)
            self.std = float(std) if std > 0 else 1.0

        def call(self, x):
            x = tf.cast(tf.reshape(x, (-1, 1)), tf.float32)
            missing = tf.math.is_nan(x)
            filled = tf.where(missing, tf.constant(self.mean, tf.float32), x)
            return tf.concat(
                [(filled - self.mean) / self.std, tf.cast(missing, tf.float32)], 1
            )

    inputs, encoded = {}, []
    for column in schema.features:
        name = input_names[column.name]
        if column.type == "numeric":
            inp = keras.Input(shape=(), dtype="float32", name=name)
            mean, std = stats.numeric[column.name]
            encoded.append(ImputeNormalize(mean, std, name=f"Norm_{name}")(inp))
        else:
            inp = keras.Input(shape=(), dtype="string", name=name)
            lookup = keras.layers.StringLookup(
                vocabulary=stats.vocabularies[column.name] or ["<none>"],
                num_oov_indices=1,
                output_mode="one_hot",
                dtype="float32",
                name=f"OneHot_{name}",
            )
            encoded.append(lookup(keras.layers.Reshape((1,), name=f"Reshape_{name}")(inp)))
        inputs[name] = inp
    x = keras.layers.Concatenate(name="Features", dtype="float32")(encoded) \
        if len(encoded) > 1 else encoded[0]
    return keras.Model(inputs=inputs, outputs=x, name="preprocessor")


def build_builtin(model_type: str, input_dim: int, num_classes: int,
                  hidden_units: tuple[int, ...], dropout: float, seed: int,
                  regression: bool = False):
    """``mlp``: dense layers; ``wide_deep``: a linear (wide) part plus an MLP (deep) part.
    Class probabilities (softmax), or with ``regression`` one linear output (the
    standardised label; float32 under mixed precision too)."""
    import keras

    if model_type not in KERAS_MODEL_TYPES:
        raise ValueError(f"unknown Keras model_type {model_type!r}; valid: "
                         f"{', '.join(KERAS_MODEL_TYPES)}")
    features = keras.Input(shape=(input_dim,), name="features")
    x = features
    for i, units in enumerate(hidden_units):
        x = keras.layers.Dense(units, activation="relu", name=f"dense_{i}")(x)
        if dropout:
            x = keras.layers.Dropout(dropout, seed=seed + i, name=f"dropout_{i}")(x)
    logits = keras.layers.Dense(num_classes, name="deep_logits")(x)
    if model_type == "wide_deep":
        wide = keras.layers.Dense(num_classes, name="wide_logits")(features)
        logits = keras.layers.Add(name="logits")([logits, wide])
    if regression:
        value = keras.layers.Activation("linear", dtype="float32", name="value")(logits)
        return keras.Model(features, value, name=f"gkeflow_{model_type}_regressor")
    probabilities = keras.layers.Activation("softmax", dtype="float32",
                                            name="probabilities")(logits)
    return keras.Model(features, probabilities, name=f"gkeflow_{model_type}")


def load_user_builder(module: str):
    """``build_model`` from a ``.py`` file path or an importable module name."""
    if not module:
        raise ValueError("no user module given")
    if module.endswith(".py"):
        path = Path(module)
        if not path.is_file():
            raise FileNotFoundError(f"user model module not found: {path}")
        spec = importlib.util.spec_from_file_location(f"gkeflow_user_model_{path.stem}", path)
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = loaded
        spec.loader.exec_module(loaded)
    else:
        loaded = importlib.import_module(module)
    builder = getattr(loaded, "build_model", None)
    if not callable(builder):
        raise AttributeError(
            f"user model module {module!r} has no build_model(schema, hparams) function"
        )
    return builder


def build_user_model(module: str, schema: Schema, hparams: dict):
    """Call the user's ``build_model`` and check the model's input and output shapes."""
    model = load_user_builder(module)(schema, dict(hparams))
    if not hasattr(model, "fit") or not hasattr(model, "inputs"):
        raise TypeError(f"build_model in {module!r} must return a keras.Model; "
                        f"got {type(model).__name__}")
    if len(model.inputs) != 1 or model.inputs[0].shape[-1] != hparams["input_dim"]:
        shapes = [tuple(i.shape) for i in model.inputs]
        raise ValueError(
            f"the model from {module!r} must take one input of shape (None, "
            f"{hparams['input_dim']}); it takes {shapes}"
        )
    if model.outputs[0].shape[-1] != hparams["num_classes"]:
        what = ("one value per row (regression)" if hparams.get("task") == "regression"
                else f"{hparams['num_classes']} class probabilities")
        raise ValueError(
            f"the model from {module!r} must output {what}; it outputs shape "
            f"{tuple(model.outputs[0].shape)}"
        )
    return model
