"""KubeRay engine of a GKE sweep (``sweep.engine: ray``): the trials as one RayJob.

:func:`rayjob_template` turns the trial compute (``train-model``'s profile, one pod per
trial in flight) into the RayJob every run creates (``ray.io/v1``, checked against the
vendored CRD of KubeRay v1.7.0; fields KubeRay 1.1 already serves):

- a head group: a small CPU pod (:data:`HEAD_CPU`, :data:`HEAD_MEMORY`) that runs the
  driver and schedules no trial (``num-cpus: "0"``), on standard capacity so a Spot
  reclaim never takes the sweep's bookkeeping with it;
- a worker group ``trials`` of ``replicas`` pods (fixed: no autoscaling), each with the
  profile's CPU, memory and ``nvidia.com/gpu``, its node selector and tolerations (GPU,
  Spot, flex-start, reservation), a memory-backed ``/dev/shm`` (Ray's object store), and
  Ray resources stated outright (one trial per pod: ``num-cpus: "1"``, ``num-gpus``);
- ``shutdownAfterJobFinishes`` with ``ttlSecondsAfterFinished: 0`` (KubeRay deletes the Ray
  cluster as soon as the Ray job ends, even when the launcher is gone), the sweep's deadline
  (``activeDeadlineSeconds``, which KubeRay counts from ``Initializing``: it adds the
  provisioning wait, :func:`rayjob_deadline_s`), no retry of
  the whole job (``backoffLimit: 0``; lost trials are retried inside Tune), the Kueue
  queue-name label when ``queue`` is set.

Every pod runs as ``worker_service_account``, never as the launcher's account.
"""

from __future__ import annotations

from typing import Any

from gkeflow.components.sweep import rayjob as rj
from gkeflow.pipelines.compute.profiles import (
    GPU_RESOURCE,
    SHM_PATH,
    SHM_VOLUME,
    ComputeProfile,
)

HEAD_CPU, HEAD_MEMORY = "2", "8G"
#: How long KubeRay keeps the Ray cluster after the Ray job ends (KubeRay v1.7.0
#: ``rayjob_controller.go``: with ``shutdownAfterJobFinishes`` it deletes the RayCluster this
#: many seconds after the job finished). 0: the head and every GPU worker go at once, also
#: when the launcher step is gone. The submitter's log stays: its Kubernetes Job belongs to
#: the RayJob, which the launcher deletes after reading it.
TTL_AFTER_FINISHED_S = 0
#: Restarts of a trial whose worker was lost (a Spot node reclaimed): it resumes from its
#: last checkpoint.
TRIAL_RETRIES = 3
RAY_PORTS = [{"name": "gcs", "containerPort": 6379},
             {"name": "dashboard", "containerPort": 8265},
             {"name": "client", "containerPort": 10001}]


def trial_resources(profile: ComputeProfile) -> dict[str, Any]:
    """What Tune asks for each trial (``TuneSettings`` fields): one whole worker pod."""
    return {"cpus_per_trial": 1.0,
            "gpus_per_trial": float(profile.accelerator_count if profile.uses_gpu else 0),
            "trial_retries": TRIAL_RETRIES}


def rayjob_template(profile: ComputeProfile, image: str, deadline_s: int = 0,
                    head: ComputeProfile | None = None, target: str = "gke") -> dict[str, Any]:
    """The RayJob of a sweep whose trials take ``profile`` (``replicas``: trials at once)
    and whose head takes ``head`` (its CPU and memory; default :data:`HEAD_CPU`,
    :data:`HEAD_MEMORY`); name, namespace and entrypoint are set at run time
    (:mod:`gkeflow.components.sweep.rayjob`); its pods as the Kubernetes platform ``target``
    places them (GKE Autopilot's rules for their requests)."""
    from gkeflow.pipelines.compute import pod_rules
    from gkeflow.pipelines.compute.engines.gke import node_placement, shm_size

    profile = pod_rules.fitted(profile, target)
    if head is not None:
        head = pod_rules.fitted(head, target)

    resources: dict[str, Any] = {"cpu": profile.cpu, "memory": profile.memory}
    if profile.ephemeral_storage:
        resources["ephemeral-storage"] = profile.ephemeral_storage
    if profile.uses_gpu:
        resources[GPU_RESOURCE] = str(profile.accelerator_count)
    selectors, tolerations = node_placement(profile, target)
    env = [{"name": "TF_CPP_MIN_LOG_LEVEL", "value": "1"}]
    worker_pod: dict[str, Any] = {
        "serviceAccountName": profile.worker_service_account,
        "terminationGracePeriodSeconds": 60,
        "containers": [{
            "name": "ray-worker", "image": image, "env": [dict(e) for e in env],
            "resources": {"requests": dict(resources), "limits": dict(resources)},
            "volumeMounts": [{"name": SHM_VOLUME, "mountPath": SHM_PATH}],
        }],
        "volumes": [{"name": SHM_VOLUME, "emptyDir": {"medium": "Memory",
                                                      "sizeLimit": shm_size(profile)}}],
    }
    if selectors:
        worker_pod["nodeSelector"] = selectors
    if tolerations:
        worker_pod["tolerations"] = tolerations
    head_resources = ({"cpu": head.cpu, "memory": head.memory} if head is not None
                      else {"cpu": HEAD_CPU, "memory": HEAD_MEMORY})
    head_pod = {
        "serviceAccountName": profile.worker_service_account,
        "containers": [{
            "name": "ray-head", "image": image, "env": [dict(e) for e in env],
            "ports": [dict(p) for p in RAY_PORTS],
            "resources": {"requests": dict(head_resources), "limits": dict(head_resources)},
        }],
    }
    workers = max(1, profile.replicas)
    gpus = profile.accelerator_count if profile.uses_gpu else 0
    spec: dict[str, Any] = {
        "entrypoint": "",
        "submissionMode": "K8sJobMode",
        "shutdownAfterJobFinishes": True,
        "ttlSecondsAfterFinished": TTL_AFTER_FINISHED_S,
        "backoffLimit": 0,
        "rayClusterSpec": {
            "headGroupSpec": {
                "rayStartParams": {"num-cpus": "0", "dashboard-host": "0.0.0.0"},
                "template": {"spec": head_pod},
            },
            "workerGroupSpecs": [{
                "groupName": rj.TRIALS_GROUP,
                "replicas": workers, "minReplicas": workers, "maxReplicas": workers,
                "rayStartParams": {"num-cpus": "1", "num-gpus": str(gpus)},
                "template": {"spec": worker_pod},
            }],
        },
    }
    if deadline_s:
        spec["activeDeadlineSeconds"] = int(deadline_s)
    labels = {"app.kubernetes.io/managed-by": "gkeflow"}
    if profile.queue:
        from gkeflow.pipelines.compute.capacity import KUEUE_QUEUE_LABEL

        labels[KUEUE_QUEUE_LABEL] = profile.queue
    return {"apiVersion": rj.API_VERSION, "kind": rj.KIND, "metadata": {"labels": labels},
            "spec": spec}


