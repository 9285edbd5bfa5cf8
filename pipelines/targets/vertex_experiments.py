"""Vertex AI Experiments: a Vertex AI pipeline run submitted into an experiment.

The calls ``aiplatform.PipelineJob.submit(experiment=...)`` makes, through gkeflow's bounded
calls: before the job is created, the ``default`` metadata store and the experiment (a
``system.Experiment`` context whose id is the experiment's name) are read, and created
when missing, so a refused or misnamed experiment costs no run; once Vertex AI has made the
run's ``system.PipelineRun`` context, it is added to the experiment's children
(``AddContextChildren``). Idempotent: the context id is the experiment's name (a create
answered 409, or failing after the server acted, reads it back), and the service skips a
child it already has, so retries never make a second experiment or a second run in it.
Vertex AI schedules have no experiment association (``CreatePipelineJobRequest`` has no
such field), so scheduled runs are not submitted into one.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gkeflow.pipelines.targets.backends import PlannedRequest
from gkeflow.pipelines.targets.transport import RemoteError

SYSTEM_EXPERIMENT = "system.Experiment"
#: aiplatform's ``metadata.constants.SCHEMA_VERSIONS[SYSTEM_EXPERIMENT]``.
SCHEMA_VERSION = "0.0.1"
#: The experiment's metadata as aiplatform writes it (``constants.EXPERIMENT_METADATA``).
EXPERIMENT_METADATA = {"experiment_deleted": False}
#: A context holding this key backs a TensorBoard of a CustomJob, not an experiment.
TENSORBOARD_FIELD = "tensorboard_link"
STORE_ID = "default"
#: How long submit waits for Vertex AI to make the run's context (it does so as the run starts).
RUN_CONTEXT_WAIT_S = 300.0
_DONE = {"PIPELINE_STATE_SUCCEEDED", "PIPELINE_STATE_FAILED", "PIPELINE_STATE_CANCELLED"}


def store_name(backend) -> str:
    return f"{backend.parent}/metadataStores/{STORE_ID}"


def experiment_context_name(backend, experiment: str) -> str:
    return f"{store_name(backend)}/contexts/{experiment}"


def experiment_url(backend, experiment: str) -> str:
    target = backend.target
    return (f"https://console.cloud.google.com/vertex-ai/experiments/locations/{target.region}"
            f"/experiments/{experiment}?project={target.project}")


def _plan(backend, method: str, path: str, body=None, note: str = "") -> None:
    backend.planned.append(PlannedRequest(method, f"{backend.endpoint}/v1/{path}", body,
                                          note=note))


def _absent(backend, what: str, get, *, once: bool = False):
    """``get()``'s answer, or None on a 404; ``once``: one request (the look-up after a
    create failed)."""
    try:
        return (backend.once if once else backend.call)(what, get)
    except RemoteError as exc:
        if exc.status == 404:
            return None
        raise


def _ensure_store(backend, client) -> None:
    from google.cloud import aiplatform_v1

    name = store_name(backend)
    if _absent(backend, "look up metadata store 'default'",
               lambda: client.get_metadata_store(name=name, **backend.rpc)) is not None:
        return

    def find():
        return _absent(backend, "look up metadata store 'default'",
                       lambda: client.get_metadata_store(name=name, **backend.rpc), once=True)

    created = backend.call(
        "create metadata store 'default'",
        lambda: client.create_metadata_store(
            parent=backend.parent, metadata_store=aiplatform_v1.MetadataStore(),
            metadata_store_id=STORE_ID, **backend.rpc),
        idempotent=False, recover=find)
    if hasattr(created, "result"):  # an operation, not the store a look-up found
        backend.call("wait for metadata store 'default'",
                     lambda: created.result(timeout=backend.policy.timeout_s))


def _check_experiment(context, experiment: str) -> None:
    if context.schema_title != SYSTEM_EXPERIMENT:
        raise RemoteError(f"Vertex AI metadata context {experiment!r} is a "
                          f"{context.schema_title}, not an experiment; choose another "
                          "tracking.vertex_experiments.experiment")
    if TENSORBOARD_FIELD in context.metadata:
        raise RemoteError(f"Vertex AI context {experiment!r} is a CustomJob's TensorBoard "
                          "experiment, not a Vertex AI experiment; choose another "
                          "tracking.vertex_experiments.experiment")


def ensure_experiment(backend, experiment: str) -> str:
    """The experiment context's resource name; the context (and the ``default`` metadata
    store) created when missing. Called before the run is created."""
    name = experiment_context_name(backend, experiment)
    if backend.dry_run:
        _plan(backend, "GET", store_name(backend),
              note="POST metadataStores?metadataStoreId=default only if it is missing")
        _plan(backend, "GET", name, note=f"Vertex AI experiment {experiment!r}")
        _plan(backend, "POST", f"{store_name(backend)}/contexts?contextId={experiment}",
              {"displayName": experiment, "schemaTitle": SYSTEM_EXPERIMENT,
               "schemaVersion": SCHEMA_VERSION, "metadata": EXPERIMENT_METADATA},
              note="only if the experiment is missing; a 409 reads it back")
        return name
    from google.cloud import aiplatform_v1

    client = backend.client("metadata")
    _ensure_store(backend, client)

    def find(once: bool = True):
        return _absent(backend, f"look up experiment {experiment!r}",
                       lambda: client.get_context(name=name, **backend.rpc), once=once)

    context = find(once=False)
    if context is None:
        body = aiplatform_v1.Context(display_name=experiment, schema_title=SYSTEM_EXPERIMENT,
                                     schema_version=SCHEMA_VERSION,
                                     metadata=EXPERIMENT_METADATA)
        context = backend.call(
            f"create experiment {experiment!r}",
            lambda: client.create_context(parent=store_name(backend), context=body,
                                          context_id=experiment, **backend.rpc),
            idempotent=False, recover=find)
    _check_experiment(context, experiment)
    return context.name


def add_run(backend, experiment: str, job_name: str, *,
            wait_s: float = RUN_CONTEXT_WAIT_S, sleep: Callable[[float], None] = time.sleep,
            clock: Callable[[], float] = time.monotonic) -> str:
    """Add the run ``job_name`` to ``experiment`` once Vertex AI has made the run's context;
    returns the line that says so, or a warning line when the run has none in ``wait_s``
    (the run goes on either way); "" in a dry run, which plans the requests."""
    context = experiment_context_name(backend, experiment)
    if backend.dry_run:
        _plan(backend, "GET", job_name,
              note=f"repeated until jobDetail.pipelineRunContext is set (at most {wait_s:.0f}s)")
        _plan(backend, "POST", f"{context}:addContextChildren",
              {"childContexts": ["<jobDetail.pipelineRunContext.name>"]},
              note="a child the experiment has already is skipped")
        return ""  # the plan's own tracking line names the experiment
    try:
        return _add_run(backend, experiment, job_name, wait_s, sleep, clock)
    except RemoteError as exc:  # the run exists: a failure here must not invite a resubmit
        return (f"warning: run not added to Vertex AI experiment {experiment!r}: {exc}; "
                "the run goes on")


def _add_run(backend, experiment: str, job_name: str, wait_s: float,
             sleep: Callable[[float], None], clock: Callable[[], float]) -> str:
    context = experiment_context_name(backend, experiment)
    pipeline = backend.client("pipeline")
    job_id = job_name.rsplit("/", 1)[-1]
    deadline = clock() + wait_s
    delay = 1.0
    while True:
        job = backend.call(f"get pipeline job {job_id}",
                           lambda: pipeline.get_pipeline_job(name=job_name, **backend.rpc))
        run_context = job.job_detail.pipeline_run_context.name
        if run_context:
            break
        state = job.state.name
        if state in _DONE or clock() + delay > deadline:
            why = (f"it ended {state.removeprefix('PIPELINE_STATE_')} before Vertex AI made "
                   "its run context" if state in _DONE else
                   f"Vertex AI had not made its run context after {wait_s:.0f}s")
            return (f"warning: run not added to Vertex AI experiment {experiment!r}: {why}; "
                    "the run goes on")
        sleep(delay)
        delay = min(delay * 2, 15.0)
    metadata = backend.client("metadata")
    backend.call(f"add run {job_id} to experiment {experiment!r}",
                 lambda: metadata.add_context_children(context=context,
                                                       child_contexts=[run_context],
                                                       **backend.rpc))
    return (f"tracking: run added to Vertex AI experiment {experiment!r} "
            f"({experiment_url(backend, experiment)})")
