"""A small in-memory Vertex AI JobService for hyperparameter tuning jobs (REST, v1).

Bodies are parsed strictly as ``aiplatform_v1.HyperparameterTuningJob`` (unknown fields
are a 400), the rules a submitted job must meet are checked, and a created job runs its
trials when it is read: each trial gets parameter values from the study spec and a metric
from :attr:`FakeTuning.score` (or fails when ``score`` raises).
"""

from __future__ import annotations

import itertools
import json
import math
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from google.cloud import aiplatform_v1 as v1
from werkzeug.wrappers import Request, Response

from tests.integration.fake_vertex import LABEL_KEY, LABEL_VALUE, Rejected, _error, _strict
from tests.integration.wsgi_fake import WsgiFake


@dataclass
class FakeTuning(WsgiFake):
    project: str = "test-project"
    location: str = "us-central1"
    score: Callable[[dict], float] = lambda params: 0.5
    jobs: dict[str, v1.HyperparameterTuningJob] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    reads_until_done: int = 2

    def __post_init__(self):
        self._ids = itertools.count(7000)
        self._lock = threading.Lock()
        self._reads: dict[str, int] = {}
        self.parent = f"projects/{self.project}/locations/{self.location}"

    def _wsgi(self, environ, start_response):
        request = Request(environ)
        self.requests.append((request.method, request.full_path.rstrip("?")))
        try:
            with self._lock:
                body = self._route(request)
            response = Response(body, status=200, content_type="application/json")
        except Rejected as exc:
            if exc.status == 400:
                self.violations.append(f"{request.method} {request.path}: {exc.message}")
            response = _error(exc.status, exc.message)
        return response(environ, start_response)

    def _route(self, request: Request) -> str:
        collection = f"/v1/{self.parent}/hyperparameterTuningJobs"
        if request.path == collection and request.method == "POST":
            return self._create(_strict(v1.HyperparameterTuningJob, request))
        if request.path == collection and request.method == "GET":
            return self._list(request.args.get("filter", ""))
        match = re.fullmatch(collection + r"/(\d+)", request.path)
        if match and request.method == "GET":
            return self._get(match.group(1))
        raise Rejected(404, f"no such method: {request.method} {request.path}")

    def _create(self, job: v1.HyperparameterTuningJob) -> str:
        problems = []
        if not job.display_name:
            problems.append("displayName is required")
        if len(job.study_spec.metrics) != 1:
            problems.append("studySpec.metrics needs exactly one metric")
        if not job.study_spec.parameters:
            problems.append("studySpec.parameters is empty")
        if not 1 <= job.parallel_trial_count <= job.max_trial_count:
            problems.append("parallelTrialCount must be in [1, maxTrialCount]")
        pools = job.trial_job_spec.worker_pool_specs
        if len(pools) != 1 or not pools[0].container_spec.image_uri \
                or not pools[0].machine_spec.machine_type:
            problems.append("one worker pool with an image and a machine type is required")
        if not job.trial_job_spec.base_output_directory.output_uri_prefix.startswith("gs://"):
            problems.append("baseOutputDirectory must be a gs:// URI")
        for key, value in job.labels.items():
            if not LABEL_KEY.match(key) or not LABEL_VALUE.match(value):
                problems.append(f"invalid label {key}={value}")
        if problems:
            raise Rejected(400, "; ".join(problems))
        job_id = str(next(self._ids))
        job.name = f"{self.parent}/hyperparameterTuningJobs/{job_id}"
        job.state = v1.JobState.JOB_STATE_PENDING
        self.jobs[job_id] = job
        return v1.HyperparameterTuningJob.to_json(job)

    def _list(self, filter_: str) -> str:
        match = re.fullmatch(r'labels\.([a-z0-9_-]+)="([^"]*)"', filter_)
        if filter_ and not match:
            raise Rejected(400, f"unsupported filter {filter_!r}")
        found = [j for j in self.jobs.values()
                 if not match or j.labels.get(match.group(1)) == match.group(2)]
        return v1.ListHyperparameterTuningJobsResponse.to_json(
            v1.ListHyperparameterTuningJobsResponse(hyperparameter_tuning_jobs=found))

    def _get(self, job_id: str) -> str:
        job = self.jobs.get(job_id)
        if job is None:
            raise Rejected(404, f"job {job_id} not found")
        self._reads[job_id] = self._reads.get(job_id, 0) + 1
        if self._reads[job_id] == 1:
            job.state = v1.JobState.JOB_STATE_RUNNING
        elif self._reads[job_id] >= self.reads_until_done and not job.trials:
            self._run_trials(job)
        return v1.HyperparameterTuningJob.to_json(job)

    def _run_trials(self, job: v1.HyperparameterTuningJob) -> None:
        metric = job.study_spec.metrics[0].metric_id
        count = job.max_trial_count
        for index in range(count):
            params = {spec.parameter_id: _value(spec, index, count)
                      for spec in job.study_spec.parameters}
            trial = v1.Trial(id=str(index + 1), state=v1.Trial.State.SUCCEEDED,
                             parameters=[v1.Trial.Parameter(parameter_id=k, value=v)
                                         for k, v in params.items()])
            try:
                trial.final_measurement = v1.Measurement(metrics=[
                    v1.Measurement.Metric(metric_id=metric, value=self.score(params))])
            except Exception as exc:
                trial.state = v1.Trial.State.INFEASIBLE
                trial.infeasible_reason = str(exc)
            job.trials.append(trial)
        ok = any(t.state == v1.Trial.State.SUCCEEDED for t in job.trials)
        job.state = v1.JobState.JOB_STATE_SUCCEEDED if ok else v1.JobState.JOB_STATE_FAILED


def _value(spec: v1.StudySpec.ParameterSpec, index: int, count: int):
    """The index-th of ``count`` points spread over the parameter's range."""
    kind = spec._pb.WhichOneof("parameter_value_spec")
    if kind == "double_value_spec":
        low, high = spec.double_value_spec.min_value, spec.double_value_spec.max_value
        t = index / max(1, count - 1)
        if spec.scale_type == v1.StudySpec.ParameterSpec.ScaleType.UNIT_LOG_SCALE:
            return math.exp(math.log(low) + t * (math.log(high) - math.log(low)))
        return low + t * (high - low)
    if kind == "integer_value_spec":
        low, high = spec.integer_value_spec.min_value, spec.integer_value_spec.max_value
        return float(low + index % (high - low + 1))
    if kind == "discrete_value_spec":
        values = list(spec.discrete_value_spec.values)
        return values[index % len(values)]
    values = list(spec.categorical_value_spec.values)
    return values[index % len(values)]


def job_json(fake: FakeTuning, job_id: str) -> dict:
    return json.loads(v1.HyperparameterTuningJob.to_json(fake.jobs[job_id]))
