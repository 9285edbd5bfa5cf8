"""A sweep in MLflow: the selecting step (select-best-trial, tune-with-vizier on Vertex AI,
tune-with-ray or tune-on-kuberay) logs the sweep and its best trial into its own run, and
every trial as a nested run of the pipeline run's parent, whichever engine ran it.

A trial's run is the one its training opened (task tag = the trial's id, under the same
parent: ParallelFor trials train in train-model steps and Ray Tune trials in Ray workers,
both logging their curves there as they train), else one made here (Vizier's trials run as
Vertex AI jobs the pipeline does not track). A Ray trial the scheduler stopped is ended
here, ``KILLED``.
Either way it gets the trial's hyperparameters as params, its objective metric, its status
and rank, and the best one ``gkeflow.sweep.best = true``.
"""

from __future__ import annotations

from typing import Any

from gkeflow.components.tracking.client import (
    PARENT_TAG,
    STEP_TAG,
    TASK_TAG,
    Tracker,
)
from gkeflow.components.tracking.pipeline_run import open_step_run
from gkeflow.components.tracking.steps import best_effort
from gkeflow.components.tracking.vertex_run import log_step

BEST_TRIAL_TAG = "gkeflow.sweep.best_trial"
TRIAL_STEP = "sweep-trial"


@best_effort
def track_selection(selection: Any, step: str = "select-best-trial",
                    tuning_job: str = "") -> None:
    """The selecting step: the sweep's settings, the best trial and the trial table; then
    each trial's run (:func:`log_trial`)."""
    summary = selection.summary()
    metric = selection.metric
    params = {"metric": metric, "direction": selection.direction,
              "trials": len(summary["trials"]),
              **({"tuning_job": tuning_job} if tuning_job else {}),
              **{f"best_{k}": v for k, v in summary["hyperparameters"].items()}}
    figures = {f"best_{metric}": summary["best_value"], "trials_succeeded": summary["succeeded"],
               "trials_failed": summary["failed"]}
    log_step(step, params, figures)
    t = open_step_run(step)
    if not t.enabled:
        return
    t.log_params(params)
    t.log_metrics(figures)
    t.set_tags({BEST_TRIAL_TAG: summary["best_trial"]})
    t.log_dict(summary, "sweep/trials.json")
    parent = t.call("reading the parent run", parent_of, t.client, t.run_id)
    if parent:
        outcomes = {row["trial_id"]: row for row in summary["trials"]}
        for outcome in selection_outcomes(selection):
            if not t.enabled:
                break
            log_trial(t, parent, outcome, outcomes.get(outcome["trial_id"], {}), metric,
                      best=outcome["trial_id"] == summary["best_trial"])
    t.finish()


def selection_outcomes(selection: Any) -> list[dict[str, Any]]:
    """Each trial of the table: its id, hyperparameters and status."""
    return [{"trial_id": row["trial_id"], "status": row["status"],
             "hyperparameters": {k: v for k, v in row.items() if k not in
                                 ("rank", "trial_id", "status", "error", selection.metric)}}
            for row in selection.rows]


def parent_of(client: Any, run_id: str) -> str:
    """The parent run of ``run_id`` (the pipeline run's), or ""."""
    return client.get_run(run_id).data.tags.get(PARENT_TAG, "")


def trial_run(client: Any, parent: str, trial_id: str) -> tuple[str, bool]:
    """(run id, made here): the trial's training run under ``parent``, else a new one."""
    experiment_id = client.get_run(parent).info.experiment_id
    task = trial_id.replace("'", "")
    found = client.search_runs([experiment_id], max_results=1, filter_string=(
        f"tags.`{PARENT_TAG}` = '{parent}' and tags.`{TASK_TAG}` = '{task}'"))
    if found:
        return found[0].info.run_id, False
    run = client.create_run(experiment_id, run_name=trial_id, tags={
        PARENT_TAG: parent, STEP_TAG: TRIAL_STEP, TASK_TAG: task})
    return run.info.run_id, True


def log_trial(t: Tracker, parent: str, outcome: dict[str, Any], row: dict[str, Any],
              metric: str, best: bool) -> None:
    """One trial into its run (through ``t``: the selecting step's budget): hyperparameters,
    the objective metric under its own name, status, rank, best or not."""
    found = t.call(f"opening the run of {outcome['trial_id']}", trial_run, t.client, parent,
                   outcome["trial_id"])
    if not found:
        return
    run_id, made = found
    hyperparameters = outcome["hyperparameters"]
    own, t.run_id = t.run_id, run_id
    try:
        if made:  # a training step's run has them already, as it typed them
            t.log_params(hyperparameters)
        value = row.get(metric)
        t.log_metrics({metric: value} if value is not None else {})
        t.set_tags({"gkeflow.sweep.trial": outcome["trial_id"],
                    "gkeflow.sweep.status": outcome["status"],
                    "gkeflow.sweep.rank": row.get("rank") or "-",
                    "gkeflow.sweep.best": "true" if best else "false",
                    **{f"gkeflow.sweep.hp.{k}": v for k, v in hyperparameters.items()}})
        # a trial the scheduler stopped (a Ray Tune trial) never ended its own run
        if made or outcome["status"] == "stopped":
            t.call("ending the trial's run", t.client.set_terminated, run_id,
                   {"succeeded": "FINISHED", "stopped": "KILLED"}.get(outcome["status"],
                                                                    "FAILED"),
                   budgeted=False)
    finally:
        t.run_id = own
