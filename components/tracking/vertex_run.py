"""A pipeline run's steps logging to one Vertex AI Experiments run (aiplatform SDK), for runs
outside Vertex AI Pipelines (GKE): each tracked step adds its parameters and metrics to the
experiment run named after the pipeline run, created by whichever step comes first.

The compiled pipeline gives the steps ``GKEFLOW_VERTEX_EXPERIMENT``,
``GKEFLOW_VERTEX_PROJECT``, ``GKEFLOW_VERTEX_LOCATION`` (and ``GKEFLOW_VERTEX_API_ENDPOINT``
where one is set), and the run's id (see :mod:`gkeflow.components.tracking.pipeline_run`).
Credentials are the pod's own (Workload Identity). The run's context id,
``<experiment>-<run>``, is deterministic: two steps that create it at once get one run (the
second create is answered 409 and reads it), and adding it to the experiment again is
skipped by the service. Best effort: bounded retries, one line on failure, the step goes on.
"""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gkeflow.components.tracking.client import one_line
from gkeflow.components.tracking.pipeline_run import pipeline_run

ENV_EXPERIMENT = "GKEFLOW_VERTEX_EXPERIMENT"
ENV_PROJECT = "GKEFLOW_VERTEX_PROJECT"
ENV_LOCATION = "GKEFLOW_VERTEX_LOCATION"
ENV_ENDPOINT = "GKEFLOW_VERTEX_API_ENDPOINT"
#: The TensorBoard instance backing the experiment, where the runs' curves go.
ENV_TENSORBOARD = "GKEFLOW_VERTEX_TENSORBOARD"
TENSORBOARD = re.compile(r"^projects/([^/]+)/locations/([^/]+)/tensorboards/([^/]+)$")
#: The artifact that links an experiment run to its TensorBoard run (aiplatform's names).
RUN_ARTIFACT_SCHEMA = "google.VertexTensorboardRun"
RUN_ARTIFACT_SUFFIX = "-tb-run"
TRACKING_LABEL = "vertex_experiment_tracking"
MAX_CONTEXT_ID = 128
#: Tracking never holds a step up for long: short calls, a small budget per call.
CALL_TIMEOUT_S = 20.0
BUDGET_S = 30.0
#: All of one step's (or one local run's) Vertex AI Experiments calls together.
DEADLINE_S = 120.0
#: Updates of a run read before another step changed it (its etag): read again, re-apply.
UPDATE_ATTEMPTS = 4
STALE = frozenset({409, 412})


def experiment_run_name(experiment: str, run_id: str) -> str:
    """``run_id`` as an experiment run name Vertex AI accepts (lowercase letters, digits and
    hyphens; the context ``<experiment>-<run>`` at most 128 characters)."""
    name = re.sub(r"[^a-z0-9-]+", "-", run_id.lower()).strip("-") or "run"
    return name[:MAX_CONTEXT_ID - len(experiment) - 1].rstrip("-")


