"""``sweep.engine: ray``: the sweep's trials as one Ray Tune run, poor trials stopped early.

The trials are the ones the other engines run (``expand_trials``: the same ids and
hyperparameters); each is the suite's ``train()`` in a Tune trial that reports its eval
metric after every epoch, so a scheduler (ASHA, or the median stopping rule) ends the
trials that fall behind instead of paying for their last epochs. Each finished trial
exports its SavedModel and writes the same JSON report a ``train_model`` trial returns, so
selection, evaluation, the gate and registration are those of every sweep. A stopped trial
is reported ``stopped`` with the epochs it trained and its last metric.

Where it runs: on a local instance (``ray.init`` with as many CPUs as trials run at once:
``sweep.engine: ray`` in a local run), or on a KubeRay cluster (``address``: the RayJob's
driver, :mod:`.ray_driver`). The inputs and every trial's output live under URIs that
every node reads alike (a directory, or ``gs://`` on a cluster): each trial fetches the
prepared splits, checkpoints under ``<output>/checkpoints/<trial>`` (a trial Tune restarts
after its node was lost, e.g. a Spot VM, resumes from its last epoch), and publishes its
model and report under ``<output>/trials/<trial>``, the report written last. Ray is
imported only when a sweep runs.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gkeflow.components.sweep.ray_settings import TuneSettings, trial_uri

#: Keras log name -> the sweep's metric name (measured on the eval split).
LOG_METRICS = {"val_accuracy": "eval_accuracy", "val_loss": "eval_loss",
               "val_rmse": "eval_rmse"}
REPORT_KEY = "report"  # the trial's report, in its publication's marker


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
    """The trial's ``TrainParams`` fields: the sweep's fixed values, the searched ones on top,
    each of its field's type (a search algorithm or a JSON round trip may hand ``32.0`` for
    an integer, or a list for ``hidden_units``)."""
    values = {**fixed, **{k: v for k, v in trial.items() if k != "trial_id"}}
    return {name: field_value(name, value) for name, value in values.items()}


def field_value(name: str, value: Any) -> Any:
    """``value`` as ``TrainParams.<name>`` takes it: a whole float as an int, a number as a
    float, layer sizes (text, list) as a tuple of ints; a fractional value for an integer
    field is refused with the field's name."""
    import typing

    from gkeflow.components.train.params import TrainParams

    kind = typing.get_type_hints(TrainParams).get(name)
    if kind is bool or kind is None or isinstance(value, bool):
        return value
    if kind is int:
        number = float(value)
        if not number.is_integer():
            raise ValueError(f"{name} must be a whole number; the search gave {value!r}")
        return int(number)
    if kind is float:
        return float(value)
    if kind is str:
        return str(value)
    if name == "hidden_units" or typing.get_origin(kind) is tuple:
        parts = value.split(",") if isinstance(value, str) else list(value)
        return tuple(int(float(u)) for u in parts if str(u).strip())
    return value


def run_trial(config: Mapping[str, Any]) -> None:
    """One Tune trial (runs in a Ray worker): fetch the inputs, train, report each epoch to
    Tune (and to the trial's MLflow run, when tracked), publish the model and the trial's
    report (written last)."""
    import tempfile

    from gkeflow.components.prepare.logic import Schema
    from gkeflow.components.scaleout import storage
    from gkeflow.components.tracking.steps import track_training, training_params
    from gkeflow.components.tracking.trials import open_trial_run
    from gkeflow.components.train.logic import TrainParams, train
    from gkeflow.components.train.report import trial_report

    trial, metric, output = dict(config["trial"]), config["metric"], config["output"]
    if "trial_id" not in trial:  # bayesian search: Tune made this trial
        from ray import tune

        from gkeflow.components.sweep.ray_search import trial_id_of

        trial["trial_id"] = trial_id_of(tune.get_context().get_trial_id())
    trial_id = str(trial["trial_id"])
    published = trial_uri(output, trial_id)
    tracker = open_trial_run(config.get("tracking") or {}, trial_id)
    with tempfile.TemporaryDirectory(prefix=f"gkeflow-{trial_id}-") as scratch:
        local = Path(scratch)
        model_dir = local / "model"
        try:
            dataset = storage.download(config["dataset"], local / "dataset")
            schema = storage.download(config["schema"], local / "schema.json")
            params = TrainParams(**trial_params(config["fixed"], trial))
            tracker.log_params(training_params(params))
            result = train(dataset, Schema.load(schema), model_dir, params,
                           live=lambda sampler: epoch_reporter(metric, tracker, sampler),
                           checkpoint_dir=f"{output.rstrip('/')}/checkpoints/{trial_id}")
            if params.model_type not in ("mlp", "wide_deep"):
                final_report(metric, result)  # trees report rounds' losses only
            report = trial_report(trial_id, f"{published}/model",
                                  {**result.metrics, "epochs_run": result.epochs_run})
            track_training(result, params, model_dir, task=trial_id, tracker=tracker,
                           live=True)
        except Exception as exc:  # a failed trial is listed; the sweep goes on
            report = trial_report(trial_id, "", error=f"{type(exc).__name__}: {exc}")
            tracker.finish("FAILED")
            model_dir.mkdir(parents=True, exist_ok=True)
        out = local / "published"
        shutil.copytree(model_dir, out / "model")
        storage.publish(out, published, {REPORT_KEY: report})


