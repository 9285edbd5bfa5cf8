"""One Vertex AI Vizier trial: ``python -m gkeflow.components.sweep.trial --dataset DIR
--schema FILE [--learning_rate=0.01 ...]``.

Runs the same training code as ``train_model`` on the prepared splits, writes the
SavedModel to ``$AIP_MODEL_DIR`` (checkpoints to ``$AIP_CHECKPOINT_DIR``, so a restarted
trial resumes) and reports the eval-split metric the way Vizier reads it (the hypertune
metrics file). When the sweep is tracked in MLflow, the trial logs its parameters and
its curves epoch by epoch into the ``train-model`` run of its task (``trial-NNN``, from
``CLOUD_ML_TRIAL_ID``) under the pipeline run's parent, as Ray's and ParallelFor's trials do.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

METRIC_FILE = "/tmp/hypertune/output.metrics"


def report_metric(metric: str, value: float, step: int = 0) -> Path:
    """Append one measurement to the file Vertex AI's tuning service reads."""
    path = Path(os.environ.get("CLOUD_ML_HP_METRIC_FILE", METRIC_FILE))
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"timestamp": time.time(),
                                 "trial": str(os.environ.get("CLOUD_ML_TRIAL_ID", 0)),
                                 metric: float(value), "global_step": str(step),
                                 "checkpoint_path": ""}) + "\n")
    return path


def parse_args(argv: list[str]) -> argparse.Namespace:
    from gkeflow.components.sweep.hparams import TUNABLE_DEFAULTS

    parser = argparse.ArgumentParser(prog=__name__)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--schema", required=True)
    parser.add_argument("--metric", default="eval_accuracy")
    parser.add_argument("--user-module", default="")
    parser.add_argument("--require-gpu", action="store_true")
    parser.add_argument("--model-dir", default="")
    for name, default in TUNABLE_DEFAULTS.items():
        parser.add_argument(f"--{name}", type=type(default), default=default)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from gkeflow.components.prepare.logic import Schema
    from gkeflow.components.sweep.hparams import GBDT_ONLY
    from gkeflow.components.sweep.vizier import fuse_path
    from gkeflow.components.train.logic import TrainParams, train

    args = parse_args(sys.argv[1:] if argv is None else argv)
    model_dir = args.model_dir or fuse_path(os.environ["AIP_MODEL_DIR"])
    checkpoints = os.environ.get("AIP_CHECKPOINT_DIR", "")
    params = TrainParams(
        epochs=int(args.epochs), batch_size=int(args.batch_size),
        learning_rate=float(args.learning_rate), model_type=args.model_type,
        hidden_units=tuple(int(u) for u in args.hidden_units.split(",") if u.strip()),
        dropout=float(args.dropout), early_stopping_patience=int(args.early_stopping_patience),
        require_gpu=args.require_gpu, user_module=args.user_module,
        **{name: getattr(args, name) for name in GBDT_ONLY},
    )
    from gkeflow.components.sweep.vizier import trial_id
    from gkeflow.components.tracking.live import live_curves
    from gkeflow.components.tracking.steps import track_training, training_params
    from gkeflow.components.tracking.trials import open_trial_run, tracking_from_env

    task = trial_id(os.environ.get("CLOUD_ML_TRIAL_ID", "0"))
    tracker = open_trial_run(tracking_from_env(), task)
    tracker.log_params(training_params(params))
    try:
        result = train(dataset_dir=Path(fuse_path(args.dataset)),
                       schema=Schema.load(Path(fuse_path(args.schema))),
                       model_dir=Path(model_dir), params=params,
                       checkpoint_dir=Path(fuse_path(checkpoints)) if checkpoints else None,
                       live=lambda sampler: live_curves(tracker, sampler))
    except BaseException:
        tracker.finish("FAILED")
        raise
    track_training(result, params, Path(model_dir), task=task, tracker=tracker, live=True)
    value = result.metrics.get(args.metric)
    if value is None:
        print(f"training reported no {args.metric}; metrics: {sorted(result.metrics)}")
        return 1
    report_metric(args.metric, value, result.epochs_run)
    print(json.dumps({args.metric: value, **result.metrics}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
