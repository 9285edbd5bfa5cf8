"""GKE engine: the training step launches a JobSet (``jobset.x-k8s.io/v1alpha2``) of GPU pods.

:func:`jobset_template` turns the step's compute into the JobSet every run launches: one
replicated job ``worker`` whose Indexed Job runs ``replicas`` pods in parallel, each with the
profile's CPU, memory and ``nvidia.com/gpu`` requests, the accelerator node selector and GPU
toleration, the Spot or flex-start selector and toleration, a memory-backed ``/dev/shm``
and the Kueue queue-name label when ``queue`` is set. JobSet puts the pods behind a
headless service so each resolves the others by their stable host names; the launcher step
(:mod:`gkeflow.components.scaleout.jobset_launcher`) names it per run and task.

The pods run as ``worker_service_account`` (default ``gkeflow-worker``), never as the
launcher's account. The JobSet carries the training deadline (``timeout_s``, each Job's
``activeDeadlineSeconds``); the launcher step's own deadline is
:func:`launcher_deadline_s`: that plus a provisioning allowance.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gkeflow.pipelines.compute import tpu_profile
from gkeflow.pipelines.compute.profiles import (
    GKE_ACCELERATOR_LABEL,
    GPU_RESOURCE,
    SHM_PATH,
    SHM_VOLUME,
    ComputeError,
    ComputeProfile,
    memory_bytes,
)

#: What the launcher pod's deadline allows, on top of the JobSet's own, for the JobSet's nodes
#: to be provisioned (Spot and GPU capacity can take long): an hour, or the profile's
#: ``max_wait`` when that is longer (flex-start).
PROVISIONING_ALLOWANCE_S = 3600
#: Taint GKE puts on nodes created by queued provisioning (flex-start with all-or-nothing).
GKE_QUEUED_TAINT = "cloud.google.com/gke-queued"
WORKER_COMMAND = ["python3", "-u", "-m", "gkeflow.components.scaleout.worker"]


def node_placement(profile: ComputeProfile, target: str = "gke") -> tuple[
        dict[str, str], list[dict[str, str]]]:
    """Node selectors and tolerations of every worker: the single-pod step's capacity rules
    (:mod:`gkeflow.pipelines.compute.capacity`) written into the JobSet's pod template, as
    the Kubernetes platform ``target`` wants them (GKE Autopilot: no node-pool tolerations
    for accelerators, its Accelerator compute class on GPU pods)."""
    from gkeflow.pipelines.compute import capacity, pod_rules
    from gkeflow.pipelines.settings.platforms import platform

    node_pools = platform(target).node_pools
    selectors: dict[str, str] = {}
    tolerations: list[dict[str, str]] = []
    if profile.uses_gpu:
        selectors[GKE_ACCELERATOR_LABEL] = profile.accelerator
        selectors.update(pod_rules.accelerator_selectors(profile, target))
        if node_pools:
            tolerations.append({"key": GPU_RESOURCE, "operator": "Exists",
                                "effect": "NoSchedule"})
    if profile.uses_tpu:
        selectors.update(tpu_profile.gke_selectors(profile))
        if node_pools:
            tolerations.append({"key": tpu_profile.TPU_RESOURCE, "operator": "Exists",
                                "effect": "NoSchedule"})
    if profile.scheduling == "spot":
        selectors[capacity.GKE_SPOT_LABEL] = "true"
        tolerations.append({"key": capacity.GKE_SPOT_LABEL, "operator": "Equal",
                            "value": "true", "effect": "NoSchedule"})
    elif profile.scheduling == "flex-start":
        selectors[capacity.GKE_FLEX_START_LABEL] = "true"
        tolerations.append({"key": capacity.GKE_FLEX_START_LABEL, "operator": "Equal",
                            "value": "true", "effect": "NoSchedule"})
        # Queued provisioning (all-or-nothing multi-node capacity) taints its nodes too.
        tolerations.append({"key": GKE_QUEUED_TAINT, "operator": "Exists",
                            "effect": "NoSchedule"})
    elif profile.scheduling == "reservation":
        project, name = capacity.split_reservation(profile.reservation)
        selectors[capacity.GKE_RESERVATION_NAME_LABEL] = name
        selectors[capacity.GKE_RESERVATION_AFFINITY_LABEL] = "specific"
        if project:
            selectors[capacity.GKE_RESERVATION_PROJECT_LABEL] = project
    return selectors, tolerations


def shm_size(profile: ComputeProfile) -> str:
    """Memory-backed /dev/shm for every worker: the profile's, else half its memory."""
    return profile.effective_shm_size or f"{memory_bytes(profile.memory) // 2 // 2**20}Mi"


