"""Direct mode inside compiled pipelines (Vertex AI, Kubeflow Pipelines without the MLflow
plugin): each step finds or creates its pipeline run's parent MLflow run itself, then opens
its nested run under it.

The compiled pipeline gives every tracked step (``gkeflow.pipelines.definitions.tracking_tasks``):

- ``GKEFLOW_MLFLOW_TRACKING_URI``, ``GKEFLOW_MLFLOW_EXPERIMENT``, ``GKEFLOW_MLFLOW_PIPELINE``,
  ``GKEFLOW_MLFLOW_TARGET`` and ``GKEFLOW_MLFLOW_RUN_URL`` (a template of the run's page);
- the run's id and name: on Vertex AI (and kfp.local) as two extra command-line arguments
  resolved from the pipeline-job placeholders; on GKE, whose Kubeflow Pipelines backend
  resolves those placeholders only as input values, as ``GKEFLOW_PIPELINE_RUN_ID`` /
  ``_NAME`` from the pod's ``pipeline/runid`` label and run-name annotation. Never as step
  inputs: those would change the steps' cache keys on every run;
- credentials by reference only: on GKE ``MLFLOW_TRACKING_*`` from a Kubernetes Secret, on
  Vertex AI ``GKEFLOW_MLFLOW_TOKEN_SECRET``, a Secret Manager secret read at start.

Precedence (:func:`open_step_run`): ``MLFLOW_RUN_ID`` (the plugin) wins, then a parent run
handed down by ``gkeflow run`` (``GKEFLOW_MLFLOW_PARENT_RUN_ID``), then this module's mode.

Two steps starting at once must not make two parents: each searches by the run's tag; one
that finds none creates a candidate, waits :data:`SETTLE_S` and searches again, keeping the
oldest (recorded start time, then run id: every racer picks the same one); a losing
candidate is tagged with the winner and deleted.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from gkeflow.components.cloud.secret_manager import ENDPOINT_ENV
from gkeflow.components.tracking import client as base
from gkeflow.components.tracking.client import Limits, Tracker, one_line

ENV_URI = "GKEFLOW_MLFLOW_TRACKING_URI"
ENV_EXPERIMENT = "GKEFLOW_MLFLOW_EXPERIMENT"
ENV_PIPELINE = "GKEFLOW_MLFLOW_PIPELINE"
ENV_TARGET = "GKEFLOW_MLFLOW_TARGET"
ENV_RUN_URL = "GKEFLOW_MLFLOW_RUN_URL"
ENV_TOKEN_SECRET = "GKEFLOW_MLFLOW_TOKEN_SECRET"
ENV_SECRET_MANAGER = ENDPOINT_ENV
#: The extra arguments a compiled step gets (``--NAME VALUE``), read from ``sys.argv``.
ARG_RUN_ID = "--gkeflow_pipeline_run_id"
ARG_RUN_NAME = "--gkeflow_pipeline_run_name"
#: GKE: the run's id and name from the pod's metadata (kfp-kubernetes field paths).
ENV_RUN_ID_FIELD = "GKEFLOW_PIPELINE_RUN_ID"
ENV_RUN_NAME_FIELD = "GKEFLOW_PIPELINE_RUN_NAME"

PIPELINE_RUN_TAG = "gkeflow.pipeline_run_id"
PIPELINE_RUN_NAME_TAG = "gkeflow.pipeline_run_name"
PIPELINE_TAG = "gkeflow.pipeline"
RUN_URL_TAG = "gkeflow.run_url"
TARGET_TAG = "gkeflow.target"
SUPERSEDED_TAG = "gkeflow.superseded_by"
#: How long a step that created a parent waits before looking for a rival one.
SETTLE_S = 2.0


def argument(name: str, argv: Sequence[str] | None = None) -> str:
    """The value after ``name`` on the command line ("" when absent or unresolved)."""
    args = list(sys.argv if argv is None else argv)
    for index, arg in enumerate(args[:-1]):
        if arg == name:
            value = args[index + 1]
            return "" if value.startswith("{{$") else value
    return ""


def pipeline_run(environ: dict[str, str] | None = None,
                 argv: Sequence[str] | None = None) -> tuple[str, str]:
    """The pipeline run's (id, name): the resolved arguments, else the pod's fields."""
    env = os.environ if environ is None else environ
    return (argument(ARG_RUN_ID, argv) or env.get(ENV_RUN_ID_FIELD, ""),
            argument(ARG_RUN_NAME, argv) or env.get(ENV_RUN_NAME_FIELD, ""))


def run_url(template: str, run_id: str, run_name: str) -> str:
    """The run's page from ``template`` (``{run_id}``, ``{run_name}``), or ""."""
    if not template:
        return ""
    return template.replace("{run_id}", run_id).replace("{run_name}", run_name)


