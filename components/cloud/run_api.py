"""Read the failed step, its error, the gate decision and the steps served from cache of
the running pipeline from its target's run API, for the exit tasks (the notification, and
the run's end in its trackers).

The exit handler's ``PipelineTaskFinalStatus`` describes the handler's group (its error
says "Task exit-handler-1 failed." on some backends); the run's task details name the step
that failed and carry its own error. Kubeflow Pipelines: ``GET {api}/apis/v2beta1/runs/{id}``
(in cluster ``http://ml-pipeline.kubeflow:8888``, with the pod's service-account token from
``KF_PIPELINES_SA_TOKEN_PATH`` on multi-user installs). Vertex AI: ``GET {endpoint}/v1/{job}``
with the step's Google credentials. The registered version of a KFP run is register-model's
``model_version`` output, which KFP keeps in ML Metadata: read over gRPC-Web from the
in-cluster ``metadata-envoy-service`` (:mod:`gkeflow.components.cloud.mlmd`). Best effort:
a failure leaves the report as it was.

A step served from cache: on Vertex AI its task is ``SKIPPED`` ("skipped due to cache hit",
``aiplatform.v1.PipelineTaskDetail.State``; a condition that was not met is
``NOT_TRIGGERED``); on Kubeflow Pipelines the run API's ``SKIPPED`` also covers other skips,
so the step's ML Metadata execution decides: ``last_known_state`` ``CACHED``.
"""

from __future__ import annotations

import json
import os
import re
import urllib.request

from gkeflow.components.cloud.mlmd import version_text
from gkeflow.components.cloud.retry import RetryPolicy

#: Task groups and bookkeeping (the notification itself: "notify-run", shown "Notify"),
#: not steps.
_GROUPS = ("exit-handler-", "condition-", "for-loop-", "root", "notify")
#: Step states that are an end without a failure (the run API's names, see :func:`_state`).
_GOOD_ENDS = ("SUCCEEDED", "SKIPPED", "CACHED")
_STATE = {"CANCELED": "CANCELLED", "PIPELINE_STATE_FAILED": "FAILED"}


def _state(value) -> str:
    text = str(value or "").upper().removeprefix("RUNTIME_STATE_")
    return _STATE.get(text, text)


def _is_step(name: str) -> bool:
    return bool(name) and not name.lower().startswith(_GROUPS) and not name.endswith("-driver")


def _get(url: str, headers: dict, policy: RetryPolicy) -> dict:
    def read():
        request = urllib.request.Request(url, headers=headers)
        with urllib.request.urlopen(request, timeout=policy.call_timeout_s) as answer:
            return json.loads(answer.read() or b"{}")

    return policy.call(read, "reading the run's task details")


def _token_headers() -> dict[str, str]:
    token_path = os.environ.get("KF_PIPELINES_SA_TOKEN_PATH", "")
    if token_path and os.path.exists(token_path):
        with open(token_path, encoding="utf-8") as handle:
            return {"Authorization": f"Bearer {handle.read().strip()}"}
    return {}


#: Earlier succeeded runs whose median step durations give the expected cost.
HISTORY_RUNS = 5


def kfp_tasks(run: dict) -> list[dict]:
    """The task details of a Kubeflow Pipelines run (its JSON) as the notification reads them."""
    return [{"name": t.get("display_name", ""), "state": _state(t.get("state")),
             "error": (t.get("error") or {}).get("message", ""), "metadata": {},
             "execution_id": str(t.get("execution_id") or ""),
             "model_artifact_ids": [str(i) for i in ((t.get("outputs") or {}).get(
                 "model") or {}).get("artifact_ids", [])],
             "duration_s": span_s(t.get("start_time"), t.get("end_time"))}
            for t in (run.get("run_details") or {}).get("task_details", [])]