def final_report(metric: str, result) -> None:
    """The trial's final ``metric`` to Tune (a model without Keras epochs, such as
    gradient-boosted trees, reports its rounds' losses only), so a Bayesian search and the
    schedulers see every trial's result."""
    from ray import tune

    value = result.metrics.get(metric)
    if value is not None and math.isfinite(float(value)):
        tune.report({"epoch": max(1, int(result.epochs_run)), metric: float(value)})


def epoch_reporter(metric: str, tracker, sampler):
    """A Keras callback: each epoch's curves into the trial's run (when tracked), then its
    eval metric to Tune, whose scheduler may stop the trial there."""
    import keras
    from ray import tune

    from gkeflow.components.tracking.live import live_curves

    curves = live_curves(tracker, sampler)

    class ReportEpoch(keras.callbacks.Callback):
        def set_model(self, model):
            super().set_model(model)
            if curves is not None:
                curves.set_model(model)

        def on_epoch_begin(self, epoch, logs=None):
            if curves is not None:
                curves.on_epoch_begin(epoch, logs)

        def on_epoch_end(self, epoch, logs=None):
            if curves is not None:
                curves.on_epoch_end(epoch, logs)
            named = {LOG_METRICS.get(k, k): float(v) for k, v in (logs or {}).items()}
            value = named.get(metric)
            if value is not None and math.isfinite(value):
                tune.report({"epoch": epoch + 1, metric: value})

    return ReportEpoch()


def published_report(output: str, trial_id: str) -> str | None:
    """The report a trial published, or None (it was stopped, or is not done)."""
    from gkeflow.components.scaleout import storage

    summary = storage.published_summary(trial_uri(output, trial_id))
    return None if summary is None else summary[REPORT_KEY]


def _remove_checkpoints(output: str, trial_id: str, echo: Callable[[str], None]) -> None:
    """Remove what a stopped or failed trial left to resume from (best effort)."""
    from gkeflow.components.train.store import open_store

    try:
        open_store(f"{output.rstrip('/')}/checkpoints/{trial_id}").remove_all()
    except Exception as exc:
        echo(f"could not remove the checkpoints of {trial_id} under {output}/checkpoints: "
             f"{type(exc).__name__}: {exc}")


def stopped_report(trial_id: str, metric: str, last: Mapping[str, Any]) -> str:
    """The report of a trial the scheduler stopped: its epochs and last metric, no model."""
    from gkeflow.components.train.report import trial_report

    epochs = int(last.get("epoch", 0))
    metrics = {metric: float(last[metric]), "epochs_run": epochs} if metric in last else {}
    return trial_report(trial_id, "", metrics, status="stopped",
                        error=f"stopped early by the scheduler after {epochs} epoch(s)")


