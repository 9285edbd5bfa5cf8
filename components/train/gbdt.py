"""Gradient-boosted trees (``model_type: gbdt``): XGBoost on the prepared splits, exported as
the same raw-feature SavedModel as a Keras model (the trees as TensorFlow ops,
:mod:`~gkeflow.components.train.trees`).

Features go to XGBoost as they are: numbers with NaN for missing, categorical columns as
the index of their value in the schema's vocabulary (XGBoost's native categorical splits;
an unknown or missing value is missing). Histogram trees on the step's GPU when it has one
(``device="cuda"``), else on every CPU core; early stopping on the eval split's loss; the
booster is cut at its best round before export.

Preemption: every ``gbdt_checkpoint_every`` rounds the booster and the training state are
committed to the same checkpoint store as Keras training (``state.json`` last: the commit
point); SIGTERM stops after the current round, commits and raises
:class:`~gkeflow.components.train.checkpoint.Preempted`; a retry continues boosting from
the committed booster (XGBoost's ``xgb_model=``), with the same history and early-stopping
state, so the result is the one an uninterrupted run gives. (With ``gbdt_subsample`` or
``gbdt_colsample_bytree`` below 1 the resumed rounds draw fresh samples: XGBoost's samplers
start anew with a loaded booster, so the model is as good but not the same bits.)
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from gkeflow.components.prepare.logic import Schema
from gkeflow.components.train import gbdt_cv
from gkeflow.components.train.gbdt_rounds import (
    BoostState,
    make_round_callback,
    read_boost_state,
)
from gkeflow.components.train.gbdt_settings import GbdtSettingsError, check_gbdt_settings
from gkeflow.components.train.params import TrainParams, TrainResult

__all__ = ["GbdtSettingsError", "check_gbdt_settings", "train_gbdt"]



# -- the data as XGBoost takes it ------------------------------------------------------------
def feature_types(schema: Schema) -> list[str]:
    """XGBoost's feature types: ``q`` (numeric) or ``c`` (categorical), in schema order."""
    return ["q" if c.type == "numeric" else "c" for c in schema.features]


def design_matrix(frame, schema: Schema) -> np.ndarray:
    """A split (``load_split``'s frame) as float32 ``[rows, features]``: numbers with NaN
    for missing, a categorical value as its index in the column's vocabulary (unknown or
    missing: NaN)."""
    import pandas as pd

    columns = []
    for column in schema.features:
        values = frame[column.name] if column.name in frame else pd.Series(
            [None] * len(frame), dtype=object)
        if column.type == "numeric":
            columns.append(pd.to_numeric(values, errors="coerce").to_numpy(np.float32))
        else:
            codes = {value: float(i) for i, value in enumerate(column.vocabulary)}
            columns.append(np.fromiter((codes.get(v, np.nan) if v is not None else np.nan
                                        for v in values), np.float32, len(values)))
    return (np.column_stack(columns) if columns
            else np.zeros((len(frame), 0), np.float32)).astype(np.float32, copy=False)


def label_values(frame, schema: Schema, transform: str = "none") -> np.ndarray:
    """Class indices (classification) or the label's values (regression; ``log`` applied)."""
    if not schema.regression:
        from gkeflow.components.train.inputs import encode_labels

        return encode_labels(frame, schema)
    from gkeflow.components.train.regression import transformed_label

    return transformed_label(frame[schema.label].to_numpy(np.float64), schema.label, transform)


def objective(schema: Schema) -> tuple[dict[str, Any], str]:
    """XGBoost's objective settings and the eval metric that is the step's loss."""
    if schema.regression:
        return {"objective": "reg:squarederror"}, "rmse"
    classes = len(schema.label_vocabulary)
    if classes <= 2:
        return {"objective": "binary:logistic"}, "logloss"
    return {"objective": "multi:softprob", "num_class": classes}, "mlogloss"


def booster_params(params: TrainParams, schema: Schema, device: str) -> dict[str, Any]:
    settings, metric = objective(schema)
    return {
        **settings,
        "eval_metric": metric,
        "tree_method": "hist",
        "device": device,
        "eta": params.gbdt_learning_rate,
        "max_depth": params.gbdt_max_depth,
        "min_child_weight": params.gbdt_min_child_weight,
        "subsample": params.gbdt_subsample,
        "colsample_bytree": params.gbdt_colsample_bytree,
        "lambda": params.gbdt_reg_lambda,
        "max_cat_to_onehot": 4,
        "seed": params.seed,
        "nthread": os.cpu_count() or 1,
    }


