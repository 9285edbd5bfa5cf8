"""A training JobSet: the compiled template finished for one run, and its state read back.

The template (compiled from the step's compute, see :mod:`gkeflow.pipelines.compute.engines.gke`)
holds one replicated job ``worker`` whose single Indexed Job runs one pod per machine. At
run time :func:`finish` names it after the run and task, and gives every pod the command
that trains and the host names of all workers; each pod builds its own ``TF_CONFIG`` from
those and its completion index (:mod:`gkeflow.components.scaleout.cluster`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re

from gkeflow.components.scaleout import cluster

GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"
NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gkeflow"}
#: JobSet name + "-worker-0-<pod index>" must stay a DNS label (63 characters).
_NAME_HASH_CHARS = 16


def jobset_name(run_id: str, task_name: str) -> str:
    """The same DNS-safe name for every attempt of one run's task."""
    digest = hashlib.sha256(f"{run_id}\0{task_name}".encode()).hexdigest()[:_NAME_HASH_CHARS]
    return f"gkeflow-train-{digest}"


def label_value(text: str) -> str:
    value = re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:63].strip("-._")
    return value or "none"


def replicas_of(template: dict) -> int:
    """Workers of the JobSet: over its replicated jobs, their Jobs times the pods each runs."""
    return sum(int(job.get("replicas", 1)) * int(job["template"]["spec"]["parallelism"])
               for job in template["spec"]["replicatedJobs"])


#: What JAX reads to join the slices of a Multislice run (jax ``cloud_tpu_cluster``): the
#: coordinator (worker 0 of slice 0), the number of slices and this pod's slice.
MEGASCALE_COORDINATOR_ENV = "MEGASCALE_COORDINATOR_ADDRESS"
MEGASCALE_SLICES_ENV = "MEGASCALE_NUM_SLICES"
MEGASCALE_SLICE_ID_ENV = "MEGASCALE_SLICE_ID"
TPU_RESOURCE = "google.com/tpu"


def multislice(replicated: dict) -> int:
    """Slices of a TPU replicated job (its Jobs); 0 when it asks for no TPU."""
    container = replicated["template"]["spec"]["template"]["spec"]["containers"][0]
    limits = (container.get("resources") or {}).get("limits") or {}
    return int(replicated.get("replicas", 1)) if TPU_RESOURCE in limits else 0


def megascale_env(coordinator_host: str, slices: int) -> list[dict]:
    """``env`` joining a pod to the other slices: the slice id is its Job's index."""
    return [{"name": MEGASCALE_COORDINATOR_ENV, "value": coordinator_host.split(":")[0]},
            {"name": MEGASCALE_SLICES_ENV, "value": str(slices)},
            {"name": MEGASCALE_SLICE_ID_ENV, "valueFrom": {"fieldRef": {
                "fieldPath": f"metadata.labels['{cluster.JOB_INDEX_LABEL}']"}}}]


#: Kubeflow Pipelines' label of a run's pods, and gkeflow's of a step's.
PIPELINE_RUN_LABEL = "pipeline/runid"
STEP_LABEL = "gkeflow-step"


