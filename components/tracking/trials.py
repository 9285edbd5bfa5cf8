"""Trials that train outside the selecting step (Ray Tune's, on a local Ray instance or a
KubeRay cluster; Vertex AI Vizier's, jobs of the tuning service) log into nested runs of
their own, as ParallelFor trials do.

The selecting step (``tune-with-ray``, ``tune-on-kuberay``) opens its run and hands the
trials :func:`trial_tracking`: the server and the pipeline run's parent run, values only.
Each trial opens the ``train-model`` run of its task (the trial id) under that parent
(:func:`open_trial_run`: the one a restarted trial left, else a new one) and logs its
parameters at once and its curves epoch by epoch; the selection then tags every trial's
run with its status and rank (:mod:`.sweep`), ending the runs of trials the scheduler
stopped. On a KubeRay cluster the Ray pods get the credentials by reference
(:func:`kubernetes_env`: ``secretKeyRef`` entries of the step's Kubernetes Secret). A
Vizier trial's container gets the same values as environment variables (:func:`trial_env`,
read back by :func:`tracking_from_env`), with the name of the Secret Manager secret holding
the server's token, never the token.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from gkeflow.components.tracking import client as base
from gkeflow.components.tracking.client import Tracker, one_line


def trial_tracking(step: str, log: Callable[[str], None] = print) -> dict[str, str]:
    """``{"uri", "parent"}`` for the trials of ``step``; empty when tracking is off."""
    from gkeflow.components.tracking.pipeline_run import open_step_run

    try:
        tracker = open_step_run(step, log=log)
        if not tracker.enabled or not tracker.uri:
            return {}
        parent = tracker.parent_id()
        return {"uri": tracker.uri, "parent": parent} if parent else {}
    except Exception as exc:  # best effort: tracking never fails the sweep
        log(f"mlflow: the trials of {step} are not tracked: {one_line(exc)}")
        return {}


def open_trial_run(tracking: Mapping[str, str], trial_id: str,
                   log: Callable[[str], None] = print) -> Tracker:
    """The trial's ``train-model`` run under the pipeline run's parent; off without
    ``tracking``. Credentials come from this process's environment (MLflow's variables)."""
    if not tracking or not tracking.get("uri") or not tracking.get("parent"):
        return Tracker(log=log)
    handed = (base.ENV_RUN_ID, base.ENV_TRAINING_RUN, base.ENV_PARENT_RUN_ID)
    env = {k: v for k, v in os.environ.items() if k not in handed}
    env[base.ENV_TRACKING_URI] = tracking["uri"]
    try:
        return base.open_step_run("train-model", task=trial_id,
                                  parent_run_id=tracking["parent"], environ=env, log=log)
    except Exception as exc:
        log(f"mlflow: {trial_id} is not tracked: {one_line(exc)}")
        return Tracker(log=log)


def kubernetes_env(tracking: Mapping[str, str],
                   environ: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """``env`` entries giving a cluster's pods the step's MLflow credentials by reference
    (the Secret named in ``GKEFLOW_MLFLOW_GKE_SECRET``, each key optional); none without
    tracking or a Secret."""
    from gkeflow.components.tracking.handoff import ENV_GKE_SECRET, SECRET_KEYS

    env = os.environ if environ is None else environ
    secret = env.get(ENV_GKE_SECRET, "")
    if not tracking or not secret:
        return []
    return [{"name": name, "valueFrom": {"secretKeyRef": {
        "name": secret, "key": key, "optional": True}}} for key, name in SECRET_KEYS]


#: A Vizier trial's container: the tracking server and the parent run (values only).
ENV_TRIAL_URI = "GKEFLOW_TRIAL_MLFLOW_URI"
ENV_TRIAL_PARENT = "GKEFLOW_TRIAL_MLFLOW_PARENT"


def trial_env(tracking: Mapping[str, str],
              environ: Mapping[str, str] | None = None) -> list[dict[str, str]]:
    """``env`` entries (``{"name", "value"}``) of a Vertex AI trial container: the server,
    the parent run and the step's token secret name (``GKEFLOW_MLFLOW_TOKEN_SECRET``, which
    the trial reads with its own service account); none without tracking."""
    from gkeflow.components.tracking.pipeline_run import ENV_TOKEN_SECRET

    env = os.environ if environ is None else environ
    if not tracking or not tracking.get("uri") or not tracking.get("parent"):
        return []
    entries = [{"name": ENV_TRIAL_URI, "value": tracking["uri"]},
               {"name": ENV_TRIAL_PARENT, "value": tracking["parent"]}]
    if env.get(ENV_TOKEN_SECRET):
        entries.append({"name": ENV_TOKEN_SECRET, "value": env[ENV_TOKEN_SECRET]})
    return entries


def tracking_from_env(environ: dict[str, str] | None = None,
                      log: Callable[[str], None] = print) -> dict[str, str]:
    """What :func:`trial_env` gave this trial's container (``{}``: not tracked), with the
    server's token read into MLflow's variable from the secret it names."""
    from gkeflow.components.tracking.pipeline_run import load_credentials

    env = os.environ if environ is None else environ
    uri, parent = env.get(ENV_TRIAL_URI, ""), env.get(ENV_TRIAL_PARENT, "")
    if not (uri and parent):
        return {}
    load_credentials(env, log)
    return {"uri": uri, "parent": parent}
