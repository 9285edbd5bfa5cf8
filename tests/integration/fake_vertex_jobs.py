"""A fake Vertex AI JobService over REST: CustomJobs, HyperparameterTuningJobs and
BatchPredictionJobs (and the PipelineJob a CustomJob launcher reads).

- every body is parsed strictly with its ``aiplatform_v1`` type (unknown fields are a 400)
  and checked against the rules the service enforces (labels, required fields);
- ``list`` accepts only the filter the launchers send (``labels.KEY="VALUE"``) and the query
  parameters the API defines;
- jobs go PENDING -> RUNNING -> ``outcome``, after ``running_looks`` reads, or when a
  ``clock`` is given, after ``duration_s`` of that clock (simulated time);
- ``:cancel`` turns a live job CANCELLING (for ``cancelling_looks`` reads), then CANCELLED;
  cancelling an ended job is the service's 400 FAILED_PRECONDITION;
- :class:`~tests.integration.faults.Faults` decides which requests fail and how.

What the launchers did is recorded: :attr:`created`, :attr:`cancelled`, :attr:`calls`,
:attr:`violations`, and :attr:`max_gap_s`, the longest time (by ``clock``) between two
answered status reads of a job, counted from its creation.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable

from google.cloud import aiplatform_v1 as v1
from google.protobuf import timestamp_pb2
from werkzeug.wrappers import Request, Response

from tests.integration.fake_vertex import LABEL_KEY, LABEL_VALUE, _error
from tests.integration.faults import Faults
from tests.integration.wsgi_fake import WsgiFake

#: REST collection -> (message type, the JSON key of its list response).
COLLECTIONS = {
    "customJobs": v1.CustomJob,
    "hyperparameterTuningJobs": v1.HyperparameterTuningJob,
    "batchPredictionJobs": v1.BatchPredictionJob,
}
_COLLECTION = re.compile(r"^/v1/(projects/[^/]+/locations/[^/]+)/([A-Za-z]+)$")
_JOB = re.compile(r"^/v1/(projects/[^/]+/locations/[^/]+/([A-Za-z]+)/[0-9]+)(:cancel)?$")
_PIPELINE = re.compile(r"^/v1/(projects/[^/]+/locations/[^/]+/pipelineJobs/[^/:]+)$")
_LABEL_FILTER = re.compile(r'^labels\.([a-z0-9_-]+)="([^"]*)"$')
_LIST_QUERY = {"filter", "pageSize", "pageToken", "readMask", "$alt"}
_LIVE = {"JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_PAUSED",
         "JOB_STATE_UPDATING"}
_ENDED = {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED",
          "JOB_STATE_EXPIRED", "JOB_STATE_PARTIALLY_SUCCEEDED"}


class FakeVertexJobs(WsgiFake):
    def __init__(self, running_looks: int = 1, outcome: str = "JOB_STATE_SUCCEEDED",
                 service_account: str = "runner@p.iam.gserviceaccount.com",
                 network: str = "projects/123/global/networks/vpc",
                 faults: Faults | None = None, clock: Callable[[], float] | None = None,
                 duration_s: float = 0.0, cancelling_looks: int = 1,
                 error_message: str = "The replica workerpool1-0 exited with a non-zero "
                                      "status of 1"):
        self.running_looks, self.outcome = running_looks, outcome
        self.service_account, self.network = service_account, network
        self.faults = faults or Faults()
        self.clock, self.duration_s = clock, duration_s
        self.cancelling_looks, self.error_message = cancelling_looks, error_message
        self.jobs: dict[str, object] = {}
        self.looks: dict[str, int] = {}
        self.born: dict[str, float] = {}
        self.last_read: dict[str, float] = {}
        self.created: list = []
        #: per create: the states of the jobs that already carried the same labels
        self.states_at_create: list[list[str]] = []
        self.cancelled: list[str] = []
        self.violations: list[str] = []
        self.calls = 0
        self.max_gap_s = 0.0
        self._ids = iter(range(1000, 10**9))
        self._lock = threading.Lock()

    # -- set-up -------------------------------------------------------------------------------

    def add_job(self, parent: str, job, state: str) -> str:
        """A job an earlier launcher attempt created."""
        collection = next(c for c, t in COLLECTIONS.items() if isinstance(job, t))
        name = f"{parent}/{collection}/{next(self._ids)}"
        job = type(job)(job)
        job.name, job.state = name, v1.JobState[state]
        stamp = timestamp_pb2.Timestamp(seconds=1_700_000_000 + len(self.jobs))
        job.create_time = stamp.ToDatetime()
        self.jobs[name], self.looks[name] = job, 0
        self.born[name] = self.now()
        return name

    def now(self) -> float:
        return self.clock() if self.clock else 0.0

    # -- HTTP ---------------------------------------------------------------------------------

    def _wsgi(self, environ, start_response):
        request = Request(environ)
        with self._lock:
            self.calls += 1

        def handle():
            with self._lock:
                return self._route(request)

        return self.faults.serve(environ, start_response, request.method, request.path, handle,
                                 _error)

    def _route(self, request: Request) -> Response:
        if (match := _COLLECTION.match(request.path)) and match.group(2) in COLLECTIONS:
            kind = COLLECTIONS[match.group(2)]
            if request.method == "POST":
                return self._create(request, match.group(1), match.group(2), kind)
            if request.method == "GET":
                return self._list(request, match.group(1), match.group(2), kind)
        if (match := _JOB.match(request.path)) and match.group(2) in COLLECTIONS:
            if set(request.args) - {"$alt"}:
                return self._reject(request, f"unknown query parameters {sorted(request.args)}")
            name = match.group(1)
            if name not in self.jobs:
                return _error(404, f"{name} not found")
            if match.group(3):
                return self._cancel(request, name)
            if request.method == "GET":
                return self._get(request, name)
        if (match := _PIPELINE.match(request.path)) and request.method == "GET":
            return _json(v1.PipelineJob(name=match.group(1), service_account=self.service_account,
                                        network=self.network))
        return _error(404, f"no route {request.method} {request.path}")

    def _reject(self, request: Request, message: str) -> Response:
        self.violations.append(f"{request.method} {request.path}: {message}")
        return _error(400, message)

    def _create(self, request: Request, parent: str, collection: str, kind) -> Response:
        if set(request.args) - {"$alt"}:
            return self._reject(request, f"unknown query parameters {sorted(request.args)}")
        try:
            job = kind.from_json(request.get_data(as_text=True), ignore_unknown_fields=False)
        except Exception as exc:  # noqa: BLE001 - a strict parse failure is a 400
            return self._reject(request, f"invalid {kind.__name__}: {exc}")
        problems = self.problems(job)
        if problems:
            return self._reject(request, "; ".join(problems))
        self.created.append(kind(job))
        self.states_at_create.append(sorted(
            f"{n}={j.state.name}" for n, j in self.jobs.items() if j.labels == job.labels))
        name = self.add_job(parent, job, "JOB_STATE_PENDING")
        self.last_read[name] = self.now()  # gaps count from the job's creation
        return _json(self.jobs[name])

    def problems(self, job) -> list[str]:
        """What the service would refuse in a new job."""
        problems = []
        if not job.display_name:
            problems.append("display_name is required")
        for key, value in job.labels.items():
            if not LABEL_KEY.match(key) or not LABEL_VALUE.match(value):
                problems.append(f"invalid label {key}={value}")
        if isinstance(job, v1.CustomJob) and not job.job_spec.worker_pool_specs:
            problems.append("job_spec.worker_pool_specs is required")
        if isinstance(job, v1.BatchPredictionJob) and not job.model:
            problems.append("model is required")
        if isinstance(job, v1.HyperparameterTuningJob) and not job.study_spec.metrics:
            problems.append("study_spec.metrics is required")
        return problems

    def _list(self, request: Request, parent: str, collection: str, kind) -> Response:
        unknown = set(request.args) - _LIST_QUERY
        if unknown:
            return self._reject(request, f"unknown query parameters {sorted(unknown)}")
        wanted = request.args.get("filter", "")
        label = _LABEL_FILTER.match(wanted)
        if wanted and not label:
            return self._reject(request, f"unsupported filter {wanted!r}")
        found = [j for n, j in self.jobs.items() if n.startswith(f"{parent}/{collection}/")
                 and (not label or j.labels.get(label.group(1)) == label.group(2))]
        body = {collection: [json.loads(kind.to_json(j)) for j in found]}
        return Response(json.dumps(body), content_type="application/json")

    def _get(self, request: Request, name: str) -> Response:
        job = self.jobs[name]
        self._advance(job)
        response = _json(job)

        def delivered():
            now = self.now()
            with self._lock:
                self.max_gap_s = max(self.max_gap_s, now - self.last_read.get(name, now))
                self.last_read[name] = now

        response.on_delivered = delivered
        return response

    def _cancel(self, request: Request, name: str) -> Response:
        if request.method != "POST":
            return _error(404, f"no route {request.method} {request.path}")
        job = self.jobs[name]
        if job.state.name in _ENDED:
            return _error(400, f"{name} is in state {job.state.name} and cannot be cancelled")
        if job.state.name != "JOB_STATE_CANCELLING":
            self.cancelled.append(name)
            job.state = v1.JobState.JOB_STATE_CANCELLING
            self.looks[name] = 0
        return Response("{}", content_type="application/json")

    def _advance(self, job) -> None:
        state = job.state.name
        self.looks[job.name] += 1
        if state == "JOB_STATE_CANCELLING":
            if self.looks[job.name] > self.cancelling_looks:
                job.state = v1.JobState.JOB_STATE_CANCELLED
            return
        if state not in _LIVE:
            return
        if self.clock is not None:
            done = self.now() - self.born[job.name] >= self.duration_s
        else:
            done = self.looks[job.name] > self.running_looks
        if not done:
            job.state = v1.JobState.JOB_STATE_RUNNING
            return
        job.state = v1.JobState[self.outcome]
        if self.outcome == "JOB_STATE_FAILED":
            job.error.message = self.error_message
        self.finish(job)

    def finish(self, job) -> None:
        """What a job that ended leaves behind (e.g. a batch job's output directory)."""
        if isinstance(job, v1.BatchPredictionJob) and job.state.name == "JOB_STATE_SUCCEEDED":
            prefix = job.output_config.gcs_destination.output_uri_prefix
            job.output_info.gcs_output_directory = f"{prefix}/prediction-1"


def _json(message) -> Response:
    return Response(type(message).to_json(message), content_type="application/json")