def visible_gpus() -> int:
    """NVIDIA GPUs this process can use (NVML, limited by CUDA_VISIBLE_DEVICES); 0 without
    NVML or a driver."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return 0
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            count = pynvml.nvmlDeviceGetCount()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no library, no driver, no device: no GPU
        return 0
    if visible:
        return min(count, len([v for v in visible.split(",") if v.strip()]))
    return count


# -- training -------------------------------------------------------------------------------
def train_gbdt(dataset_dir: Path, schema: Schema, model_dir: Path, params: TrainParams,
               checkpoint_dir: Path | str | None = None, tensorboard_dir: Path | None = None,
               data_uri: str = "", live: Callable[[Any], Any] | None = None) -> TrainResult:
    """Train gradient-boosted trees on the train split (early stopping on eval) and export
    the raw-feature SavedModel to ``model_dir``; arguments as
    :func:`~gkeflow.components.train.logic.train`."""
    import xgboost as xgb

    from gkeflow.components.prepare.reader import load_split
    from gkeflow.components.train import tpu as tpus
    from gkeflow.components.train.devices import GpuUnavailableError
    from gkeflow.components.train.inputs import split_rows
    from gkeflow.components.train.preemption import Preempted
    from gkeflow.components.train.store import fetched, open_store
    from gkeflow.components.train.utilisation import GpuSampler

    check_gbdt_settings(params)
    if tpus.find_tpu(os.environ, tpus.tpu_device_files()) is not None or params.strategy == "tpu":
        raise tpus.TpuUnavailableError("model_type gbdt trains on CPUs or NVIDIA GPUs, not on "
                                       "a TPU; give train-model a GPU or CPU profile")
    from gkeflow.components.train.gbdt_collective import from_tf_config, joined

    collective = from_tf_config(os.environ.get("TF_CONFIG", ""))
    gpus = visible_gpus()
    if params.require_gpu and not gpus:
        raise GpuUnavailableError("this step asked for a GPU but NVML sees none; refusing to "
                                  "train gradient-boosted trees on CPU")
    if gpus and not xgb.build_info().get("USE_CUDA"):
        if params.require_gpu:
            raise GpuUnavailableError(
                f"this step has {gpus} GPU(s) but this XGBoost build ({xgb.__version__}) has "
                "no CUDA kernels; run train-model in the GPU image (package xgboost, not "
                "xgboost-cpu)")
        print(f"note: {gpus} GPU(s) visible but this XGBoost build has no CUDA kernels "
              "(xgboost-cpu): training on the CPU", flush=True)
        gpus = 0
    device = "cuda" if gpus else "cpu"
    rows = split_rows(dataset_dir)
    if not rows.get("train"):
        raise ValueError(f"the train split in {dataset_dir} has no rows")
    print(f"model: gradient-boosted trees (XGBoost {xgb.__version__}, hist on {device}); "
          f"{len(schema.features)} features, {rows['train']} train rows", flush=True)
    loaded = time.perf_counter()
    types = feature_types(schema)
    train_frame = load_split(dataset_dir, "train", schema)
    arrays = {"train": (design_matrix(train_frame, schema),
                        label_values(train_frame, schema, params.label_transform))}
    del train_frame
    if rows.get("eval"):
        eval_frame = load_split(dataset_dir, "eval", schema)
        arrays["eval"] = (design_matrix(eval_frame, schema),
                          label_values(eval_frame, schema, params.label_transform))
        del eval_frame
    matrices = {split: xgb.DMatrix(x, label=y, feature_types=types, enable_categorical=True,
                                   missing=np.nan) for split, (x, y) in arrays.items()}
    dtrain = matrices["train"]
    evals = [(matrix, split) for split, matrix in matrices.items()]
    shares, shared = arrays, matrices  # what this worker trains on: every row, or its share
    if collective is not None:
        shares = {split: (x[collective.share(len(y))], y[collective.share(len(y))])
                  for split, (x, y) in arrays.items()}
        shared = {split: xgb.DMatrix(x, label=y, feature_types=types, enable_categorical=True,
                                     missing=np.nan) for split, (x, y) in shares.items()}
        print(f"worker {collective.rank} of {collective.workers}: "
              f"{len(shares['train'][1])} of {rows['train']} train rows, trees grown with "
              f"every worker's (XGBoost's collective)", flush=True)
    print(f"data read in {time.perf_counter() - loaded:.1f} s", flush=True)

    store = open_store(checkpoint_dir) if checkpoint_dir else None
    resume = read_boost_state(store) if store is not None else None
    state, token = resume if resume else (BoostState(), None)
    booster = None
    if resume:
        with fetched(store, state.booster_file) as local:
            booster = xgb.Booster(model_file=str(local))
        print(f"resuming from checkpoint: {state.rounds_completed} rounds completed "
              f"({store.uri})", flush=True)
    sampler = GpuSampler(params.gpu_sample_interval_s)
    live_callbacks = live(sampler) if live is not None else None
    live_list = [c for c in (live_callbacks if isinstance(live_callbacks, list)
                             else [live_callbacks]) if c is not None]
    total = params.gbdt_rounds
    patience = params.gbdt_early_stopping_rounds if len(evals) > 1 else 0
    writer = store if collective is None or collective.chief else None  # the chief commits
    rounds = make_round_callback(writer, state, token, params.gbdt_checkpoint_every if writer
                                 else 0, patience, live_list, max(1, total // 100), total)
    previous = None
    if writer is not None and threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, rounds.handler)
    started = time.perf_counter()
    sampler.start()
    sampler.begin_epoch(0)
    refitted = params.refit and "eval" in arrays
    together = joined(collective) if collective is not None else contextlib.nullcontext()
    settings = booster_params(params, schema, device)
    if collective is not None and collective.threads:
        settings["nthread"] = collective.threads
    try:
        with together:
            remaining = 0 if state.stopped_early else total - state.rounds_completed
            if remaining > 0:
                booster = xgb.train(settings, shared["train"],
                                    num_boost_round=remaining,
                                    evals=[(m, split) for split, m in shared.items()],
                                    verbose_eval=False, xgb_model=booster, callbacks=[rounds])
            best = state.best_round or state.rounds_completed
            if refitted and not rounds.preempted:
                refit, _ = refit_booster(
                    settings, shares, types, best,
                    None if collective is None else (rows["train"], rows.get("eval", 0)),
                    cv_patience=patience)
    finally:
        sampler.end_epoch()
        sampler.stop()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    elapsed = time.perf_counter() - started
    if collective is not None and booster is not None:  # every worker must agree: say so
        import hashlib

        digest = hashlib.sha256(bytes(booster.save_raw("ubj"))).hexdigest()[:16]
        print(f"worker {collective.rank}: forest {digest} "
              f"({booster.num_boosted_rounds()} rounds)", flush=True)
    if rounds.preempted:
        raise Preempted(f"training stopped by SIGTERM after round {state.rounds_completed}; "
                        f"checkpoint committed to {store.uri}; a retry resumes from it")
    best = state.best_round or state.rounds_completed
    booster = booster[:best] if best < booster.num_boosted_rounds() else booster
    metrics = _final_metrics(booster, schema, evals, state, params.label_transform)
    eval_predictions = (served_values(booster.predict(matrices["eval"]), schema,
                                      params.label_transform) if "eval" in matrices else None)
    if refitted:  # the export's matrix: all rows the refit saw
        booster = refit
        dtrain = xgb.DMatrix(np.vstack([arrays["train"][0], arrays["eval"][0]]),
                             feature_types=types, enable_categorical=True, missing=np.nan)
    usage = sampler.report(params.gpu_utilisation_warn_below)
    print(usage.summary_line(), flush=True)
    if usage.warning:
        print(f"WARNING: {usage.warning}", flush=True)
    metrics.update(usage.metrics())
    trained = state.rounds_completed - rounds.first_round
    examples_per_s = rows["train"] * max(trained, 1) / max(elapsed, 1e-9)
    described = f"xgboost hist on {device}" + (f" ({gpus} GPU)" if gpus else "") + (
        f", {collective.workers} workers (XGBoost's collective)" if collective else "")
    metadata = model_metadata(schema, params, data_uri or str(dataset_dir), best, state,
                              described, metrics, usage.to_dict(), xgb.__version__)
    metadata["refit_on_train_and_eval"] = bool(refitted)
    if refitted:  # how many rounds the exported forest has, and what chose them
        metadata["refit_rounds"] = int(booster.attr("refit_rounds"))
        metadata["refit_rounds_from"] = booster.attr("refit_rounds_from")
    from gkeflow.components.train.tree_export import export_trees

    if collective is None or collective.chief:  # the other workers' models are not kept
        export_trees(model_dir, booster, dtrain, schema, metadata, params.label_transform)
    if writer is not None:
        store.remove_all()
    if tensorboard_dir is not None:
        _write_curves(tensorboard_dir, state.history)
    return TrainResult(
        metrics=metrics, history=state.history, epochs_run=state.rounds_completed,
        examples_per_s=examples_per_s, features=[c.name for c in schema.features],
        best_epoch=best, resumed_from_epoch=rounds.first_round, strategy=described,
        precision="float32", backend="xgboost", gpu_utilisation=usage,
        gpu_utilisation_warning=usage.warning, eval_predictions=eval_predictions)


def served_values(predicted: np.ndarray, schema: Schema, transform: str) -> np.ndarray:
    """XGBoost's predictions as the SavedModel serves them: ``[rows, classes]``
    probabilities, or ``[rows, 1]`` values in the label's units."""
    predicted = np.asarray(predicted, np.float64)
    if schema.regression:
        values = np.exp(predicted) if transform == "log" else predicted
        return values.reshape(-1, 1)
    if predicted.ndim == 1:
        return np.column_stack([1 - predicted, predicted])
    return predicted