def kfp_run(api: str, run_id: str, policy: RetryPolicy) -> tuple[str, list[dict]]:
    """(created_at, [{name, state, error, metadata, execution_id}]) of a Kubeflow
    Pipelines run."""
    run = _get(f"{api.rstrip('/')}/apis/v2beta1/runs/{run_id}", _token_headers(), policy)
    return run.get("created_at", ""), kfp_tasks(run)


def step_durations(tasks: list[dict]) -> dict[str, float]:
    """step -> seconds of the steps of a run that succeeded."""
    found: dict[str, float] = {}
    for t in tasks:
        if _is_step(t["name"]) and t["state"] == "SUCCEEDED" and t.get("duration_s") is not None:
            key = _key(t["name"])
            found[key] = found.get(key, 0.0) + t["duration_s"]
    return found


def kfp_history(api: str, run_id: str, policy: RetryPolicy,
                limit: int = HISTORY_RUNS) -> list[dict[str, float]]:
    """Step durations of the newest ``limit`` succeeded runs of the same pipeline (in the
    run's experiment), this one left out."""
    from urllib.parse import urlencode

    base, headers = f"{api.rstrip('/')}/apis/v2beta1", _token_headers()
    run = _get(f"{base}/runs/{run_id}", headers, policy)
    pipeline = (run.get("pipeline_version_reference") or {}).get("pipeline_id", "")
    if not pipeline:
        return []
    query = {"page_size": 50, "sort_by": "created_at desc",
             **({"experiment_id": run["experiment_id"]} if run.get("experiment_id") else {})}
    found = []
    for other in _get(f"{base}/runs?{urlencode(query)}", headers, policy).get("runs", []):
        if (other.get("run_id") == run_id or _state(other.get("state")) != "SUCCEEDED"
                or (other.get("pipeline_version_reference") or {}).get("pipeline_id")
                != pipeline):
            continue
        if not (other.get("run_details") or {}).get("task_details"):
            other = _get(f"{base}/runs/{other['run_id']}", headers, policy)
        found.append(step_durations(kfp_tasks(other)))
        if len(found) >= limit:
            break
    return found


def kfp_registered_version(metadata_api: str, tasks: list[dict], policy: RetryPolicy) -> str:
    """register-model's ``model_version`` output, read from ML Metadata at ``metadata_api``
    (the execution of the step or of its driver, whichever the task details name); "" when
    it did not succeed."""
    from gkeflow.components.cloud.mlmd import (
        MetadataReader,
        registered_version,
        urllib_transport,
    )

    ids = [int(t["execution_id"]) for t in tasks
           if _key(t["name"]).removesuffix("-driver") == "register-model"
           and t["state"] == "SUCCEEDED" and t.get("execution_id", "").isdigit()]
    if not ids:
        return ""
    reader = MetadataReader(urllib_transport(metadata_api, _token_headers(),
                                             policy.call_timeout_s))
    return policy.call(lambda: registered_version(reader, ids),
                       "reading the registered version from ML Metadata")


def _key(name: str) -> str:
    return re.sub(r"[\s_]+", "-", name.strip().lower())


def _google_headers(endpoint: str) -> dict[str, str]:
    if re.match(r"^http://(127\.0\.0\.1|localhost)(:\d+)?/?$", endpoint):
        return {}  # a plain-http loopback endpoint is an emulator: no credentials
    import google.auth
    from google.auth.transport.requests import Request

    credentials, _ = google.auth.default(
        scopes=["https://www.googleapis.com/auth/cloud-platform"])
    credentials.refresh(Request())
    return {"Authorization": f"Bearer {credentials.token}"}


def _vertex_tasks(data: dict) -> list[dict]:
    return [{"name": t.get("taskName", ""), "state": _state(t.get("state")),
             "error": (t.get("error") or {}).get("message", ""),
             "metadata": (t.get("execution") or {}).get("metadata") or {},
             "model_uri": next((a.get("uri", "") for a in ((t.get("outputs") or {}).get(
                 "model") or {}).get("artifacts", [])), ""),
             "duration_s": span_s(t.get("startTime"), t.get("endTime"))}
            for t in (data.get("jobDetail") or {}).get("taskDetails", [])
            if str(t.get("parentTaskId") or "0") != "0"]  # the parentless task is the run


