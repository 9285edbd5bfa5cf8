"""Vertex AI jobs (CustomJob, HyperparameterTuningJob, BatchPredictionJob) as the
follower sees them (:class:`~gkeflow.components.cloud.follow.Remote`).

The three job types share one REST surface (``create``, ``get``, ``list`` with a label
filter, ``:cancel``) and one ``JobState``, so one class serves all of them; the launchers
differ only in the body they send. Every call passes the policy's per-call timeout and
``retry=None`` (the follower retries, the client library does not retry on its own).

- the step's job is the newest one carrying the label ``key`` = ``value``, in any state;
- ``JOB_STATE_CANCELLING`` is :attr:`Phase.STOPPING` (waited out, never replaced early);
- ``JOB_STATE_PARTIALLY_SUCCEEDED`` counts as succeeded (some trials or rows failed);
- a job that vanished (404) is reported as deleted by someone else.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gkeflow.components.cloud.follow import Phase, Status

#: Vertex AI job kind -> the snake_case stem of its JobService methods.
KINDS = {"CustomJob": "custom_job",
         "HyperparameterTuningJob": "hyperparameter_tuning_job",
         "BatchPredictionJob": "batch_prediction_job"}

_PHASES = {
    "JOB_STATE_QUEUED": Phase.RUNNING, "JOB_STATE_PENDING": Phase.RUNNING,
    "JOB_STATE_RUNNING": Phase.RUNNING, "JOB_STATE_PAUSED": Phase.RUNNING,
    "JOB_STATE_UPDATING": Phase.RUNNING, "JOB_STATE_UNSPECIFIED": Phase.RUNNING,
    "JOB_STATE_CANCELLING": Phase.STOPPING,
    "JOB_STATE_SUCCEEDED": Phase.SUCCEEDED, "JOB_STATE_PARTIALLY_SUCCEEDED": Phase.SUCCEEDED,
    "JOB_STATE_FAILED": Phase.FAILED, "JOB_STATE_CANCELLED": Phase.FAILED,
    "JOB_STATE_EXPIRED": Phase.FAILED,
}


def phase_of(state: str) -> Phase:
    """The follower's phase of a Vertex AI ``JobState`` name."""
    return _PHASES.get(state, Phase.RUNNING)


def job_client(location: str, api_endpoint: str = "", credentials=None):
    """A ``JobServiceClient`` for ``location`` over REST; anonymous for ``http://`` endpoints
    (local fakes)."""
    from google.api_core.client_options import ClientOptions
    from google.cloud import aiplatform_v1

    if credentials is None and api_endpoint.startswith("http://"):
        from google.auth.credentials import AnonymousCredentials

        credentials = AnonymousCredentials()
    options = ClientOptions(api_endpoint=api_endpoint or f"{location}-aiplatform.googleapis.com")
    return aiplatform_v1.JobServiceClient(client_options=options, transport="rest",
                                          credentials=credentials)


def resource_uri(name: str) -> str:
    """``projects/p/locations/l/...`` -> the REST URI Vertex AI Pipelines cancels."""
    location = name.split("/locations/", 1)[1].split("/", 1)[0]
    return f"https://{location}-aiplatform.googleapis.com/v1/{name}"


def gcp_resources(kind: str, name: str) -> str:
    """The ``gcp_resources`` document Vertex AI Pipelines reads to cancel the job when the
    pipeline run is cancelled."""
    return json.dumps({"resources": [{"resourceType": kind, "resourceUri": resource_uri(name)}]})


