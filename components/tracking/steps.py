"""What each step logs into its MLflow run: one call at the end of each step's shell.

Each function opens the step's run (:func:`open_step_run`), logs, and ends it; with no
tracking configured it returns at once without importing mlflow. On GKE a step may also add
its parameters and metrics to its pipeline run's Vertex AI experiment run
(:func:`gkeflow.components.tracking.vertex_run.log_step`, a no-op unless compiled in).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gkeflow.components.tracking.client import (
    MODEL_LOGGED_TAG,
    MODEL_URI_TAG,
    PARENT_TAG,
    TASK_TAG,
    Tracker,
    entity_key,
    one_line,
)
from gkeflow.components.tracking.pipeline_run import open_step_run
from gkeflow.components.tracking.plots import confusion_matrix_png, roc_png
from gkeflow.components.tracking.vertex_run import log_step

DECISION_TAG = "gkeflow.gate.decision"
REASONS_TAG = "gkeflow.gate.reasons"
FINGERPRINT_TAG = "gkeflow.data_fingerprint"
MODEL_ARTIFACT_PATH = "model"


def best_effort(track):
    """Whatever goes wrong while tracking, the step goes on (one line says so)."""
    @functools.wraps(track)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            track(*args, **kwargs)
        except Exception as exc:
            print(f"mlflow: tracking stopped in this step: {one_line(exc)}; the run goes on")

    return wrapper


@best_effort
def track_preparation(result: Any, data_uri: str, label_column: str,
                      data_fingerprint: str = "", tracker: Tracker | None = None,
                      step: str = "prepare-data") -> None:
    """prepare-data (or the fan-out's merge-prepared, ``step``): the data fingerprint, the
    source and the split counts."""
    params = {"data_uri": data_uri, "label_column": label_column,
              "data_fingerprint": data_fingerprint or "(not computed)"}
    counts = {"rows_read": result.rows_read, "rejected_rows": result.rejected_rows,
              **{f"{name}_rows": n for name, n in result.split_rows.items()}}
    log_step(step, params, counts)
    t = tracker or open_step_run(step)
    if not t.enabled:
        return
    t.log_params(params)
    if data_fingerprint:
        t.set_tags({FINGERPRINT_TAG: data_fingerprint})
    t.log_metrics(counts)
    schema = result.schema
    t.log_to_parent(params={"data_uri": data_uri, "label": label_column,
                            "task": getattr(schema, "task", "") or "classification",
                            "data_fingerprint": data_fingerprint or "(not computed)"},
                    metrics={"rows_read": result.rows_read,
                             "rejected_rows": result.rejected_rows})
    from gkeflow.components.tracking.datasets import dataset_input, log_dataset

    log_dataset(t, dataset_input(data_uri, data_fingerprint, label_column,
                                 dict(result.split_rows),
                                 [c.name for c in schema.features]), [t.run_id, t.parent_id()])
    t.log_dict({"rows_read": result.rows_read, "split_rows": dict(result.split_rows),
                "rejected_rows": result.rejected_rows,
                "rejected_reasons": dict(result.rejected_reasons),
                "label": result.schema.label,
                "classes": list(result.schema.label_vocabulary),
                "features": [c.name for c in result.schema.features],
                "problems": list(result.problems)}, "data/preparation.json")
    t.finish()


def training_params(params: Any) -> dict[str, Any]:
    """train-model's parameters as MLflow takes them (lists joined with commas)."""
    values = dataclasses.asdict(params) if dataclasses.is_dataclass(params) else dict(params)
    return {k: ",".join(map(str, v)) if isinstance(v, list | tuple) else v
            for k, v in values.items()}


def start_training_run(params: Any, task: str = "") -> Tracker:
    """train-model's run, opened as training starts, its parameters logged at once: the
    live curves (:mod:`gkeflow.components.tracking.live`) go into it epoch by epoch. A
    retried step reopens the run its earlier attempt left (the same task)."""
    try:
        tracker = open_step_run("train-model", task=task)
        tracker.log_params(training_params(params))
        return tracker
    except Exception as exc:  # best effort: tracking never fails the step
        print(f"mlflow: tracking off for train-model: {one_line(exc)}", flush=True)
        return Tracker()


@best_effort
def track_training(result: Any, params: Any, model_dir: Path, task: str = "",
                   tracker: Tracker | None = None, live: bool = False,
                   model_uri: str = "",
                   writer: Callable[[Path, Path], Path] | None = None) -> None:
    """train-model: the parameters, the curves per epoch (``step`` = epoch, from 1), the
    final metrics and the model under ``model/``: as the MLflow model ``writer(model_dir,
    path)`` writes (``gkeflow.components.train.mlflow_model``: one that
    ``mlflow.pyfunc.load_model`` loads), else its SavedModel files. ``live``: the curves and
    parameters are in ``tracker``'s run already (logged as training went). ``model_uri``
    (the step's Model artifact) is tagged, for the registry to point at this run's model."""
    values = training_params(params)
    final = {**{f"final_{k}": v for k, v in result.metrics.items()},
             "best_epoch": result.best_epoch, "epochs_run": result.epochs_run,
             "examples_per_s": result.examples_per_s}
    log_step("train-model", values, final)
    t = tracker or open_step_run("train-model", task=task)
    if not t.enabled:
        return
    from mlflow.entities import Metric

    if not live:
        now = int(time.time() * 1000)
        t.log_params(values)
        series = [Metric(entity_key(name), float(value), now, epoch)
                  for name, history in result.history.items()
                  for epoch, value in enumerate(history, start=1) if _finite(value)]
        t.log_metric_series(series)
    t.log_metrics(final)
    if task in ("", "train-model"):  # not a sweep's trial: the pipeline's own training
        t.log_to_parent(params={f"train.{k}": v for k, v in values.items()},
                        metrics={"best_epoch": result.best_epoch,
                                 "epochs_run": result.epochs_run})
    t.set_tags({"gkeflow.strategy": result.strategy, "gkeflow.precision": result.precision,
                **({TASK_TAG: task.replace("'", "")} if task else {})})  # how a sweep finds trials
    if Path(model_dir).is_dir():
        log_model(t, Path(model_dir), model_uri, writer)
    t.finish()


def log_model(t: Tracker, model_dir: Path, model_uri: str = "",
              writer: Callable[[Path, Path], Path] | None = None) -> None:
    """The SavedModel as an MLflow model under ``model/`` (``writer``), tagged complete once
    uploaded; the SavedModel's own files without a writer or where it fails (said)."""
    if not t.enabled:
        return
    with tempfile.TemporaryDirectory(prefix="gkeflow-mlflow-model-") as tmp:
        directory = model_dir
        if writer is not None:
            try:
                directory = writer(model_dir, Path(tmp) / "model")
            except Exception as exc:  # e.g. no pandas: the files still reach the run
                print(f"mlflow: the model is logged as its SavedModel files, not as an "
                      f"MLflow model: {one_line(exc)}", flush=True)
        t.log_artifacts(str(directory), MODEL_ARTIFACT_PATH)
    if t.enabled:
        t.set_tags({MODEL_LOGGED_TAG: "true", **({MODEL_URI_TAG: model_uri} if model_uri
                                                 else {})})


def logged_model_run(t: Tracker, model_uri: str) -> str:
    """The run of this pipeline run that logged the MLflow model of ``model_uri`` ('' for
    none): what the registry's version then points at, so the model is uploaded once."""
    parent = t.parent_id() if t.enabled and model_uri else ""
    if not parent:
        return ""
    experiment = t.call("reading the pipeline run", t.client.get_run, parent)
    if experiment is None:
        return ""
    quoted = model_uri.replace("'", "")
    logged = f"tags.`{MODEL_URI_TAG}` = '{quoted}' and tags.`{MODEL_LOGGED_TAG}` = 'true'"
    found = t.call("finding the run that logged the model", t.client.search_runs,
                   [experiment.info.experiment_id], max_results=1,
                   filter_string=f"tags.`{PARENT_TAG}` = '{parent}' and {logged}")
    if not found:  # training came from cache: the run that trained it, in this experiment
        found = t.call("finding the run that logged the model", t.client.search_runs,
                       [experiment.info.experiment_id], max_results=1,
                       order_by=["attributes.start_time DESC"], filter_string=logged)
    return found[0].info.run_id if found else ""


@best_effort
def track_evaluation(result: Any, model_card: str, tracker: Tracker | None = None,
                     plots_html: str = "") -> None:
    """evaluate-model: overall and per-slice metrics, the gate's decision, the confusion
    matrix and the ROC curve (JSON plus PNG where matplotlib is installed), or a regressor's
    plots (``plots_html``), the model card and the whole evidence (evaluation.json)."""
    policy = {"min_accuracy": result.policy.min_accuracy,
              "comparison_metric": result.policy.comparison_metric,
              "regression_tolerance": result.policy.regression_tolerance,
              "thresholds": ",".join(str(x) for x in result.policy.thresholds)}
    log_step("evaluate-model", {**policy, "decision": "blessed" if result.passed
                                else "rejected"}, result.scalar_metrics())
    t = tracker or open_step_run("evaluate-model")
    if not t.enabled:
        return
    t.log_metrics(result.scalar_metrics())
    t.log_params(policy)
    t.log_to_parent(metrics={f"test_{k}": v for k, v in result.scalar_metrics().items()},
                    tags={DECISION_TAG: "blessed" if result.passed else "rejected"})
    t.set_tags({DECISION_TAG: "blessed" if result.passed else "rejected",
                REASONS_TAG: "; ".join(result.decision.reasons),
                "gkeflow.champion_version": result.champion.version if result.champion else 0})
    if getattr(result, "task", "") == "regression":  # no confusion matrix, no ROC curve
        t.log_dict(json.loads(result.to_json()), "evaluation/evaluation.json")
        if plots_html:
            t.log_text(plots_html, "evaluation/regression_plots.html")
        t.log_text(model_card, "model_card.md")
        t.finish()
        return
    metrics = result.metrics
    t.log_dict({"labels": metrics.labels, "matrix": metrics.confusion_matrix,
                "rows": "true class", "columns": "predicted class"},
               "evaluation/confusion_matrix.json")
    roc = {"positive_class": result.roc_class, "auc": metrics.roc_auc,
           "fpr": [float(v) for v in result.roc.fpr], "tpr": [float(v) for v in result.roc.tpr],
           "threshold": [float(v) for v in result.roc.thresholds]}
    t.log_dict(roc, "evaluation/roc_curve.json")
    t.log_dict([dataclasses.asdict(s) if dataclasses.is_dataclass(s) else vars(s)
                for s in result.slices], "evaluation/slices.json")
    t.log_dict(json.loads(result.to_json()), "evaluation/evaluation.json")
    t.log_text(model_card, "model_card.md")
    with tempfile.TemporaryDirectory(prefix="gkeflow-plots-") as tmp:
        cm, curve = Path(tmp) / "confusion_matrix.png", Path(tmp) / "roc_curve.png"
        if t.enabled and confusion_matrix_png(metrics.labels, metrics.confusion_matrix, cm):
            t.log_artifact(str(cm), "evaluation")
        if t.enabled and roc["fpr"] and roc_png(roc["fpr"], roc["tpr"], result.roc_class,
                                                metrics.roc_auc, curve):
            t.log_artifact(str(curve), "evaluation")
    t.finish()


@best_effort
def track_registration(outcome: Any, blessed: bool | None = None,
                       tracker: Tracker | None = None) -> None:
    """register-model: the gate's decision and the registered version, as tags."""
    version = outcome.version
    action = ("unchanged" if outcome.unchanged
              else "registered" if outcome.created else "already-registered")
    log_step("register-model", {"action": action, "backend": outcome.backend,
                                "model": f"{version.name}@{version.version}"}, {})
    t = tracker or open_step_run("register-model")
    if not t.enabled:
        return
    tags = {"gkeflow.registry.backend": outcome.backend,
            "gkeflow.registry.action": action,
            "gkeflow.registered_model.name": version.name,
            "gkeflow.registered_model.version": version.version,
            "gkeflow.registered_model.resource_name": version.resource_name}
    if blessed is not None:
        tags[DECISION_TAG] = "blessed" if blessed else "rejected"
    t.set_tags(tags)
    t.log_to_parent(tags={"gkeflow.registered_model.name": version.name,
                          "gkeflow.registered_model.version": version.version},
                    metrics={"registered_version": float(version.version)}
                    if str(version.version).isdigit() else None)
    t.finish()


@best_effort
def track_prediction(result: Any, output_uri: str = "", tracker: Tracker | None = None) -> None:
    """predict-batch: the model scored with, the row counts, the speed and the drift."""
    params = {"model_name": result.model_name, "model_version": result.model_version,
              "selected_by": result.selected_by, "output_uri": output_uri or "(run's own)"}
    counts = {"rows_read": result.rows_read, "rows_scored": result.rows_scored,
              "rows_rejected": result.rows_rejected, "rows_per_s": result.rows_per_s,
              **dict(result.drift)}
    log_step("predict-batch", params, counts)
    t = tracker or open_step_run("predict-batch")
    if not t.enabled:
        return
    t.log_params(params)
    t.log_metrics(counts)
    t.set_tags({"gkeflow.scored_model": f"{result.model_name}@{result.model_version}"})
    t.finish()


def _finite(value: Any) -> bool:
    try:
        return float(value) == float(value) and abs(float(value)) != float("inf")
    except (TypeError, ValueError):
        return False
