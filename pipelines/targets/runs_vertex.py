"""Run history on Vertex AI Pipelines for `gkeflow runs`.

Runs are the project's PipelineJobs in the target's region, newest first, selected by the
labels gkeflow sets (``gkeflow-pipeline``; ``gkeflow-schedule`` on scheduled runs). Steps
come from ``job_detail.task_details`` (state, times, error, the metrics artifacts of the
evaluation); a step's log is its CustomJob's, read from Cloud Logging
(``entries:list``, ``resource.type="ml_job"``). Cancel is ``:cancel``; retry creates a new
PipelineJob with the same spec, parameters, service account, network and key, labelled
``gkeflow-retry-of`` with the old job's id (its id is chosen here, so a retried create
never makes two).
"""

from __future__ import annotations

import random
import string
import time
from collections.abc import Callable, Iterator

from gkeflow.components.cloud.mlmd import version_text
from gkeflow.pipelines.targets.backends import MANAGED_LABEL, normalise_state
from gkeflow.pipelines.targets.runs import (
    REGISTER_STEP,
    RunInfo,
    RunStateError,
    TaskInfo,
    parse_time,
    refuse_if_ended,
    step_key,
)
from gkeflow.pipelines.targets.transport import RemoteError

RETRY_LABEL = "gkeflow-retry-of"
LOGGING_ENDPOINT = "https://logging.googleapis.com"


def _metrics(task) -> dict[str, float]:
    """Numbers in the task's ``system.Metrics`` output artifacts."""
    found: dict[str, float] = {}
    for artifacts in task.outputs.values():
        for artifact in artifacts.artifacts:
            if artifact.schema_title != "system.Metrics":
                continue
            for key, value in dict(artifact.metadata or {}).items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    found[key] = float(value)
    return found


