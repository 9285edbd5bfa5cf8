"""The fake Kubeflow Pipelines and Vertex AI servers of fakes.py, extended to run history:
listing runs (newest first, paged), run details with task details (times, errors, pods or
CustomJobs, metrics artifacts), logs, cancel and retry, and runs fired by a schedule.

Strict like their parents: KFP requests are matched to the v2beta1 swagger (bodies, query
names) and the fake's answers validated against it; the endpoints outside the API: the
UI server's ``GET /k8s/pod/logs`` (kubeflow/pipelines ``frontend/server/app.ts``) accepts
only its query names (``podname``, ``podnamespace``, ``createdat``), and ML Metadata's
gRPC-Web calls (``POST /ml_metadata.MetadataStoreService/GetArtifactsByID`` and
``GetExecutionsByID``, what the UI server proxies to ``metadata-envoy``) accept one framed
request that parses with no unknown field and answer data and trailer frames. A run's
task details carry ``execution_id`` and ``outputs`` artifact ids; ML Metadata holds the
evaluation's ``system.Metrics`` artifact and register-model's ``outputs``. Vertex bodies parse as
``aiplatform_v1`` messages with unknown fields refused; Cloud Logging ``entries:list`` bodies
as ``logging_v2.ListLogEntriesRequest`` and the answers as ``ListLogEntriesResponse``; the
Vertex fake also answers Secret Manager's ``GET /v1/{version}:access``.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import urllib.parse
from typing import Any

from tests.integration.fakes import (
    FakeKfpServer,
    FakeVertexServer,
    Invalid,
    Recorded,
    task_names,
)

T0 = dt.datetime(2026, 3, 2, 2, 0, tzinfo=dt.UTC)


class Text(str):
    """A plain-text answer (a pod log)."""


class GrpcWeb(bytes):
    """A gRPC-Web answer: frames, ending with the trailer frame."""


MLMD_PREFIX = "/ml_metadata.MetadataStoreService/"
METRICS = {"accuracy": 0.97, "log_loss": 0.12}


class _Script:
    """How runs go: every task succeeds, or ``fail_task`` fails with ``error_message``."""

    fail_task: str | None = None
    error_message = "ValueError: label column 'species' has 1 class; need at least 2"
    #: Tasks served from cache, and tasks a condition left out (by task name): both end
    #: SKIPPED on Kubeflow Pipelines (their ML Metadata executions CACHED and CANCELED); on
    #: Vertex AI SKIPPED (cache hit) and NOT_TRIGGERED.
    cached_tasks: frozenset = frozenset()
    untriggered_tasks: frozenset = frozenset()
    #: The model a cached train-model task hands on (its output artifact's URI).
    CACHED_MODEL_URI = "gs://my-bucket/root/earlier-run/train-model/model"

    def _run_script(self, task_names, failing=None):
        script = super()._run_script(task_names, failing or self.fail_task)
        skipped = {**dict.fromkeys(self.untriggered_tasks, self.UNTRIGGERED),
                   **dict.fromkeys(self.cached_tasks, "SKIPPED")}
        return [(state, {name: skipped.get(name, task) if task == "SUCCEEDED" else task
                         for name, task in tasks.items()}) for state, tasks in script]

    @staticmethod
    def _times(base: dt.datetime, index: int, state: str
               ) -> tuple[dt.datetime | None, dt.datetime | None]:
        """A task's start and end: the run's start plus two minutes per task before it."""
        if state == "PENDING":
            return None, None
        start = base + dt.timedelta(minutes=2 * index)
        ended = state in ("SUCCEEDED", "FAILED", "CANCELED", "CANCELLED")
        return start, (start + dt.timedelta(seconds=90) if ended else None)

    def log_lines(self, task: str, state: str) -> list[str]:
        lines = [f"{task}: started", f"{task}: working"]
        if state == "FAILED":
            lines += ["Traceback (most recent call last):", self.error_message]
        elif state == "SUCCEEDED":
            lines.append(f"{task}: done")
        return lines


def _display_names(spec: dict) -> dict[str, str]:
    """Task name -> ``taskInfo.name`` over the root DAG and every sub-DAG."""
    names = {}
    for dag in [spec.get("root", {}).get("dag", {})] + [
            c["dag"] for c in spec.get("components", {}).values() if "dag" in c]:
        for name, task in dag.get("tasks", {}).items():
            names[name] = task.get("taskInfo", {}).get("name", name)
    return names


def _stamp(value: dt.datetime | None) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if value else ""


class FakeKfpRuns(_Script, FakeKfpServer):
    """FakeKfpServer with run history, task details, pod logs, terminate and retry."""

    UNTRIGGERED = "SKIPPED"

    def __init__(self, expected_token: str | None = None):
        super().__init__(expected_token)
        self.pods: dict[str, tuple[str, str]] = {}  # pod -> (task, state)
        self.display_names: dict[str, dict[str, str]] = {}  # run -> task -> display name
        self.execution_ids: dict[str, int] = {}  # task id -> MLMD execution id
        self.mlmd_artifacts: dict[int, Any] = {}  # id -> ml_metadata.Artifact
        self.mlmd_executions: dict[int, Any] = {}  # id -> ml_metadata.Execution
        self.versions_registered = 0

    def finish(self, run_id: str) -> dict:
        """Play the run's script to its end (what polling would see)."""
        while len(self.run_scripts[run_id]) > 1:
            self._advance_run(run_id)
        return self._advance_run(run_id)

    def fire(self, recurring_run_id: str) -> str:
        """The schedule starts a run, as the KFP scheduled-workflow controller would."""
        with self.lock:
            recurring = self.recurring_runs[recurring_run_id]
            body = {"experiment_id": recurring["experiment_id"],
                    "display_name": f"{recurring['display_name']}-{self.new_id()}",
                    "pipeline_version_reference": recurring["pipeline_version_reference"],
                    "runtime_config": recurring.get("runtime_config", {})}
            run = self._create_run(body)
            run["recurring_run_id"] = recurring_run_id
            return run["run_id"]

    def _create_run(self, body: dict) -> dict:
        run = super()._create_run(body)
        self.display_names[run["run_id"]] = _display_names(self._spec_for(body))
        return run

    def _advance_run(self, run_id: str) -> dict:
        run = super()._advance_run(run_id)
        base = dt.datetime.fromisoformat(run["created_at"].replace("Z", "+00:00"))
        names = self.display_names.get(run_id, {})
        for task in run["run_details"]["task_details"]:
            self._record_metadata(task)
        for task in run["run_details"]["task_details"]:
            # the backend reports a step by its display name (taskInfo.name)
            task["display_name"] = names.get(task["display_name"], task["display_name"])
        for index, task in enumerate(run["run_details"]["task_details"]):
            start, end = self._times(base, index, task["state"])
            task["create_time"] = run["created_at"]
            if start:
                task["start_time"] = _stamp(start)
                step = re.sub(r"[^a-z0-9]+", "-", task["display_name"].lower())
                pod = f"{run_id}-{step}-{index}"
                task["child_tasks"] = [{"task_id": f"{task['task_id']}-exec", "pod_name": pod}]
                self.pods[pod] = (task["display_name"], task["state"])
            if end:
                task["end_time"] = _stamp(end)
            if task["state"] == "FAILED":
                task["error"] = {"code": 2, "message": self.error_message, "details": []}
        if run["state"] in ("SUCCEEDED", "FAILED", "CANCELED"):
            run["finished_at"] = _stamp(base + dt.timedelta(minutes=30))
        if run["state"] == "FAILED" and self.fail_task:
            run["error"] = {"code": 2, "message": f"task {self.fail_task} failed: "
                                                  f"{self.error_message}", "details": []}
        return run

    def _record_metadata(self, task: dict) -> None:
        """What the KFP launcher records in ML Metadata for a step (by its task name):
        an execution per step; the evaluation's metrics artifact; register-model's
        output parameters."""
        from gkeflow.components.cloud.mlmd import messages

        kinds = messages()
        execution_id = self.execution_ids.setdefault(task["task_id"],
                                                     100 + len(self.execution_ids))
        task["execution_id"] = str(execution_id)
        execution = self.mlmd_executions.setdefault(
            execution_id, kinds["Execution"](id=execution_id, type="system.ContainerExecution",
                                             name=task["display_name"]))
        if task["state"] == "SKIPPED":  # what the driver recorded
            cached = task["display_name"] in self.cached_tasks
            execution.last_known_state = 5 if cached else 6  # CACHED, CANCELED
            if cached and task["display_name"] == "train-model":
                artifact = kinds["Artifact"](id=9000 + execution_id, type="system.Model",
                                             uri=self.CACHED_MODEL_URI)
                self.mlmd_artifacts[artifact.id] = artifact
                task["outputs"] = {"model": {"artifact_ids": [str(artifact.id)]}}
            return
        if task["state"] != "SUCCEEDED":
            return
        execution.last_known_state = 3  # COMPLETE
        if task["display_name"] == "evaluate-model":
            artifact_id = 5000 + execution_id
            if artifact_id not in self.mlmd_artifacts:
                artifact = kinds["Artifact"](id=artifact_id, type="system.Metrics",
                                             uri=f"gs://my-bucket/{execution_id}/metrics")
                for key, value in METRICS.items():
                    artifact.custom_properties[key].double_value = value
                artifact.custom_properties["display_name"].string_value = "metrics"
                artifact.custom_properties["store_session_info"].string_value = "{}"
                self.mlmd_artifacts[artifact_id] = artifact
            task["outputs"] = {"metrics": {"artifact_ids": [str(artifact_id)]}}
        if task["display_name"] == "register-model" and "outputs" not in \
                execution.custom_properties:
            self.versions_registered += 1
            execution.custom_properties["outputs"].struct_value.update({
                "model_version": self.versions_registered,
                "resource_name": f"penguins/{self.versions_registered}"})

    def _mlmd(self, record: Recorded) -> GrpcWeb:
        """One gRPC-Web call of ML Metadata, parsed strictly."""
        import struct

        from google.protobuf.unknown_fields import UnknownFieldSet

        from gkeflow.components.cloud.mlmd import frame, messages

        if record.method != "POST":
            raise Invalid("ML Metadata's gRPC-Web calls are POSTs")
        if record.headers.get("content-type") not in ("application/grpc-web+proto",
                                                      "application/grpc-web"):
            raise Invalid(f"content-type {record.headers.get('content-type')!r} is not "
                          "gRPC-Web")
        body = record.body
        if len(body) < 5 or body[0] != 0 or \
                struct.unpack(">I", body[1:5])[0] != len(body) - 5:
            raise Invalid("the body is not one gRPC-Web data frame")
        method = record.path.removeprefix(MLMD_PREFIX)
        calls = {"GetArtifactsByID": ("artifact_ids", self.mlmd_artifacts, "artifacts"),
                 "GetExecutionsByID": ("execution_ids", self.mlmd_executions, "executions")}
        if method not in calls:
            return GrpcWeb(_trailer(12, f"unknown method {method}"))
        kinds = messages()
        request = kinds[f"{method}Request"].FromString(body[5:])
        if len(UnknownFieldSet(request)):
            raise Invalid(f"{method}: the request has fields MLMD does not define")
        ids_field, store, answer_field = calls[method]
        answer = kinds[f"{method}Response"]()
        getattr(answer, answer_field).extend(
            store[i] for i in getattr(request, ids_field) if i in store)
        return GrpcWeb(frame(answer) + _trailer(0, ""))

    def route(self, record: Recorded) -> tuple[int, Any]:
        if record.path.startswith(MLMD_PREFIX):
            if self.expected_token is not None and \
                    record.headers.get("authorization") != f"Bearer {self.expected_token}":
                return 401, self.error_body(401, "Unauthorized")
            with self.lock:
                return 200, self._mlmd(record)
        if record.path == "/k8s/pod/logs":
            if self.expected_token is not None and \
                    record.headers.get("authorization") != f"Bearer {self.expected_token}":
                return 401, self.error_body(401, "Unauthorized")
            unknown = set(record.query) - {"podname", "podnamespace", "createdat"}
            if unknown or not record.query.get("podname"):
                raise Invalid(f"/k8s/pod/logs takes podname, podnamespace, createdat; got "
                              f"{sorted(record.query)}")
            pod = record.query["podname"][0]
            if pod not in self.pods:
                raise LookupError(f"pod {pod} not found")
            return 200, Text("\n".join(self.log_lines(*self.pods[pod])) + "\n")
        return super().route(record)

    def _route(self, record: Recorded, body: dict | None) -> tuple[int, Any]:
        path, method = record.path.removeprefix("/apis/v2beta1"), record.method
        with self.lock:
            if path == "/runs" and method == "GET":
                experiment = self._first(record, "experiment_id")
                items = [r for r in self.runs.values()
                         if not experiment or r["experiment_id"] == experiment]
                items = self._filter(items, self._first(record, "filter"))
                if self._first(record, "sort_by") not in ("", "created_at desc"):
                    raise Invalid(f"fake sorts only by 'created_at desc', got "
                                  f"{self._first(record, 'sort_by')!r}")
                items.sort(key=lambda r: r["run_id"], reverse=True)
                start = int(self._first(record, "page_token") or 0)
                size = int(self._first(record, "page_size") or 20)
                page = items[start:start + size]
                token = str(start + size) if start + size < len(items) else ""
                return 200, {"runs": page, "total_size": len(items), "next_page_token": token}
            match = re.fullmatch(r"/pipelines/([^/:]+)", path)
            if match and method == "GET":
                if match[1] not in self.pipelines:
                    raise LookupError(f"pipeline {match[1]} not found")
                return 200, self.pipelines[match[1]]
            match = re.fullmatch(r"/runs/([^/:]+):(terminate|retry)", path)
            if match and method == "POST":
                run_id, verb = match[1], match[2]
                if run_id not in self.runs:
                    raise LookupError(f"run {run_id} not found")
                run = self.runs[run_id]
                tasks = {t["display_name"]: t["state"]
                         for t in (run.get("run_details") or {}).get("task_details", [])}
                if verb == "terminate":
                    tasks = {n: ("CANCELED" if s in ("PENDING", "RUNNING") else s)
                             for n, s in tasks.items()}
                    self.run_scripts[run_id] = [("CANCELED", tasks)]
                    return 200, {}
                if run["state"] != "FAILED":
                    return 400, self.error_body(400, f"run {run_id} is {run['state']}; only "
                                                     "a failed run can be retried")
                done = {n: "SUCCEEDED" for n in tasks}
                self.run_scripts[run_id] = [("RUNNING", {**tasks, **{
                    n: "RUNNING" for n, s in tasks.items() if s == "FAILED"}}),
                    ("SUCCEEDED", done)]
                self.fail_task = None
                run["state"] = "RUNNING"
                return 200, {}
        return super()._route(record, body)

    def _send(self, handler, status: int, payload: Any) -> None:
        if not isinstance(payload, (Text, GrpcWeb)):
            return super()._send(handler, status, payload)
        grpc = isinstance(payload, GrpcWeb)
        data = bytes(payload) if grpc else payload.encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/grpc-web+proto" if grpc
                            else "text/plain; charset=utf-8")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)