def jobset_template(profile: ComputeProfile, image: str, target: str = "gke") -> dict[str, Any]:
    """The JobSet for a training step with ``profile`` (name, namespace, args set at run time)
    on the Kubernetes platform ``target`` (its rules for a pod's requests applied)."""
    from gkeflow.pipelines.compute import pod_rules

    profile = pod_rules.fitted(profile, target)
    resources: dict[str, Any] = {"cpu": profile.cpu, "memory": profile.memory}
    if profile.ephemeral_storage:
        resources["ephemeral-storage"] = profile.ephemeral_storage
    if profile.uses_gpu:
        resources[GPU_RESOURCE] = str(profile.accelerator_count)
    pods = profile.replicas
    if profile.uses_tpu:  # one Job per slice, one pod per host with all its chips
        tpu = tpu_profile.shape(profile)
        resources[tpu_profile.TPU_RESOURCE] = str(tpu.chips_per_host)
        pods = tpu.hosts
    selectors, tolerations = node_placement(profile, target)
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 60,
        "containers": [{
            "name": "worker",
            "image": image,
            "command": list(WORKER_COMMAND),
            "args": [],
            "ports": [{"name": "tpu", "containerPort": tpu_profile.TPU_PORT}
                      if profile.uses_tpu else {"name": "collective", "containerPort": 2222}],
            "env": [{"name": "TF_CPP_MIN_LOG_LEVEL", "value": "1"}],
            "resources": {"requests": dict(resources), "limits": dict(resources)},
        }],
    }
    if profile.uses_tpu and profile.replicas > 1:
        # Multislice: the slices talk over the data-centre network (DCN) from the host's own
        # interfaces, as Google's and JobSet's Multislice manifests run them (not privileged)
        pod_spec["hostNetwork"] = True
        pod_spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    if not profile.uses_tpu:  # GPU collectives want a memory-backed /dev/shm
        pod_spec["containers"][0]["volumeMounts"] = [{"name": SHM_VOLUME,
                                                      "mountPath": SHM_PATH}]
        pod_spec["volumes"] = [{"name": SHM_VOLUME, "emptyDir": {
            "medium": "Memory", "sizeLimit": shm_size(profile)}}]
    # The workers' own account: no permission on JobSets, pods or logs (the launcher's has).
    pod_spec["serviceAccountName"] = profile.worker_service_account
    if selectors:
        pod_spec["nodeSelector"] = selectors
    if tolerations:
        pod_spec["tolerations"] = tolerations
    job_spec: dict[str, Any] = {
        "parallelism": pods,
        "completions": pods,
        "completionMode": "Indexed",
        "backoffLimit": 0,
        "template": {"spec": pod_spec},
    }
    if profile.timeout_s:  # the training deadline travels with the JobSet
        job_spec["activeDeadlineSeconds"] = profile.timeout_s
    labels = {"app.kubernetes.io/managed-by": "gkeflow"}
    if profile.queue:
        from gkeflow.pipelines.compute.capacity import KUEUE_QUEUE_LABEL

        labels[KUEUE_QUEUE_LABEL] = profile.queue
    metadata: dict[str, Any] = {"labels": labels}
    slices = 1
    if profile.uses_tpu:  # each slice's Job gets a node pool (one slice) of its own
        metadata["annotations"] = {
            tpu_profile.EXCLUSIVE_TOPOLOGY_ANNOTATION: tpu_profile.GKE_NODEPOOL_LABEL}
        slices = profile.replicas
    replicated = [{"name": "worker", "replicas": slices, "template": {"spec": job_spec}}]
    if profile.chief_scheduling:
        replicated = _chief_and_workers(profile, job_spec, target)
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": metadata,
        "spec": {
            # Pods resolve each other as <jobset>-<job>-0-<index>.<jobset> (headless service).
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            # Multi-worker training does not survive a lost worker: fail, let the step retry
            # (it resumes from the chief's last checkpoint).
            "failurePolicy": {"maxRestarts": 0},
            "successPolicy": {"operator": "All"},
            "replicatedJobs": replicated,
        },
    }


def _chief_and_workers(profile: ComputeProfile, job_spec: dict[str, Any],
                       target: str = "gke") -> list[dict]:
    """Mixed capacity: replicated job ``chief`` (one pod, worker 0, on ``chief_scheduling``
    nodes) first, then ``worker`` (the other pods, on ``scheduling`` nodes)."""
    import copy
    from dataclasses import replace

    chief = copy.deepcopy(job_spec)
    chief["parallelism"] = chief["completions"] = 1
    pod = chief["template"]["spec"]
    selectors, tolerations = node_placement(replace(profile, scheduling=profile.chief_scheduling,
                                                 spot=False, chief_scheduling=""), target)
    pod.pop("nodeSelector", None)
    pod.pop("tolerations", None)
    if selectors:
        pod["nodeSelector"] = selectors
    if tolerations:
        pod["tolerations"] = tolerations
    workers = copy.deepcopy(job_spec)
    workers["parallelism"] = workers["completions"] = profile.replicas - 1
    return [{"name": "chief", "replicas": 1, "template": {"spec": chief}},
            {"name": "worker", "replicas": 1, "template": {"spec": workers}}]


