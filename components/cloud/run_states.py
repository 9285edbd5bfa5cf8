"""How a pipeline run ended, as each backend names it: the exit task's
``PipelineTaskFinalStatus.state`` mapped to SUCCEEDED, FAILED, CANCELLED or UNKNOWN, for the
notification (gkeflow.components.notify) and the trackers (gkeflow.components.tracking)."""

from __future__ import annotations

#: What a run's end means: the backend's own state names mapped per target.
SUCCEEDED, FAILED, CANCELLED, UNKNOWN = "SUCCEEDED", "FAILED", "CANCELLED", "UNKNOWN"
#: ``PipelineTaskFinalStatus.state`` as each backend fills it for the exit handler's group.
#: Kubeflow Pipelines (gke): the group's ML Metadata execution state
#: (``Execution.State``; backend/src/v2/driver/resolve.go), its error left empty. Vertex AI:
#: ``PipelineTaskDetail.State`` (SKIPPED is a cache hit). kfp.local (local): SUCCEEDED or
#: FAILED. States that are not an end (running, pending, cancelling...) and names not listed
#: are UNKNOWN: never called a success, always reported with the backend's own word.
BACKEND_STATES: dict[str, dict[str, str]] = {
    "gke": {"COMPLETE": SUCCEEDED, "CACHED": SUCCEEDED, "FAILED": FAILED,
            "CANCELED": CANCELLED, "NEW": UNKNOWN, "RUNNING": UNKNOWN, "UNKNOWN": UNKNOWN},
    "vertex": {"SUCCEEDED": SUCCEEDED, "SKIPPED": SUCCEEDED, "FAILED": FAILED,
               "CANCELLED": CANCELLED, "STATE_UNSPECIFIED": UNKNOWN, "PENDING": UNKNOWN,
               "RUNNING": UNKNOWN, "CANCEL_PENDING": UNKNOWN, "CANCELLING": UNKNOWN,
               "NOT_TRIGGERED": UNKNOWN},
    "local": {"SUCCEEDED": SUCCEEDED, "FAILED": FAILED},
}


def final_state(target: str, backend_state: str | None) -> str:
    """SUCCEEDED, FAILED, CANCELLED or UNKNOWN for ``backend_state`` as ``target``'s backend
    names it (see :data:`BACKEND_STATES`)."""
    return BACKEND_STATES.get(target, {}).get(str(backend_state or "").strip().upper(), UNKNOWN)