def _trailer(status: int, message: str) -> bytes:
    """A gRPC-Web trailer frame."""
    import struct

    text = f"grpc-status: {status}\r\ngrpc-message: {urllib.parse.quote(message)}\r\n".encode()
    return b"\x80" + struct.pack(">I", len(text)) + text


_LOG_FILTER = re.compile(r'^resource\.type="ml_job" AND resource\.labels\.job_id="([0-9]+)"'
                         r'(?: AND timestamp>"([^"]+)")?$')


class FakeVertexRuns(_Script, FakeVertexServer):
    """FakeVertexServer with job listing, task details, cancel and Cloud Logging."""

    UNTRIGGERED = "NOT_TRIGGERED"

    def __init__(self):
        self.registered: dict[str, int] = {}  # job -> the version its register-model made
        super().__init__()
        self.custom_jobs: dict[str, tuple[str, str]] = {}  # job id -> (task, state)
        self.secrets: dict[str, str] = {}  # Secret Manager: projects/P/secrets/S -> value
        self.secret_reads: list[str] = []

    def fire(self, schedule_name: str) -> str:
        """The schedule starts a PipelineJob, as Vertex AI would at its cron time."""
        from google.cloud import aiplatform_v1
        from google.protobuf import json_format

        with self.lock:
            schedule = self.schedules[schedule_name]
            request = schedule.create_pipeline_job_request
            job = aiplatform_v1.PipelineJob(request.pipeline_job)
            job_id = f"{schedule.display_name}-{self.new_id()}"
            job.name, job.display_name = f"{request.parent}/pipelineJobs/{job_id}", job_id
            job.schedule_name = schedule.name
            job.state = aiplatform_v1.PipelineState.PIPELINE_STATE_PENDING
            job.create_time = dt.datetime.now(dt.UTC)
            self.jobs[job.name] = job
            spec = json_format.MessageToDict(job._pb.pipeline_spec)
            self.job_scripts[job.name] = self._run_script(task_names(spec))
            return job.name

    def finish(self, name: str):
        while len(self.job_scripts[name]) > 1:
            self._advance_job(name)
        return self._advance_job(name)

    def _advance_job(self, name: str):
        from google.cloud import aiplatform_v1

        job = super()._advance_job(name)
        parent = name.split("/pipelineJobs/")[0]
        job_id = name.rsplit("/", 1)[-1]
        base = job.create_time.replace(microsecond=0)
        for index, task in enumerate(job.job_detail.task_details):
            state = task.state.name
            start, end = self._times(base, index, state)
            if start:
                task.start_time = start
            if end:
                task.end_time = end
            if not task.parent_task_id:
                continue
            if start:
                custom_job = str(abs(hash((job_id, task.task_name))) % 10**12)
                task.executor_detail = aiplatform_v1.PipelineTaskExecutorDetail(
                    container_detail={"main_job": f"{parent}/customJobs/{custom_job}"})
                self.custom_jobs[custom_job] = (task.task_name, state)
            if state == "FAILED":
                task.error = {"code": 9, "message": self.error_message}
            if task.task_name == "train-model" and state == "SKIPPED":  # the cached model
                task.outputs = {"model": aiplatform_v1.PipelineTaskDetail.ArtifactList(
                    artifacts=[aiplatform_v1.Artifact(schema_title="system.Model",
                                                      uri=self.CACHED_MODEL_URI)])}
            if task.task_name == "evaluate-model" and state == "SUCCEEDED":
                task.outputs = {"metrics": aiplatform_v1.PipelineTaskDetail.ArtifactList(
                    artifacts=[aiplatform_v1.Artifact(
                        schema_title="system.Metrics", uri="gs://my-bucket/metrics",
                        metadata=METRICS)])}
            if task.task_name == "register-model" and state == "SUCCEEDED":
                if name not in self.registered:  # one version per job, however often read
                    self.registered[name] = len(self.registered) + 1
                version = self.registered[name]
                task.execution = aiplatform_v1.Execution(metadata={
                    "output:model_version": version,
                    "output:resource_name": f"penguins/{version}"})
        if job.state.name in ("PIPELINE_STATE_SUCCEEDED", "PIPELINE_STATE_FAILED",
                              "PIPELINE_STATE_CANCELLED"):
            job.end_time = base + dt.timedelta(minutes=30)
        job.start_time = base
        if job.state.name == "PIPELINE_STATE_FAILED" and self.fail_task:
            job.error = {"code": 9, "message": f"The DAG failed because task "
                                               f"{self.fail_task} failed."}
        return job

    def route(self, record: Recorded) -> tuple[int, Any]:
        from google.cloud import aiplatform_v1

        path, method = record.path, record.method
        with self.lock:
            match = re.fullmatch(
                r"/v1/(projects/[^/]+/locations/[^/]+/pipelineJobs/[^/:]+):cancel", path)
            if match and method == "POST":
                self._parse(aiplatform_v1.CancelPipelineJobRequest, record.body, "cancel body")
                if match[1] not in self.jobs:
                    raise LookupError(f"PipelineJob {match[1]} not found")
                job = self.jobs[match[1]]
                job.state = aiplatform_v1.PipelineState.PIPELINE_STATE_CANCELLING
                self.job_scripts[match[1]] = [("CANCELLED", {})]
                return 200, {}
            if path == "/v2/entries:list" and method == "POST":
                return 200, self._log_entries(record)
            match = re.fullmatch(r"/v1/(projects/[^/]+/secrets/[^/]+/versions/[^/:]+):access",
                                 path)
            if match and method == "GET":  # Secret Manager AccessSecretVersion
                if record.query or record.body:
                    raise Invalid("AccessSecretVersion takes no query and no body")
                secret = re.sub(r"/versions/[^/]+$", "", match[1])
                if secret not in self.secrets:
                    raise LookupError(f"Secret [{secret}] not found or has no versions")
                import base64

                data = base64.b64encode(self.secrets[secret].encode()).decode()
                self.secret_reads.append(match[1])
                return 200, {"name": match[1], "payload": {"data": data}}
        status, answer = super().route(record)
        match = re.fullmatch(r"/v1/(projects/[^/]+/locations/[^/]+/pipelineJobs/[^/:]+)", path)
        if match and method == "GET" and status == 200 and "$alt" not in record.query:
            # Without $alt=json;enum-encoding=int (what the client libraries ask for) the
            # API answers in its JSON mapping: lowerCamelCase names, enums by name.
            job = self.jobs[match[1]]
            answer = json.loads(type(job).to_json(job, use_integers_for_enums=False,
                                                  preserving_proto_field_name=False))
        return status, answer

    def _log_entries(self, record: Recorded) -> dict:
        from google.cloud.logging_v2.types import ListLogEntriesRequest, ListLogEntriesResponse

        request = self._parse(ListLogEntriesRequest, record.body, "entries:list body")
        if list(request.resource_names) != ["projects/my-project"]:
            raise Invalid(f"resourceNames {list(request.resource_names)} must name the project")
        found = _LOG_FILTER.match(request.filter)
        if not found:
            raise Invalid(f"filter {request.filter!r} does not select one ml_job's entries")
        if found[1] not in self.custom_jobs:
            return {}
        task, state = self.custom_jobs[found[1]]
        entries = []
        for index, line in enumerate(self.log_lines(task, state)):
            stamp = T0 + dt.timedelta(seconds=index)
            if found[2] and stamp <= dt.datetime.fromisoformat(found[2].replace("Z", "+00:00")):
                continue
            entries.append({
                "logName": "projects/my-project/logs/workerpool0-0",
                "resource": {"type": "ml_job", "labels": {"job_id": found[1],
                                                          "project_id": "my-project"}},
                "textPayload": line, "timestamp": _stamp(stamp),
                "insertId": f"{found[1]}-{index}"})
        answer = {"entries": entries}
        ListLogEntriesResponse.from_json(json.dumps(answer), ignore_unknown_fields=False)
        return answer


def query_of(url: str) -> dict[str, list[str]]:
    return urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