def launcher_deadline_s(profile: ComputeProfile) -> int:
    """The launcher pod's ``activeDeadlineSeconds``: the JobSet's deadline (``timeout_s``)
    plus :data:`PROVISIONING_ALLOWANCE_S` (or ``max_wait``, when longer); 0 (none) when the
    JobSet has none. The launcher's clock starts before the JobSet's nodes exist, so an
    equal deadline would stop training that is still within its own."""
    if not profile.timeout_s:
        return 0
    from gkeflow.pipelines.compute.profiles import to_seconds

    waiting = to_seconds("max_wait", profile.max_wait) if profile.max_wait else 0
    return profile.timeout_s + max(PROVISIONING_ALLOWANCE_S, waiting)


class JobSetEngine:
    """Multi-node training as a JobSet on the Kubernetes platform ``target``."""

    name = "gke"
    runs_any_component = False

    def __init__(self, target: str = "gke"):
        self.target = target

    def describe(self, profile: ComputeProfile, step: str = "train-model") -> str:
        from gkeflow.pipelines.compute.engines import gpus_text

        if profile.uses_tpu:
            tpu = tpu_profile.shape(profile)
            return (f"{step} launches a JobSet: one Job per slice of {tpu.hosts} pods "
                    f"(one per {tpu.machine_type} host, {tpu_profile.TPU_RESOURCE}: "
                    f"{tpu.chips_per_host} each), {tpu_profile.describe(profile, 'gke')}, "
                    f"running as service account {profile.worker_service_account}; launched "
                    "by a 1-CPU pipeline step")

        queue = f", Kueue queue {profile.queue}" if profile.queue else ""
        chief = (f" (the chief on {profile.chief_scheduling} capacity)"
                 if profile.chief_scheduling else "")
        nodes = f" on {profile.accelerator} nodes" if profile.uses_gpu else ""
        deadline = ""
        if profile.timeout_s:
            from gkeflow.pipelines.compute.profiles import format_duration

            deadline = (f", deadline {format_duration(profile.timeout_s)} (launcher "
                        f"{format_duration(launcher_deadline_s(profile))})")
        from gkeflow.pipelines.compute.wording import counted

        return (f"{step} launches a JobSet of {counted(profile.replicas, 'pod')} "
                f"({gpus_text(profile, GPU_RESOURCE)}){nodes}, scheduling "
                f"{profile.scheduling}{chief}{queue}{deadline}, running as service account "
                f"{profile.worker_service_account}; launched by a 1-CPU pipeline step")

    def applies(self, profile: ComputeProfile) -> bool:
        return profile.replicas > 1 or tpu_profile.multi_host(profile)

    def task(self, profile: ComputeProfile, arguments: dict[str, Any],
             env: Mapping[str, str] | None = None, component=None):
        if component is not None:
            raise ComputeError("the JobSet engine runs train_model only")
        from gkeflow.components.scaleout.component import train_model_jobset
        from gkeflow.components.scaleout.jobset import dumps
        from gkeflow.pipelines.compute.engines import (
            as_training_step,
            keras_arguments,
            refuse_env,
        )
        from gkeflow.pipelines.compute.launchers import settings

        refuse_env("JobSet", env)

        # the GPU or TPU image, as the profile asks; the compiler maps and pins it
        template = jobset_template(profile, tpu_profile.training_image(profile), self.target)
        return as_training_step(train_model_jobset)(jobset_template=dumps(template),
                                                    **settings(profile),
                                                    **keras_arguments(arguments))

    def machine(self, profile: ComputeProfile) -> str:
        return ""

    def launcher_profile(self, profile: ComputeProfile) -> ComputeProfile:
        from dataclasses import replace

        from gkeflow.pipelines.compute.engines import launcher_profile

        return replace(launcher_profile(profile), timeout_s=launcher_deadline_s(profile))


ENGINE = JobSetEngine()
_ENGINES = {ENGINE.target: ENGINE}


def engine_on(target: str) -> JobSetEngine:
    """The JobSet engine placing its pods as the Kubernetes platform ``target`` wants."""
    if target not in _ENGINES:
        _ENGINES[target] = JobSetEngine(target)
    return _ENGINES[target]
