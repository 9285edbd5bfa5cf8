"""Steps served from cache, in MLflow: such a step runs no code, so it logs nothing; the
run that ends the pipeline run gives each one its nested run all the same, tagged
``gkeflow.cached`` and pointing at the run that produced its outputs
(``gkeflow.cached_from``), whose parameters and latest metrics it copies: the pipeline run
shows every step, and what a cached step stands for.

The producing run is the one that logged the cached model (``gkeflow.model_uri``) when there
is one, else the newest finished, uncached run of the same task in the experiment. The
pipeline run itself gets the headline figures that step gave its own pipeline run (data
source, label, fingerprint and row counts for prepare-data; the training settings and
epochs for train-model) and the dataset inputs, so MLflow's compare view reads the same for
a cached run as for one that ran. A step whose producing run was never tracked (an earlier
run without tracking) is tagged ``gkeflow.cached_from: untracked`` and said in one line:
``--no-cache`` retrains it, tracked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from gkeflow.components.tracking.client import (
    MODEL_URI_TAG,
    PARENT_TAG,
    TASK_TAG,
    Limits,
    Tracker,
    nested_run,
)

CACHED_TAG = "gkeflow.cached"
CACHED_FROM_TAG = "gkeflow.cached_from"
UNTRACKED = "untracked"
#: What each step gives its pipeline run: parameter names (a trailing "." is a prefix) and
#: metric names, copied from the producing step's pipeline run for a cached step.
HEADLINES = {
    "prepare-data": (("data_uri", "label", "task", "data_fingerprint"),
                     ("rows_read", "rejected_rows")),
    "merge-prepared": (("data_uri", "label", "task", "data_fingerprint"),
                       ("rows_read", "rejected_rows")),
    "train-model": (("train.",), ("best_epoch", "epochs_run")),
}


def _headline(names: tuple[str, ...], key: str) -> bool:
    return any(key.startswith(n) if n.endswith(".") else key == n for n in names)


def parent_headlines(client: Any, made: Any, task: str) -> tuple[dict, dict]:
    """(params, metrics) the producing run ``made`` of ``task`` gave its pipeline run."""
    params_of, metrics_of = HEADLINES.get(task, ((), ()))
    parent_id = made.data.tags.get(PARENT_TAG, "")
    if not parent_id or not (params_of or metrics_of):
        return {}, {}
    parent = client.get_run(parent_id)
    return ({k: v for k, v in parent.data.params.items() if _headline(params_of, k)},
            {k: v for k, v in parent.data.metrics.items() if _headline(metrics_of, k)})


def producer(client: Any, experiment_id: str, parent_run_id: str, task: str,
             model_uri: str = "") -> Any:
    """The run that made the outputs of ``task`` this pipeline run took from cache."""
    quoted = task.replace("'", "")
    if model_uri:
        found = client.search_runs(
            [experiment_id], max_results=1, order_by=["attributes.start_time DESC"],
            filter_string=f"tags.`{MODEL_URI_TAG}` = '{model_uri.replace(chr(39), '')}'")
        if found:
            return found[0]
    found = client.search_runs(
        [experiment_id], max_results=20, order_by=["attributes.start_time DESC"],
        filter_string=(f"tags.`{TASK_TAG}` = '{quoted}' and "
                       "attributes.status = 'FINISHED'"))
    return next((run for run in found if run.data.tags.get(CACHED_TAG) != "true"
                 and run.data.tags.get(PARENT_TAG) != parent_run_id), None)


def record_cached_steps(tracking_uri: str, parent_run_id: str, tasks: Iterable[str],
                        model_uris: dict[str, str] | None = None, *,
                        log: Callable[[str], None] = print, client: Any = None) -> list[str]:
    """A nested run per cached task under ``parent_run_id`` (MLflow at ``tracking_uri``, or
    through ``client``); the tasks recorded."""
    tasks = list(tasks)
    if not ((tracking_uri or client is not None) and parent_run_id and tasks):
        return []
    if client is None:
        from mlflow import MlflowClient

        client = MlflowClient(tracking_uri=tracking_uri)
    tracker = Tracker(client, parent_run_id, limits=Limits(), log=log,
                      scope="the cached steps")
    parent = tracker.call("reading the pipeline run", tracker.client.get_run, parent_run_id)
    if parent is None:
        return []
    experiment_id = parent.info.experiment_id
    recorded, untracked = [], []
    for task in tasks:
        run_id = tracker.call(f"opening {task}'s run", nested_run, tracker.client,
                              parent_run_id, task, task)
        if not run_id:
            break
        made = tracker.call(f"finding the run that made {task}'s outputs", producer,
                            tracker.client, experiment_id, parent_run_id, task,
                            (model_uris or {}).get(task, ""))
        step = Tracker(tracker.client, run_id, owns_run=True, log=log,
                       scope=f"cached step {task}")
        step.set_tags({CACHED_TAG: "true",
                       CACHED_FROM_TAG: made.info.run_id if made is not None else UNTRACKED})
        if made is not None:
            step.log_params(dict(made.data.params))
            step.log_metrics(dict(made.data.metrics))
            headlines = tracker.call(f"reading what {task} gave its pipeline run",
                                     parent_headlines, tracker.client, made, task)
            if headlines:
                tracker.log_params(headlines[0], parent_run_id)
                tracker.log_metrics(headlines[1], 0, parent_run_id)
            from gkeflow.components.tracking.datasets import copy_datasets

            full = tracker.call(f"reading {task}'s producing run", tracker.client.get_run,
                                made.info.run_id)
            copy_datasets(tracker, full or made, [run_id, parent_run_id])
        else:
            untracked.append(task)
        step.finish()
        recorded.append(task)
    if untracked:
        log(f"tracking: {', '.join(untracked)} came from the cache of an untracked run: "
            "MLflow has no figures or curves for them (run again with --no-cache to retrain "
            "them, tracked)")
    return recorded
