"""Vertex AI Pipelines: :class:`VertexBackend`, through ``google.cloud.aiplatform``.

Every remote call goes through :func:`gkeflow.pipelines.targets.transport.call` with the client
library's own retries off (``retry=None``) and a timeout per request. Creates are
idempotent: a pipeline job has the id gkeflow chose (a 409 for it, or a 5xx after the
server created it, means it exists: it is read back); a schedule carries a request label
that is looked up before any retry. With ``dry_run`` no credentials are needed and nothing
is sent.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import replace
from typing import Any

from gkeflow.pipelines.settings.remote_config import VertexTarget
from gkeflow.pipelines.targets.backends import (
    FINGERPRINT_LABEL,
    MANAGED_LABEL,
    OWNER_LABEL,
    REQUEST_LABEL,
    PlannedRequest,
    PreparedPipeline,
    RemoteSchedule,
    RunStatus,
    ScheduleRequest,
    TargetBackend,
    normalise_state,
)
from gkeflow.pipelines.targets.transport import RemoteError, RetryPolicy, call


def sanitise_label(text: str, *, key: bool = False) -> str:
    """A Vertex label key or value: lowercase letters, digits, ``_`` and ``-``, at most 63
    characters; keys start with a letter."""
    text = re.sub(r"[^a-z0-9_-]+", "-", str(text).lower()).strip("-")[:63]
    if key and (not text or not text[0].isalpha()):
        text = f"k-{text}"[:63]
    return text


def sanitise_labels(labels: dict[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in labels.items():
        clean_key = sanitise_label(key, key=True)
        if clean_key in out:
            raise ValueError(f"labels {key!r} and another label both become {clean_key!r}")
        out[clean_key] = sanitise_label(value)
    return out


def is_local_endpoint(endpoint: str | None) -> bool:
    return bool(endpoint) and bool(re.match(r"^http://(127\.0\.0\.1|localhost|\[::1\])(:\d+)?$",
                                            endpoint))


class VertexBackend(TargetBackend):
    """Vertex AI Pipelines, through ``google.cloud.aiplatform``."""

    target_name = "vertex"

    def __init__(self, target: VertexTarget, *, dry_run: bool = False,
                 policy: RetryPolicy | None = None):
        super().__init__(target, dry_run=dry_run, policy=policy)
        self._initialised = False

    @property
    def parent(self) -> str:
        return f"projects/{self.target.project}/locations/{self.target.region}"

    @property
    def endpoint(self) -> str:
        return self.target.api_endpoint or f"https://{self.target.region}-aiplatform.googleapis.com"

    def _init(self) -> None:
        if self._initialised:
            return
        from google.cloud import aiplatform

        if self.dry_run or is_local_endpoint(self.target.api_endpoint):
            # A dry run sends nothing, and a plain-http endpoint on loopback is a local
            # emulator: neither needs credentials.
            from google.auth.credentials import AnonymousCredentials

            credentials = AnonymousCredentials()
        else:
            from gkeflow.pipelines.targets.credentials import google_credentials

            credentials = google_credentials("targets.vertex")
        # The SDK logs "Creating PipelineJobSchedule..." and code snippets at INFO on
        # stdout; gkeflow prints its own summary.
        import logging

        for name in list(logging.root.manager.loggerDict):
            if name.startswith("google.cloud.aiplatform"):
                logging.getLogger(name).setLevel(logging.WARNING)
        kwargs = {"api_endpoint": self.target.api_endpoint} if self.target.api_endpoint else {}
        aiplatform.init(project=self.target.project, location=self.target.region,
                        credentials=credentials, api_transport="rest", **kwargs)
        self._initialised = True

    def client(self, kind: str):
        self._init()
        from google.cloud.aiplatform import initializer, utils

        client_class = {"schedule": utils.ScheduleClientWithOverride,
                        "pipeline": utils.PipelineJobClientWithOverride,
                        "metadata": utils.MetadataClientWithOverride}[kind]
        return initializer.global_config.create_client(
            client_class=client_class, location_override=self.target.region
        ).select_version("v1")

    def call(self, what: str, func, *, idempotent: bool = True, recover=None):
        try:
            return call(what, func, self.policy, idempotent=idempotent, recover=recover)
        except RemoteError as exc:
            if exc.status is not None:
                raise
            raise RemoteError(f"{exc}; {self.connection_hint()}", exc.status) from None

    def connection_hint(self) -> str:
        """What to check when Vertex AI could not be reached at all."""
        if self.target.api_endpoint:
            return (f"check targets.vertex.api_endpoint ({self.target.api_endpoint}) and "
                    "the network")
        return (f"check the network, or set targets.vertex.api_endpoint if {self.endpoint} "
                "is not reachable from here")

    def once(self, what: str, func):
        """One request, no retry: a look-up that makes a create idempotent."""
        return call(what, func, replace(self.policy, attempts=1))

    @property
    def rpc(self) -> dict[str, Any]:
        """Per-request settings: our timeout, and no retries inside the client library."""
        return {"timeout": self.policy.timeout_s, "retry": None}

    def _plan(self, method: str, path: str, body=None, note: str = "") -> None:
        self.planned.append(PlannedRequest(method, f"{self.endpoint}/v1/{path}", body,
                                           note=note))

    def console_url(self, job_name: str) -> str:
        job_id = job_name.rsplit("/", 1)[-1]
        return (f"https://console.cloud.google.com/vertex-ai/locations/{self.target.region}"
                f"/pipelines/runs/{job_id}?project={self.target.project}")

    def _pipeline_job(self, prepared: PreparedPipeline, display_name: str,
                      parameters: dict[str, Any], labels: dict[str, str],
                      job_id: str | None = None):
        self._init()
        from google.cloud import aiplatform

        return aiplatform.PipelineJob(
            display_name=display_name, template_path=prepared.path, job_id=job_id,
            pipeline_root=self.target.pipeline_root, parameter_values=parameters,
            enable_caching=self.target.enable_caching,
            encryption_spec_key_name=self.target.encryption_key,
            labels=sanitise_labels({**self.target.labels, **labels}),
            project=self.target.project, location=self.target.region)

    @staticmethod
    def _job_body(job, prepared: PreparedPipeline) -> dict:
        body = json.loads(type(job._gca_resource).to_json(
            job._gca_resource, use_integers_for_enums=False,
            always_print_fields_with_no_presence=False))
        body["pipelineSpec"] = (f"<pipeline spec {prepared.display_name}: {prepared.task_count} "
                                f"steps, sha256 {prepared.spec_sha256[:12]}>")
        return body

    def submit(self, prepared: PreparedPipeline, job_id: str, parameters: dict[str, Any],
               labels: dict[str, str]) -> str:
        job = self._pipeline_job(prepared, job_id, parameters, labels, job_id=job_id)
        if self.dry_run:
            body = self._job_body(job, prepared)
            body["serviceAccount"] = self.target.service_account
            if self.target.network:
                body["network"] = self.target.network
            self._plan("POST", f"{self.parent}/pipelineJobs?pipelineJobId={job_id}", body)
            return f"{self.parent}/pipelineJobs/{job_id}"
        # Not job.submit(): besides creating the job, it checks (and would create) the
        # pipeline-root bucket and grant IAM on it, with its own minutes-long retries.
        # gkeflow only creates the job; pipeline_root must name an existing bucket.
        resource = job._gca_resource
        resource.service_account = self.target.service_account
        if self.target.network:
            resource.network = self.target.network
        client = self.client("pipeline")
        name = f"{self.parent}/pipelineJobs/{job_id}"

        def find():  # the job id is ours: a job under it is the one an attempt created
            try:
                return self.once(f"look up pipeline job {job_id!r}",
                                  lambda: client.get_pipeline_job(name=name, **self.rpc))
            except RemoteError as exc:
                if exc.status == 404:
                    return None
                raise

        created = self.call(
            f"create pipeline job {job_id!r}",
            lambda: client.create_pipeline_job(parent=self.parent, pipeline_job=resource,
                                               pipeline_job_id=job_id, **self.rpc),
            idempotent=False, recover=find)
        return created.name

    def run_status(self, job_name: str) -> RunStatus:
        client = self.client("pipeline")
        job = self.call(f"get pipeline job {job_name.rsplit('/', 1)[-1]}",
                         lambda: client.get_pipeline_job(name=job_name, **self.rpc))
        tasks = {}
        for task in job.job_detail.task_details:
            if task.task_name and task.parent_task_id:  # the root (whole pipeline) has none
                tasks[task.task_name] = normalise_state(task.state)
        return RunStatus(job_name, normalise_state(job.state), tasks, job.error.message or "")

    # -- schedules ----------------------------------------------------------------------------

    def list_schedules(self, *, _call=None) -> list[RemoteSchedule]:
        from gkeflow.pipelines.settings.cron import split_vertex_cron

        if self.dry_run:
            self._plan("GET", f"{self.parent}/schedules",
                       note="read what exists; the requests below assume none does")
            return []
        _call = _call or self.call
        client = self.client("schedule")
        pager = _call("list schedules", lambda: client.list_schedules(
            request={"parent": self.parent}, **self.rpc))
        schedules = []
        for schedule in _call("list schedules (pages)", lambda: list(pager)):
            labels = dict(schedule.create_pipeline_job_request.pipeline_job.labels)
            name = labels.get(MANAGED_LABEL)
            if not name:
                continue  # not made by gkeflow: never touched
            local_cron, time_zone = split_vertex_cron(schedule.cron)
            next_run = schedule.next_run_time if schedule.next_run_time else None
            schedules.append(RemoteSchedule(
                id=schedule.name, name=name, target="vertex", cron=schedule.cron,
                max_concurrency=int(schedule.max_concurrent_run_count or 1),
                enabled=schedule.state.name == "ACTIVE", catch_up=None,
                job_fingerprint=labels.get(FINGERPRINT_LABEL, ""), local_cron=local_cron,
                time_zone=time_zone, next_run_time=next_run,
                pipeline_version=labels.get("gkeflow-version", ""),
                request_id=labels.get(REQUEST_LABEL, ""),
                owner=labels.get(OWNER_LABEL, "")))
        return schedules

    def create_schedule(self, request: ScheduleRequest, prepared: PreparedPipeline,
                        labels: dict[str, str]) -> str:
        """Create the schedule; its pipeline job carries a fresh ``gkeflow-request`` label,
        looked up before any retry so that a create the server executed is not repeated."""
        request_id = uuid.uuid4().hex[:16]
        job = self._pipeline_job(
            prepared, f"{request.name}", request.parameters,
            {**labels, MANAGED_LABEL: request.name, FINGERPRINT_LABEL: request.job_fingerprint,
             REQUEST_LABEL: request_id, **({OWNER_LABEL: request.owner} if request.owner else {})})
        job_body = self._job_body(job, prepared)
        job_body["serviceAccount"] = self.target.service_account
        if self.target.network:
            job_body["network"] = self.target.network
        body = {"displayName": request.name, "cron": request.cron,
                "maxConcurrentRunCount": str(request.max_concurrency),
                "createPipelineJobRequest": {"parent": self.parent, "pipelineJob": job_body}}
        if self.dry_run:
            self._plan("POST", f"{self.parent}/schedules", body,
                       note="retried only after looking for its gkeflow-request label")
            if not request.enabled:
                self._plan("POST", f"{self.parent}/schedules/<schedule_id>:pause", {})
            return "<schedule>"
        from google.cloud import aiplatform_v1

        pipeline_job = job._gca_resource
        pipeline_job.service_account = self.target.service_account
        if self.target.network:
            pipeline_job.network = self.target.network
        schedule = aiplatform_v1.Schedule(
            display_name=request.name, cron=request.cron,
            max_concurrent_run_count=request.max_concurrency,
            create_pipeline_job_request=aiplatform_v1.CreatePipelineJobRequest(
                parent=self.parent, pipeline_job=pipeline_job))
        client = self.client("schedule")

        def find():
            found = [r for r in self.list_schedules(_call=self.once)
                     if r.request_id == request_id]
            return found[0] if found else None

        created = self.call(
            f"create schedule {request.name!r}",
            lambda: client.create_schedule(parent=self.parent, schedule=schedule, **self.rpc),
            idempotent=False, recover=find)
        resource_name = created.id if isinstance(created, RemoteSchedule) else created.name
        if not request.enabled:
            remote = RemoteSchedule(resource_name, request.name, "vertex", request.cron,
                                    request.max_concurrency, True, None,
                                    request.job_fingerprint)
            self.set_enabled(remote, False)
        return resource_name

    def delete_schedule(self, schedule: RemoteSchedule) -> None:
        if self.dry_run:
            return self._plan("DELETE", schedule.id)
        client = self.client("schedule")
        try:
            operation = self.call(f"delete schedule {schedule.name!r}",
                                   lambda: client.delete_schedule(name=schedule.id, **self.rpc))
        except RemoteError as exc:
            if exc.status == 404:  # gone already: an earlier try's answer was lost
                return
            raise
        self.call(f"wait for deletion of schedule {schedule.name!r}",
                   lambda: operation.result(timeout=self.policy.timeout_s))

    def set_enabled(self, schedule: RemoteSchedule, enabled: bool,
                    catch_up: bool = False) -> None:
        verb = "resume" if enabled else "pause"
        if self.dry_run:
            return self._plan("POST", f"{schedule.id}:{verb}",
                              {"catchUp": catch_up} if enabled else {})
        client = self.client("schedule")

        def settled():  # an earlier try whose answer was lost may have done it
            return True if self._is_state(client, schedule, enabled) else None

        if enabled:
            self.call(f"resume schedule {schedule.name!r}", lambda: client.resume_schedule(
                request={"name": schedule.id, "catch_up": catch_up}, **self.rpc),
                idempotent=False, recover=settled)
        else:
            self.call(f"pause schedule {schedule.name!r}", lambda: client.pause_schedule(
                name=schedule.id, **self.rpc), idempotent=False, recover=settled)

    def _is_state(self, client, schedule: RemoteSchedule, enabled: bool) -> bool:
        """Whether ``schedule`` is now active (``enabled``) or paused (one try)."""
        from google.cloud import aiplatform_v1

        current = self.once(f"read schedule {schedule.name!r}",
                             lambda: client.get_schedule(name=schedule.id, **self.rpc))
        wanted = (aiplatform_v1.Schedule.State.ACTIVE if enabled
                  else aiplatform_v1.Schedule.State.PAUSED)
        return current.state == wanted

    def needs_replacement(self, remote: RemoteSchedule, request: ScheduleRequest) -> list[str]:
        if remote.job_fingerprint != request.job_fingerprint:
            return ["pipeline version or parameters"]
        return []

    def updatable_changes(self, remote: RemoteSchedule, request: ScheduleRequest) -> list[str]:
        changes = []
        if remote.cron != request.cron:
            changes.append(f"cron {remote.cron!r} -> {request.cron!r}")
        if remote.max_concurrency != request.max_concurrency:
            changes.append(f"max_concurrency {remote.max_concurrency} -> "
                           f"{request.max_concurrency}")
        return changes

    def update_schedule(self, remote: RemoteSchedule, request: ScheduleRequest) -> None:
        body = {"name": remote.id, "cron": request.cron,
                "maxConcurrentRunCount": str(request.max_concurrency)}
        if self.dry_run:
            return self._plan("PATCH", f"{remote.id}?updateMask=cron,maxConcurrentRunCount",
                              body)
        from google.cloud import aiplatform_v1
        from google.protobuf import field_mask_pb2

        client = self.client("schedule")
        schedule = aiplatform_v1.Schedule(name=remote.id, cron=request.cron,
                                          max_concurrent_run_count=request.max_concurrency)
        self.call(f"update schedule {request.name!r}", lambda: client.update_schedule(
            schedule=schedule,
            update_mask=field_mask_pb2.FieldMask(paths=["cron", "max_concurrent_run_count"]),
            **self.rpc))
