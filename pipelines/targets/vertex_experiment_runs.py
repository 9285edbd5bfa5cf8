"""A run outside Vertex AI Pipelines (a local `gkeflow run`) logged to a Vertex AI
Experiments experiment through the aiplatform SDK: an experiment run (a
``system.ExperimentRun`` context under the experiment's) holding the run's parameters and
metrics, so they sit in the experiment's comparison beside Vertex AI pipeline runs.

Best effort: every call is bounded and retried by the Vertex AI backend's policy, and a
failure is one warning line; the run's outcome never depends on it. The experiment run's
id is the run's own id, so a retried create finds the run it made instead of a second one
(:func:`gkeflow.components.tracking.vertex_run.log_run`, which GKE steps use too).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gkeflow.components.tracking.vertex_run import (
    DEADLINE_S,
    experiment_run_name,
    log_run,
    within,
)
from gkeflow.pipelines.targets.vertex_experiments import experiment_url


def log_experiment_run(backend, experiment: str, run_id: str, params: Mapping[str, Any],
                       metrics: Mapping[str, Any], succeeded: bool,
                       tensorboard: str = "") -> str:
    """Log one run to ``experiment`` (created if missing), linked to its curves in
    ``tensorboard`` when the experiment has one; returns the line that says where, or a
    warning line (never raises). ``backend``: a
    :class:`~gkeflow.pipelines.targets.vertex.VertexBackend` (project, region, endpoint,
    credentials and retry policy)."""
    name = experiment_run_name(experiment, run_id)
    try:
        backend.client("metadata")  # aiplatform.init: the target's project and credentials
        within(DEADLINE_S, lambda: log_run(
            experiment, name, params, metrics, "COMPLETE" if succeeded else "FAILED",
            parent=backend.parent, call=backend.call, tensorboard=tensorboard),
            f"logging run {name}")
    except Exception as exc:  # best effort, RemoteError included: the run's outcome stands
        text = " ".join(str(exc).split())[:300] or type(exc).__name__
        return (f"warning: run not logged to Vertex AI experiment {experiment!r}: {text}; "
                "the run's outcome is unchanged")
    return (f"tracking: run {name} logged to Vertex AI experiment {experiment!r} "
            f"({experiment_url(backend, experiment)})")