def vertex_run(endpoint: str, job: str, policy: RetryPolicy) -> tuple[str, list[dict]]:
    """(start time, [{name, state, error, metadata}]) of a Vertex AI PipelineJob."""
    data = _get(f"{endpoint.rstrip('/')}/v1/{job}", _google_headers(endpoint), policy)
    return data.get("startTime") or data.get("createTime", ""), _vertex_tasks(data)


#: PipelineState.PIPELINE_STATE_SUCCEEDED by name, or by number (``enum-encoding=int``).
VERTEX_SUCCEEDED = ("PIPELINE_STATE_SUCCEEDED", 4, "4")


def vertex_history(endpoint: str, job: str, policy: RetryPolicy,
                   limit: int = HISTORY_RUNS) -> list[dict[str, float]]:
    """Step durations of the newest ``limit`` succeeded PipelineJobs of the same gkeflow
    pipeline (label ``gkeflow-pipeline``) in the job's location, this one left out."""
    from urllib.parse import urlencode

    base, headers = f"{endpoint.rstrip('/')}/v1", _google_headers(endpoint)
    data = _get(f"{base}/{job}", headers, policy)
    pipeline = (data.get("labels") or {}).get("gkeflow-pipeline", "")
    if not pipeline or "/pipelineJobs/" not in job:
        return []
    parent = job.rsplit("/pipelineJobs/", 1)[0]
    query = urlencode({"filter": f'labels.gkeflow-pipeline="{pipeline}"', "pageSize": 50})
    jobs = _get(f"{base}/{parent}/pipelineJobs?{query}", headers, policy).get(
        "pipelineJobs", [])
    jobs.sort(key=lambda j: j.get("createTime", ""), reverse=True)
    found = []
    for other in jobs:
        if other.get("name") == job or other.get("state") not in VERTEX_SUCCEEDED:
            continue
        other = _get(f"{base}/{other['name']}", headers, policy)  # the job with its steps
        found.append(step_durations(_vertex_tasks(other)))
        if len(found) >= limit:
            break
    return found


def _epoch(text: str) -> float | None:
    import datetime as dt

    try:
        return dt.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def span_s(start, end) -> float | None:
    """Seconds from ``start`` to ``end`` (RFC 3339 stamps); None unless both are known."""
    began, ended = _epoch(start or ""), _epoch(end or "")
    if began is None or ended is None or ended < began:
        return None
    return ended - began


def state_of_steps(steps: list[dict]) -> str:
    """The run's end read from its steps, for a backend state that is not an end (Kubeflow
    Pipelines can hand the exit task RUNNING for a group holding a ParallelFor,
    kubeflow/pipelines#13321): FAILED or CANCELLED when a step says so, SUCCEEDED when
    every step ended well, else UNKNOWN."""
    states = {t["state"] for t in steps}
    if "FAILED" in states:
        return "FAILED"
    if states & {"CANCELLED", "CANCELING", "CANCELLING"}:
        return "CANCELLED"
    return "SUCCEEDED" if states and states <= set(_GOOD_ENDS) else "UNKNOWN"


