"""What the two remote targets behind `gkeflow submit` and `gkeflow schedule` share.

:class:`~gkeflow.pipelines.targets.kfp.KfpBackend` talks to the Kubeflow Pipelines v2beta1
API through ``kfp.Client``; :class:`~gkeflow.pipelines.targets.vertex.VertexBackend` talks to
Vertex AI through ``google.cloud.aiplatform``;
:func:`~gkeflow.pipelines.targets.backend_choice.make_backend` picks one. Both expose the
same small surface (upload, run, poll, list/create/update/pause/resume/delete schedules);
every remote call goes through :func:`gkeflow.pipelines.targets.transport.call` (retries,
timeouts, clear errors). With ``dry_run`` nothing is sent and no credentials are needed:
every request, look-ups included, is recorded as a :class:`PlannedRequest`, with
``<placeholders>`` for the ids the server would assign.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gkeflow.pipelines.targets.transport import RetryPolicy

#: Marker in the description (KFP) / label (Vertex) of schedules that gkeflow manages.
MANAGED_LABEL = "gkeflow-schedule"
FINGERPRINT_LABEL = "gkeflow-job"
#: A client-chosen id per create, stored with the schedule so that a retried create can
#: find what an earlier attempt made.
REQUEST_LABEL = "gkeflow-request"
#: Which gkeflow.yaml made a schedule (its ``name``): ``--prune`` deletes only its own.
OWNER_LABEL = "gkeflow-owner"
#: How many earlier recurring run ids a replaced KFP schedule remembers (for its history).
MAX_PREVIOUS_IDS = 100
KFP_DESCRIPTION_RE = re.compile(r"^gkeflow schedule (?P<name>\S+); (?P<fields>.*)$")


@dataclass(frozen=True)
class PlannedRequest:
    """A write that ``--dry-run`` shows instead of sending."""

    method: str
    url: str
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    note: str = ""  # when it would be sent, e.g. "only if the look-up finds none"

    def render(self) -> str:
        lines = [f"{self.method} {self.url}" + (f"    # {self.note}" if self.note else "")]
        lines += [f"  {k}: {v}" for k, v in self.headers.items()]
        if self.body is not None:
            text = self.body if isinstance(self.body, str) else json.dumps(
                self.body, indent=2, sort_keys=True, default=str)
            lines += ["  " + line for line in text.splitlines()]
        return "\n".join(lines)


@dataclass
class PreparedPipeline:
    """A pipeline compiled for one target, ready to upload or submit."""

    name: str  # short name, e.g. "training"
    display_name: str  # pipelineInfo.name, e.g. "gkeflow-training"
    target: str
    path: str
    spec_sha256: str
    version_name: str
    parameter_types: dict[str, str]  # name -> PipelineSpec parameterType
    task_count: int


@dataclass
class RunStatus:
    run_id: str
    state: str  # normalised: PENDING RUNNING SUCCEEDED FAILED CANCELLED ...
    tasks: dict[str, str]  # task name -> normalised state
    error: str = ""

    @property
    def done(self) -> bool:
        return self.state in TERMINAL_STATES


TERMINAL_STATES = {"SUCCEEDED", "FAILED", "CANCELLED", "SKIPPED"}


def normalise_state(state: Any) -> str:
    text = str(getattr(state, "name", state) or "PENDING").upper()
    for prefix in ("PIPELINE_STATE_", "RUNTIME_STATE_"):
        text = text.removeprefix(prefix)
    return {"CANCELED": "CANCELLED", "CANCELING": "CANCELLING", "UNSPECIFIED": "PENDING",
            "QUEUED": "PENDING", "ERROR": "FAILED"}.get(text, text)


@dataclass
class RemoteSchedule:
    """A schedule as it exists on a target."""

    id: str
    name: str
    target: str
    cron: str  # as the target stores it (KFP: 6-field UTC; Vertex: TZ=... 5-field)
    max_concurrency: int
    enabled: bool
    catch_up: bool | None
    job_fingerprint: str
    local_cron: str = ""  # the 5-field cron from gkeflow.yaml, when known
    time_zone: str = ""
    utc_offset_minutes: int | None = None
    next_run_time: Any = None  # datetime from the server, if it says
    pipeline_version: str = ""
    request_id: str = ""  # the client-chosen id of the create that made it
    owner: str = ""  # the gkeflow.yaml ``name`` that made it; "" before owners were written
    previous_ids: tuple[str, ...] = ()  # KFP: the recurring runs it replaced, oldest first


@dataclass
class ScheduleRequest:
    """What one schedule should be on its target."""

    name: str
    cron: str  # target form
    local_cron: str
    time_zone: str
    max_concurrency: int
    catch_up: bool
    enabled: bool
    parameters: dict[str, Any]
    job_fingerprint: str
    utc_offset_minutes: int | None = None
    owner: str = ""
    previous_ids: tuple[str, ...] = ()  # KFP: ids of the schedules this one replaces
    plugins_input: dict = field(default_factory=dict)  # KFP >= 2.17: e.g. the MLflow experiment


def lineage(current: RemoteSchedule, extras=()) -> tuple[str, ...]:
    """The ids a replacement of ``current`` (and its duplicates) remembers, oldest first, at
    most :data:`MAX_PREVIOUS_IDS`."""
    ids: list[str] = []
    for remote in (current, *extras):
        for found in (*remote.previous_ids, remote.id):
            if found and found not in ids:
                ids.append(found)
    return tuple(ids[-MAX_PREVIOUS_IDS:])


def quiet(func: Callable[[], Any]) -> Callable[[], Any]:
    """kfp.Client prints links on stdout; keep gkeflow's own output clean."""

    def run():
        with contextlib.redirect_stdout(io.StringIO()):
            return func()

    return run


class TargetBackend:
    """What both targets keep: their config, the retry policy, dry-run's planned requests."""

    def __init__(self, target, *, dry_run: bool = False, policy: RetryPolicy | None = None):
        self.target = target
        self.dry_run = dry_run
        self.policy = policy or RetryPolicy(attempts=target.retries + 1,
                                            timeout_s=target.timeout_s)
        self.planned: list[PlannedRequest] = []

