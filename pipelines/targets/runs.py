"""Run history on both targets: what `gkeflow runs list|show|logs|cancel|retry` and
`gkeflow schedule list` know of past runs, in one shape for Kubeflow Pipelines and Vertex AI.

The target-specific reading lives in :mod:`gkeflow.pipelines.targets.runs_kfp` (the v2beta1 runs
API through the ``kfp.Client`` transport) and :mod:`gkeflow.pipelines.targets.runs_vertex` (Vertex
AI PipelineJobs through ``aiplatform_v1``; logs from Cloud Logging). Every call goes through
the target backend's retrying :func:`~gkeflow.pipelines.targets.transport.call`;
:func:`~gkeflow.pipelines.targets.backend_choice.reader` picks the reader of a target.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import asdict, dataclass, field
from typing import Any


class RunStateError(LookupError):
    """A run is not in a state the command applies to (e.g. retrying one that succeeded)."""


#: States a run does not leave.
ENDED_STATES = ("SUCCEEDED", "FAILED", "CANCELLED", "SKIPPED")


def refuse_if_ended(run_id: str, state: str) -> None:
    """RunStateError when the run has ended: there is nothing left to cancel."""
    if state in ENDED_STATES:
        raise RunStateError(f"run {run_id} already ended ({state.lower()}); nothing to cancel")


#: Steps of the training pipeline whose outcome is the gate decision.
EVALUATE_STEP, REGISTER_STEP = "evaluate-model", "register-model"


def step_key(name: str) -> str:
    """``Train model`` (a display name, as backends report steps) and ``train-model`` (the
    task name) -> ``train-model``."""
    return re.sub(r"[\s_]+", "-", name.strip().lower())


@dataclass
class TaskInfo:
    """One step of a run."""

    name: str
    state: str  # normalised: PENDING RUNNING SUCCEEDED FAILED CANCELLED SKIPPED ...
    start: dt.datetime | None = None
    end: dt.datetime | None = None
    error: str = ""
    log_ref: str = ""  # KFP: the executor pod; Vertex: the CustomJob resource name

    @property
    def duration_s(self) -> float | None:
        return _duration(self.start, self.end)


@dataclass
class RunInfo:
    """One run: its state, timing, failed step and link; with ``tasks`` for `runs show`."""

    target: str
    id: str  # KFP run id; Vertex PipelineJob resource name
    name: str
    pipeline: str
    state: str
    start: dt.datetime | None = None
    end: dt.datetime | None = None
    url: str = ""
    schedule: str = ""  # the gkeflow schedule (or KFP recurring run) that started it
    error: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
    tasks: list[TaskInfo] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    registered_version: str = ""
    note: str = ""  # why metrics or the registered version could not be read
    labels: dict[str, str] = field(default_factory=dict)  # the Vertex AI PipelineJob's

    @property
    def duration_s(self) -> float | None:
        return _duration(self.start, self.end)

    @property
    def failed_step(self) -> TaskInfo | None:
        failed = [t for t in self.tasks if t.state == "FAILED"]
        failed.sort(key=lambda t: t.end or t.start or dt.datetime.max.replace(tzinfo=dt.UTC))
        return failed[0] if failed else None

    @property
    def gate(self) -> str:
        """The training gate's decision, from the evaluate and register steps' states."""
        states = {step_key(t.name): t.state for t in self.tasks}
        if states.get(EVALUATE_STEP) != "SUCCEEDED":
            return ""
        register = states.get(REGISTER_STEP)
        if register == "SUCCEEDED":
            version = f" version {self.registered_version}" if self.registered_version else ""
            return f"passed: registered{version}"
        if register in (None, "SKIPPED", "NOT_TRIGGERED"):
            return "blocked: not registered" if self.state in ("SUCCEEDED", "FAILED") else ""
        return f"passed: register-model {register.lower()}"

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["duration_s"] = self.duration_s
        data["failed_step"] = self.failed_step.name if self.failed_step else ""
        data["gate"] = self.gate
        for task, info in zip(data["tasks"], self.tasks, strict=True):
            task["duration_s"] = info.duration_s
        return _jsonable(data)


def _duration(start, end) -> float | None:
    if start is None:
        return None
    end = end or dt.datetime.now(dt.UTC)
    return max(0.0, (end - start).total_seconds())


def _jsonable(value):
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dt.datetime):
        return value.isoformat()
    return value


def parse_time(value: Any) -> dt.datetime | None:
    """An API timestamp (RFC 3339 text, datetime, protobuf Timestamp) -> aware datetime;
    unset (empty, the epoch) -> None."""
    if value is None or value == "":
        return None
    if isinstance(value, dt.datetime):
        parsed = value
    elif hasattr(value, "ToDatetime"):
        parsed = value.ToDatetime(tzinfo=dt.UTC)
    else:
        try:
            parsed = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return None if parsed.year <= 1970 else parsed


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    from gkeflow.components.cloud.retry import format_duration as fmt

    return fmt(seconds) if seconds >= 60 else f"{seconds:.0f}s"


def format_time(value: dt.datetime | None) -> str:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M") if value else "-"


def target_of(config, run_id: str, target: str | None) -> str:
    """The target a run id belongs to: ``--target``, else Vertex for a resource name
    (``projects/.../pipelineJobs/...``), else the only configured target, else gke."""
    if target:
        return target
    if run_id.startswith("projects/") and "/pipelineJobs/" in run_id:
        return "vertex"
    configured = [t for t in ("gke", "vertex") if getattr(config.targets, t) is not None]
    if len(configured) == 1:
        return configured[0]
    return "gke"

