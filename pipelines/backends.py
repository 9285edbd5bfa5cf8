"""The two remote targets behind `gkeflow submit` and `gkeflow schedule`.

:class:`KfpBackend` talks to the Kubeflow Pipelines v2beta1 API through ``kfp.Client``;
:class:`VertexBackend` talks to Vertex AI through ``google.cloud.aiplatform``. Both expose the
same small surface (upload, run, poll, list/create/update/pause/resume/delete schedules);
every remote call goes through :func:`gkeflow.pipelines.remote.call` (retries, timeouts, clear
errors). With ``dry_run`` the writes are recorded as :class:`PlannedRequest` instead of sent
(reads still happen, so the plan reflects what is really there).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gkeflow.pipelines.config import GkeTarget, VertexTarget
from gkeflow.pipelines.remote import RemoteError, RetryPolicy, call, register_secret

#: Marker in the description (KFP) / label (Vertex) of schedules that gkeflow manages.
MANAGED_LABEL = "gkeflow-schedule"
FINGERPRINT_LABEL = "gkeflow-job"
_KFP_DESCRIPTION_RE = re.compile(r"^gkeflow schedule (?P<name>\S+); (?P<fields>.*)$")


@dataclass(frozen=True)
class PlannedRequest:
    """A write that ``--dry-run`` shows instead of sending."""

    method: str
    url: str
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)

    def render(self) -> str:
        lines = [f"{self.method} {self.url}"]
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


def _normalise_state(state: Any) -> str:
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


def _quiet(func: Callable[[], Any]) -> Callable[[], Any]:
    """kfp.Client prints links on stdout; keep gkeflow's own output clean."""

    def run():
        with contextlib.redirect_stdout(io.StringIO()):
            return func()

    return run


# ---------------------------------------------------------------------------------------------
# Kubeflow Pipelines


def _kfp_client_class():
    import kfp

    class _Client(kfp.Client):
        """``kfp.Client`` whose health check obeys gkeflow's timeout and retry policy
        (the stock one retries five times, five seconds apart, without a timeout)."""

        _gkeflow_policy = RetryPolicy()

        def get_kfp_healthz(self, sleep_duration: int = 5):
            return call("Kubeflow Pipelines health check",
                        lambda: self._healthz_api.healthz_service_get_healthz(
                            _request_timeout=(self._gkeflow_policy.timeout_s,
                                              self._gkeflow_policy.timeout_s)),
                        self._gkeflow_policy)

    return _Client


class _TargetBackend:
    """What both targets keep: their config, the retry policy, dry-run's planned requests."""

    def __init__(self, target, *, dry_run: bool = False, policy: RetryPolicy | None = None):
        self.target = target
        self.dry_run = dry_run
        self.policy = policy or RetryPolicy(attempts=target.retries + 1,
                                            timeout_s=target.timeout_s)
        self.planned: list[PlannedRequest] = []


