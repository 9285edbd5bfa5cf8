"""The fake Vertex AI v1 server for pipeline jobs and schedules: every body parsed with its
``aiplatform_v1`` type, unknown fields refused (fakes.py)."""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any

from tests.integration.fake_http import (
    Conflict,
    Invalid,
    Recorded,
    Server,
    parse_pipeline_spec_strict,
    task_names,
)

# ---------------------------------------------------------------------------------------------
# Vertex AI


_LABEL_CLAUSE = re.compile(r'^labels\.([a-z][a-z0-9_-]*)="([a-z0-9_-]*)"$')


class FakeVertexServer(Server):
    """The parts of the Vertex AI v1 REST API that gkeflow uses (pipeline jobs, schedules,
    and the ML Metadata calls of Vertex AI Experiments: fake_vertex_metadata.py)."""

    def __init__(self):
        super().__init__()
        self.jobs: dict[str, Any] = {}  # name -> aiplatform_v1.PipelineJob
        self.job_scripts: dict[str, list] = {}
        self.schedules: dict[str, Any] = {}  # name -> aiplatform_v1.Schedule
        from tests.integration.fake_vertex_metadata import FakeMetadata

        self.metadata = FakeMetadata(self)  # Vertex ML Metadata: stores, contexts
        from tests.integration.fake_vertex_tensorboard import FakeTensorboard

        self.tensorboard = FakeTensorboard(self)  # where experiment runs' curves live

    def error_body(self, status: int, message: str) -> dict:
        names = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
                 404: "NOT_FOUND", 409: "ALREADY_EXISTS", 429: "RESOURCE_EXHAUSTED",
                 500: "INTERNAL", 503: "UNAVAILABLE"}
        return {"error": {"code": status, "message": message,
                          "status": names.get(status, "UNKNOWN")}}

    @staticmethod
    def _parse(message_type, body: bytes, what: str):
        try:
            return message_type.from_json(body.decode() or "{}", ignore_unknown_fields=False)
        except Exception as exc:  # noqa: BLE001 - any parse failure is a contract violation
            raise Invalid(f"{what} does not parse as {message_type.__name__}: {exc}") from None

    @staticmethod
    def _json(message) -> dict:
        return json.loads(type(message).to_json(message))

    def _check_job(self, job, where: str) -> None:
        from google.protobuf import json_format

        spec = json_format.MessageToDict(job._pb.pipeline_spec)
        if not spec:
            raise Invalid(f"{where}: pipelineSpec is empty")
        parse_pipeline_spec_strict(spec)
        if not job.runtime_config.gcs_output_directory.startswith("gs://"):
            raise Invalid(f"{where}: runtimeConfig.gcsOutputDirectory must be gs://, got "
                          f"{job.runtime_config.gcs_output_directory!r}")
        for key, value in job.labels.items():
            if not re.fullmatch(r"[a-z][a-z0-9_-]{0,62}", key) or \
                    not re.fullmatch(r"[a-z0-9_-]{0,63}", value):
                raise Invalid(f"{where}: label {key}={value} breaks Vertex label rules")
        declared = spec.get("root", {}).get("inputDefinitions", {}).get("parameters", {})
        unknown = set(job.runtime_config.parameter_values) - set(declared)
        if unknown:
            raise Invalid(f"{where}: parameterValues {sorted(unknown)} are not pipeline inputs")

    def route(self, record: Recorded) -> tuple[int, Any]:
        from google.cloud import aiplatform_v1

        path, method = record.path, record.method
        with self.lock:
            match = re.fullmatch(r"/v1/(projects/[^/]+/locations/[^/]+)/pipelineJobs", path)
            if match and method == "POST":
                job = self._parse(aiplatform_v1.PipelineJob, record.body, "PipelineJob body")
                self._check_job(job, "PipelineJob")
                job_id = record.query.get("pipelineJobId", [f"job-{self.new_id()}"])[0]
                job.name = f"{match[1]}/pipelineJobs/{job_id}"
                if job.name in self.jobs:
                    raise Conflict(f"PipelineJob {job.name} already exists")
                job.state = aiplatform_v1.PipelineState.PIPELINE_STATE_PENDING
                job.create_time = dt.datetime.now(dt.UTC)
                # Vertex AI attaches the run's billing id to the job and what it creates
                job.labels["vertex-ai-pipelines-run-billing-id"] = str(
                    8_000_000_000_000_000_000 + len(self.jobs))
                self.jobs[job.name] = job
                from google.protobuf import json_format

                spec = json_format.MessageToDict(job._pb.pipeline_spec)
                self.job_scripts[job.name] = self._run_script(task_names(spec))
                return 200, self._json(job)
            if match and method == "GET":  # list: newest first, by label, paged
                return 200, self._list_jobs(match[1], record)
            match = re.fullmatch(r"/v1/(projects/[^/]+/locations/[^/]+/pipelineJobs/[^/:]+)",
                                 path)
            if match and method == "GET":
                return 200, self._json(self._advance_job(match[1]))
            match = re.fullmatch(r"/v1/(projects/[^/]+/locations/[^/]+)/schedules", path)
            if match and method == "POST":
                schedule = self._parse(aiplatform_v1.Schedule, record.body, "Schedule body")
                self._check_schedule(schedule)
                schedule.name = f"{match[1]}/schedules/{self.new_id()}"
                schedule.state = aiplatform_v1.Schedule.State.ACTIVE
                schedule.create_time = dt.datetime.now(dt.UTC)
                self._set_next_run(schedule)
                self.schedules[schedule.name] = schedule
                return 200, self._json(schedule)
            if match and method == "GET":
                unknown = set(record.query) - {"filter", "pageSize", "pageToken", "orderBy",
                                               "$alt", "readMask"}
                if unknown:
                    raise Invalid(f"unknown list parameters {sorted(unknown)}")
                items = [s for s in self.schedules.values() if s.name.startswith(match[1])]
                return 200, {"schedules": [self._json(s) for s in items]}
            match = re.fullmatch(
                r"/v1/(projects/[^/]+/locations/[^/]+/schedules/[^/:]+)(?::(pause|resume))?",
                path)
            if match:
                name, verb = match[1], match[2]
                if name not in self.schedules:
                    raise LookupError(f"Schedule {name} not found")
                schedule = self.schedules[name]
                if verb == "pause" and method == "POST":
                    self._parse(aiplatform_v1.PauseScheduleRequest, record.body, "pause body")
                    if schedule.state != aiplatform_v1.Schedule.State.ACTIVE:
                        raise Invalid("only an ACTIVE schedule can be paused")
                    schedule.state = aiplatform_v1.Schedule.State.PAUSED
                    return 200, {}
                if verb == "resume" and method == "POST":
                    request = self._parse(aiplatform_v1.ResumeScheduleRequest, record.body,
                                          "resume body")
                    if schedule.state != aiplatform_v1.Schedule.State.PAUSED:
                        raise Invalid("only a PAUSED schedule can be resumed")
                    schedule.state = aiplatform_v1.Schedule.State.ACTIVE
                    schedule.catch_up = request.catch_up
                    return 200, {}
                if method == "GET" and not verb:
                    return 200, self._json(schedule)
                if method == "DELETE" and not verb:
                    del self.schedules[name]
                    return 200, {"name": f"{name}/operations/{self.new_id()}", "done": True,
                                 "response": {"@type": "type.googleapis.com/google.protobuf."
                                                       "Empty"}}
                if method == "PATCH" and not verb:
                    update = self._parse(aiplatform_v1.Schedule, record.body, "Schedule body")
                    mask = record.query.get("updateMask", [""])[0].split(",")
                    allowed = {"cron", "maxConcurrentRunCount", "displayName"}
                    if not mask or not set(mask) <= allowed:
                        raise Invalid(f"updateMask {mask} must be a subset of {allowed}")
                    if "cron" in mask:
                        schedule.cron = update.cron
                    if "maxConcurrentRunCount" in mask:
                        schedule.max_concurrent_run_count = update.max_concurrent_run_count
                    self._set_next_run(schedule)
                    return 200, self._json(schedule)
            if self.metadata.handles(path):
                return self.metadata.route(record)
            if self.tensorboard.handles(path):
                return self.tensorboard.route(record)
        raise Invalid(f"the fake does not implement {method} {path}")

    def _list_jobs(self, parent: str, record: Recorded) -> dict:
        unknown = set(record.query) - {"filter", "pageSize", "pageToken", "orderBy",
                                       "readMask", "$alt"}
        if unknown:
            raise Invalid(f"unknown list parameters {sorted(unknown)}")
        wanted = {}
        text = record.query.get("filter", [""])[0]
        for clause in filter(None, (c.strip() for c in text.split(" AND "))):
            found = _LABEL_CLAUSE.match(clause)
            if not found:
                raise Invalid(f"filter clause {clause!r} is not labels.KEY=\"VALUE\"")
            wanted[found[1]] = found[2]
        order = record.query.get("orderBy", [""])[0]
        if order not in ("", "create_time desc"):
            raise Invalid(f"orderBy {order!r} is not a PipelineJob field ordering")
        jobs = [j for j in self.jobs.values() if j.name.startswith(parent + "/")
                and all(j.labels.get(k) == v for k, v in wanted.items())]
        jobs.sort(key=lambda j: (j.create_time, j.name), reverse=True)
        start = int(record.query.get("pageToken", ["0"])[0] or 0)
        size = int(record.query.get("pageSize", ["20"])[0] or 20)
        page = jobs[start:start + size]
        answer = {"pipelineJobs": [self._json(j) for j in page]}
        if start + size < len(jobs):
            answer["nextPageToken"] = str(start + size)
        return answer

    def _check_schedule(self, schedule) -> None:
        if not schedule.display_name:
            raise Invalid("Schedule.displayName is required")
        if not schedule.cron:
            raise Invalid("Schedule.cron is required")
        from gkeflow.pipelines.settings.cron import (
            CronError,
            CronExpression,
            split_vertex_cron,
            zone,
        )

        cron, time_zone = split_vertex_cron(schedule.cron)
        try:
            CronExpression.parse(cron)
            zone(time_zone)
        except CronError as exc:
            raise Invalid(f"Schedule.cron {schedule.cron!r}: {exc}") from None
        if schedule.max_concurrent_run_count < 1:
            raise Invalid("Schedule.maxConcurrentRunCount must be >= 1")
        request = schedule.create_pipeline_job_request
        if not request.parent:
            raise Invalid("Schedule.createPipelineJobRequest.parent is required")
        self._check_job(request.pipeline_job, "Schedule.createPipelineJobRequest.pipelineJob")

    @staticmethod
    def _set_next_run(schedule) -> None:
        from gkeflow.pipelines.settings.cron import next_runs, split_vertex_cron

        cron, time_zone = split_vertex_cron(schedule.cron)
        schedule.next_run_time = next_runs(cron, time_zone, 1)[0].astimezone(dt.UTC)

    def _advance_job(self, name: str):
        from google.cloud import aiplatform_v1

        if name not in self.jobs:
            raise LookupError(f"PipelineJob {name} not found")
        job = self.jobs[name]
        script = self.job_scripts[name]
        state, tasks = script.pop(0) if len(script) > 1 else script[0]
        job.state = getattr(aiplatform_v1.PipelineState, f"PIPELINE_STATE_{state}")
        task_state_type = aiplatform_v1.PipelineTaskDetail.State
        details = [aiplatform_v1.PipelineTaskDetail(task_id=1, task_name=job.display_name,
                                                    state=task_state_type[state])]
        for index, (task, task_state) in enumerate(sorted(tasks.items()), start=2):
            details.append(aiplatform_v1.PipelineTaskDetail(
                task_id=index, parent_task_id=1, task_name=task,
                state=task_state_type[task_state]))
        job.job_detail = aiplatform_v1.PipelineJobDetail(task_details=details)
        if state != "PENDING":  # Vertex AI makes the run's metadata context as it starts
            job.job_detail.pipeline_run_context = self.metadata.run_context(job)
        if state == "FAILED":
            failed = [n for n, s in tasks.items() if s == "FAILED"]
            job.error = {"code": 9, "message": f"The DAG failed because task {failed[0]} "
                                               "failed."}
        return job
