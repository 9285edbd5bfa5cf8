"""Per-step compute requests: declared once, validated, then applied to a task for one target.

A :class:`ComputeProfile` says what a step needs: CPU, memory, accelerator and count,
spot, shared memory, timeout, retries (every retry field explicit) and caching.
:func:`validate_profiles` checks a whole pipeline's profiles against the machine shapes in
:mod:`gkeflow.pipelines.compute.accelerators` before anything is compiled, and
:func:`apply_compute` turns a profile into what each backend understands:

- ``gke`` (open-source Kubeflow Pipelines): CPU and memory requests and limits on every
  step; on GPU steps only the accelerator type ``nvidia.com/gpu`` with the count, the GKE
  accelerator node selector and the ``nvidia.com/gpu`` toleration, the selectors, tolerations
  and labels of the step's capacity (spot, flex-start, reservation, Kueue queue: see
  :mod:`gkeflow.pipelines.compute.capacity`), and a memory-backed ``/dev/shm`` on multi-GPU steps;
  ``activeDeadlineSeconds`` when the step has a timeout;
- GKE Autopilot: the same, after Autopilot's rules for the pod's requests
  (:mod:`~gkeflow.pipelines.compute.pod_rules`), with the ``Accelerator`` compute class on
  GPU pods and no accelerator tolerations (Autopilot adds them);
- ``vertex`` (Vertex AI Pipelines): CPU and memory limits and the ``NVIDIA_*`` accelerator
  type and count; no Kubernetes settings, so the compiled YAML stays a single document;
- ``local`` (``kfp.local``): caching only, the one setting it honours.

:func:`gkeflow.pipelines.compute.plan.plan` reports what each step will actually request on a
target, with the training engine chosen there (:mod:`gkeflow.pipelines.compute.engines`).

This module applies profiles and is where the rest of gkeflow imports them from; the
profile itself is in :mod:`~gkeflow.pipelines.compute.compute_profile`, its fields' values in
:mod:`~gkeflow.pipelines.compute.profile_values` and the checks in
:mod:`~gkeflow.pipelines.compute.profile_checks`.
"""

from __future__ import annotations

from gkeflow.pipelines.compute import capacity, kfp_task_check, pod_rules, tpu_profile
from gkeflow.pipelines.compute.compute_profile import (
    FIELD_NAMES,
    NEVER_CACHED,
    ComputeProfile,
    apply_overrides,
    override_step,
    parse_override,
)
from gkeflow.pipelines.compute.profile_checks import (
    fitting_shape,
    profile_problems,
    validate_profiles,
)
from gkeflow.pipelines.compute.profile_values import (
    GKE_TO_VERTEX_ACCELERATOR,
    SCHEDULING,
    TARGETS,
    VERTEX_TO_GKE_ACCELERATOR,
    ComputeError,
    PipelineUnfit,
    canonical_accelerator,
    format_duration,
    format_gib,
    to_seconds,
)
from gkeflow.pipelines.compute.units import cpu_cores, memory_bytes
from gkeflow.pipelines.settings.platforms import names, platform

__all__ = [
    "FIELD_NAMES", "GKE_ACCELERATOR_LABEL", "GKE_SPOT_LABEL", "GKE_TO_VERTEX_ACCELERATOR",
    "GPU_RESOURCE", "NEVER_CACHED", "SCHEDULING", "SHM_PATH", "SHM_VOLUME", "TARGETS",
    "VERTEX_TO_GKE_ACCELERATOR", "ComputeError", "ComputeProfile", "PipelineUnfit",
    "apply_compute", "apply_overrides", "canonical_accelerator", "cpu_cores", "fitting_shape",
    "format_duration", "format_gib", "memory_bytes", "override_step", "parse_override",
    "profile_problems", "to_seconds", "validate_profiles",
]

GKE_ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
GKE_SPOT_LABEL = capacity.GKE_SPOT_LABEL
GPU_RESOURCE = "nvidia.com/gpu"
SHM_VOLUME = "dshm"
SHM_PATH = "/dev/shm"


#: Pod label naming the step a pod runs (GKE cost allocation exports it to the billing data
#: as ``k8s-label/gkeflow-step``: `gkeflow runs cost` reads each step's actual cost by it).
STEP_LABEL = "gkeflow-step"


def apply_compute(task, profile: ComputeProfile, target: str, step: str = ""):
    """Apply ``profile`` to the pipeline task ``task`` in the form ``target`` understands;
    on GKE its pod is labelled with ``step``."""
    if target not in names():
        raise ComputeError(f"unknown target {target!r}; valid: {', '.join(TARGETS)}")
    kfp_task_check.install()
    task.set_caching_options(profile.caching)
    if platform(target).local:
        return task
    if profile.retries:
        task.set_retry(
            num_retries=profile.retries,
            backoff_duration=f"{profile.retry_backoff_s}s",
            backoff_factor=profile.retry_backoff_factor,
            backoff_max_duration=f"{profile.retry_max_duration_s}s",
        )
    if platform(target).kubernetes:
        _apply_gke(task, pod_rules.fitted(profile, target), target)
        if step:
            from kfp import kubernetes

            kubernetes.add_pod_label(task, STEP_LABEL, step)
    else:
        task.set_cpu_limit(profile.cpu).set_memory_limit(profile.memory)
        if profile.uses_gpu:
            task.set_accelerator_type(GKE_TO_VERTEX_ACCELERATOR[profile.accelerator])
            task.set_accelerator_limit(profile.accelerator_count)
    return task


def _apply_gke(task, profile: ComputeProfile, target: str) -> None:
    from kfp import kubernetes

    node_pools = platform(target).node_pools
    task.set_cpu_request(profile.cpu).set_cpu_limit(profile.cpu)
    task.set_memory_request(profile.memory).set_memory_limit(profile.memory)
    if profile.uses_gpu:
        task.set_accelerator_type(GPU_RESOURCE).set_accelerator_limit(profile.accelerator_count)
        kubernetes.add_node_selector(task, GKE_ACCELERATOR_LABEL, profile.accelerator)
        for key, value in pod_rules.accelerator_selectors(profile, target).items():
            kubernetes.add_node_selector(task, key, value)
        if node_pools:  # Autopilot adds the toleration to the nodes it makes for the pod
            kubernetes.add_toleration(task, key=GPU_RESOURCE, operator="Exists",
                                      effect="NoSchedule")
    if profile.uses_tpu:  # a single-host slice (a multi-host one runs as a JobSet)
        tpu = tpu_profile.shape(profile)
        task.set_accelerator_type(tpu_profile.TPU_RESOURCE).set_accelerator_limit(tpu.chips)
        for key, value in tpu_profile.gke_selectors(profile).items():
            kubernetes.add_node_selector(task, key, value)
        if node_pools:
            kubernetes.add_toleration(task, key=tpu_profile.TPU_RESOURCE, operator="Exists",
                                      effect="NoSchedule")
    capacity.apply_gke_capacity(task, profile)
    if profile.uses_gpu and profile.effective_shm_size:
        kubernetes.empty_dir_mount(
            task, volume_name=SHM_VOLUME, mount_path=SHM_PATH, medium="Memory",
            size_limit=profile.effective_shm_size,
        )
    from gkeflow.pipelines.compute.scratch import apply_gke_disk

    apply_gke_disk(task, profile)
    if profile.timeout_s:
        kubernetes.set_timeout(task, profile.timeout_s)