class KfpBackend(_TargetBackend):
    """Kubeflow Pipelines on GKE, through ``kfp.Client``."""

    target_name = "gke"

    def __init__(self, target: GkeTarget, *, dry_run: bool = False,
                 policy: RetryPolicy | None = None):
        super().__init__(target, dry_run=dry_run, policy=policy)
        self._client = None
        self._experiment_id: str | None = None

    # -- connection ---------------------------------------------------------------------------

    def _token(self) -> str | None:
        auth = self.target.auth
        if auth.token_env:
            token = os.environ.get(auth.token_env, "")
            if not token:
                raise RemoteError(f"environment variable {auth.token_env} is empty or not set "
                                  "(targets.gke.auth.token_env names it); export the "
                                  "Kubeflow Pipelines bearer token there")
            register_secret(token)
            return token
        if auth.google:
            import google.auth
            import google.auth.transport.requests

            credentials, _ = google.auth.default(
                scopes=["https://www.googleapis.com/auth/cloud-platform"])
            credentials.refresh(google.auth.transport.requests.Request())
            register_secret(credentials.token)
            return credentials.token
        return None

    @property
    def auth_header(self) -> dict[str, str]:
        auth = self.target.auth
        if auth.token_env or auth.google:
            return {"Authorization": "Bearer ***"}
        if auth.iap_client_id:
            return {"Authorization": "Bearer *** (IAP ID token)"}
        return {}

    @property
    def client(self):
        if self._client is None:
            client_class = _kfp_client_class()
            client_class._gkeflow_policy = self.policy
            token = self._token()
            import warnings

            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "This client only works", FutureWarning)
                self._client = _quiet(lambda: client_class(
                    host=self.target.host, existing_token=token,
                    client_id=self.target.auth.iap_client_id,
                    namespace=self.target.namespace, ui_host=self.target.ui_url))()
            self._apply_timeout(self._client)
        return self._client

    def _apply_timeout(self, client) -> None:
        """Give every request of this client a timeout (kfp.Client sets none)."""
        rest = client._run_api.api_client.rest_client
        original = rest.request
        timeout = self.policy.timeout_s

        def request(*args, **kwargs):
            if not kwargs.get("_request_timeout"):
                kwargs["_request_timeout"] = (timeout, timeout)
            return original(*args, **kwargs)

        rest.request = request

    def _call(self, what: str, func, *, idempotent: bool = True):
        return call(what, _quiet(func), self.policy, idempotent=idempotent)

    def _plan(self, method: str, path: str, body=None) -> None:
        self.planned.append(PlannedRequest(method, f"{self.target.host}{path}", body,
                                           self.auth_header))

    @property
    def ui_url(self) -> str:
        return self.target.ui_url or self.target.host

    def run_url(self, run_id: str) -> str:
        return f"{self.ui_url}/#/runs/details/{run_id}"

    # -- pipelines and versions ---------------------------------------------------------------

    def find_pipeline_version(self, prepared: PreparedPipeline) -> tuple[str | None, str | None]:
        pipeline_id = self._call(f"look up pipeline {prepared.display_name!r}",
                                 lambda: self.client.get_pipeline_id(prepared.display_name))
        if not pipeline_id:
            return None, None
        name_filter = json.dumps({"predicates": [{
            "operation": "EQUALS", "key": "name", "stringValue": prepared.version_name}]})
        response = self._call(
            f"look up version {prepared.version_name!r}",
            lambda: self.client.list_pipeline_versions(pipeline_id, page_size=10,
                                                       filter=name_filter))
        for version in response.pipeline_versions or []:
            if version.name == prepared.version_name or \
                    version.display_name == prepared.version_name:
                return pipeline_id, version.pipeline_version_id
        return pipeline_id, None

    def ensure_pipeline_version(self, prepared: PreparedPipeline) -> tuple[str, str, list[str]]:
        """Upload the pipeline (once) and this version (once); returns ids and what was done."""
        done: list[str] = []
        pipeline_id, version_id = self.find_pipeline_version(prepared)
        if version_id:
            note = f"pipeline version {prepared.version_name} already uploaded"
            return pipeline_id, version_id, [note]
        if not pipeline_id:
            if self.dry_run:
                self._plan("POST", f"/apis/v2beta1/pipelines/upload?name="
                           f"{prepared.display_name}", f"<multipart uploadfile: {prepared.path}>")
                pipeline_id = "<new pipeline id>"
            else:
                pipeline = self._call(
                    f"upload pipeline {prepared.display_name!r}",
                    lambda: self.client.upload_pipeline(
                        prepared.path, pipeline_name=prepared.display_name,
                        description=f"gkeflow pipeline {prepared.name}"),
                    idempotent=False)
                pipeline_id = pipeline.pipeline_id
            done.append(f"uploaded pipeline {prepared.display_name}")
        if self.dry_run:
            self._plan("POST", f"/apis/v2beta1/pipelines/upload_version?name="
                       f"{prepared.version_name}&pipelineid={pipeline_id}",
                       f"<multipart uploadfile: {prepared.path}>")
            version_id = "<new version id>"
        else:
            version = self._call(
                f"upload pipeline version {prepared.version_name!r}",
                lambda: self.client.upload_pipeline_version(
                    prepared.path, prepared.version_name, pipeline_id=pipeline_id,
                    description=f"{prepared.name} for {prepared.target}, spec sha256 "
                                f"{prepared.spec_sha256[:12]}"),
                idempotent=False)
            version_id = version.pipeline_version_id
        done.append(f"uploaded pipeline version {prepared.version_name}")
        return pipeline_id, version_id, done

    # -- experiments and runs -----------------------------------------------------------------

    def experiment_id(self, create: bool = True) -> str | None:
        if self._experiment_id:
            return self._experiment_id
        name = self.target.experiment
        try:
            experiment = self._call(
                f"look up experiment {name!r}",
                lambda: self.client.get_experiment(experiment_name=name,
                                                   namespace=self.target.namespace))
        except ValueError:
            experiment = None
        if experiment is None:
            if not create:
                return None
            if self.dry_run:
                self._plan("POST", "/apis/v2beta1/experiments",
                           {"display_name": name, "namespace": self.target.namespace})
                return "<new experiment id>"
            experiment = self._call(
                f"create experiment {name!r}",
                lambda: self.client.create_experiment(name, namespace=self.target.namespace),
                idempotent=False)
        self._experiment_id = experiment.experiment_id
        return self._experiment_id

    def create_run(self, prepared: PreparedPipeline, pipeline_id: str, version_id: str,
                   run_name: str, parameters: dict[str, Any]) -> str:
        experiment_id = self.experiment_id()
        body = {
            "experiment_id": experiment_id, "display_name": run_name,
            "pipeline_version_reference": {"pipeline_id": pipeline_id,
                                           "pipeline_version_id": version_id},
            "runtime_config": {"parameters": parameters,
                               **({"pipeline_root": self.target.pipeline_root}
                                  if self.target.pipeline_root else {})},
            **({"service_account": self.target.service_account}
               if self.target.service_account else {}),
        }
        if self.dry_run:
            self._plan("POST", "/apis/v2beta1/runs", body)
            return "<new run id>"
        run = self._call(
            f"create run {run_name!r}",
            lambda: self.client.run_pipeline(
                experiment_id, run_name, params=parameters, pipeline_id=pipeline_id,
                version_id=version_id, pipeline_root=self.target.pipeline_root,
                service_account=self.target.service_account),
            idempotent=False)
        return run.run_id

    def run_status(self, run_id: str) -> RunStatus:
        run = self._call(f"get run {run_id}", lambda: self.client.get_run(run_id))
        tasks = {}
        details = getattr(run, "run_details", None)
        for task in (getattr(details, "task_details", None) or []):
            name = task.display_name or task.task_id
            if name and name != "root" and not name.endswith(("-driver", "root-system")):
                tasks[name] = _normalise_state(task.state)
        error = getattr(getattr(run, "error", None), "message", "") or ""
        return RunStatus(run_id, _normalise_state(run.state), tasks, error)

    # -- recurring runs -----------------------------------------------------------------------

    @staticmethod
    def _description(request: ScheduleRequest, version_name: str) -> str:
        fields = {"job": request.job_fingerprint, "cron": request.local_cron,
                  "tz": request.time_zone, "utc_offset": request.utc_offset_minutes,
                  "version": version_name}
        return f"gkeflow schedule {request.name}; " + json.dumps(fields, sort_keys=True)

    def list_schedules(self) -> list[RemoteSchedule]:
        experiment_id = self.experiment_id(create=False)
        if experiment_id is None:
            return []
        schedules: list[RemoteSchedule] = []
        token = ""
        while True:
            page = self._call(
                "list recurring runs",
                lambda t=token: self.client.list_recurring_runs(
                    page_token=t, page_size=100, experiment_id=experiment_id))
            for recurring in page.recurring_runs or []:
                match = _KFP_DESCRIPTION_RE.match(recurring.description or "")
                if not match:
                    continue  # not made by gkeflow: never touched
                try:
                    fields = json.loads(match.group("fields"))
                except ValueError:
                    fields = {}
                trigger = recurring.trigger
                cron = trigger.cron_schedule.cron if trigger and trigger.cron_schedule else ""
                schedules.append(RemoteSchedule(
                    id=recurring.recurring_run_id, name=match.group("name"), target="gke",
                    cron=cron or "", max_concurrency=int(recurring.max_concurrency or 1),
                    enabled=str(recurring.mode).upper().endswith("ENABLE")
                    and not str(recurring.mode).upper().endswith("DISABLE"),
                    catch_up=not bool(recurring.no_catchup),
                    job_fingerprint=str(fields.get("job", "")),
                    local_cron=str(fields.get("cron", "")), time_zone=str(fields.get("tz", "")),
                    utc_offset_minutes=fields.get("utc_offset"),
                    pipeline_version=str(fields.get("version", ""))))
            token = page.next_page_token
            if not token:
                return schedules

    def create_schedule(self, request: ScheduleRequest, prepared: PreparedPipeline,
                        pipeline_id: str, version_id: str) -> str:
        experiment_id = self.experiment_id()
        description = self._description(request, prepared.version_name)
        if self.dry_run:
            self._plan("POST", "/apis/v2beta1/recurringruns", {
                "experiment_id": experiment_id, "display_name": request.name,
                "description": description,
                "mode": "ENABLE" if request.enabled else "DISABLE",
                "trigger": {"cron_schedule": {"cron": request.cron}},
                "max_concurrency": str(request.max_concurrency),
                "no_catchup": not request.catch_up,
                "pipeline_version_reference": {"pipeline_id": pipeline_id,
                                               "pipeline_version_id": version_id},
                "runtime_config": {"parameters": request.parameters},
            })
            return "<new recurring run id>"
        recurring = self._call(
            f"create recurring run {request.name!r}",
            lambda: self.client.create_recurring_run(
                experiment_id, request.name, description=description,
                cron_expression=request.cron, max_concurrency=request.max_concurrency,
                no_catchup=not request.catch_up, params=request.parameters,
                pipeline_id=pipeline_id, version_id=version_id, enabled=request.enabled,
                pipeline_root=self.target.pipeline_root,
                service_account=self.target.service_account),
            idempotent=False)
        return recurring.recurring_run_id

    def delete_schedule(self, schedule: RemoteSchedule) -> None:
        if self.dry_run:
            return self._plan("DELETE", f"/apis/v2beta1/recurringruns/{schedule.id}")
        self._call(f"delete recurring run {schedule.name!r}",
                   lambda: self.client.delete_recurring_run(schedule.id))

    def set_enabled(self, schedule: RemoteSchedule, enabled: bool,
                    catch_up: bool = False) -> None:
        verb = "enable" if enabled else "disable"
        if self.dry_run:
            return self._plan("POST", f"/apis/v2beta1/recurringruns/{schedule.id}:{verb}")
        func = self.client.enable_recurring_run if enabled else self.client.disable_recurring_run
        self._call(f"{verb} recurring run {schedule.name!r}", lambda: func(schedule.id))

    def needs_replacement(self, remote: RemoteSchedule, request: ScheduleRequest) -> list[str]:
        """KFP cannot update a recurring run in place: any change but on/off replaces it."""
        changes = []
        if remote.job_fingerprint != request.job_fingerprint:
            changes.append("pipeline version or parameters")
        if remote.cron != request.cron:
            changes.append(f"cron {remote.cron!r} -> {request.cron!r}")
        if remote.max_concurrency != request.max_concurrency:
            changes.append(f"max_concurrency {remote.max_concurrency} -> "
                           f"{request.max_concurrency}")
        if remote.catch_up != request.catch_up:
            changes.append(f"catch_up {remote.catch_up} -> {request.catch_up}")
        return changes

    def updatable_changes(self, remote: RemoteSchedule, request: ScheduleRequest) -> list[str]:
        return []

    def update_schedule(self, remote: RemoteSchedule, request: ScheduleRequest) -> None:
        raise NotImplementedError("Kubeflow Pipelines recurring runs are replaced, not updated")


