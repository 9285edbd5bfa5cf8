"""The regression head's pieces: the label's scaling (so the network learns a standardised
target and the exported model predicts in the label's own units), the loss, and what the
training history reports.

The scaling is ``z = (t(y) - mean) / std`` with ``t`` the identity, or ``log`` for skewed
positive targets; the exported serving function inverts it (``y = t⁻¹(z * std + mean)``),
so nothing outside training sees standardised or logged values.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

from gkeflow.components.prepare.finish import train_column_stats

LOSSES = ("auto", "mse", "huber")


class LabelTransformError(ValueError):
    """The label cannot take the transform asked for (log of values <= 0)."""


LABEL_TRANSFORMS = ("none", "log")


@dataclass(frozen=True)
class LabelScaling:
    """How the label is standardised for training and restored at serving."""

    mean: float
    std: float
    transform: str = "none"

    def as_dict(self) -> dict:
        return asdict(self)


def check_settings(loss: str, label_transform: str) -> None:
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {', '.join(LOSSES)}; got {loss!r}")
    if label_transform not in LABEL_TRANSFORMS:
        raise ValueError(f"label_transform must be one of {', '.join(LABEL_TRANSFORMS)}; "
                         f"got {label_transform!r}")


def label_scaling(dataset_dir: Path, schema, transform: str) -> LabelScaling:
    """The train split's label mean and standard deviation (of ``log(y)`` with the log
    transform): from prepare_data's statistics, or read from the split's shards.

    Raises:
        ValueError: the log transform of a label with values <= 0.
    """
    stats = train_column_stats(dataset_dir, schema.label)
    if transform == "none" and stats and stats.get("mean") is not None:
        return LabelScaling(float(stats["mean"]), _positive(stats.get("std")), "none")
    if transform == "log" and stats and stats.get("min") is not None and stats["min"] <= 0:
        raise LabelTransformError(f"label_transform log needs a positive label, but "
                                  f"{schema.label!r} goes down to {stats['min']:g} in the "
                                  "train split; use label_transform none")
    values = transformed_label(train_labels(dataset_dir, schema), schema.label, transform)
    if not values.size:
        raise ValueError(f"the train split has no value of the label {schema.label!r}")
    return LabelScaling(float(values.mean()), _positive(float(values.std())), transform)


def transformed_label(values, label: str, transform: str):
    """The label's values as the model learns them: ``log`` applied under that transform.

    Raises:
        LabelTransformError: the log transform of values <= 0.
    """
    if transform != "log":
        return values
    if values.size and values.min() <= 0:
        raise LabelTransformError(f"label_transform log needs a positive label, but "
                                  f"{label!r} goes down to {values.min():g}; use "
                                  "label_transform none")
    import numpy as np

    return np.log(values)


def _positive(std) -> float:
    return float(std) if std and math.isfinite(float(std)) and float(std) > 0 else 1.0


def train_labels(dataset_dir: Path, schema):
    """Every label value of the train split, as float64."""
    import numpy as np

    from gkeflow.components.prepare.reader import make_tf_dataset

    dataset = make_tf_dataset(Path(dataset_dir), "train", schema, 65536, columns=[schema.label])
    parts = [np.asarray(batch[schema.label], np.float64) for batch in dataset.as_numpy_iterator()]
    return np.concatenate(parts) if parts else np.zeros(0)


def scale_label(values, scaling: LabelScaling):
    """Label tensor -> the standardised target the network learns (float32)."""
    import tensorflow as tf

    values = tf.cast(values, tf.float32)
    if scaling.transform == "log":
        values = tf.math.log(values)
    return tf.reshape((values - scaling.mean) / scaling.std, (-1, 1))


def unscale_prediction(outputs, scaling: LabelScaling):
    """The network's standardised outputs -> predictions in the label's units."""
    import tensorflow as tf

    values = tf.cast(outputs, tf.float32) * scaling.std + scaling.mean
    return tf.math.exp(values) if scaling.transform == "log" else values


def loss_function(loss: str):
    """``mse`` (also ``auto``) or ``huber`` on the standardised target (delta 1 = one std)."""
    import keras

    return keras.losses.Huber(delta=1.0) if loss == "huber" else "mean_squared_error"


def history_metrics(final: dict, scaling: LabelScaling) -> dict[str, float]:
    """Train/eval loss and RMSE at the best epoch; RMSE in the label's units, or of
    ``log(y)`` (``*_rmse_log``) with the log transform."""
    suffix = "_rmse_log" if scaling.transform == "log" else "_rmse"
    metrics = {"train_loss": final.get("loss", float("nan")),
               f"train{suffix}": final.get("rmse", float("nan")) * scaling.std}
    if "val_loss" in final:
        metrics["eval_loss"] = final["val_loss"]
        metrics[f"eval{suffix}"] = final.get("val_rmse", float("nan")) * scaling.std
    return metrics


__all__ = ["LABEL_TRANSFORMS", "LOSSES", "LabelScaling", "LabelTransformError",
           "check_settings", "history_metrics", "label_scaling", "loss_function",
           "scale_label", "train_labels", "transformed_label", "unscale_prediction"]
