"""A sweep's KubeRay RayJob: the compiled template finished for one run, its state read back.

The template (compiled from the trial step's compute, see
:mod:`gkeflow.pipelines.compute.engines.kuberay`) holds a RayCluster spec: a head group
(no GPU, no trials: ``num-cpus: 0``) and one worker group ``trials``, a pod per trial in
flight, each with the trial step's CPU, memory, GPUs, Spot or reservation placement. At run
time :func:`finish` names it after the run and task and sets the entrypoint (the driver,
:mod:`.ray_driver`).

States are KubeRay's (``ray-operator/apis/ray/v1/rayjob_types.go``, v1.7.0): the
deployment status (``Initializing``, ``Running``, ``Complete``, ``Failed``,
``ValidationFailed``, ``Suspending``, ``Suspended``, ``Retrying``, ``Waiting``) and the Ray
job's status (``PENDING``, ``RUNNING``, ``STOPPED``, ``SUCCEEDED``, ``FAILED``). Only
``Complete`` and ``Failed`` are terminal for the operator; ``ValidationFailed`` is terminal
for this launcher too (the operator never goes on from it without an edit).
"""

from __future__ import annotations

import copy
import hashlib
import shlex

from gkeflow.components.scaleout.jobset import (
    MANAGED_BY,
    PIPELINE_RUN_LABEL,
    STEP_LABEL,
    label_value,
)

GROUP, VERSION, PLURAL, KIND = "ray.io", "v1", "rayjobs", "RayJob"
API_VERSION = f"{GROUP}/{VERSION}"
#: The label the Job controller gives the pods of the submitter Job, which KubeRay names
#: after the RayJob: its log is the driver's (``ray job logs --follow``).
SUBMITTER_LABEL = "batch.kubernetes.io/job-name"
DRIVER_COMMAND = ["python3", "-u", "-m", "gkeflow.components.sweep.ray_driver"]
#: KubeRay refuses RayJob names over 47 characters (its RayCluster and pods add suffixes).
MAX_NAME = 47
TRIALS_GROUP = "trials"
#: The oldest KubeRay whose RayJob CRD holds every field the body sets (1.1 added
#: ``activeDeadlineSeconds``; ``backoffLimit`` came in 1.2 and defaults to 0 before).
MIN_KUBERAY = "1.1"
#: Fields of ``spec`` the launcher relies on, which an older CRD would prune silently.
RELIED_ON = ("entrypoint", "submissionMode", "shutdownAfterJobFinishes",
             "ttlSecondsAfterFinished", "activeDeadlineSeconds", "rayClusterSpec")
COMPLETE, FAILED, VALIDATION_FAILED = "Complete", "Failed", "ValidationFailed"


def rayjob_name(run_id: str, task_name: str) -> str:
    """The same DNS-safe name for every attempt of one run's task."""
    digest = hashlib.sha256(f"{run_id}\0{task_name}".encode()).hexdigest()[:16]
    return f"gkeflow-tune-{digest}"


def pod_templates(manifest: dict) -> list[dict]:
    """The head's pod template, then each worker group's."""
    cluster = manifest["spec"]["rayClusterSpec"]
    return [cluster["headGroupSpec"]["template"],
            *(group["template"] for group in cluster.get("workerGroupSpecs") or [])]


def finish(template: dict, name: str, namespace: str, args: list[str], run_id: str = "",
           task_name: str = "") -> dict:
    """The RayJob to create: ``template`` named, placed, labelled, given the driver's command."""
    manifest = copy.deepcopy(template)
    metadata = manifest.setdefault("metadata", {})
    metadata["name"], metadata["namespace"] = name, namespace
    labels = metadata.setdefault("labels", {})
    labels.update(MANAGED_BY)
    if run_id:
        labels["gkeflow/run-id"] = label_value(run_id)
    if task_name:
        labels["gkeflow/task"] = label_value(task_name)
    for pod in pod_templates(manifest):
        pod_labels = pod.setdefault("metadata", {}).setdefault("labels", {})
        pod_labels.update(MANAGED_BY)
        if run_id:  # the billing export's labels (GKE cost allocation), as JobSets carry
            pod_labels[PIPELINE_RUN_LABEL] = label_value(run_id)
        if task_name:
            pod_labels[STEP_LABEL] = label_value(task_name)
    manifest["spec"]["entrypoint"] = shlex.join([*DRIVER_COMMAND, *args])
    return manifest


def with_env(manifest: dict, entries: list[dict]) -> dict:
    """``manifest`` with ``entries`` in every Ray container (the driver runs on the head,
    trials on the workers), replacing variables of the same name."""
    if not entries:
        return manifest
    manifest = copy.deepcopy(manifest)
    names = {entry["name"] for entry in entries}
    for pod in pod_templates(manifest):
        container = pod["spec"]["containers"][0]
        container["env"] = [e for e in container.get("env", []) if e["name"] not in names] + [
            dict(entry) for entry in entries]
    return manifest


def first_line(message: str, limit: int = 300) -> str:
    """KubeRay's ``status.message`` as one line: a failed driver's message is Ray's "Job
    entrypoint command failed with exit code N, last available logs (truncated to 20,000
    chars): ..." followed by the logs, which the step has already printed as they came."""
    text = str(message or "").strip()
    head = text.split("\n", 1)[0].strip()
    marker = ", last available logs"
    if marker in head:
        head = head.split(marker, 1)[0] + " (the driver's log is above)"
    return head if len(head) <= limit else head[:limit - 1] + "…"


def state(job: dict) -> tuple[str, str]:
    """("Completed" | "Failed" | "Running", message) from a RayJob's status.

    ``Complete`` with a Ray job that did not succeed (``STOPPED``: someone stopped it) is a
    failure here: the sweep published nothing to collect.
    """
    status = job.get("status") or {}
    deployment, ray_status = status.get("jobDeploymentStatus", ""), status.get("jobStatus", "")
    reason, message = status.get("reason", ""), first_line(status.get("message", ""))
    said = "; ".join(part for part in (reason, message) if part)
    if deployment == COMPLETE:
        if ray_status in ("SUCCEEDED", ""):
            return "Completed", said
        return "Failed", f"the Ray job ended {ray_status}" + (f" ({said})" if said else "")
    if deployment in (FAILED, VALIDATION_FAILED):
        return "Failed", said or f"RayJob {deployment}"
    return "Running", said


def describe(job: dict) -> str:
    """One line for logs: name, deployment and Ray job status, ready workers."""
    status = job.get("status") or {}
    parts = [status.get("jobDeploymentStatus") or "New"]
    if status.get("jobStatus"):
        parts.append(f"Ray job {status['jobStatus']}")
    cluster = status.get("rayClusterStatus") or {}
    if "availableWorkerReplicas" in cluster or "desiredWorkerReplicas" in cluster:
        parts.append(f"workers {cluster.get('availableWorkerReplicas', 0)}/"
                     f"{cluster.get('desiredWorkerReplicas', 0)} available")
    return f"RayJob {job['metadata']['name']} " + ", ".join(parts)


def pruned_fields(sent: dict, stored: dict) -> list[str]:
    """``spec`` fields the body set that the stored RayJob lacks (pruned by its CRD)."""
    kept = stored.get("spec") or {}
    return [f"spec.{name}" for name in RELIED_ON
            if name in sent.get("spec", {}) and name not in kept]


def worker_account(manifest: dict) -> str:
    """The service account the Ray pods run as ("" for the namespace's default)."""
    return pod_templates(manifest)[0]["spec"].get("serviceAccountName", "")
