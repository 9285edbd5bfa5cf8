"""A regularised linear model (``model_type: linear``): ridge regression or multinomial
logistic regression on the same dense features as the Keras models (missing numbers -> the
train mean plus a missing-indicator, standardised; categories one-hot with an unknown
bucket), exported as the same raw-feature SavedModel.

The L2 strength is chosen on the eval split from a fixed grid (the one with the lowest eval
loss: log loss, or RMSE of the standardised label); with no eval rows the middle of the
grid is used. Ridge is solved in closed form, logistic regression by L-BFGS (SciPy), warm
started from the next stronger penalty, so a fit takes seconds on tables of 100,000 rows.
Small, nearly linear tables are common, and there a linear model often beats every other.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from gkeflow.components.prepare.logic import Schema
from gkeflow.components.train.params import TrainParams, TrainResult

#: L2 strengths tried, strongest first (per example: the penalty is ``l2/2 * |W|^2``).
L2_GRID = (1.0, 0.3, 0.1, 0.03, 0.01, 0.003, 0.001, 0.0001)


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=1, keepdims=True)


def fit_logistic(x: np.ndarray, y: np.ndarray, classes: int, l2: float,
                 start: np.ndarray | None = None) -> np.ndarray:
    """Weights ``[features + 1, classes]`` (the last row is the bias, not penalised)."""
    from scipy.optimize import minimize

    rows, width = x.shape
    design = np.hstack([x, np.ones((rows, 1))])
    onehot = np.zeros((rows, classes))
    onehot[np.arange(rows), y] = 1.0
    penalty = np.ones((width + 1, 1))
    penalty[-1] = 0.0

    def loss(flat):
        weights = flat.reshape(width + 1, classes)
        logits = design @ weights
        shifted = logits - logits.max(axis=1, keepdims=True)
        log_norm = np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        log_p = shifted - log_norm
        value = -np.mean(np.sum(onehot * log_p, axis=1)) + 0.5 * l2 * np.sum(
            penalty * weights ** 2)
        gradient = design.T @ (np.exp(log_p) - onehot) / rows + l2 * penalty * weights
        return value, gradient.reshape(-1)

    initial = np.zeros((width + 1) * classes) if start is None else start.reshape(-1)
    found = minimize(loss, initial, jac=True, method="L-BFGS-B",
                     options={"maxiter": 500, "gtol": 1e-6})
    return found.x.reshape(width + 1, classes)


def fit_ridge(x: np.ndarray, z: np.ndarray, l2: float) -> np.ndarray:
    """Weights ``[features + 1, 1]`` minimising ``mean((Xw + b - z)^2)/2 + l2/2 |w|^2``."""
    from scipy.linalg import solve

    rows, width = x.shape
    design = np.hstack([x, np.ones((rows, 1))])
    gram = design.T @ design / rows
    gram[np.arange(width), np.arange(width)] += l2
    gram[-1, -1] += 1e-12
    return solve(gram, design.T @ z / rows, assume_a="pos").reshape(width + 1, 1)


def _scores(x: np.ndarray, weights: np.ndarray) -> np.ndarray:
    return x @ weights[:-1] + weights[-1]


def _log_loss(probabilities: np.ndarray, y: np.ndarray) -> float:
    return float(-np.mean(np.log(np.clip(probabilities[np.arange(y.size), y], 1e-15, 1.0))))


def choose_fit(train: tuple, evaluation: tuple | None, regression: bool, classes: int,
               echo=print):
    """The weights of the grid's best L2 strength on the eval split, that strength, and each
    strength's eval loss."""
    x, y = train
    tried, best, weights = {}, None, None
    grid = L2_GRID if evaluation is not None else (L2_GRID[len(L2_GRID) // 2],)
    for l2 in grid:
        weights = (fit_ridge(x, y, l2) if regression
                   else fit_logistic(x, y, classes, l2, start=weights))
        if evaluation is None:
            return weights, l2, tried
        ex, ey = evaluation
        scores = _scores(ex, weights)
        value = (float(np.sqrt(np.mean((scores.reshape(-1) - ey) ** 2))) if regression
                 else _log_loss(softmax(scores), ey))
        tried[l2] = value
        if best is None or value < best[0]:
            best = (value, l2, weights)
    echo("linear: eval " + ("RMSE (standardised)" if regression else "log loss")
         + " by L2 strength: " + ", ".join(f"{k:g}: {v:.4f}" for k, v in tried.items())
         + f"; chosen {best[1]:g}")
    return best[2], best[1], tried


def train_linear(dataset_dir: Path, schema: Schema, model_dir: Path, params: TrainParams,
                 checkpoint_dir=None, tensorboard_dir=None, data_uri: str = "",
                 live=None) -> TrainResult:
    """Fit the linear model on the train split (L2 chosen on eval) and export the
    raw-feature SavedModel; arguments as :func:`~gkeflow.components.train.logic.train`
    (nothing to checkpoint: a fit takes seconds)."""
    from gkeflow.components.prepare.reader import load_split
    from gkeflow.components.train import regression as reg
    from gkeflow.components.train.gbdt import label_values
    from gkeflow.components.train.inputs import input_names, split_rows, to_model_inputs
    from gkeflow.components.train.models import (
        feature_stats_from_arrays,
        feature_stats_from_prepared,
    )
    from gkeflow.components.train.tf_features import build_tf_preprocessor

    rows = split_rows(dataset_dir)
    if not rows.get("train"):
        raise ValueError(f"the train split in {dataset_dir} has no rows")
    names = input_names(schema)
    train_frame = load_split(dataset_dir, "train", schema)
    stats = feature_stats_from_prepared(schema, dataset_dir) or feature_stats_from_arrays(
        schema, to_model_inputs(train_frame, schema), names)
    preprocessor = build_tf_preprocessor(schema, stats, names)
    scaling = (reg.label_scaling(dataset_dir, schema, params.label_transform)
               if schema.regression else None)
    print(f"model: linear ({'ridge' if schema.regression else 'logistic'} regression) on "
          f"{preprocessor.output_dim} encoded features, {rows['train']} train rows", flush=True)

    def split(frame):
        x = preprocessor(to_model_inputs(frame, schema)).numpy().astype(np.float64)
        y = label_values(frame, schema, params.label_transform)
        if scaling is not None:
            y = (y - scaling.mean) / scaling.std
        return x, y

    started = time.perf_counter()
    train = split(train_frame)
    evaluation = split(load_split(dataset_dir, "eval", schema)) if rows.get("eval") else None
    classes = 1 if schema.regression else len(schema.label_vocabulary)
    weights, l2, tried = choose_fit(train, evaluation, schema.regression, classes)
    elapsed = time.perf_counter() - started
    metrics = {}
    for name, data in (("train", train), ("eval", evaluation)):
        if data is None:
            continue
        scores = _scores(data[0], weights)
        if schema.regression:
            rmse = float(np.sqrt(np.mean((scores.reshape(-1) - data[1]) ** 2)))
            suffix = "_rmse_log" if params.label_transform == "log" else "_rmse"
            metrics[f"{name}_loss"] = rmse ** 2
            metrics[f"{name}{suffix}"] = rmse * scaling.std
        else:
            probabilities = softmax(scores)
            metrics[f"{name}_loss"] = _log_loss(probabilities, data[1])
            metrics[f"{name}_accuracy"] = float(np.mean(probabilities.argmax(axis=1)
                                                        == data[1]))
    for callback in (live(None) if live is not None else None) or []:
        if callback is not None and "eval_loss" in metrics:
            callback.on_epoch_end(0, {"loss": metrics["train_loss"],
                                      "val_loss": metrics["eval_loss"]})
    eval_predictions = None
    if evaluation is not None:
        eval_predictions = _served(_scores(evaluation[0], weights), scaling)
        if params.refit:  # the chosen strength, fitted on the train and eval rows together
            both = (np.vstack([train[0], evaluation[0]]), np.concatenate([train[1],
                                                                          evaluation[1]]))
            weights = (fit_ridge(*both, l2) if schema.regression
                       else fit_logistic(*both, classes, l2, start=weights))
            print(f"linear: refit on the train and eval splits ({len(both[1])} rows)",
                  flush=True)
    metadata = _metadata(schema, params, names, data_uri or str(dataset_dir), metrics, l2,
                         tried, scaling, preprocessor.output_dim)
    metadata["refit_on_train_and_eval"] = bool(params.refit and evaluation is not None)
    export_linear(model_dir, preprocessor, weights, schema, metadata, scaling)
    history = {"loss": [metrics["train_loss"]]}
    if "eval_loss" in metrics:
        history["val_loss"] = [metrics["eval_loss"]]
    return TrainResult(metrics=metrics, history=history, epochs_run=1,
                       examples_per_s=rows["train"] * len(tried or [l2]) / max(elapsed, 1e-9),
                       features=[c.name for c in schema.features], best_epoch=1,
                       strategy=f"linear (L2 {l2:g}) on cpu", backend="numpy",
                       eval_predictions=eval_predictions)


def _served(scores: np.ndarray, scaling) -> np.ndarray:
    """Scores as the SavedModel serves them: probabilities, or values in the label's units."""
    if scaling is None:
        return softmax(scores)
    values = scores * scaling.std + scaling.mean
    return np.exp(values) if scaling.transform == "log" else values


def _metadata(schema, params, names, data_uri, metrics, l2, tried, scaling, width) -> dict:
    from gkeflow.components.train.exported import SERVING_SIGNATURE

    return {
        "framework": "tensorflow",
        "model_family": "linear",
        "label": schema.label,
        "task": schema.task,
        "label_vocabulary": schema.label_vocabulary,
        "label_scaling": scaling.as_dict() if scaling is not None else None,
        "features": [{"name": c.name, "input": names[c.name], "type": c.type}
                     for c in schema.features],
        "signature": SERVING_SIGNATURE,
        "input_signature": {names[c.name]: ("float32" if c.type == "numeric" else "string")
                            for c in schema.features},
        "model": "linear",
        "params": asdict(params),
        "training_data_uri": data_uri,
        "l2": l2,
        "l2_eval_losses": {f"{k:g}": v for k, v in tried.items()},
        "encoded_features": width,
        "best_epoch": 1,
        "epochs_run": 1,
        "strategy": "linear",
        "training_backend": "numpy",
        "replicas": 1,
        "precision": "float32",
        "metrics": metrics,
    }


def export_linear(model_dir: Path, preprocessor, weights: np.ndarray, schema: Schema,
                  metadata: dict, scaling=None) -> None:
    """The preprocessor and the linear map behind the raw-feature ``serve`` and
    ``serving_default`` signatures; ``model_dir`` appears whole or not at all."""
    import tensorflow as tf

    from gkeflow.components._atomic import publish_dir
    from gkeflow.components.train.exported import (
        MODEL_METADATA_FILE,
        SERVING_SIGNATURE,
        raw_signature,
        schema_features,
    )
    signature = raw_signature(schema_features(schema))
    module = tf.Module(name="gkeflow_linear")
    module.preprocessor = preprocessor
    module.kernel = tf.Variable(weights[:-1].astype(np.float32), trainable=False, name="kernel")
    module.bias = tf.Variable(weights[-1].astype(np.float32), trainable=False, name="bias")

    @tf.function(input_signature=[signature])
    def serve(features):
        scores = tf.matmul(module.preprocessor(features), module.kernel) + module.bias
        if scaling is None:
            return tf.nn.softmax(scores, axis=1)
        from gkeflow.components.train.regression import unscale_prediction

        return unscale_prediction(scores, scaling)

    module.serve = serve
    with publish_dir(model_dir) as scratch:
        tf.saved_model.save(module, str(scratch), signatures={
            SERVING_SIGNATURE: serve, "serving_default": serve})
        (scratch / MODEL_METADATA_FILE).write_text(json.dumps(metadata, indent=2))