def loggable(values: Mapping[str, Any], *, numbers_only: bool) -> dict[str, Any]:
    """``values`` as the SDK takes them: finite numbers and, for parameters, strings."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, bool):
            value = float(value) if numbers_only else str(value).lower()
        if isinstance(value, int | float):
            if math.isfinite(value):
                out[str(key)] = value
        elif not numbers_only and value is not None:
            out[str(key)] = str(value)[:1000]
    return out


def is_local_endpoint(endpoint: str) -> bool:
    return bool(re.match(r"^http://(127\.0\.0\.1|localhost|\[::1\])(:\d+)?$", endpoint or ""))


def log_run(experiment: str, name: str, params: Mapping[str, Any],
            metrics: Mapping[str, Any], state: str, *, parent: str,
            call: Callable[..., Any], tensorboard: str = "") -> None:
    """Get or create ``experiment`` and its run ``name``, add it to the experiment, log
    ``params`` and ``metrics`` and set ``state`` (``RUNNING``, ``COMPLETE``, ``FAILED``).
    ``aiplatform.init`` has been called; ``call(what, fn, idempotent=..., recover=...)``
    makes one bounded, retried call; ``parent``: ``projects/P/locations/L``. With
    ``tensorboard`` (the experiment's backing instance) the run is linked to its TensorBoard
    run, where its curves are (:mod:`vertex_curves`)."""
    from google.cloud import aiplatform
    from google.cloud.aiplatform import initializer, utils
    from google.cloud.aiplatform_v1 import Execution

    metadata = initializer.global_config.create_client(
        client_class=utils.MetadataClientWithOverride).select_version("v1")
    rpc = {"timeout": CALL_TIMEOUT_S, "retry": None}  # the SDK's own calls retry for 120 s

    def reachable() -> None:
        from google.api_core.exceptions import NotFound

        try:
            metadata.get_metadata_store(name=f"{parent}/metadataStores/default", **rpc)
        except NotFound:  # made with the experiment
            pass

    call("reach Vertex ML Metadata", reachable)  # a service that is away fails fast here
    found = call(f"look up or create experiment {experiment!r}",
                 lambda: aiplatform.Experiment.get_or_create(experiment))
    experiment_context = f"{parent}/metadataStores/default/contexts/{experiment}"
    run_context = f"{experiment_context}-{name}"  # the SDK's id: <experiment>-<run>

    def existing():
        try:
            return metadata.get_context(name=run_context, **rpc)
        except Exception:  # not there: the create did not happen
            return None

    created = existing() or call(
        f"create experiment run {name}",
        lambda: aiplatform.ExperimentRun.create(name, experiment=found),
        idempotent=False, recover=existing)
    # a create whose answer was lost, or another step's run, may not be in the experiment
    # yet: adding a child the experiment has already is skipped by the service
    call(f"add {name} to experiment {experiment!r}",
         lambda: metadata.add_context_children(context=experiment_context,
                                               child_contexts=[run_context], **rpc))
    if tensorboard:
        link_tensorboard_run(metadata, found, run_context, tensorboard, call)
    values = loggable(params, numbers_only=False)
    numbers = loggable(metrics, numbers_only=True)

    def apply(run) -> None:
        if values:
            run.log_params(values)
        if numbers:
            run.log_metrics(numbers)
        run.update_state(Execution.State[state])

    run = created if isinstance(created, aiplatform.ExperimentRun) else None
    for attempt in range(UPDATE_ATTEMPTS):
        if run is None:
            run = call(f"read experiment run {name}",
                       lambda: aiplatform.ExperimentRun(name, experiment=found))
        try:
            call(f"log to experiment run {name}", functools.partial(apply, run))
            return
        except Exception as exc:  # another step updated the run since it was read (etag)
            if status_of(exc) not in STALE or attempt == UPDATE_ATTEMPTS - 1:
                raise
            run = None


def tensorboard_run_name(tensorboard: str, experiment: str, run: str) -> str:
    return f"{tensorboard}/experiments/{experiment}/runs/{run}"


def ensure_tensorboard_run(tensorboard: str, experiment: str, run: str,
                           call: Callable[..., Any]) -> Any:
    """Make the TensorBoard experiment ``experiment`` and its run ``run`` in ``tensorboard``
    (kept when they exist, as the aiplatform SDK names them); returns the TensorBoard
    client. ``aiplatform.init`` has been called (:func:`session`)."""
    from google.cloud.aiplatform import initializer, utils
    from google.cloud.aiplatform_v1 import types

    client = initializer.global_config.create_client(
        client_class=utils.TensorboardClientWithOverride).select_version("v1")
    made = (
        (f"create TensorBoard experiment {experiment}", lambda: (
            client.create_tensorboard_experiment(
                parent=tensorboard, tensorboard_experiment_id=experiment,
                tensorboard_experiment=types.TensorboardExperiment(
                    display_name=experiment,
                    labels={"vertex_tensorboard_experiment_source": "vertex_experiment"}),
                timeout=CALL_TIMEOUT_S))),
        (f"create TensorBoard run {run}", lambda: client.create_tensorboard_run(
            parent=f"{tensorboard}/experiments/{experiment}", tensorboard_run_id=run,
            tensorboard_run=types.TensorboardRun(display_name=run),
            timeout=CALL_TIMEOUT_S)))
    for what, create in made:
        try:
            call(what, create, idempotent=False)
        except Exception as exc:  # 409: a retried step, another step or worker made it
            if status_of(exc) != 409:
                raise
    return client


def link_tensorboard_run(metadata: Any, experiment: Any, run_context: str, tensorboard: str,
                         call: Callable[..., Any]) -> None:
    """Link experiment run ``run_context`` to its TensorBoard run (made if missing) by the
    artifact aiplatform looks it up by, and make ``tensorboard`` the backing instance of
    ``experiment`` (an ``aiplatform.Experiment``)."""
    from google.cloud.aiplatform_v1 import types

    store, context_id = run_context.split("/contexts/")
    run = context_id.removeprefix(f"{experiment.name}-")
    ensure_tensorboard_run(tensorboard, experiment.name, run, call)  # the link names it
    run_name = tensorboard_run_name(tensorboard, experiment.name, run)
    artifact_id = f"{context_id}{RUN_ARTIFACT_SUFFIX}"
    try:
        call(f"link {run} to its TensorBoard run", lambda: metadata.create_artifact(
            parent=store, artifact_id=artifact_id, artifact=types.Artifact(
                schema_title=RUN_ARTIFACT_SCHEMA, schema_version="0.0.1",
                state=types.Artifact.State.LIVE, uri=f"https://{run_name}",
                metadata={"resourceName": run_name, TRACKING_LABEL: True}),
            timeout=CALL_TIMEOUT_S), idempotent=False)
    except Exception as exc:  # 409: linked by an earlier step of the run
        if status_of(exc) != 409:
            raise
    call(f"add the TensorBoard run to {run}", lambda: (
        metadata.add_context_artifacts_and_executions(
            context=run_context, artifacts=[f"{store}/artifacts/{artifact_id}"],
            timeout=CALL_TIMEOUT_S)))
    call("record the experiment's TensorBoard",
         lambda: experiment.assign_backing_tensorboard(tensorboard))


def within(seconds: float, fn: Callable[[], Any], what: str) -> Any:
    """``fn()`` in a daemon thread, waited for ``seconds`` at most (then TimeoutError; the
    thread is abandoned): the SDK's own calls cannot all be given a timeout."""
    import threading

    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = fn()
        except BaseException as exc:  # handed to the caller
            outcome["error"] = exc

    worker = threading.Thread(target=run, name="vertex-experiments", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise TimeoutError(f"{what} took more than {seconds:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of an SDK (``code``) or gkeflow (``status``) error."""
    for name in ("status", "code"):
        value = getattr(exc, name, None)
        if isinstance(value, int):
            return value
    return None


def session(environ: Mapping[str, str]) -> tuple[str, Callable[..., Any]]:
    """``aiplatform.init`` for ``environ``'s project, location and endpoint (a plain-http
    loopback endpoint is an emulator: no credentials), and the bounded, retried
    ``call(what, fn, idempotent=..., recover=...)`` the calls go through; returns
    ``(projects/P/locations/L, call)``."""
    from google.cloud import aiplatform

    from gkeflow.components.cloud.retry import RetryPolicy

    project, location = environ.get(ENV_PROJECT, ""), environ.get(ENV_LOCATION, "")
    endpoint = environ.get(ENV_ENDPOINT, "")
    credentials = None
    if is_local_endpoint(endpoint):
        from google.auth.credentials import AnonymousCredentials

        credentials = AnonymousCredentials()
    aiplatform.init(project=project, location=location, credentials=credentials,
                    api_transport="rest", **({"api_endpoint": endpoint} if endpoint else {}))
    policy = RetryPolicy(call_timeout_s=CALL_TIMEOUT_S, budget_s=BUDGET_S)

    def call(what, fn, idempotent=True, recover=None):
        from google.api_core.exceptions import Conflict

        if idempotent:  # a get-or-create: the store, then the experiment, may race
            for _ in range(2):
                try:
                    return policy.call(fn, what)
                except Conflict:  # another step created it meanwhile: now it is found
                    continue
            return policy.call(fn, what)
        try:
            return fn()
        except Exception:
            found = recover() if recover else None
            if found is None:
                raise
            return found

    return f"projects/{project}/locations/{location}", call


def log_step(step: str, params: Mapping[str, Any], metrics: Mapping[str, Any],
             environ: dict[str, str] | None = None, argv: Sequence[str] | None = None,
             log: Callable[[str], None] = print, state: str = "COMPLETE") -> bool:
    """Add one step's ``params`` and ``metrics`` to its pipeline run's experiment run and
    set the run's ``state``; False (after one line, if it was configured) when nothing was
    logged."""
    env = os.environ if environ is None else environ
    experiment, project = env.get(ENV_EXPERIMENT, ""), env.get(ENV_PROJECT, "")
    location, run_id = env.get(ENV_LOCATION, ""), pipeline_run(env, argv)[0]
    if not (experiment and project and location and run_id):
        return False
    name = experiment_run_name(experiment, run_id)
    try:
        parent, call = session(env)
        within(DEADLINE_S, lambda: log_run(
            experiment, name, {f"{step}.{k}": v for k, v in params.items()}, metrics,
            state, parent=parent, call=call, tensorboard=env.get(ENV_TENSORBOARD, "")),
            f"logging to experiment run {name}")
    except Exception as exc:  # best effort: the step goes on
        log(f"vertex experiments: {step} not logged to experiment {experiment!r} "
            f"({one_line(exc)}); the run goes on")
        return False
    return True