def run_tune(dataset: str | Path, schema: str | Path, trials: Sequence[Mapping[str, Any]],
             fixed: Mapping[str, Any], settings: TuneSettings, output: str | Path,
             echo: Callable[[str], None] = print, address: str = "",
             tracking: Mapping[str, str] | None = None,
             space: Mapping[str, Mapping[str, Any]] | None = None
             ) -> tuple[list[dict], list[str]]:
    """Run every trial under Tune; the trials (ids and hyperparameters) and one JSON
    report per trial, in trial order.

    ``trials``: the trials to run (``search: fixed``); with ``search: bayesian`` only their
    number counts, and the hyperparameters are drawn from ``space`` (``sweep.parameters``).

    ``dataset``, ``schema`` and ``output``: directories (or files) on this machine, or
    URIs every node reads alike (``gs://``). ``address``: the Ray cluster to join
    (``"auto"`` on a KubeRay head); empty starts a local instance sized for the trials.
    ``tracking``: where each trial opens its MLflow run
    (:func:`gkeflow.components.tracking.trials.trial_tracking`); empty for none.
    """
    import ray
    from ray import tune

    output = str(output)
    if not output.startswith("gs://"):
        Path(output).mkdir(parents=True, exist_ok=True)
    settings.check_space(space)
    bayesian = settings.search == "bayesian"
    max_epochs = max(int(trial_params(fixed, t).get("epochs", 1)) for t in trials)
    if bayesian and "epochs" in space:  # the most a searched epochs can be
        spec = space["epochs"]
        max_epochs = int(max(spec.get("values") or [spec.get("max", max_epochs)]))
    echo(f"Ray Tune: {len(trials)} trials, {settings.parallel_trials} at once, "
         f"{'Bayesian search (Optuna TPE), ' if bayesian else ''}scheduler "
         f"{settings.scheduler}, {settings.metric} ({settings.direction})")
    # the trials' processes inherit this one's environment (the backend, TF's log level)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # a trial that failed before its first epoch ends without a metric: listed as failed
    # (its published report), never a reason for Tune to abort the whole sweep
    os.environ["TUNE_DISABLE_STRICT_METRIC_CHECKING"] = "1"
    if address:
        ray.init(address=address, configure_logging=False, log_to_driver=False)
    else:
        cpus = settings.cpus_per_trial * min(settings.parallel_trials, len(trials))
        ray.init(num_cpus=max(1, math.ceil(cpus)), num_gpus=math.ceil(
            settings.gpus_per_trial * settings.parallel_trials) or None,
                 include_dashboard=False, configure_logging=False, log_to_driver=False)
    try:
        trainable = tune.with_resources(run_trial, {"cpu": settings.cpus_per_trial,
                                                    "gpu": settings.gpus_per_trial})
        if bayesian:
            from gkeflow.components.sweep.ray_search import bayesian_search, tune_domains

            searched = tune_domains(space)
            search = {"search_alg": bayesian_search(settings.metric, settings.mode,
                                                    settings.seed, settings.parallel_trials),
                      "num_samples": len(trials)}
        else:
            searched, search = tune.grid_search(list(trials)), {}
        tuner = tune.Tuner(
            trainable,
            param_space={"trial": searched, "fixed": dict(fixed),
                         "metric": settings.metric, "dataset": str(dataset),
                         "schema": str(schema), "output": output,
                         "tracking": dict(tracking or {})},
            tune_config=tune.TuneConfig(scheduler=make_scheduler(settings, max_epochs),
                                        max_concurrent_trials=settings.parallel_trials,
                                        **search),
            run_config=tune.RunConfig(
                storage_path=f"{output.rstrip('/')}/ray", name="sweep", verbose=0,
                failure_config=tune.FailureConfig(max_failures=settings.trial_retries)),
        )
        results = tuner.fit()
        found, ran = {}, {}
        for result in results:
            trial = dict(result.config["trial"])
            if bayesian:
                from gkeflow.components.sweep.ray_search import trial_id_of

                trial = {"trial_id": trial_id_of(_tune_id(result)), **trial}
            trial_id = str(trial["trial_id"])
            ran[trial_id] = trial
            written = published_report(output, trial_id)
            if written is not None:
                found[trial_id] = written
            elif result.error is not None:
                from gkeflow.components.train.report import trial_report

                found[trial_id] = trial_report(trial_id, "", error=str(result.error))
            else:
                found[trial_id] = stopped_report(trial_id, settings.metric,
                                                 result.metrics or {})
            if written is None:  # a finished trial removed its own checkpoints
                _remove_checkpoints(output, trial_id, echo)
    finally:
        ray.shutdown()
    # searched trials in the order the search made them (Tune's results keep it)
    order = list(ran) if bayesian else [str(t["trial_id"]) for t in trials]
    ran_trials = [ran[i] for i in order if i in found]
    reports = [found[i] for i in order if i in found]
    parsed = [json.loads(r) for r in reports]
    epochs = sum(int(r["metrics"].get("epochs_run", 0)) for r in parsed)
    stopped = sum(r["status"] == "stopped" for r in parsed)
    echo(f"Ray Tune: {stopped} of {len(trials)} trials stopped early; {epochs} epochs trained "
         f"in all (every trial to its end: {max_epochs * len(trials)} at most)")
    return ran_trials, reports


def _tune_id(result) -> str:
    """Tune's id of the trial behind ``result`` (``<experiment>_<counter>``): in its last
    result, else in the name of its directory."""
    import re

    if (result.metrics or {}).get("trial_id"):
        return str(result.metrics["trial_id"])
    found = re.search(r"_([0-9a-f]{8}|[0-9a-f]{5}_\d{5})_", str(result.path))
    return found.group(1) if found else str(result.path)