def read_secret_token(version: str, environ: dict[str, str] | None = None,
                      timeout_s: float = 10.0) -> str:
    """The token held in Secret Manager secret ``version`` (one bounded request)."""
    from gkeflow.components.cloud.secret_manager import access_request, secret_value

    session, url = access_request(version, environ)
    answer = session.get(url, timeout=timeout_s)
    if answer.status_code != 200:
        name = url.rsplit("/v1/", 1)[-1].removesuffix(":access")
        raise RuntimeError(f"Secret Manager answered {answer.status_code} for {name}")
    return secret_value(answer.json())


#: A compiled GKE step's credentials from its Kubernetes Secret -> MLflow's own variables.
SECRET_ENV = {"GKEFLOW_MLFLOW_TRACKING_TOKEN": "MLFLOW_TRACKING_TOKEN",
              "GKEFLOW_MLFLOW_TRACKING_USERNAME": "MLFLOW_TRACKING_USERNAME",
              "GKEFLOW_MLFLOW_TRACKING_PASSWORD": "MLFLOW_TRACKING_PASSWORD"}


def load_credentials(environ: dict[str, str] | None = None,
                     log: Callable[[str], None] = print) -> None:
    """Give MLflow's client (``MLFLOW_TRACKING_TOKEN`` / ``_USERNAME`` / ``_PASSWORD``) the
    credentials of a compiled step where none are set already (the plugin's win): a GKE
    step's from its Secret (:data:`SECRET_ENV`), a Vertex AI step's token from the Secret
    Manager secret ``GKEFLOW_MLFLOW_TOKEN_SECRET`` names."""
    env = os.environ if environ is None else environ
    if not any(env.get(name) for name in SECRET_ENV.values()):
        for ours, mlflows in SECRET_ENV.items():
            if env.get(ours):
                env[mlflows] = env[ours]
    secret = env.get(ENV_TOKEN_SECRET, "")
    if not secret or env.get("MLFLOW_TRACKING_TOKEN"):
        return
    try:
        env["MLFLOW_TRACKING_TOKEN"] = read_secret_token(secret, env)
    except Exception as exc:  # never the value: the message names the secret only
        log(f"mlflow: could not read the token in {secret} ({one_line(exc)}); "
            "calling the server without it")


def candidates(client: Any, experiment_id: str, pipeline_run_id: str) -> list:
    """The live parent runs tagged with ``pipeline_run_id``, oldest first."""
    key = pipeline_run_id.replace("'", "")
    runs = client.search_runs([experiment_id], max_results=50,
                              filter_string=f"tags.`{PIPELINE_RUN_TAG}` = '{key}'")
    return sorted(runs, key=lambda run: (run.info.start_time or 0, run.info.run_id))


#: MLflow 3 opens an experiment in the view its kind names: the model-training view (runs,
#: metrics, charts), not the GenAI one (traces, evaluations), whatever it infers.
EXPERIMENT_TAGS = {"mlflow.experimentKind": "custom_model_development"}


