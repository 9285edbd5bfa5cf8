"""A run outside Vertex AI Pipelines (a local `gkeflow run`) logged to a Vertex AI
Experiments experiment through the aiplatform SDK: an experiment run (a
``system.ExperimentRun`` context under the experiment's) holding the run's parameters and
metrics, so they sit in the experiment's comparison beside Vertex AI pipeline runs.

Best effort: every call is bounded and retried by the Vertex AI backend's policy, and a
failure is one warning line; the run's outcome never depends on it. The experiment run's
id is the run's own id, so a retried create finds the run it made instead of a second one.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from gkeflow.pipelines.targets.vertex_experiments import (
    experiment_context_name,
    experiment_url,
)

#: Vertex AI metadata resource ids: the run context's id is ``<experiment>-<run>``.
MAX_CONTEXT_ID = 128


def experiment_run_name(experiment: str, run_id: str) -> str:
    """``run_id`` as an experiment run name Vertex AI accepts (lowercase letters, digits and
    hyphens; the context ``<experiment>-<run>`` at most 128 characters)."""
    name = re.sub(r"[^a-z0-9-]+", "-", run_id.lower()).strip("-") or "run"
    return name[:MAX_CONTEXT_ID - len(experiment) - 1].rstrip("-")


def loggable(values: Mapping[str, Any], *, numbers_only: bool) -> dict[str, Any]:
    """``values`` as the SDK takes them: numbers (finite) and, for parameters, strings."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, bool):
            value = str(value).lower() if not numbers_only else float(value)
        if isinstance(value, int | float):
            if math.isfinite(value):
                out[str(key)] = value
        elif not numbers_only and value is not None:
            out[str(key)] = str(value)[:1000]
    return out


def log_experiment_run(backend, experiment: str, run_id: str, params: Mapping[str, Any],
                       metrics: Mapping[str, Any], succeeded: bool) -> str:
    """Log one run to ``experiment`` (created if missing); returns the line that says
    where, or a warning line (never raises). ``backend``: a
    :class:`~gkeflow.pipelines.targets.vertex.VertexBackend` (project, region, endpoint,
    credentials and retry policy)."""
    name = experiment_run_name(experiment, run_id)
    try:
        _log(backend, experiment, name, params, metrics, succeeded)
    except Exception as exc:  # best effort, RemoteError included: the run's outcome stands
        text = " ".join(str(exc).split())[:300] or type(exc).__name__
        return (f"warning: run not logged to Vertex AI experiment {experiment!r}: {text}; "
                "the run's outcome is unchanged")
    return (f"tracking: run {name} logged to Vertex AI experiment {experiment!r} "
            f"({experiment_url(backend, experiment)})")


def _log(backend, experiment: str, name: str, params: Mapping[str, Any],
         metrics: Mapping[str, Any], succeeded: bool) -> None:
    metadata = backend.client("metadata")  # aiplatform.init: the target's project, credentials
    from google.cloud import aiplatform
    from google.cloud.aiplatform_v1 import Execution

    found = backend.call(f"look up or create experiment {experiment!r}",
                         lambda: aiplatform.Experiment.get_or_create(experiment))

    experiment_context = experiment_context_name(backend, experiment)
    run_context = f"{experiment_context}-{name}"  # the SDK's id: <experiment>-<run>

    def existing():
        try:
            return metadata.get_context(name=run_context, **backend.rpc)
        except Exception:  # not there: the create did not happen
            return None

    created = backend.call(f"create experiment run {name}",
                           lambda: aiplatform.ExperimentRun.create(name, experiment=found),
                           idempotent=False, recover=existing)
    # A create whose answer was lost is found again, but may not be in the experiment yet:
    # adding a child the experiment has already is skipped by the service.
    backend.call(f"add {name} to experiment {experiment!r}",
                 lambda: metadata.add_context_children(
                     context=experiment_context, child_contexts=[run_context], **backend.rpc))
    run = created if isinstance(created, aiplatform.ExperimentRun) else backend.call(
        f"read experiment run {name}", lambda: aiplatform.ExperimentRun(name, experiment=found))
    values = loggable(params, numbers_only=False)
    if values:
        backend.call(f"log parameters of {name}", lambda: run.log_params(values))
    numbers = loggable(metrics, numbers_only=True)
    if numbers:
        backend.call(f"log metrics of {name}", lambda: run.log_metrics(numbers))
    state = Execution.State.COMPLETE if succeeded else Execution.State.FAILED
    backend.call(f"end experiment run {name}", lambda: run.update_state(state))
