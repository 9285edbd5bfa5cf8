"""Per-step compute requests, applied to a pipeline task for one target.

A :class:`ComputeProfile` says what a step needs (CPU, memory, accelerator, spot,
retries, caching). :func:`apply_compute` turns it into what each backend
understands:

- ``gke`` (open-source Kubeflow Pipelines): accelerator type ``nvidia.com/gpu``
  plus the GKE node selector and toleration through kfp-kubernetes;
- ``vertex`` (Vertex AI Pipelines): the ``NVIDIA_*`` accelerator type; no
  Kubernetes settings, so the compiled YAML stays a single document;
- ``local`` (``kfp.local``): nothing but caching, which is all it honours.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kfp import dsl

TARGETS = ("gke", "vertex", "local")

#: GKE accelerator name -> Vertex AI accelerator type.
GKE_TO_VERTEX_ACCELERATOR = {
    "nvidia-tesla-t4": "NVIDIA_TESLA_T4",
    "nvidia-l4": "NVIDIA_L4",
    "nvidia-tesla-v100": "NVIDIA_TESLA_V100",
    "nvidia-tesla-p100": "NVIDIA_TESLA_P100",
    "nvidia-tesla-a100": "NVIDIA_TESLA_A100",
    "nvidia-a100-80gb": "NVIDIA_A100_80GB",
    "nvidia-h100-80gb": "NVIDIA_H100_80GB",
    "nvidia-h100-mega-80gb": "NVIDIA_H100_MEGA_80GB",
    "nvidia-h200-141gb": "NVIDIA_H200_141GB",
}
VERTEX_TO_GKE_ACCELERATOR = {v: k for k, v in GKE_TO_VERTEX_ACCELERATOR.items()}

GKE_ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
GKE_SPOT_LABEL = "cloud.google.com/gke-spot"
GPU_RESOURCE = "nvidia.com/gpu"


class ComputeError(ValueError):
    """A compute request that no target can satisfy; the message names the step."""


def canonical_accelerator(name: str) -> str:
    """GKE spelling of an accelerator; Vertex spellings are accepted as aliases."""
    if not name:
        return ""
    if name in GKE_TO_VERTEX_ACCELERATOR:
        return name
    if name.upper() in VERTEX_TO_GKE_ACCELERATOR:
        return VERTEX_TO_GKE_ACCELERATOR[name.upper()]
    raise ComputeError(
        f"unknown accelerator {name!r}; valid: {', '.join(GKE_TO_VERTEX_ACCELERATOR)} "
        f"(or their Vertex spellings {', '.join(VERTEX_TO_GKE_ACCELERATOR)})"
    )


@dataclass(frozen=True)
class ComputeProfile:
    """What one pipeline step asks the cluster for."""

    cpu: str = "1"
    memory: str = "4G"
    accelerator: str = ""
    accelerator_count: int = 0
    spot: bool = False
    retries: int = 0
    caching: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "accelerator", canonical_accelerator(self.accelerator))
        if self.accelerator and self.accelerator_count < 1:
            raise ComputeError(
                f"accelerator {self.accelerator} needs accelerator_count >= 1; "
                f"got {self.accelerator_count}"
            )
        if self.accelerator_count and not self.accelerator:
            raise ComputeError(
                f"accelerator_count={self.accelerator_count} without an accelerator type"
            )
        if self.retries < 0:
            raise ComputeError(f"retries must be >= 0; got {self.retries}")

    @property
    def uses_gpu(self) -> bool:
        return self.accelerator_count > 0

    def with_overrides(self, **changes) -> ComputeProfile:
        return replace(self, **changes)


def apply_compute(task: dsl.PipelineTask, profile: ComputeProfile, target: str) -> dsl.PipelineTask:
    """Apply ``profile`` to ``task`` in the form ``target`` understands."""
    if target not in TARGETS:
        raise ComputeError(f"unknown target {target!r}; valid: {', '.join(TARGETS)}")
    task.set_caching_options(profile.caching)
    if target == "local":
        return task
    if profile.retries:
        task.set_retry(
            num_retries=profile.retries,
            backoff_duration="30s",
            backoff_factor=2.0,
            backoff_max_duration="3600s",
        )
    if target == "gke":
        task.set_cpu_request(profile.cpu).set_cpu_limit(profile.cpu)
        task.set_memory_request(profile.memory).set_memory_limit(profile.memory)
        if profile.uses_gpu:
            from kfp import kubernetes

            task.set_accelerator_type(GPU_RESOURCE).set_accelerator_limit(
                profile.accelerator_count
            )
            kubernetes.add_node_selector(task, GKE_ACCELERATOR_LABEL, profile.accelerator)
            kubernetes.add_toleration(
                task, key=GPU_RESOURCE, operator="Exists", effect="NoSchedule"
            )
        if profile.spot:
            from kfp import kubernetes

            kubernetes.add_node_selector(task, GKE_SPOT_LABEL, "true")
            kubernetes.add_toleration(
                task, key=GKE_SPOT_LABEL, operator="Equal", value="true", effect="NoSchedule"
            )
    else:  # vertex
        task.set_cpu_limit(profile.cpu).set_memory_limit(profile.memory)
        if profile.uses_gpu:
            task.set_accelerator_type(GKE_TO_VERTEX_ACCELERATOR[profile.accelerator])
            task.set_accelerator_limit(profile.accelerator_count)
    return task