def write_gcp_resources(path: str, kind: str, name: str) -> None:
    """Write :func:`gcp_resources` to ``path`` (the step's output file); no-op when empty."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(gcp_resources(kind, name))


class VertexJob:
    """One Vertex AI job of one step, found by its label.

    Args:
        client: An ``aiplatform_v1.JobServiceClient``.
        kind: ``CustomJob``, ``HyperparameterTuningJob`` or ``BatchPredictionJob``.
        parent: ``projects/P/locations/L``.
        body: The job to create (an ``aiplatform_v1`` message, already validated).
        label: ``(key, value)``: the label that marks this step's job on every attempt.
        poll_s: Seconds between two status reads.
        sleep: How to wait (the retry policy's, so tests and benchmarks can scale time).
    """

    def __init__(self, client, kind: str, parent: str, body: Any, label: tuple[str, str],
                 poll_s: float, sleep: Callable[[float], None]):
        if kind not in KINDS:
            raise ValueError(f"unknown Vertex AI job kind {kind!r}")
        self.client, self.kind, self.parent, self.body = client, kind, parent, body
        self.label, self.poll_s, self.sleep = label, poll_s, sleep
        self._stem = KINDS[kind]
        self._read_ok = True
        self.create_sent = False  # whether this launcher sent a create (for its report)

    def _method(self, verb: str, plural: bool = False):
        return getattr(self.client, f"{verb}_{self._stem}{'s' if plural else ''}")

    def find(self, timeout_s: float):
        key, value = self.label
        request = {"parent": self.parent, "filter": f'labels.{key}="{value}"'}
        pager = self._method("list", plural=True)(request=request, timeout=timeout_s,
                                                  retry=None)
        jobs = list(pager)  # further pages are fetched here, inside the retried call
        if not jobs:
            return None
        return max(jobs, key=lambda j: (_seconds(j.create_time), _job_number(j.name)))

    def create(self, timeout_s: float):
        self.create_sent = True
        return self._method("create")(parent=self.parent, **{self._stem: self.body},
                                      timeout=timeout_s, retry=None)

    def status(self, job) -> Status:
        state = job.state.name
        error = job.error.message if job.error.message else ""
        if state == "JOB_STATE_CANCELLED" and not error:
            error = "cancelled by someone else (JOB_STATE_CANCELLED)"
        elif state == "JOB_STATE_EXPIRED" and not error:
            error = "expired before it could run (JOB_STATE_EXPIRED)"
        return Status(phase_of(state), f"{self.kind} {job.name}: {state}", error)

    def identity(self, job) -> str:
        return job.name

    def name(self, job) -> str:
        return job.name

    def next(self, job, timeout_s: float):
        from google.api_core import exceptions

        if self._read_ok:  # after a failed read, the retry's backoff was the wait
            self.sleep(self.poll_s)
        self._read_ok = False
        try:
            current = self._method("get")(name=job.name, timeout=timeout_s, retry=None)
        except exceptions.NotFound:
            current = None
        self._read_ok = True
        return current

    def stop(self, job, timeout_s: float) -> None:
        from google.api_core import exceptions

        try:
            self._method("cancel")(name=job.name, timeout=timeout_s, retry=None)
        except (exceptions.NotFound, exceptions.FailedPrecondition):
            pass  # gone, or ended meanwhile: nothing left to stop

    def clear(self, job, timeout_s: float) -> None:
        """Nothing to clear: a replacement gets a new resource name."""

    def stop_hint(self, job) -> str:
        return ("curl -X POST -H \"Authorization: Bearer $(gcloud auth print-access-token)\" "
                f"{resource_uri(job.name)}:cancel")


def _seconds(timestamp) -> float:
    try:
        return timestamp.timestamp() if timestamp else 0.0
    except (AttributeError, ValueError, OSError):
        return 0.0


def _job_number(name: str) -> int:
    tail = name.rsplit("/", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def follow_vertex_job(remote: VertexJob, policy, echo: Callable[[str], None],
                      gcp_resources_path: str = "", deadline_s: float | None = None):
    """Follow ``remote`` (create or attach, then to its end), writing ``gcp_resources`` as
    soon as the job is known. A job still cancelling is looked at every poll interval."""
    from gkeflow.components.cloud.follow import follow

    return follow(remote, policy, echo=echo, deadline_s=deadline_s, stopping_poll_s=0.0,
                  attached=lambda job: write_gcp_resources(gcp_resources_path, remote.kind,
                                                           job.name))
