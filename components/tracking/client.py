"""One step's MLflow run, best effort: bounded HTTP retries, a bounded total time, and on the
first failure one log line, then no more tracking for the rest of the step.

Which run a step logs into (:func:`open_step_run`):

- **plugin mode**: ``MLFLOW_RUN_ID`` (with ``MLFLOW_TRACKING_URI``) in the environment, as
  Kubeflow Pipelines 2.17's MLflow plugin sets for each task; the plugin ends the run;
- **direct mode**: a parent run given explicitly (or in ``GKEFLOW_MLFLOW_PARENT_RUN_ID``);
  the step finds or creates its nested run (tag ``mlflow.parentRunId``) and ends it;
- otherwise tracking is off and nothing is imported or sent.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

ENV_TRACKING_URI = "MLFLOW_TRACKING_URI"
ENV_RUN_ID = "MLFLOW_RUN_ID"
ENV_EXPERIMENT_ID = "MLFLOW_EXPERIMENT_ID"
ENV_PARENT_RUN_ID = "GKEFLOW_MLFLOW_PARENT_RUN_ID"
#: The run a training process started by a launcher logs into (the launcher's nested run,
#: :mod:`gkeflow.components.tracking.handoff`); given to the chief only.
ENV_TRAINING_RUN = "GKEFLOW_MLFLOW_TRAINING_RUN_ID"
PARENT_TAG = "mlflow.parentRunId"
RUN_NAME_TAG = "mlflow.runName"
STEP_TAG = "gkeflow.step"
#: Tags of the run that logged a model: its URI (the step's Model artifact) and that the
#: MLflow model under ``model/`` is complete (the registry may then point at it).
MODEL_URI_TAG = "gkeflow.model_uri"
MODEL_LOGGED_TAG = "gkeflow.model_logged"
TASK_TAG = "gkeflow.task"

#: MLflow's limits on one log-batch request and on one value.
MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_TAGS_PER_BATCH = 100
MAX_PARAM_LENGTH = 6000
MAX_TAG_LENGTH = 8000
MAX_KEY_LENGTH = 250
#: What MLflow refuses in a metric, param or tag name.
_BAD_KEY_CHARS = re.compile(r"[^\w./\- :]")
#: The error code of a request MLflow refused for its content (a param logged before with
#: another value, a bad name): that one call is skipped, tracking goes on.
REFUSED = "INVALID_PARAMETER_VALUE"


@dataclass(frozen=True)
class Limits:
    """How hard tracking tries: per HTTP call (MLflow's client retries) and per step."""

    max_retries: int = 2
    timeout_s: int = 10
    backoff_factor: int = 1
    backoff_jitter: float = 0.5
    #: All tracking calls of one step together; past it tracking turns off.
    budget_s: float = 120.0

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Limits:
        """The defaults, lowered (never raised) by MLflow's own variables where set."""
        env = os.environ if environ is None else environ
        base = cls()

        def lower(name: str, default: int) -> int:
            try:
                return min(default, max(0, int(env[name])))
            except (KeyError, ValueError):
                return default

        return cls(max_retries=lower("MLFLOW_HTTP_REQUEST_MAX_RETRIES", base.max_retries),
                   timeout_s=lower("MLFLOW_HTTP_REQUEST_TIMEOUT", base.timeout_s) or 1,
                   backoff_factor=lower("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR",
                                        base.backoff_factor),
                   backoff_jitter=base.backoff_jitter, budget_s=base.budget_s)

    def http_env(self) -> dict[str, str]:
        """MLflow's client settings for these limits."""
        return {
            "MLFLOW_HTTP_REQUEST_MAX_RETRIES": str(self.max_retries),
            "MLFLOW_HTTP_REQUEST_TIMEOUT": str(max(1, self.timeout_s)),
            "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": str(self.backoff_factor),
            "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": str(self.backoff_jitter),
        }


@contextlib.contextmanager
def environment(variables: dict[str, str]) -> Iterator[None]:
    """``variables`` set in this process's environment inside, then restored as they were
    (unset where they were unset)."""
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def http_limits(limits: Limits):
    """Set MLflow's HTTP retry and timeout variables for the calls inside, then restore."""
    return environment(limits.http_env())


def entity_key(name: str) -> str:
    """``name`` as MLflow accepts a metric, param or tag name."""
    key = _BAD_KEY_CHARS.sub("_", str(name)).replace("..", "_").strip("/ ") or "_"
    return key[:MAX_KEY_LENGTH]


def one_line(exc: BaseException, limit: int = 300) -> str:
    """An exception as one short line."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text[:limit]}"


class Tracker:
    """Best-effort logging into one MLflow run; every method returns quietly when off."""

    def __init__(self, client: Any = None, run_id: str = "", *, limits: Limits | None = None,
                 owns_run: bool = False, log: Callable[[str], None] = print,
                 scope: str = "this step", clock: Callable[[], float] = time.monotonic,
                 uri: str = "") -> None:
        self.client, self.run_id, self.limits = client, run_id, limits or Limits()
        #: The tracking server's URI (handed on to a launched training job).
        self.uri = uri
        self.owns_run, self.scope, self._log, self._clock = owns_run, scope, log, clock
        self.enabled = client is not None and bool(run_id)
        #: The server failed (or there is none): not even the run is ended.
        self.failed = not self.enabled
        self.calls = 0
        self.spent_s = 0.0
        self._parent: str | None = None  # the pipeline run's run id, once read

    def call(self, what: str, fn: Callable[..., Any], *args: Any, budgeted: bool = True,
             **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` within the limits; on any failure tracking turns off.
        ``budgeted=False``: made even when the step's budget is spent (ending the run)."""
        if not self.enabled and (budgeted or self.failed):
            return None
        if budgeted and self.spent_s >= self.limits.budget_s:
            self.turn_off(f"{self.limits.budget_s:g} s of tracking spent in {self.scope}")
            return None
        self.calls += 1
        start = self._clock()
        try:
            with http_limits(self.limits):
                return fn(*args, **kwargs)
        except Exception as exc:  # best effort: nothing here may fail the step
            if getattr(exc, "error_code", "") == REFUSED:
                self._log(f"mlflow: the server refused {what}, skipped ({one_line(exc)})")
            else:
                self.turn_off(f"{what} failed ({one_line(exc)})")
                self.failed = True
            return None
        finally:
            self.spent_s += self._clock() - start

    def turn_off(self, reason: str) -> None:
        if self.enabled:
            self.enabled = False
            self._log(f"mlflow: tracking off for the rest of {self.scope}: {reason}; "
                      "the run goes on")

    # --- what steps log ---------------------------------------------------------------------

    def log_metrics(self, values: dict[str, float | None], step: int = 0,
                    run_id: str = "") -> None:
        """Finite numeric values as metrics at ``step`` (of ``run_id``, default this run);
        None, NaN and inf are left out."""
        if not self.enabled:
            return
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(entity_key(k), float(v), now, step) for k, v in values.items()
                   if isinstance(v, int | float) and math.isfinite(v)]
        self.log_metric_series(metrics, run_id)

    def log_metric_series(self, metrics: list, run_id: str = "") -> None:
        """``mlflow.entities.Metric`` objects, in as few requests as MLflow allows."""
        for i in range(0, len(metrics), MAX_METRICS_PER_BATCH):
            self.call("logging metrics", self.client.log_batch, run_id or self.run_id,
                      metrics=metrics[i:i + MAX_METRICS_PER_BATCH])

    def log_params(self, values: dict[str, Any], run_id: str = "") -> None:
        if not self.enabled:
            return
        from mlflow.entities import Param

        params = [Param(entity_key(k), str(v)[:MAX_PARAM_LENGTH]) for k, v in values.items()]
        for i in range(0, len(params), MAX_PARAMS_TAGS_PER_BATCH):
            self.call("logging parameters", self.client.log_batch, run_id or self.run_id,
                      params=params[i:i + MAX_PARAMS_TAGS_PER_BATCH])

    def set_tags(self, values: dict[str, Any], run_id: str = "") -> None:
        if not self.enabled:
            return
        from mlflow.entities import RunTag

        tags = [RunTag(entity_key(k), str(v)[:MAX_TAG_LENGTH]) for k, v in values.items()]
        for i in range(0, len(tags), MAX_PARAMS_TAGS_PER_BATCH):
            self.call("setting tags", self.client.log_batch, run_id or self.run_id,
                      tags=tags[i:i + MAX_PARAMS_TAGS_PER_BATCH])

    def log_dict(self, value: Any, artifact_file: str) -> None:
        self.call(f"logging {artifact_file}", self.client.log_dict, self.run_id, value,
                  artifact_file)

    def log_text(self, text: str, artifact_file: str) -> None:
        self.call(f"logging {artifact_file}", self.client.log_text, self.run_id, text,
                  artifact_file)

    def log_artifact(self, path: str, artifact_path: str | None = None) -> None:
        self.call(f"uploading {os.path.basename(path)}", self.client.log_artifact,
                  self.run_id, path, artifact_path)

    def log_artifacts(self, directory: str, artifact_path: str) -> None:
        self.call(f"uploading {artifact_path}/", self.client.log_artifacts, self.run_id,
                  directory, artifact_path)

    def parent_id(self) -> str:
        """The pipeline run's MLflow run this step's run is nested in ('' for none)."""
        if getattr(self, "parent_run_id", ""):
            return self.parent_run_id
        if self._parent is None:
            run = self.call("reading the run's parent", self.client.get_run, self.run_id)
            self._parent = run.data.tags.get(PARENT_TAG, "") if run is not None else ""
        return self._parent

    def log_to_parent(self, params: dict[str, Any] | None = None,
                      metrics: dict[str, float | None] | None = None,
                      tags: dict[str, Any] | None = None) -> None:
        """Headline figures on the pipeline run's own MLflow run, so that MLflow's compare
        view shows two pipeline runs side by side."""
        if not self.enabled:
            return
        parent = self.parent_id()
        if not parent:
            return
        self.log_params(params or {}, parent)
        self.log_metrics(metrics or {}, 0, parent)
        self.set_tags(tags or {}, parent)

    def finish(self, status: str = "FINISHED") -> None:
        """End the run when this step created it (direct mode); the plugin ends its own."""
        if self.owns_run:
            self.call("ending the run", self.client.set_terminated, self.run_id, status,
                      budgeted=False)