# ---------------------------------------------------------------------------------------------
# Vertex AI


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


def _is_local_endpoint(endpoint: str | None) -> bool:
    return bool(endpoint) and bool(re.match(r"^http://(127\.0\.0\.1|localhost|\[::1\])(:\d+)?$",
                                            endpoint))


class VertexBackend(_TargetBackend):
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

        credentials = None
        if _is_local_endpoint(self.target.api_endpoint):
            # A plain-http endpoint on loopback is a local emulator: send no credentials.
            from google.auth.credentials import AnonymousCredentials

            credentials = AnonymousCredentials()
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

    def _client(self, kind: str):
        self._init()
        from google.cloud.aiplatform import initializer, utils

        client_class = {"schedule": utils.ScheduleClientWithOverride,
                        "pipeline": utils.PipelineJobClientWithOverride}[kind]
        return initializer.global_config.create_client(
            client_class=client_class, location_override=self.target.region
        ).select_version("v1")

    def _call(self, what: str, func, *, idempotent: bool = True):
        return call(what, func, self.policy, idempotent=idempotent)

    def _plan(self, method: str, path: str, body=None) -> None:
        self.planned.append(PlannedRequest(method, f"{self.endpoint}/v1/{path}", body))

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
                                f"tasks, sha256 {prepared.spec_sha256[:12]}>")
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
        client = self._client("pipeline")
        created = self._call(
            f"create pipeline job {job_id!r}",
            lambda: client.create_pipeline_job(parent=self.parent, pipeline_job=resource,
                                               pipeline_job_id=job_id,
                                               timeout=self.policy.timeout_s),
            idempotent=False)
        return created.name

    def run_status(self, job_name: str) -> RunStatus:
        client = self._client("pipeline")
        job = self._call(f"get pipeline job {job_name.rsplit('/', 1)[-1]}",
                         lambda: client.get_pipeline_job(name=job_name,
                                                         timeout=self.policy.timeout_s))
        tasks = {}
        for task in job.job_detail.task_details:
            if task.task_name and task.parent_task_id:  # the root (whole pipeline) has none
                tasks[task.task_name] = _normalise_state(task.state)
        return RunStatus(job_name, _normalise_state(job.state), tasks, job.error.message or "")

    # -- schedules ----------------------------------------------------------------------------

    def list_schedules(self) -> list[RemoteSchedule]:
        from gkeflow.pipelines.cron import split_vertex_cron

        client = self._client("schedule")
        pager = self._call("list schedules", lambda: client.list_schedules(
            request={"parent": self.parent}, timeout=self.policy.timeout_s))
        schedules = []
        for schedule in self._call("list schedules (pages)", lambda: list(pager)):
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
                pipeline_version=labels.get("gkeflow-version", "")))
        return schedules

    def create_schedule(self, request: ScheduleRequest, prepared: PreparedPipeline,
                        labels: dict[str, str]) -> str:
        job = self._pipeline_job(
            prepared, f"{request.name}", request.parameters,
            {**labels, MANAGED_LABEL: request.name, FINGERPRINT_LABEL: request.job_fingerprint})
        if self.dry_run:
            job_body = self._job_body(job, prepared)
            job_body["serviceAccount"] = self.target.service_account
            if self.target.network:
                job_body["network"] = self.target.network
            self._plan("POST", f"{self.parent}/schedules", {
                "displayName": request.name, "cron": request.cron,
                "maxConcurrentRunCount": str(request.max_concurrency),
                "createPipelineJobRequest": {"parent": self.parent, "pipelineJob": job_body},
            })
            if not request.enabled:
                self._plan("POST", f"{self.parent}/schedules/<new>:pause", {})
            return "<new schedule>"
        schedule = self._call(
            f"create schedule {request.name!r}",
            lambda: job.create_schedule(
                cron=request.cron, display_name=request.name,
                max_concurrent_run_count=request.max_concurrency,
                service_account=self.target.service_account, network=self.target.network,
                create_request_timeout=self.policy.timeout_s),
            idempotent=False)
        if not request.enabled:
            remote = RemoteSchedule(schedule.resource_name, request.name, "vertex", request.cron,
                                    request.max_concurrency, True, None,
                                    request.job_fingerprint)
            self.set_enabled(remote, False)
        return schedule.resource_name

    def delete_schedule(self, schedule: RemoteSchedule) -> None:
        if self.dry_run:
            return self._plan("DELETE", schedule.id)
        client = self._client("schedule")
        operation = self._call(f"delete schedule {schedule.name!r}", lambda: client.delete_schedule(
            name=schedule.id, timeout=self.policy.timeout_s))
        self._call(f"wait for deletion of schedule {schedule.name!r}",
                   lambda: operation.result(timeout=self.policy.timeout_s))

    def set_enabled(self, schedule: RemoteSchedule, enabled: bool,
                    catch_up: bool = False) -> None:
        verb = "resume" if enabled else "pause"
        if self.dry_run:
            return self._plan("POST", f"{schedule.id}:{verb}",
                              {"catchUp": catch_up} if enabled else {})
        client = self._client("schedule")
        if enabled:
            self._call(f"resume schedule {schedule.name!r}", lambda: client.resume_schedule(
                request={"name": schedule.id, "catch_up": catch_up},
                timeout=self.policy.timeout_s))
        else:
            self._call(f"pause schedule {schedule.name!r}", lambda: client.pause_schedule(
                name=schedule.id, timeout=self.policy.timeout_s))

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

        client = self._client("schedule")
        schedule = aiplatform_v1.Schedule(name=remote.id, cron=request.cron,
                                          max_concurrent_run_count=request.max_concurrency)
        self._call(f"update schedule {request.name!r}", lambda: client.update_schedule(
            schedule=schedule,
            update_mask=field_mask_pb2.FieldMask(paths=["cron", "max_concurrent_run_count"]),
            timeout=self.policy.timeout_s))