def cluster_profiles(trial: ComputeProfile, head: ComputeProfile, launcher: ComputeProfile,
                     trials: int, parallel_trials: int, steps: tuple[str, str, str]
                     ) -> dict[str, ComputeProfile]:
    """The Ray cluster of a sweep as profiles, so plan and budgets price it: the trial
    workers (``replicas`` = trials at once) and the head, both with the sweep's deadline
    (:func:`sweep_deadline_s`), and the launcher step, whose deadline adds the provisioning
    allowance. ``steps``: their names (trial workers, head, launcher)."""
    from dataclasses import replace

    from gkeflow.pipelines.compute.engines.gke import PROVISIONING_ALLOWANCE_S

    workers = max(1, min(parallel_trials, trials))
    deadline = sweep_deadline_s(replace(trial, replicas=workers), trials)
    rayjob = rayjob_deadline_s(replace(trial, timeout_s=deadline))
    waiting = launcher.timeout_s or (rayjob + PROVISIONING_ALLOWANCE_S if rayjob else 0)
    return {steps[0]: replace(trial, replicas=workers, timeout_s=deadline),
            steps[1]: replace(head, timeout_s=deadline),
            steps[2]: replace(launcher, timeout_s=waiting)}


def template_json(trial: ComputeProfile, head: ComputeProfile, image: str,
                  target: str = "gke") -> str:
    """:func:`rayjob_template` as the launcher step's constant (compact, sorted JSON)."""
    from gkeflow.components.scaleout.jobset import dumps

    return dumps(rayjob_template(trial, image, rayjob_deadline_s(trial), head, target))


def rayjob_deadline_s(profile: ComputeProfile) -> int:
    """The RayJob's ``activeDeadlineSeconds``: the sweep's deadline (``timeout_s``) plus the
    wait for its nodes (:data:`~.gke.PROVISIONING_ALLOWANCE_S`, or ``max_wait`` when longer:
    Spot and flex-start queueing), since KubeRay starts that clock before the Ray cluster
    exists; 0 (none) when the sweep has no deadline. The same rule as the JobSet
    launcher's (:func:`~.gke.launcher_deadline_s`)."""
    from gkeflow.pipelines.compute.engines.gke import launcher_deadline_s

    return launcher_deadline_s(profile)


def sweep_deadline_s(profile: ComputeProfile, trials: int) -> int:
    """The sweep's deadline: a trial's ``timeout_s`` for each wave of trials (0: none)."""
    if not profile.timeout_s:
        return 0
    waves = -(-trials // max(1, profile.replicas))
    return profile.timeout_s * waves


def describe(profile: ComputeProfile, head: ComputeProfile) -> str:
    """One line for ``plan``: the Ray cluster the sweep creates."""
    from gkeflow.pipelines.compute.engines import gpus_text
    from gkeflow.pipelines.compute.wording import counted

    nodes = f" on {profile.accelerator} nodes" if profile.uses_gpu else ""
    queue = f", Kueue queue {profile.queue}" if profile.queue else ""
    return (f"sweep.engine ray creates a KubeRay RayJob: a Ray head ({head.cpu} CPU, "
            f"{head.memory}) and {counted(max(1, profile.replicas), 'trial worker')} "
            f"({gpus_text(profile, GPU_RESOURCE)}){nodes}, scheduling {profile.scheduling}"
            f"{queue}, running as service account {profile.worker_service_account}; "
            "launched by a 1-CPU pipeline step")