class VertexRuns:
    """`gkeflow runs` on Vertex AI, over a :class:`~.vertex.VertexBackend`."""

    target = "vertex"

    def __init__(self, backend):
        self.backend = backend

    @property
    def _client(self):
        return self.backend.client("pipeline")

    def _info(self, job) -> RunInfo:
        labels = dict(job.labels)
        tasks, metrics, registered = [], {}, ""
        for task in job.job_detail.task_details:
            if not task.parent_task_id or not task.task_name:  # the root: the whole run
                continue
            container = task.executor_detail.container_detail
            job_ref = container.main_job or task.executor_detail.custom_job_detail.job
            tasks.append(TaskInfo(
                name=task.task_name, state=normalise_state(task.state.name),
                start=parse_time(task.start_time or task.create_time),
                end=parse_time(task.end_time), error=task.error.message or "",
                log_ref=job_ref))
            metrics.update(_metrics(task))
            if step_key(task.task_name) == REGISTER_STEP and task.state.name == "SUCCEEDED":
                outputs = dict(task.execution.metadata or {})
                registered = version_text(outputs.get("output:model_version"))
        parameters = {k: v for k, v in dict(job.runtime_config.parameter_values).items()}
        return RunInfo(
            target="vertex", id=job.name, name=job.display_name,
            pipeline=labels.get("gkeflow-pipeline", ""),
            state=normalise_state(job.state.name),
            start=parse_time(job.start_time or job.create_time), end=parse_time(job.end_time),
            url=self.backend.console_url(job.name),
            schedule=labels.get(MANAGED_LABEL, ""), error=job.error.message or "",
            parameters=parameters, tasks=tasks, metrics=metrics,
            registered_version=registered, labels=labels)

    def list(self, *, pipeline: str | None = None, schedule: str | None = None,
             limit: int = 20) -> list[RunInfo]:
        clauses = []
        if pipeline:
            clauses.append(f'labels.gkeflow-pipeline="{pipeline}"')
        if schedule:
            clauses.append(f'labels.{MANAGED_LABEL}="{schedule}"')
        client, found, token = self._client, [], ""
        while len(found) < limit:
            request = {"parent": self.backend.parent, "filter": " AND ".join(clauses),
                       "order_by": "create_time desc", "page_size": min(limit, 100),
                       "page_token": token}
            page = self.backend.call("list pipeline jobs", lambda r=request: (
                client.list_pipeline_jobs(request=r, **self.backend.rpc)))
            found += [self._info(job) for job in page.pipeline_jobs]
            token = page.next_page_token
            if not token:
                break
        return found[:limit]

    def show(self, run_id: str) -> RunInfo:
        name = self._name(run_id)
        job = self.backend.call(f"get pipeline job {name.rsplit('/', 1)[-1]}",
                                 lambda: self._client.get_pipeline_job(name=name,
                                                                       **self.backend.rpc))
        return self._info(job)

    def _name(self, run_id: str) -> str:
        return run_id if run_id.startswith("projects/") else \
            f"{self.backend.parent}/pipelineJobs/{run_id}"

    # -- logs ---------------------------------------------------------------------------------

    def _session(self):
        from gkeflow.pipelines.targets.vertex import is_local_endpoint

        if is_local_endpoint(self.backend.target.api_endpoint):
            import requests

            return requests.Session(), self.backend.target.api_endpoint
        from google.auth.transport.requests import AuthorizedSession

        from gkeflow.pipelines.targets.credentials import google_credentials

        return AuthorizedSession(google_credentials("targets.vertex")), LOGGING_ENDPOINT

    def _entries(self, session, endpoint: str, job: str, after: str) -> list[dict]:
        job_id = job.rsplit("/", 1)[-1]
        query = f'resource.type="ml_job" AND resource.labels.job_id="{job_id}"'
        if after:
            query += f' AND timestamp>"{after}"'
        entries, token = [], ""
        while True:
            body = {"resourceNames": [f"projects/{self.backend.target.project}"],
                    "filter": query, "orderBy": "timestamp asc", "pageSize": 1000,
                    **({"pageToken": token} if token else {})}

            def read(body=body):
                from google.api_core import exceptions

                response = session.post(f"{endpoint}/v2/entries:list", json=body,
                                        timeout=self.backend.policy.timeout_s)
                if response.status_code != 200:
                    raise exceptions.from_http_response(response)
                return response.json()

            page = self.backend.call(f"read the log of {job_id}", read)
            entries += page.get("entries", [])
            token = page.get("nextPageToken", "")
            if not token:
                return entries

    def logs(self, run_id: str, step: str | None = None, *, follow: bool = False,
             poll_s: float = 10.0, sleep: Callable[[float], None] = time.sleep
             ) -> Iterator[tuple[str, str]]:
        """(step, line) for the log of ``step`` (default: every step with a CustomJob); with
        ``follow``, new entries until the run ends."""
        session, endpoint = self._session()
        last: dict[str, str] = {}
        while True:
            run = self.show(run_id)
            ended = run.state in ("SUCCEEDED", "FAILED", "CANCELLED", "SKIPPED")
            if step and not any(step_key(t.name) == step_key(step) for t in run.tasks) \
                    and (ended or not follow):  # when following, wait for it to start
                steps = ", ".join(t.name for t in run.tasks) or "none yet"
                raise LookupError(f"run {run.name} has no step {step!r}; steps: {steps}")
            for task in run.tasks:
                if not task.log_ref or (step and step_key(task.name) != step_key(step)):
                    continue
                for entry in self._entries(session, endpoint, task.log_ref,
                                           last.get(task.name, "")):
                    last[task.name] = entry.get("timestamp", last.get(task.name, ""))
                    text = entry.get("textPayload")
                    if text is None:
                        payload = entry.get("jsonPayload") or {}
                        text = str(payload.get("message", payload))
                    for line in str(text).splitlines() or [""]:
                        yield task.name, line
            if not follow or ended:
                return
            sleep(poll_s)

    # -- acting -------------------------------------------------------------------------------

    def cancel(self, run_id: str) -> str:
        name = self._name(run_id)
        job = self.backend.call(f"get pipeline job {name.rsplit('/', 1)[-1]}",
                                 lambda: self._client.get_pipeline_job(name=name,
                                                                       **self.backend.rpc))
        refuse_if_ended(name.rsplit("/", 1)[-1], normalise_state(job.state))
        self.backend.call(f"cancel pipeline job {name.rsplit('/', 1)[-1]}",
                           lambda: self._client.cancel_pipeline_job(name=name,
                                                                    **self.backend.rpc))
        return f"{name}: cancellation requested ({self.backend.console_url(name)})"

    def retry(self, run_id: str) -> str:
        """A new PipelineJob with the old one's spec and settings; returns what was done."""
        from google.cloud import aiplatform_v1

        name = self._name(run_id)
        client = self._client
        old = self.backend.call(f"get pipeline job {name.rsplit('/', 1)[-1]}",
                                 lambda: client.get_pipeline_job(name=name, **self.backend.rpc))
        old_id = name.rsplit("/", 1)[-1]
        state = aiplatform_v1.PipelineState(old.state).name.removeprefix("PIPELINE_STATE_")
        if state not in ("FAILED", "CANCELLED"):
            raise RunStateError(f"run {old_id} is {state.lower()}; only a failed or cancelled "
                                "run is retried (a new job would repeat one that ran or runs)")
        suffix = "".join(random.choices(string.ascii_lowercase + string.digits, k=4))
        job_id = f"{old_id[:100]}-retry-{suffix}"
        labels = {**dict(old.labels), RETRY_LABEL: old_id[:63]}
        job = aiplatform_v1.PipelineJob(
            display_name=job_id, pipeline_spec=old.pipeline_spec,
            runtime_config=old.runtime_config, labels=labels,
            service_account=old.service_account, network=old.network,
            encryption_spec=old.encryption_spec)
        new_name = f"{self.backend.parent}/pipelineJobs/{job_id}"

        def find():
            try:
                return self.backend.once(f"look up pipeline job {job_id!r}", lambda: (
                    client.get_pipeline_job(name=new_name, **self.backend.rpc)))
            except RemoteError as exc:
                if exc.status == 404:
                    return None
                raise

        created = self.backend.call(
            f"create pipeline job {job_id!r}",
            lambda: client.create_pipeline_job(parent=self.backend.parent, pipeline_job=job,
                                               pipeline_job_id=job_id, **self.backend.rpc),
            idempotent=False, recover=find)
        return (f"{old_id}: retried as {created.name} "
                f"({self.backend.console_url(created.name)})")