def apply_run(report, started: str, tasks: list[dict], now: float):
    """Fill ``report``'s duration (``started`` to ``now``), failed step, error, gate and
    registered version from the run's start and ``tasks``; an UNKNOWN state is settled
    from the steps (:func:`state_of_steps`)."""
    start = _epoch(started)
    if start is not None:
        report.duration_s = max(0.0, now - start)
    steps = [t for t in tasks if _is_step(t["name"])]
    failed = [t for t in steps if t["state"] == "FAILED"]
    if failed:
        report.failed_task = failed[0]["name"]
        report.error = failed[0]["error"] or report.error
    if report.state == "UNKNOWN":
        report.state = state_of_steps(steps)
    for t in steps:  # a step run more than once (sweep trials) costs each run
        if t["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
            key, seconds = _key(t["name"]), t.get("duration_s")
            earlier = report.step_durations.get(key, 0.0)
            report.step_durations[key] = (None if seconds is None or earlier is None
                                          else earlier + seconds)
    states = {_key(t["name"]): t for t in steps}
    if states.get("evaluate-model", {}).get("state") == "SUCCEEDED":
        register = states.get("register-model")
        if register and register["state"] == "SUCCEEDED":
            report.gate = "passed: registered"
            metadata = register["metadata"]
            report.registered_version = version_text(
                metadata.get("output:model_version") or metadata.get("model_version"))
        elif not report.failed_task:
            report.gate = "blocked: not registered"
    return report


#: ``ml_metadata.Execution.State.CACHED``: the execution reused an earlier one's outputs.
MLMD_CACHED = 5


def vertex_cached_steps(tasks: list[dict]) -> dict[str, str]:
    """step -> its model output's URI ("" for none) of the Vertex AI tasks served from
    cache."""
    return {_key(t["name"]): t.get("model_uri", "") for t in tasks
            if _is_step(t["name"]) and t["state"] == "SKIPPED"}


def kfp_cached_steps(metadata_api: str, tasks: list[dict], policy: RetryPolicy
                     ) -> dict[str, str]:
    """step -> its model output's URI ("" for none) of the Kubeflow Pipelines tasks whose ML
    Metadata execution (the step's or its driver's) is ``CACHED``, read at
    ``metadata_api``."""
    from gkeflow.components.cloud.mlmd import MetadataReader, urllib_transport

    named = {int(t["execution_id"]): t for t in tasks
             if t.get("execution_id", "").isdigit() and t["state"] in ("SKIPPED", "SUCCEEDED")
             and _is_step(_key(t["name"]).removesuffix("-driver"))}
    if not named:
        return {}
    reader = MetadataReader(urllib_transport(metadata_api, _token_headers(),
                                             policy.call_timeout_s))
    executions = policy.call(lambda: reader.executions(named),
                             "reading the steps' executions from ML Metadata")
    cached = {_key(named[e.id]["name"]).removesuffix("-driver"): named[e.id]
              for e in executions if e.last_known_state == MLMD_CACHED and e.id in named}
    artifact_ids = {int(i) for t in cached.values() for i in t.get("model_artifact_ids", [])}
    uris = {a.id: a.uri for a in policy.call(lambda: reader.artifacts(artifact_ids),
                                             "reading the cached models from ML Metadata")
            } if artifact_ids else {}
    return {step: next((uris[int(i)] for i in t.get("model_artifact_ids", [])
                        if int(i) in uris), "")
            for step, t in cached.items()}


def tasks_reader(target: str, run_api: str, run_id: str, job: str, policy: RetryPolicy):
    """A function giving ``(start, tasks)`` of this run from ``target``'s run API (Kubeflow
    Pipelines: run ``run_id``; Vertex AI: the PipelineJob ``job``), read on the first call
    that succeeds and kept for the later ones; None without a run API."""
    if not run_api:
        return None
    import functools

    @functools.cache
    def read() -> tuple[str, list[dict]]:
        return (kfp_run(run_api, run_id, policy) if target == "gke"
                else vertex_run(run_api, job, policy))

    return read


def cached_steps_reader(target: str, read_tasks, metadata_api: str, policy: RetryPolicy):
    """A function reading the steps of this run served from cache (step -> model URI) from
    the tasks ``read_tasks`` (:func:`tasks_reader`) gives and, on Kubeflow Pipelines, ML
    Metadata at ``metadata_api``; None without ``read_tasks``."""
    if read_tasks is None:
        return None

    def read() -> dict[str, str]:
        if target == "vertex":
            return vertex_cached_steps(read_tasks()[1])
        if not metadata_api:
            raise ValueError("no ML Metadata address to read the cached executions from")
        return kfp_cached_steps(metadata_api, read_tasks()[1], policy)

    return read
