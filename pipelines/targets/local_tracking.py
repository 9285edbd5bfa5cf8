"""Direct MLflow tracking for local runs: gkeflow makes the parent run itself (no Kubeflow
Pipelines plugin locally), hands every step ``MLFLOW_TRACKING_URI`` and
``GKEFLOW_MLFLOW_PARENT_RUN_ID`` through the environment kfp.local's subprocesses inherit,
and ends the parent run with the run's outcome. Best effort: a server that is down costs one
line and never changes the run.

Unless a registry is chosen, the run registers into the MLflow Model Registry of the same
server (:func:`default_registry`); that one is not best effort (the model must go
somewhere), so it is checked to answer before any step starts (:func:`registry_problem`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from gkeflow.components.tracking.client import (
    ENV_EXPERIMENT_ID,
    ENV_PARENT_RUN_ID,
    ENV_RUN_ID,
    ENV_TRACKING_URI,
)
from gkeflow.pipelines.settings.tracking_config import TrackingSettings, mlflow_registry_uri

#: How long the check that the registry's server answers may take, before any step runs.
REGISTRY_CHECK_TIMEOUT_S = 10.0


@dataclass
class LocalTracking:
    """The parent run of one local run ("" when not tracked); set ``succeeded`` before the
    block ends."""

    parent_run_id: str = ""
    pipeline_run_id: str = ""
    succeeded: bool = False


def local_run_id(pipeline: str, now: dt.datetime | None = None) -> str:
    """``local-training-20260101-120000-ab12cd``: the id a local run is tagged with."""
    now = now or dt.datetime.now(dt.UTC)
    return f"local-{pipeline}-{now:%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def credentials_problem(settings: TrackingSettings) -> str:
    """A one-line problem with the credentials' variables, or "" (checked before a run)."""
    if settings.mlflow is None or not settings.mlflow.tracking_uri:
        return ""
    try:
        settings.mlflow.credentials.environment()
    except ValueError as exc:
        return str(exc)
    return ""


def default_registry(settings: TrackingSettings) -> str:
    """The registry of a local run that names none: the MLflow Model Registry at
    ``tracking.mlflow.tracking_uri``, or "" (the run's own SQLite registry)."""
    mlflow = settings.mlflow
    return mlflow_registry_uri(mlflow.tracking_uri) if mlflow is not None else ""


def registry_problem(registry_uri: str, environment: str,
                     timeout_s: float = REGISTRY_CHECK_TIMEOUT_S) -> str:
    """One line when the MLflow server of ``registry_uri`` cannot be reached at all ("" when
    it answers, whatever it answers: its refusals are the registration's to report)."""
    import urllib.error
    import urllib.request

    from gkeflow.components.register.mlflow_registry import parse_mlflow_uri

    server = parse_mlflow_uri(registry_uri)
    url = f"{server}/api/2.0/mlflow/registered-models/search?max_results=1"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s):  # noqa: S310 - http(s) only
            return ""
    except urllib.error.HTTPError:
        return ""
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return (f"the model registry is tracking.{environment}.mlflow's server {server}, "
                f"which cannot be reached ({type(reason).__name__}); start it, or choose "
                "another registry with --param registry_uri=URI")


@contextlib.contextmanager
def direct_tracking(settings: TrackingSettings, pipeline: str, run_url: str = "", *,
                    log: Callable[[str], None] = print) -> Iterator[LocalTracking]:
    """Open the parent run in ``settings.mlflow`` (if it has a tracking URI), expose it to
    the steps for the duration of the block, then end it FINISHED or FAILED."""
    tracking = LocalTracking()
    mlflow = settings.mlflow
    if mlflow is None or not mlflow.tracking_uri:
        yield tracking
        return
    from gkeflow.components.tracking.direct import end_pipeline_run, start_pipeline_run

    tracking.pipeline_run_id = local_run_id(pipeline)
    variables = {ENV_TRACKING_URI: mlflow.tracking_uri, **mlflow.credentials.environment()}
    saved = {name: os.environ.get(name)
             for name in (*variables, ENV_PARENT_RUN_ID, ENV_RUN_ID, ENV_EXPERIMENT_ID)}
    os.environ.update(variables)
    for name in (ENV_RUN_ID, ENV_EXPERIMENT_ID):  # plugin mode is not this run's
        os.environ.pop(name, None)
    try:
        tracking.parent_run_id = start_pipeline_run(
            mlflow.tracking_uri, mlflow.experiment, tracking.pipeline_run_id,
            pipeline_name=pipeline, run_url=run_url, tags={"gkeflow.target": "local"},
            log=log)
        if tracking.parent_run_id:
            os.environ[ENV_PARENT_RUN_ID] = tracking.parent_run_id
        yield tracking
    finally:
        try:
            end_pipeline_run(mlflow.tracking_uri, tracking.parent_run_id, tracking.succeeded,
                             log=log)
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


@contextlib.contextmanager
def curves_environment(experiments, vertex_target, pipeline_run_id: str) -> Iterator[None]:
    """Within: the local steps' environment names the TensorBoard instance, experiment and
    run train-model writes its curves to (``experiments``: ``tracking.<env>.
    vertex_experiments``); nothing without a TensorBoard or ``targets.vertex``."""
    if experiments is None or not experiments.tensorboard or vertex_target is None:
        yield
        return
    from gkeflow.components.tracking import vertex_run
    from gkeflow.components.tracking.client import environment
    from gkeflow.components.tracking.vertex_curves import ENV_CURVES_EXPERIMENT, ENV_CURVES_RUN

    variables = {vertex_run.ENV_TENSORBOARD: experiments.tensorboard,
                 ENV_CURVES_EXPERIMENT: experiments.experiment,
                 ENV_CURVES_RUN: vertex_run.experiment_run_name(experiments.experiment,
                                                                pipeline_run_id),
                 vertex_run.ENV_ENDPOINT: vertex_target.api_endpoint or ""}
    with environment(variables):
        yield