def refit_booster(settings: dict, arrays: dict, types: list[str], best: int,
                  counts: tuple[int, int] | None = None, cv_patience: int = 0):
    """The booster refitted on the train and eval rows together, for as many rounds as the
    best round scaled by the rows (early stopping on eval chose ``best``), and its matrix.
    ``counts``: every worker's (train, eval) rows, when ``arrays`` is one worker's share."""
    import xgboost as xgb

    train_rows, eval_rows = counts or (len(arrays["train"][1]), len(arrays["eval"][1]))
    rounds = max(1, round(best * (train_rows + eval_rows) / train_rows))
    matrix = xgb.DMatrix(np.vstack([arrays["train"][0], arrays["eval"][0]]),
                         label=np.concatenate([arrays["train"][1], arrays["eval"][1]]),
                         feature_types=types, enable_categorical=True, missing=np.nan)
    chosen_by = "the eval split's best round, scaled to the rows"
    if counts is None and cv_patience and gbdt_cv.cross_validates(train_rows + eval_rows,
                                                                  matrix.num_col()):
        rounds = gbdt_cv.cross_validated_rounds(settings, matrix, cv_patience, rounds)
        chosen_by = f"{gbdt_cv.CV_FOLDS}-fold cross-validation on {train_rows + eval_rows} rows"
    started = time.perf_counter()
    booster = xgb.train(settings, matrix, rounds)
    print(f"refit on the train and eval splits ({train_rows + eval_rows} rows): {rounds} "
          f"rounds in {time.perf_counter() - started:.1f} s", flush=True)
    booster.set_attr(refit_rounds=str(rounds), refit_rounds_from=chosen_by)
    return booster, matrix