def mlflow_client(uri: str, log: Callable[[str], None] = print) -> Any | None:
    """An MLflow client of the server at ``uri``; None, said in one line, where there is no
    mlflow package or MLflow does not understand ``uri`` (tracking is then off)."""
    try:
        from mlflow import MlflowClient

        return MlflowClient(tracking_uri=uri)
    except ImportError:
        log("mlflow: tracking off for this step: the mlflow client is not installed "
            "(pip install mlflow-skinny)")
    except Exception as exc:  # e.g. a tracking URI MLflow does not understand
        log(f"mlflow: tracking off for this step: {one_line(exc)}")
    return None


def open_step_run(step: str, task: str = "", parent_run_id: str = "",
                  environ: dict[str, str] | None = None,
                  log: Callable[[str], None] = print) -> Tracker:
    """The tracker of one step: plugin mode, direct mode or off (see the module docstring)."""
    env = os.environ if environ is None else environ
    uri = env.get(ENV_TRACKING_URI, "")
    run_id = env.get(ENV_RUN_ID, "")
    parent = parent_run_id or env.get(ENV_PARENT_RUN_ID, "")
    if not uri or not (run_id or parent):
        return Tracker(log=log)
    limits = Limits.from_env(env)
    client = mlflow_client(uri, log)
    if client is None:
        return Tracker(log=log)
    tracker = Tracker(client, run_id or "pending", limits=limits, log=log, uri=uri)
    if run_id:
        return tracker
    nested = tracker.call("opening the step's run", nested_run, tracker.client, parent,
                          step, task or step)
    if nested:
        tracker.run_id, tracker.owns_run = nested, True
    return tracker


def nested_run(client: Any, parent_run_id: str, step: str, task: str) -> str:
    """The id of the task's run under ``parent_run_id``: the one a retry left, or a new one."""
    parent = client.get_run(parent_run_id)
    experiment_id = parent.info.experiment_id
    task_filter = task.replace("'", "")
    found = client.search_runs(
        [experiment_id], max_results=1,
        filter_string=(f"tags.`{PARENT_TAG}` = '{parent_run_id}' "
                       f"and tags.`{TASK_TAG}` = '{task_filter}'"))
    if found:
        run_id = found[0].info.run_id
        client.update_run(run_id, status="RUNNING")
        return run_id
    run = client.create_run(experiment_id, run_name=task, tags={
        PARENT_TAG: parent_run_id, STEP_TAG: step, TASK_TAG: task_filter})
    return run.info.run_id
