"""Run history on Kubeflow Pipelines (v2beta1 runs API) for `gkeflow runs`.

Runs are read from the configured experiment, newest first (``sort_by=created_at desc``);
``--pipeline`` and ``--schedule`` select by the run's pipeline and recurring run (the
schedule's, or one it replaced: a replaced schedule keeps its history). Steps come
from ``run_details.task_details``; a step's log is its executor pod's, read through the
Kubeflow Pipelines UI server (``GET <ui>/k8s/pod/logs``, what the UI's Logs tab reads: the
live pod, or the archived log once the pod is gone). Cancel is ``:terminate``, retry is
``:retry`` (KFP re-runs the failed steps of the same run). `runs show` reads a training run's
metrics and registered version from ML Metadata through the UI server
(:mod:`gkeflow.components.cloud.mlmd`); where that cannot be reached, it says so and shows
the rest.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from gkeflow.pipelines.targets.backends import normalise_state
from gkeflow.pipelines.targets.runs import (
    REGISTER_STEP,
    RunInfo,
    TaskInfo,
    parse_time,
    refuse_if_ended,
    step_key,
)
from gkeflow.pipelines.targets.transport import RemoteError

#: Task details that are KFP's own bookkeeping, not pipeline steps.
_INTERNAL = ("root", "root-driver", "root-system")


def _step_name(task) -> str:
    return task.display_name or task.task_id or ""


def _is_step(task) -> bool:
    name = _step_name(task)
    return bool(name) and name not in _INTERNAL and not name.endswith("-driver")


class KfpRuns:
    """`gkeflow runs` on Kubeflow Pipelines, over a :class:`~.kfp.KfpBackend`."""

    target = "gke"

    def __init__(self, backend):
        self.backend = backend
        self._pipeline_names: dict[str, str] = {}
        self._schedule_names: dict[str, str] | None = None

    @property
    def client(self):
        return self.backend.client

    # -- reading ------------------------------------------------------------------------------

    def _pipeline_name(self, pipeline_id: str) -> str:
        if not pipeline_id:
            return ""
        if pipeline_id not in self._pipeline_names:
            try:
                pipeline = self.backend.call(f"get pipeline {pipeline_id}",
                                              lambda: self.client.get_pipeline(pipeline_id))
            except RemoteError as exc:
                if exc.status != 404:
                    raise
                name = ""  # deleted since the run: its runs still show
            else:
                name = pipeline.display_name or pipeline.name or pipeline_id
            self._pipeline_names[pipeline_id] = name.removeprefix("gkeflow-")
        return self._pipeline_names[pipeline_id]

    def _schedules(self) -> dict[str, str]:
        """Recurring run id -> gkeflow schedule name, for each schedule and for the recurring
        runs it replaced (their runs are its history)."""
        if self._schedule_names is None:
            names: dict[str, str] = {}
            for schedule in self.backend.list_schedules():
                for found in (*schedule.previous_ids, schedule.id):
                    names[found] = schedule.name
            self._schedule_names = names
        return self._schedule_names

    def _info(self, run, with_tasks: bool) -> RunInfo:
        reference = run.pipeline_version_reference
        tasks = []
        details = run.run_details
        for task in (details.task_details if details and details.task_details else []):
            if not _is_step(task):
                continue
            pods = [c.pod_name for c in (task.child_tasks or []) if c.pod_name]
            tasks.append(TaskInfo(
                name=_step_name(task), state=normalise_state(task.state),
                start=parse_time(task.start_time or task.create_time),
                end=parse_time(task.end_time),
                error=(task.error.message if task.error and task.error.message else ""),
                log_ref=(pods[-1] if pods else task.pod_name or "")))
        recurring = run.recurring_run_id or ""
        info = RunInfo(
            target="gke", id=run.run_id, name=run.display_name or run.run_id,
            pipeline=self._pipeline_name(reference.pipeline_id if reference else ""),
            state=normalise_state(run.state),
            start=parse_time(run.created_at), end=parse_time(run.finished_at),
            url=self.backend.run_url(run.run_id),
            schedule=self._schedules().get(recurring, recurring) if recurring else "",
            error=(run.error.message if run.error and run.error.message else ""),
            parameters=dict((run.runtime_config.parameters or {})
                            if run.runtime_config else {}),
            tasks=tasks)
        if not with_tasks and info.state != "FAILED":
            info.tasks = []
        return info

    def _pages(self) -> Iterator:
        experiment_id = self.backend.experiment_id(create=False)
        if experiment_id is None:
            return
        token = ""
        while True:
            page = self.backend.call("list runs", lambda t=token: self.client.list_runs(
                page_token=t, page_size=50, sort_by="created_at desc",
                experiment_id=experiment_id))
            yield from page.runs or []
            token = page.next_page_token
            if not token:
                return

    def list(self, *, pipeline: str | None = None, schedule: str | None = None,
             limit: int = 20) -> list[RunInfo]:
        """The newest ``limit`` runs (of ``pipeline``, started by ``schedule``)."""
        schedule_ids = None
        if schedule:
            schedule_ids = {i for i, name in self._schedules().items() if name == schedule}
            if not schedule_ids:
                return []
        found = []
        for run in self._pages():
            if schedule_ids is not None and run.recurring_run_id not in schedule_ids:
                continue
            info = self._info(run, with_tasks=False)
            if pipeline and info.pipeline != pipeline:
                continue
            if info.state == "FAILED" and not info.tasks:  # the list left the steps out
                info = self.show(info.id, metadata=False)
            found.append(info)
            if len(found) >= limit:
                break
        return found

    def show(self, run_id: str, *, metadata: bool = True) -> RunInfo:
        """One run with its steps; with ``metadata``, also its metrics and registered
        version from ML Metadata."""
        run = self.backend.call(f"get run {run_id}", lambda: self.client.get_run(run_id))
        info = self._info(run, with_tasks=True)
        if metadata:
            self._read_metadata(info, run)
        return info

    # -- ML Metadata ----------------------------------------------------------------------------

    def _read_metadata(self, info: RunInfo, run) -> None:
        """Fill ``info.metrics`` (the run's ``system.Metrics`` artifacts) and
        ``info.registered_version`` (register-model's ``model_version`` output) from ML
        Metadata; a failure leaves them empty and says why in ``info.note``."""
        from google.protobuf.message import DecodeError

        from gkeflow.components.cloud.mlmd import (
            MetadataReader,
            registered_version,
            scalar_metrics,
        )
        details = run.run_details
        # every task detail, drivers included: whichever one the backend hangs the outputs
        # and the execution on, only Metrics artifacts and model_version are kept
        tasks = details.task_details if details and details.task_details else []
        artifact_ids = [int(i) for t in tasks for outputs in (t.outputs or {}).values()
                        for i in (outputs.artifact_ids or []) if str(i).isdigit()]
        registered = [int(t.execution_id) for t in tasks
                      if step_key(_step_name(t)).removesuffix("-driver") == REGISTER_STEP
                      and normalise_state(t.state) == "SUCCEEDED"
                      and str(t.execution_id or "").isdigit()]
        if not artifact_ids and not registered:
            return
        reader = MetadataReader(self._metadata_transport())
        try:
            info.metrics = scalar_metrics(reader.artifacts(artifact_ids))
            info.registered_version = registered_version(reader, registered)
        except (RemoteError, DecodeError) as exc:
            reason = str(exc) if isinstance(exc, RemoteError) else "the answer is not ML " \
                "Metadata's (is targets.gke.ui_url the Kubeflow Pipelines UI?)"
            info.note = (f"metrics and registered version not read from ML Metadata at "
                         f"{self.backend.ui_url}: {reason}; the Kubeflow Pipelines UI "
                         "shows them")

    def _metadata_transport(self):
        """gRPC-Web to ML Metadata through the UI server, with the client's credentials;
        retried briefly (a side look-up never holds up `runs show`)."""
        from dataclasses import replace

        from gkeflow.components.cloud.mlmd import CONTENT_TYPE
        from gkeflow.pipelines.targets.transport import call

        api_client = self.client._run_api.api_client
        policy = replace(self.backend.policy, attempts=min(self.backend.policy.attempts, 3),
                         timeout_s=min(self.backend.policy.timeout_s, 10.0))

        def send(path: str, body: bytes) -> tuple[dict[str, str], bytes]:
            def post():
                response = api_client.call_api(
                    path, "POST", body=body, auth_settings=["Bearer"],
                    header_params={"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE,
                                   "X-Grpc-Web": "1"},
                    _preload_content=False, _host=self.backend.ui_url,
                    _request_timeout=(policy.timeout_s,) * 2)
                answer = response[0] if isinstance(response, tuple) else response
                return dict(answer.getheaders()), answer.data

            return call(f"read ML Metadata ({path.rsplit('/', 1)[-1]})", post, policy)

        return send

    # -- logs ---------------------------------------------------------------------------------

    def _pod_log(self, pod: str) -> str:
        api_client = self.client._run_api.api_client

        def read():
            response = api_client.call_api(
                "/k8s/pod/logs", "GET",
                query_params=[("podname", pod), ("podnamespace", self.backend.target.namespace)],
                header_params={"Accept": "text/plain"}, auth_settings=["Bearer"],
                _preload_content=False, _host=self.backend.ui_url,
                _request_timeout=(self.backend.policy.timeout_s,) * 2)
            return (response[0] if isinstance(response, tuple) else response).data

        data = self.backend.call(f"read the log of pod {pod}", read)
        return data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)

    def logs(self, run_id: str, step: str | None = None, *, follow: bool = False,
             poll_s: float = 5.0, sleep: Callable[[float], None] = time.sleep
             ) -> Iterator[tuple[str, str]]:
        """(step, line) for every log line of ``step`` (default: every step that ran); with
        ``follow``, new lines until the run ends."""
        printed: dict[str, int] = {}
        while True:
            run = self.show(run_id, metadata=False)
            tasks = [t for t in run.tasks if t.log_ref
                     and (step is None or step_key(t.name) == step_key(step))]
            ended = run.state in ("SUCCEEDED", "FAILED", "CANCELLED", "SKIPPED")
            if step and not any(step_key(t.name) == step_key(step) for t in run.tasks) \
                    and (ended or not follow):  # when following, wait for it to start
                steps = ", ".join(t.name for t in run.tasks) or "none yet"
                raise LookupError(f"run {run_id} has no step {step!r}; steps: {steps}")
            for task in tasks:
                lines = self._pod_log(task.log_ref).splitlines()
                for line in lines[printed.get(task.name, 0):]:
                    yield task.name, line
                printed[task.name] = len(lines)
            if not follow or ended:
                return
            sleep(poll_s)

    # -- acting -------------------------------------------------------------------------------

    def cancel(self, run_id: str) -> str:
        run = self.backend.call(f"get run {run_id}", lambda: self.client.get_run(run_id))
        refuse_if_ended(run_id, normalise_state(run.state))
        self.backend.call(f"terminate run {run_id}",
                           lambda: self.client.terminate_run(run_id))
        return f"run {run_id}: termination requested ({self.backend.run_url(run_id)})"

    def retry(self, run_id: str) -> str:
        """KFP retries the run itself: its failed steps run again, finished ones are kept.
        Sent once (a second retry of a running run is refused by the server)."""
        self.backend.call(f"retry run {run_id}",
                           lambda: self.client._run_api.run_service_retry_run(run_id),
                           idempotent=False, recover=lambda: self._restarted(run_id))
        return f"run {run_id}: retried in place ({self.backend.run_url(run_id)})"

    def _restarted(self, run_id: str):
        """After a lost answer: the retry took effect if the run is going again."""
        run = self.backend.once(f"get run {run_id}", lambda: self.client.get_run(run_id))
        return True if normalise_state(run.state) in ("PENDING", "RUNNING") else None