def _final_metrics(booster, schema: Schema, evals, state: BoostState,
                   transform: str) -> dict[str, float]:
    """Loss (and accuracy or RMSE) on the train and eval splits at the best round."""
    metrics: dict[str, float] = {}
    for matrix, split in evals:
        labels = matrix.get_label()
        predicted = booster.predict(matrix)
        if schema.regression:
            rmse = float(np.sqrt(np.mean((predicted - labels) ** 2)))
            suffix = "_rmse_log" if transform == "log" else "_rmse"
            metrics[f"{split}_loss"] = rmse ** 2
            metrics[f"{split}{suffix}"] = rmse
            continue
        probabilities = (np.column_stack([1 - predicted, predicted]) if predicted.ndim == 1
                         else predicted)
        truth = labels.astype(int)
        chosen = np.clip(probabilities[np.arange(truth.size), truth], 1e-15, 1.0)
        metrics[f"{split}_loss"] = float(-np.mean(np.log(chosen)))
        metrics[f"{split}_accuracy"] = float(np.mean(probabilities.argmax(axis=1) == truth))
    return metrics


def model_metadata(schema: Schema, params: TrainParams, data_uri: str, best: int,
                   state: BoostState, described: str, metrics: dict, usage: dict,
                   version: str) -> dict:
    from gkeflow.components.train.exported import SERVING_SIGNATURE
    from gkeflow.components.train.inputs import input_names

    names = input_names(schema)
    return {
        "framework": "tensorflow",  # the SavedModel's runtime: TensorFlow Serving serves it
        "model_family": "gbdt",
        "trained_with": f"xgboost {version}",
        "label": schema.label,
        "task": schema.task,
        "label_vocabulary": schema.label_vocabulary,
        "label_scaling": None,
        "label_transform": params.label_transform,
        "features": [{"name": c.name, "input": names[c.name], "type": c.type}
                     for c in schema.features],
        "signature": SERVING_SIGNATURE,
        "input_signature": {names[c.name]: ("float32" if c.type == "numeric" else "string")
                            for c in schema.features},
        "model": "gbdt",
        "params": asdict(params),
        "training_data_uri": data_uri,
        "best_epoch": best,
        "best_round": best,
        "epochs_run": state.rounds_completed,
        "stopped_early": state.stopped_early,
        "strategy": described,
        "training_backend": "xgboost",
        "replicas": 1,
        "precision": "float32",
        "metrics": metrics,
        "gpu_utilisation": usage,
    }


def _write_curves(log_dir: Path, history: dict[str, list[float]]) -> None:
    """The per-round curves as TensorBoard scalars (``train/…``, ``eval/…``)."""
    import tensorflow as tf

    writer = tf.summary.create_file_writer(str(Path(log_dir) / "rounds"))
    with writer.as_default():
        for name, values in history.items():
            for step, value in enumerate(values, 1):
                tf.summary.scalar(name.replace("_", "/", 1), value, step=step)
    writer.flush()
    writer.close()