def find_or_create_parent(client: Any, experiment: str, pipeline_run_id: str,
                          tags: dict[str, str], settle_s: float = SETTLE_S,
                          sleep: Callable[[float], None] = time.sleep) -> str:
    """The one parent run of ``pipeline_run_id`` in ``experiment`` (created if missing)."""
    found = client.get_experiment_by_name(experiment)
    if found is not None:
        experiment_id = found.experiment_id
    else:
        try:
            experiment_id = client.create_experiment(experiment, tags=EXPERIMENT_TAGS)
        except Exception:  # another step created it meanwhile
            experiment_id = client.get_experiment_by_name(experiment).experiment_id
    existing = candidates(client, experiment_id, pipeline_run_id)
    if existing:
        return existing[0].info.run_id
    mine = client.create_run(experiment_id, run_name=pipeline_run_id,
                             tags={PIPELINE_RUN_TAG: pipeline_run_id, **tags}).info.run_id
    sleep(settle_s)
    rivals = candidates(client, experiment_id, pipeline_run_id)
    winner = rivals[0].info.run_id if rivals else mine
    if winner != mine:
        client.set_tag(mine, SUPERSEDED_TAG, winner)
        client.delete_run(mine)
    return winner


class PipelineStepTracker(Tracker):
    """A step's nested run whose :meth:`finish` also marks the parent run FINISHED (a later
    step sets it RUNNING again): no step knows which one is the run's last."""

    parent_run_id: str = ""

    def finish(self, status: str = "FINISHED") -> None:
        super().finish(status)
        if self.parent_run_id and not self.failed:
            self.call("ending the parent run", self.client.set_terminated,
                      self.parent_run_id, status, budgeted=False)


def open_step_run(step: str, task: str = "", parent_run_id: str = "",
                  environ: dict[str, str] | None = None, argv: Sequence[str] | None = None,
                  log: Callable[[str], None] = print, settle_s: float = SETTLE_S) -> Tracker:
    """The tracker of one step: a training run handed down by a launcher
    (:func:`open_handed_run`), plugin, ``gkeflow run``'s parent, a compiled pipeline's
    settings (this module) or off."""
    env = os.environ if environ is None else environ
    if env.get(base.ENV_TRAINING_RUN) and env.get(base.ENV_TRACKING_URI):
        return open_handed_run(env, log)
    uri, experiment = env.get(ENV_URI, ""), env.get(ENV_EXPERIMENT, "")
    run_id, run_name = pipeline_run(env, argv)
    handed = env.get(base.ENV_RUN_ID) or parent_run_id or env.get(base.ENV_PARENT_RUN_ID)
    if handed or not (uri and experiment and run_id):
        return base.open_step_run(step, task, parent_run_id, environ, log)
    load_credentials(env, log)
    client = base.mlflow_client(uri, log)
    if client is None:
        return Tracker(log=log)
    tags = {name: value for name, value in (
        (PIPELINE_RUN_NAME_TAG, run_name), (PIPELINE_TAG, env.get(ENV_PIPELINE, "")),
        (TARGET_TAG, env.get(ENV_TARGET, "")),
        (RUN_URL_TAG, run_url(env.get(ENV_RUN_URL, ""), run_id, run_name))) if value}
    tracker = PipelineStepTracker(client, "pending", limits=Limits.from_env(env), log=log,
                                  uri=uri)
    parent = tracker.call(f"opening the parent run in experiment {experiment!r}",
                          find_or_create_parent, client, experiment, run_id, tags, settle_s)
    if not parent:
        return tracker
    tracker.call("reopening the parent run", client.update_run, parent, status="RUNNING")
    nested = tracker.call("opening the step's run", base.nested_run, client, parent, step,
                          task or step)
    if nested:
        tracker.run_id, tracker.owns_run, tracker.parent_run_id = nested, True, parent
    return tracker


def open_handed_run(environ: dict[str, str] | None = None,
                    log: Callable[[str], None] = print) -> Tracker:
    """The run a launcher opened for the training it started remotely
    (``GKEFLOW_MLFLOW_TRAINING_RUN_ID`` at ``MLFLOW_TRACKING_URI``); the launcher ends it."""
    env = os.environ if environ is None else environ
    run_id, uri = env.get(base.ENV_TRAINING_RUN, ""), env.get(base.ENV_TRACKING_URI, "")
    if not (run_id and uri):
        return Tracker(log=log)
    load_credentials(env, log)
    client = base.mlflow_client(uri, log)
    if client is None:
        return Tracker(log=log)
    return Tracker(client, run_id, limits=Limits.from_env(env), log=log, uri=uri,
                   scope="this training process")
