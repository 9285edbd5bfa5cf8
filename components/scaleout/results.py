"""What a scaled-out training run takes from its step and hands back to the pipeline: the
training parameters every worker gets, the chief's model and summary."""

from __future__ import annotations

import shutil
from pathlib import Path

from gkeflow.components.scaleout.storage import COMPLETE_MARKER

#: The step parameters every worker trains with (``TrainParams`` fields).
WORKER_PARAMETERS = (
    "epochs", "batch_size", "learning_rate", "model_type", "user_module", "require_gpu",
    "early_stopping_patience", "loss", "label_transform", "backend", "gbdt_rounds",
    "gbdt_learning_rate", "gbdt_max_depth", "gbdt_min_child_weight", "gbdt_subsample",
    "gbdt_colsample_bytree", "gbdt_reg_lambda", "gbdt_early_stopping_rounds")


def worker_params(arguments: dict) -> dict:
    """The training parameters of a scale-out step's ``arguments`` (its ``locals()``)."""
    return {name: arguments[name] for name in WORKER_PARAMETERS}


def install_model(published: Path, model_dir: Path) -> None:
    """Copy a published model (without its completion marker) into the step's model output."""
    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    shutil.copytree(Path(published), model_dir, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns(COMPLETE_MARKER))


def metric_items(summary: dict) -> dict[str, float]:
    """The step's metrics, as the single-machine training step logs them, plus ``workers``."""
    items = {name: round(float(value), 6) for name, value in summary["metrics"].items()}
    items["examples_per_s"] = round(float(summary["examples_per_s"]), 1)
    items["best_epoch"] = int(summary["best_epoch"])
    items["workers"] = int(summary["workers"])
    return items


def model_metadata(summary: dict, dataset_uri: str, engine: str) -> dict:
    """Model artifact metadata: the single-machine fields plus strategy, workers and engine."""
    return {
        "framework": "tensorflow",
        "epochs_run": summary["epochs_run"],
        "best_epoch": summary["best_epoch"],
        "features": summary["features"],
        "strategy": summary["strategy"],
        "workers": summary["workers"],
        "engine": engine,
        "precision": summary["precision"],
        "training_data_uri": dataset_uri,
    }
