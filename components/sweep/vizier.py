"""``engine: vizier``: the HyperparameterTuningJob a sweep submits to Vertex AI, its trials'
outcomes, and the submission itself (REST, idempotent per pipeline run, followed by
:func:`gkeflow.components.cloud.follow.follow`).

Every trial runs :mod:`gkeflow.components.sweep.trial` in the suite's GPU image: the same
training code as ``train_model``, reading the prepared splits through the Cloud Storage
FUSE mount and reporting its eval-split metric to Vizier.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

TRIAL_MODULE = "gkeflow.components.sweep.trial"
RUN_LABEL = "gkeflow-run"
KIND = "HyperparameterTuningJob"


class TuningError(RuntimeError):
    """The tuning job could not be created or ended without a usable trial."""


def fuse_path(uri: str) -> str:
    """``gs://b/p`` -> ``/gcs/b/p`` (Vertex AI mounts Cloud Storage there); others unchanged."""
    return "/gcs/" + uri[len("gs://"):] if uri.startswith("gs://") else uri


def label_value(text: str) -> str:
    """A Vertex AI label value: lower-case letters, digits, '_' and '-', at most 63."""
    return re.sub(r"[^a-z0-9_-]+", "-", text.lower()).strip("-")[:63] or "none"


def searched_on(spec: Mapping[str, Any], metric: str, direction: str) -> dict[str, Any]:
    """``spec`` with its study searching on ``metric`` in ``direction`` (Vizier's goal)."""
    study = {**spec["studySpec"], "metrics": [{"metricId": metric, "goal": direction.upper()}]}
    return {**spec, "studySpec": study}


def build_job(spec: Mapping[str, Any], *, display_name: str, image: str, dataset_uri: str,
              schema_uri: str, output_uri: str, run_id: str, user_module: str = "",
              require_gpu: bool = False, service_account: str = "",
              fixed: Mapping[str, Any] | None = None,
              env: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """The ``HyperparameterTuningJob`` JSON for ``spec``
    (from ``gkeflow.pipelines.compute.engines.vizier``).

    ``fixed`` hyperparameters go first on each trial's command line; Vertex AI appends the
    searched ones (``--learning_rate=...``) after them, and the last occurrence wins.
    ``env``: the trials' environment (their MLflow tracking, from
    :func:`gkeflow.components.tracking.trials.trial_env`).
    """
    args = ["--dataset", fuse_path(dataset_uri), "--schema", fuse_path(schema_uri),
            "--metric", spec["studySpec"]["metrics"][0]["metricId"]]
    args += [f"--{name}={value}" for name, value in (fixed or {}).items()]
    if user_module:
        args += ["--user-module", user_module]
    if require_gpu:
        args.append("--require-gpu")
    trial_job: dict[str, Any] = {
        "workerPoolSpecs": [{
            "machineSpec": dict(spec["machineSpec"]),
            "replicaCount": "1",
            "containerSpec": {"imageUri": image,
                              "command": ["python", "-m", TRIAL_MODULE], "args": args,
                              **({"env": list(env)} if env else {})},
        }],
        "scheduling": dict(spec.get("scheduling", {})),
        "baseOutputDirectory": {"outputUriPrefix": output_uri.rstrip("/")},
    }
    if service_account:
        trial_job["serviceAccount"] = service_account
    return {
        "displayName": display_name[:128],
        "studySpec": spec["studySpec"],
        "maxTrialCount": int(spec["maxTrialCount"]),
        "parallelTrialCount": int(spec["parallelTrialCount"]),
        "maxFailedTrialCount": int(spec["maxFailedTrialCount"]),
        "trialJobSpec": trial_job,
        "labels": {RUN_LABEL: label_value(run_id)},
    }


def validate_job(body: Mapping[str, Any]):
    """Parse ``body`` strictly as ``aiplatform_v1.HyperparameterTuningJob``: unknown fields
    fail."""
    from google.cloud import aiplatform_v1

    return aiplatform_v1.HyperparameterTuningJob.from_json(json.dumps(body),
                                                          ignore_unknown_fields=False)


def step_location() -> tuple[str, str]:
    """The project and region Vertex AI Pipelines gives the step (in its environment)."""
    import os

    project = os.environ.get("CLOUD_ML_PROJECT_ID", "")
    location = os.environ.get("CLOUD_ML_REGION", os.environ.get("GOOGLE_CLOUD_REGION", ""))
    if not project or not location:
        raise TuningError("engine: vizier runs on Vertex AI Pipelines only (no project or "
                          "region in the step's environment); use engine: kfp elsewhere")
    return project, location


def trial_id(vizier_id: str | int) -> str:
    return f"trial-{int(vizier_id):03d}" if str(vizier_id).isdigit() else f"trial-{vizier_id}"


def outcomes(job: Mapping[str, Any], metric: str) -> tuple[list[dict], list[str]]:
    """(trials, reports) of a finished job, in the form the selection logic reads."""
    from gkeflow.components.train.report import trial_report

    output_uri = job["trialJobSpec"]["baseOutputDirectory"]["outputUriPrefix"].rstrip("/")
    trials, reports = [], []
    for trial in job.get("trials", []):
        tid = trial_id(trial["id"])
        params = {p["parameterId"]: p.get("value") for p in trial.get("parameters", [])}
        trials.append({"trial_id": tid, **params})
        model_uri = f"{output_uri}/{trial['id']}/model"
        if trial.get("state") == "SUCCEEDED":
            values = {m["metricId"]: float(m["value"])
                      for m in trial.get("finalMeasurement", {}).get("metrics", [])}
            reports.append(trial_report(tid, model_uri, values) if metric in values
                           else trial_report(tid, model_uri, error="no metric reported"))
        else:
            reason = trial.get("infeasibleReason") or f"state {trial.get('state', 'unknown')}"
            reports.append(trial_report(tid, model_uri, error=reason))
    return trials, reports


def submit_and_wait(body: Mapping[str, Any], project: str, location: str,
                    api_endpoint: str = "", credentials: Any = None, poll_s: float = 60.0,
                    echo: Callable[[str], None] = print, policy: Any = None,
                    gcp_resources_path: str = "",
                    deadline_s: float | None = None) -> dict[str, Any]:
    """Create the job once per pipeline run (a retried step finds and follows the job its
    first attempt created), follow it to its end; returns the finished job as JSON.

    Every call is retried by ``policy`` (a :class:`~gkeflow.components.cloud.retry.RetryPolicy`,
    default: from the environment); SIGTERM or a final give-up cancels the job.

    Raises:
        gkeflow.components.cloud.follow.Ending: the job failed, or the launcher was
            cancelled or gave up; the message is one line.
    """
    from google.cloud import aiplatform_v1

    from gkeflow.components.cloud.retry import RetryPolicy
    from gkeflow.components.cloud.vertex import VertexJob, follow_vertex_job, job_client

    job = validate_job(body)  # a malformed body fails before any call
    policy = policy or RetryPolicy.from_env()
    remote = VertexJob(job_client(location, api_endpoint, credentials), KIND,
                       f"projects/{project}/locations/{location}", job,
                       (RUN_LABEL, body["labels"][RUN_LABEL]), poll_s=poll_s,
                       sleep=policy.sleep)
    finished = follow_vertex_job(remote, policy, echo, gcp_resources_path,
                                 deadline_s=deadline_s)
    return json.loads(aiplatform_v1.HyperparameterTuningJob.to_json(
        finished, use_integers_for_enums=False))