def finish(template: dict, name: str, namespace: str, service_account: str, args: list[str],
           run_id: str = "", task_name: str = "") -> dict:
    """The JobSet to create: ``template`` named, placed and given each worker's command.

    ``service_account``: the account the workers run as; empty keeps the template's (the
    compute profile's ``worker_service_account``).
    """
    manifest = copy.deepcopy(template)
    metadata = manifest.setdefault("metadata", {})
    metadata["name"] = name
    metadata["namespace"] = namespace
    labels = metadata.setdefault("labels", {})
    labels.update(MANAGED_BY)
    if run_id:
        labels["gkeflow/run-id"] = label_value(run_id)
    if task_name:
        labels["gkeflow/task"] = label_value(task_name)
    subdomain = manifest["spec"].get("network", {}).get("subdomain", "")
    hosts: list[str] = []
    offsets = []
    for replicated in manifest["spec"]["replicatedJobs"]:  # worker order: chief's job first
        offsets.append(len(hosts))
        hosts += cluster.jobset_hosts(name, int(replicated["template"]["spec"]["parallelism"]),
                                      subdomain, replicated["name"],
                                      jobs=int(replicated.get("replicas", 1)))
    ours = {cluster.HOSTS_ENV, cluster.JOB_INDEX_ENV, cluster.PODS_PER_JOB_ENV,
            cluster.INDEX_OFFSET_ENV, MEGASCALE_COORDINATOR_ENV, MEGASCALE_SLICES_ENV,
            MEGASCALE_SLICE_ID_ENV}
    for replicated, offset in zip(manifest["spec"]["replicatedJobs"], offsets, strict=True):
        pod = replicated["template"]["spec"]["template"]
        pod_labels = pod.setdefault("metadata", {}).setdefault("labels", {})
        pod_labels.update(MANAGED_BY)
        # the labels the billing export carries (GKE cost allocation): the run's pods, as
        # Kubeflow Pipelines labels its own, and the step (`gkeflow runs cost`)
        if run_id:
            pod_labels[PIPELINE_RUN_LABEL] = label_value(run_id)
        if task_name:
            pod_labels[STEP_LABEL] = label_value(task_name)
        if service_account:
            pod["spec"]["serviceAccountName"] = service_account
        container = pod["spec"]["containers"][0]
        container["args"] = list(args)
        env = [e for e in container.get("env", []) if e["name"] not in ours]
        env.append({"name": cluster.HOSTS_ENV, "value": ",".join(hosts)})
        # Each pod's worker index = offset + job index x pods per Job + completion index.
        env.append({"name": cluster.JOB_INDEX_ENV, "valueFrom": {"fieldRef": {
            "fieldPath": f"metadata.labels['{cluster.JOB_INDEX_LABEL}']"}}})
        env.append({"name": cluster.PODS_PER_JOB_ENV,
                    "value": str(replicated["template"]["spec"]["parallelism"])})
        if offset:
            env.append({"name": cluster.INDEX_OFFSET_ENV, "value": str(offset)})
        slices = multislice(replicated)
        if slices > 1:  # Multislice: JAX joins the slices (train/jax_runtime.py)
            env += megascale_env(hosts[offset], slices)
        container["env"] = env
    return manifest


def with_env(manifest: dict, entries: list[dict]) -> dict:
    """``manifest`` with ``entries`` (Kubernetes ``env`` items) in every pod's container,
    replacing variables of the same name; the same manifest when there are none."""
    if not entries:
        return manifest
    manifest = copy.deepcopy(manifest)
    names = {entry["name"] for entry in entries}
    for replicated in manifest["spec"]["replicatedJobs"]:
        container = replicated["template"]["spec"]["template"]["spec"]["containers"][0]
        container["env"] = [e for e in container.get("env", []) if e["name"] not in names] + [
            dict(entry) for entry in entries]
    return manifest


def state(jobset: dict) -> tuple[str, str]:
    """("Completed" | "Failed" | "Running", message) from a JobSet's status."""
    status = jobset.get("status") or {}
    terminal = status.get("terminalState", "")
    for condition in status.get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") in ("Completed", "Failed"):
            return condition["type"], condition.get("message", "")
    if terminal in ("Completed", "Failed"):
        return terminal, ""
    return "Running", ""


def describe(jobset: dict) -> str:
    """One line for logs: name, state, ready/succeeded/failed jobs."""
    counts = (jobset.get("status") or {}).get("replicatedJobsStatus") or []
    parts = [f"{c.get('name')}: ready {c.get('ready', 0)}, succeeded {c.get('succeeded', 0)}, "
             f"failed {c.get('failed', 0)}" for c in counts]
    current, _ = state(jobset)
    return f"JobSet {jobset['metadata']['name']} {current}" + (
        f" ({'; '.join(parts)})" if parts else "")


def dumps(manifest: dict) -> str:
    return json.dumps(manifest, sort_keys=True, separators=(",", ":"))
