"""``sweep.engine: ray``: the sweep's trials as one Ray Tune run, poor trials stopped early.

The trials are the ones the other engines run (``expand_trials``: the same ids and
hyperparameters); each is the suite's ``train()`` in a Tune trial that reports its eval
metric after every epoch, so a scheduler (ASHA, or the median stopping rule) ends the
trials that fall behind instead of paying for their last epochs. Each finished trial
exports its SavedModel and writes the same JSON report a ``train_model`` trial returns, so
selection, evaluation, the gate and registration are those of every sweep. A stopped trial
is reported ``stopped`` with the epochs it trained and its last metric.

Ray runs here on a local instance (``ray.init`` with as many CPUs as trials run at once);
Ray is imported only when a sweep runs.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEDULERS = ("asha", "median", "none")
#: Keras log name -> the sweep's metric name (measured on the eval split).
LOG_METRICS = {"val_accuracy": "eval_accuracy", "val_loss": "eval_loss",
               "val_rmse": "eval_rmse"}
REPORT_FILE = "report.json"


@dataclass(frozen=True)
class TuneSettings:
    """How Tune runs the trials: the scheduler, how many at once, and what each gets."""

    metric: str = "eval_accuracy"
    direction: str = "maximize"
    scheduler: str = "asha"
    parallel_trials: int = 2
    grace_epochs: int = 1  # epochs every trial trains before it can be stopped
    reduction_factor: int = 2  # ASHA: 1 in this many trials goes on at each rung
    cpus_per_trial: float = 1.0
    gpus_per_trial: float = 0.0

    def __post_init__(self) -> None:
        if self.scheduler not in SCHEDULERS:
            raise ValueError(f"scheduler must be one of {', '.join(SCHEDULERS)}; "
                             f"got {self.scheduler!r}")
        if self.direction not in ("maximize", "minimize"):
            raise ValueError(f"direction must be maximize or minimize; got {self.direction!r}")
        if self.parallel_trials < 1 or self.grace_epochs < 1 or self.reduction_factor < 2:
            raise ValueError("parallel_trials and grace_epochs must be >= 1, "
                             "reduction_factor >= 2")

    @property
    def mode(self) -> str:
        return "max" if self.direction == "maximize" else "min"


def make_scheduler(settings: TuneSettings, max_epochs: int):
    """The Tune scheduler deciding, after each epoch, whether a trial goes on."""
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, MedianStoppingRule

    if settings.scheduler == "asha":
        # max_t past the last epoch, and no stop at it: a trial that trained its epochs goes
        # on to export its model and write its report
        return ASHAScheduler(time_attr="epoch", metric=settings.metric, mode=settings.mode,
                             max_t=max(max_epochs, settings.grace_epochs) + 1,
                             grace_period=settings.grace_epochs,
                             reduction_factor=settings.reduction_factor,
                             stop_last_trials=False)
    if settings.scheduler == "median":
        return MedianStoppingRule(time_attr="epoch", metric=settings.metric,
                                  mode=settings.mode, grace_period=settings.grace_epochs,
                                  min_samples_required=2)
    return FIFOScheduler()


def trial_params(fixed: Mapping[str, Any], trial: Mapping[str, Any]) -> dict[str, Any]:
    """The trial's ``TrainParams`` fields: the sweep's fixed values, the searched ones on top."""
    values = {**fixed, **{k: v for k, v in trial.items() if k != "trial_id"}}
    if isinstance(values.get("hidden_units"), str):
        values["hidden_units"] = tuple(int(u) for u in values["hidden_units"].split(",") if u)
    return values


def run_trial(config: Mapping[str, Any]) -> None:
    """One Tune trial (runs in a Ray worker): train, report each epoch, write the report."""
    from ray import tune

    from gkeflow.components.prepare.logic import Schema
    from gkeflow.components.train.logic import TrainParams, train
    from gkeflow.components.train.report import trial_report

    trial, metric = config["trial"], config["metric"]
    trial_dir = Path(config["output"]) / "trials" / str(trial["trial_id"])
    model_dir = trial_dir / "model"

    def reporter(_sampler):
        import keras

        class ReportEpoch(keras.callbacks.Callback):
            def on_epoch_end(self, epoch, logs=None):
                named = {LOG_METRICS.get(k, k): float(v) for k, v in (logs or {}).items()}
                value = named.get(metric)
                if value is not None and math.isfinite(value):
                    tune.report({"epoch": epoch + 1, metric: value})

        return ReportEpoch()

    try:
        params = TrainParams(**trial_params(config["fixed"], trial))
        result = train(Path(config["dataset"]), Schema.load(Path(config["schema"])), model_dir,
                       params, live=reporter)
        report = trial_report(str(trial["trial_id"]), str(model_dir),
                              {**result.metrics, "epochs_run": result.epochs_run})
    except Exception as exc:  # a failed trial is listed; the sweep goes on
        report = trial_report(str(trial["trial_id"]), str(model_dir),
                              error=f"{type(exc).__name__}: {exc}")
    trial_dir.mkdir(parents=True, exist_ok=True)
    (trial_dir / REPORT_FILE).write_text(report)


def stopped_report(trial_id: str, metric: str, last: Mapping[str, Any]) -> str:
    """The report of a trial the scheduler stopped: its epochs and last metric, no model."""
    from gkeflow.components.train.report import trial_report

    epochs = int(last.get("epoch", 0))
    metrics = {metric: float(last[metric]), "epochs_run": epochs} if metric in last else {}
    return trial_report(trial_id, "", metrics, status="stopped",
                        error=f"stopped early by the scheduler after {epochs} epoch(s)")


def run_tune(dataset_dir: Path, schema_path: Path, trials: Sequence[Mapping[str, Any]],
             fixed: Mapping[str, Any], settings: TuneSettings, output_dir: Path,
             echo: Callable[[str], None] = print) -> list[str]:
    """Run every trial under Tune on a local Ray instance; one JSON report per trial."""
    import ray
    from ray import tune

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    max_epochs = max(int(trial_params(fixed, t).get("epochs", 1)) for t in trials)
    cpus = settings.cpus_per_trial * min(settings.parallel_trials, len(trials))
    echo(f"Ray Tune: {len(trials)} trials, {settings.parallel_trials} at once, scheduler "
         f"{settings.scheduler}, {settings.metric} ({settings.direction})")
    # the trials' processes inherit this one's environment (the backend, TF's log level)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    ray.init(num_cpus=max(1, math.ceil(cpus)), num_gpus=math.ceil(
        settings.gpus_per_trial * settings.parallel_trials) or None,
             include_dashboard=False, configure_logging=False, log_to_driver=False)
    try:
        trainable = tune.with_resources(run_trial, {"cpu": settings.cpus_per_trial,
                                                    "gpu": settings.gpus_per_trial})
        tuner = tune.Tuner(
            trainable,
            param_space={"trial": tune.grid_search(list(trials)), "fixed": dict(fixed),
                         "metric": settings.metric, "dataset": str(dataset_dir),
                         "schema": str(schema_path), "output": str(output_dir)},
            tune_config=tune.TuneConfig(scheduler=make_scheduler(settings, max_epochs),
                                        max_concurrent_trials=settings.parallel_trials),
            run_config=tune.RunConfig(storage_path=str(output_dir / "ray"), name="sweep",
                                      verbose=0),
        )
        results = tuner.fit()
        reports = []
        for result in results:
            trial_id = str(result.config["trial"]["trial_id"])
            written = output_dir / "trials" / trial_id / REPORT_FILE
            if written.exists():
                reports.append(written.read_text())
            elif result.error is not None:
                from gkeflow.components.train.report import trial_report

                reports.append(trial_report(trial_id, "", error=str(result.error)))
            else:
                reports.append(stopped_report(trial_id, settings.metric, result.metrics or {}))
    finally:
        ray.shutdown()
    parsed = [json.loads(r) for r in reports]
    epochs = sum(int(r["metrics"].get("epochs_run", 0)) for r in parsed)
    stopped = sum(r["status"] == "stopped" for r in parsed)
    echo(f"Ray Tune: {stopped} of {len(trials)} trials stopped early; {epochs} epochs trained "
         f"in all (every trial to its end: {max_epochs * len(trials)} at most)")
    return reports
