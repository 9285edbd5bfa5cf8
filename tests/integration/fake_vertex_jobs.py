"""A fake Vertex AI REST endpoint for CustomJobs (and the PipelineJob they run under).

Every CustomJob body is parsed strictly as ``aiplatform_v1.CustomJob``. Jobs go PENDING ->
RUNNING -> ``outcome`` as they are looked at; ``:cancel`` cancels.
"""

from __future__ import annotations

import json
import re
import threading

from google.cloud import aiplatform_v1 as v1
from werkzeug.wrappers import Request, Response

from tests.integration.wsgi_fake import WsgiFake

_JOBS = re.compile(r"^/v1/(projects/[^/]+/locations/[^/]+)/customJobs$")
_JOB = re.compile(r"^/v1/(projects/[^/]+/locations/[^/]+/customJobs/[0-9]+)(:cancel)?$")
_PIPELINE = re.compile(r"^/v1/(projects/[^/]+/locations/[^/]+/pipelineJobs/[^/:]+)$")
_LABEL_FILTER = re.compile(r'^labels\.([a-z0-9_-]+)="([^"]*)"$')


def _error(status: int, message: str) -> Response:
    return Response(json.dumps({"error": {"code": status, "message": message}}), status=status,
                    content_type="application/json")


class FakeVertexJobs(WsgiFake):
    def __init__(self, running_looks: int = 1, outcome: str = "JOB_STATE_SUCCEEDED",
                 service_account: str = "runner@p.iam.gserviceaccount.com",
                 network: str = "projects/123/global/networks/vpc"):
        self.running_looks = running_looks
        self.outcome = outcome
        self.service_account = service_account
        self.network = network
        self.jobs: dict[str, v1.CustomJob] = {}
        self.looks: dict[str, int] = {}
        self.created: list[v1.CustomJob] = []
        self.cancelled: list[str] = []
        self._lock = threading.Lock()

    def add_job(self, parent: str, job: v1.CustomJob, state: str) -> str:
        """A job an earlier launcher attempt created."""
        name = f"{parent}/customJobs/{len(self.jobs) + 1000}"
        job = v1.CustomJob(job)
        job.name, job.state = name, v1.JobState[state]
        self.jobs[name], self.looks[name] = job, 0
        return name

    def _wsgi(self, environ, start_response):
        request = Request(environ)
        with self._lock:
            response = self._route(request)
        return response(environ, start_response)

    def _route(self, request: Request) -> Response:
        if (match := _JOBS.match(request.path)) and request.method == "POST":
            try:
                job = v1.CustomJob.from_json(request.get_data(as_text=True),
                                             ignore_unknown_fields=False)
            except Exception as exc:  # noqa: BLE001 - a strict parse failure is a 400
                return _error(400, f"invalid CustomJob: {exc}")
            if not job.job_spec.worker_pool_specs:
                return _error(400, "job_spec.worker_pool_specs is required")
            self.created.append(v1.CustomJob(job))
            name = self.add_job(match.group(1), job, "JOB_STATE_PENDING")
            return self._json(self.jobs[name])
        if (match := _JOBS.match(request.path)) and request.method == "GET":
            wanted = request.args.get("filter", "")
            label = _LABEL_FILTER.match(wanted)
            if wanted and not label:
                return _error(400, f"unsupported filter {wanted!r}")
            found = [j for j in self.jobs.values() if j.name.startswith(match.group(1) + "/")
                     and (not label or j.labels.get(label.group(1)) == label.group(2))]
            body = {"customJobs": [json.loads(v1.CustomJob.to_json(j)) for j in found]}
            return Response(json.dumps(body), content_type="application/json")
        if match := _JOB.match(request.path):
            name = match.group(1)
            if name not in self.jobs:
                return _error(404, f"{name} not found")
            job = self.jobs[name]
            if match.group(2) and request.method == "POST":
                job.state = v1.JobState.JOB_STATE_CANCELLED
                self.cancelled.append(name)
                return Response("{}", content_type="application/json")
            self._advance(job)
            return self._json(job)
        if (match := _PIPELINE.match(request.path)) and request.method == "GET":
            job = v1.PipelineJob(name=match.group(1), service_account=self.service_account,
                                 network=self.network)
            return self._json(job)
        return _error(404, f"no route {request.method} {request.path}")

    def _advance(self, job: v1.CustomJob) -> None:
        if job.state.name in ("JOB_STATE_PENDING", "JOB_STATE_RUNNING"):
            self.looks[job.name] += 1
            if self.looks[job.name] <= self.running_looks:
                job.state = v1.JobState.JOB_STATE_RUNNING
            else:
                job.state = v1.JobState[self.outcome]
                if self.outcome == "JOB_STATE_FAILED":
                    job.error.message = "The replica workerpool1-0 exited with a non-zero status"

    @staticmethod
    def _json(message) -> Response:
        return Response(type(message).to_json(message), content_type="application/json")
