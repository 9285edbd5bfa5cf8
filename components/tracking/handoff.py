"""Training that runs outside its tracked step (a Vertex AI CustomJob, a GKE JobSet, local
worker processes) logs into that step's own nested MLflow run.

The launcher (the tracked train-model step) opens the step's run as any step does
(:func:`~gkeflow.components.tracking.pipeline_run.open_step_run`), tags it with the job's
name (``gkeflow.remote_job``) and hands its id to the job: ``GKEFLOW_MLFLOW_TRAINING_RUN_ID``
and ``MLFLOW_TRACKING_URI`` as values, credentials by reference only (the Secret Manager
secret's name on Vertex AI, read in the container when tracking starts; ``secretKeyRef``
entries of the Kubernetes Secret on GKE). Only the chief (worker 0) logs training into it
(:func:`~gkeflow.components.tracking.pipeline_run.open_handed_run`); the launcher ends the
run when the job has ended. A launcher that re-attaches to its job (a retried step) finds
the run by the job's tag, so the job and every attempt share one run.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from gkeflow.components.tracking import client as base
from gkeflow.components.tracking.client import Tracker
from gkeflow.components.tracking.pipeline_run import (
    ENV_SECRET_MANAGER,
    ENV_TOKEN_SECRET,
    open_step_run,
)

REMOTE_JOB_TAG = "gkeflow.remote_job"
ENGINE_TAG = "gkeflow.remote_engine"
#: GKE: the Kubernetes Secret holding the credentials (its name only, compiled into the
#: launcher step by ``gkeflow.pipelines.definitions.tracking_tasks``).
ENV_GKE_SECRET = "GKEFLOW_MLFLOW_GKE_SECRET"
#: The Secret's keys and the variables MLflow's client reads them from.
SECRET_KEYS = (("token", "MLFLOW_TRACKING_TOKEN"), ("username", "MLFLOW_TRACKING_USERNAME"),
               ("password", "MLFLOW_TRACKING_PASSWORD"))
#: Plain variables of the launcher's environment the job's chief gets as they are: names
#: of secrets and endpoints, never a credential's value.
PASSED_ON = (ENV_TOKEN_SECRET, ENV_SECRET_MANAGER)


class RemoteTraining:
    """The launcher's side: the run handed to the job, and its end."""

    def __init__(self, tracker: Tracker, environ: dict[str, str] | None = None) -> None:
        self.tracker = tracker
        self._env = os.environ if environ is None else environ

    @property
    def enabled(self) -> bool:
        return self.tracker.enabled and bool(self.tracker.uri)

    @property
    def run_id(self) -> str:
        return self.tracker.run_id if self.enabled else ""

    def env(self) -> dict[str, str]:
        """Plain variables for the chief's container (none when tracking is off)."""
        if not self.enabled:
            return {}
        env = {base.ENV_TRACKING_URI: self.tracker.uri, base.ENV_TRAINING_RUN: self.run_id}
        env.update({name: self._env[name] for name in PASSED_ON if self._env.get(name)})
        return env

    def kubernetes_env(self) -> list[dict[str, Any]]:
        """``env`` entries of a pod: :meth:`env`, plus the credentials of the Kubernetes
        Secret named in ``GKEFLOW_MLFLOW_GKE_SECRET`` by ``secretKeyRef`` (each optional)."""
        entries: list[dict[str, Any]] = [{"name": k, "value": v}
                                         for k, v in sorted(self.env().items())]
        secret = self._env.get(ENV_GKE_SECRET, "")
        if entries and secret:
            entries += [{"name": name, "valueFrom": {"secretKeyRef": {
                "name": secret, "key": key, "optional": True}}} for key, name in SECRET_KEYS]
        return entries

    def end(self, succeeded: bool) -> None:
        """End the run (direct mode; the plugin ends its own) once the job has ended."""
        if self.tracker.run_id and self.tracker.run_id != "pending":
            self.tracker.finish("FINISHED" if succeeded else "FAILED")


def job_run(client: Any, run_id: str, job: str) -> str:
    """The run an earlier attempt handed to ``job`` (in ``run_id``'s experiment), or ""."""
    experiment_id = client.get_run(run_id).info.experiment_id
    found = client.search_runs([experiment_id], max_results=1,
                               filter_string=f"tags.`{REMOTE_JOB_TAG}` = "
                                             f"'{job.replace(chr(39), '')}'",
                               order_by=["attributes.start_time ASC"])
    return found[0].info.run_id if found else ""


def open_remote_training(job: str, engine: str, task: str = "train-model",
                         environ: dict[str, str] | None = None,
                         log: Callable[[str], None] = print) -> RemoteTraining:
    """The training step's run for ``job`` (the one an earlier attempt handed to it, else
    the step's own: train-model's, or a candidate step's such as ``train-mlp``), tagged with
    the job; tracking off when nothing is configured."""
    step = task if task.startswith("train-") else "train-model"  # train-gbdt, train-mlp...
    tracker = open_step_run(step, task=task, environ=environ, log=log)
    remote = RemoteTraining(tracker, environ)
    if not tracker.enabled:
        return remote
    found = tracker.call(f"looking for the run of {job}", job_run, tracker.client,
                         tracker.run_id, job)
    if found and found != tracker.run_id:
        tracker.call("reopening the job's run", tracker.client.update_run, found,
                     status="RUNNING")
        tracker.run_id = found
    tracker.set_tags({REMOTE_JOB_TAG: job, ENGINE_TAG: engine})
    if tracker.enabled:
        log(f"mlflow: training in {job} logs into run {tracker.run_id} (its chief only)")
    return remote


def chief_only(env: dict[str, str], is_chief: bool) -> dict[str, str]:
    """``env`` without the handed run unless this process is the chief."""
    return env if is_chief else {k: v for k, v in env.items() if k != base.ENV_TRAINING_RUN}
