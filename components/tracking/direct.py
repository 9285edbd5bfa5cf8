"""Direct mode: gkeflow makes the run structure itself where no plugin does (local runs,
Vertex AI, Kubeflow Pipelines before 2.17): one parent run per pipeline run, tagged with the
run's id and URL; each step then opens its nested run under it
(:func:`gkeflow.components.tracking.client.open_step_run`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gkeflow.components.tracking.client import Limits, Tracker
from gkeflow.components.tracking.pipeline_run import (
    PIPELINE_RUN_TAG,
    PIPELINE_TAG,
    RUN_URL_TAG,
    find_or_create_parent,
)

__all__ = ["PIPELINE_RUN_TAG", "PIPELINE_TAG", "RUN_URL_TAG", "end_pipeline_run",
           "parent_run", "start_pipeline_run"]


def start_pipeline_run(tracking_uri: str, experiment: str, pipeline_run_id: str, *,
                       pipeline_name: str = "", run_url: str = "",
                       tags: dict[str, str] | None = None, limits: Limits | None = None,
                       log: Callable[[str], None] = print) -> str:
    """The parent run of ``pipeline_run_id`` in ``experiment`` (created if missing, so a
    resubmission of the same run finds it again); "" when the server could not be reached,
    after one log line."""
    try:
        from mlflow import MlflowClient
    except ImportError:
        log("mlflow: not tracking this run: the mlflow client is not installed "
            "(pip install mlflow-skinny)")
        return ""
    tracker = Tracker(MlflowClient(tracking_uri=tracking_uri), "parent", limits=limits,
                      log=log, scope=f"pipeline run {pipeline_run_id}")
    all_tags = {PIPELINE_RUN_TAG: pipeline_run_id, **(tags or {})}
    if pipeline_name:
        all_tags[PIPELINE_TAG] = pipeline_name
    if run_url:
        all_tags[RUN_URL_TAG] = run_url
    run_id = tracker.call(f"opening the parent run in experiment {experiment!r}",
                          parent_run, tracker.client, experiment, pipeline_run_id, all_tags)
    return run_id or ""


def parent_run(client: Any, experiment: str, pipeline_run_id: str, tags: dict[str, str]) -> str:
    """Find or create the parent run (by the pipeline run id tag) in ``experiment``; one
    process makes it before any step starts, so there is no rival to wait for."""
    return find_or_create_parent(client, experiment, pipeline_run_id, tags, settle_s=0)


def end_pipeline_run(tracking_uri: str, parent_run_id: str, succeeded: bool, *,
                     limits: Limits | None = None,
                     log: Callable[[str], None] = print) -> None:
    """Close the parent run as FINISHED or FAILED, best effort."""
    if not parent_run_id:
        return
    from mlflow import MlflowClient

    tracker = Tracker(MlflowClient(tracking_uri=tracking_uri), parent_run_id, limits=limits,
                      owns_run=True, log=log, scope=f"parent run {parent_run_id}")
    tracker.finish("FINISHED" if succeeded else "FAILED")
