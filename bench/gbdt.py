"""Gradient-boosted trees against the Keras model on the same prepared data (CPU here):
training time and held-out error of each, and what serving the trees as TensorFlow ops
costs against XGBoost's own predictor.

    python bench/gbdt.py [--rows 50000] [--device cuda]

Prints ``gbdt_train_s``, ``mlp_train_s`` and ``train_time_ratio`` (gbdt / mlp), the test
error of each, and ``serve_rows_per_s`` of the SavedModel with ``serve_ratio`` (SavedModel
rows/s over ``booster.predict`` rows/s on the same rows). With ``--device cuda`` (a GPU
host) it also trains the same booster on the GPU and prints ``gpu_train_s``, ``gpu_speedup``
and the GPU utilisation NVML sampled while it trained.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def make_table(path: Path, rows: int, seed: int = 0) -> None:
    """20 numbers (5 with gaps), 3 categories (5, 30 and 300 values), a label that needs
    thresholds and an interaction."""
    rng = np.random.default_rng(seed)
    data = {f"x{i}": rng.normal(size=rows) for i in range(20)}
    for i in range(5):
        data[f"x{i}"][rng.random(rows) < 0.05] = np.nan
    for name, size in (("c_small", 5), ("c_mid", 30), ("c_big", 300)):
        data[name] = [f"{name}_{v}" for v in rng.integers(0, size, rows)]
    score = (np.nan_to_num(data["x0"]) > 0.3) * 1.5 + data["x5"] * data["x6"] \
        + pd.Series(data["c_mid"]).str.len().to_numpy() % 3 - 1 + rng.normal(0, 0.5, rows)
    data["label"] = np.where(score > 0.5, "yes", "no")
    pd.DataFrame(data).to_csv(path, index=False)


def test_error(model_dir, dataset_dir, schema) -> float:
    from gkeflow.components.prepare.reader import load_split
    from gkeflow.components.train.exported import ExportedModel
    from gkeflow.components.train.inputs import encode_labels, to_model_inputs

    test = load_split(dataset_dir, "test", schema)
    probabilities = ExportedModel(model_dir).predict_proba(to_model_inputs(test, schema))
    return float(np.mean(probabilities.argmax(axis=1) != encode_labels(test, schema)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args()

    from gkeflow.components.prepare.logic import prepare
    from gkeflow.components.prepare.reader import load_split
    from gkeflow.components.train.exported import ExportedModel
    from gkeflow.components.train.inputs import to_model_inputs
    from gkeflow.components.train.logic import TrainParams, train

    with tempfile.TemporaryDirectory(prefix="gkeflow-bench-gbdt-") as scratch:
        root = Path(scratch)
        make_table(root / "table.csv", args.rows)
        with contextlib.redirect_stdout(io.StringIO()):
            prepared = prepare(str(root / "table.csv"), root / "dataset", "label")
        schema, dataset = prepared.schema, root / "dataset"
        figures = {}
        for model_type in ("gbdt", "mlp"):
            started = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):
                result = train(dataset, schema, root / model_type,
                               TrainParams(model_type=model_type))
            figures[f"{model_type}_train_s"] = time.perf_counter() - started
            figures[f"{model_type}_test_error"] = test_error(root / model_type, dataset, schema)
            if model_type == "gbdt":
                figures["gbdt_rounds"] = result.epochs_run
        figures["train_time_ratio"] = figures["gbdt_train_s"] / figures["mlp_train_s"]

        import xgboost as xgb

        from gkeflow.components.train.gbdt import design_matrix, feature_types

        test = load_split(dataset, "test", schema)
        inputs = to_model_inputs(test, schema)
        model = ExportedModel(root / "gbdt")
        model.predict_proba(inputs)  # traced once
        started = time.perf_counter()
        for _ in range(3):
            model.predict_proba(inputs)
        saved_rate = 3 * len(test) / (time.perf_counter() - started)
        booster, matrix = _booster(root / "gbdt", dataset, schema, test)
        started = time.perf_counter()
        for _ in range(3):
            booster.predict(xgb.DMatrix(design_matrix(test, schema), feature_types=feature_types(
                schema), enable_categorical=True))
        booster_rate = 3 * len(test) / (time.perf_counter() - started)
        figures["serve_rows_per_s"] = saved_rate
        figures["serve_ratio"] = saved_rate / booster_rate
        if args.device == "cuda":
            figures.update(_gpu_figures(dataset, schema, matrix))
        print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                       for k, v in figures.items()))


def _booster(model_dir, dataset, schema, test):
    """The same booster refitted here (the SavedModel holds the trees as arrays)."""
    import json

    import xgboost as xgb

    from gkeflow.components.prepare.reader import load_split
    from gkeflow.components.train.gbdt import (
        booster_params,
        design_matrix,
        feature_types,
        label_values,
    )
    from gkeflow.components.train.params import TrainParams

    rounds = json.loads((model_dir / "gkeflow_model.json").read_text())["best_round"]
    train = load_split(dataset, "train", schema)
    matrix = xgb.DMatrix(design_matrix(train, schema), label=label_values(train, schema),
                         feature_types=feature_types(schema), enable_categorical=True)
    booster = xgb.train(booster_params(TrainParams(model_type="gbdt"), schema, "cpu"), matrix,
                        rounds)
    return booster, matrix


def _gpu_figures(dataset, schema, matrix) -> dict:
    import xgboost as xgb

    from gkeflow.components.train.gbdt import booster_params
    from gkeflow.components.train.params import TrainParams
    from gkeflow.components.train.utilisation import GpuSampler

    figures = {}
    for device in ("cpu", "cuda"):
        params = booster_params(TrainParams(model_type="gbdt"), schema, device)
        sampler = GpuSampler(1.0).start() if device == "cuda" else None
        started = time.perf_counter()
        xgb.train(params, matrix, 1000)
        figures[f"{device}_1000_rounds_s"] = time.perf_counter() - started
        if sampler is not None:
            sampler.stop()
            report = sampler.report(0)
            figures["gpu_utilisation"] = report.summary_line()
    figures["gpu_speedup"] = figures["cpu_1000_rounds_s"] / figures["cuda_1000_rounds_s"]
    return figures


if __name__ == "__main__":
    main()
