"""Accelerators and the machine shapes that host them on Google Cloud: data, not logic.

Sources (read 2026-11-29; update this module, and its date, when Google Cloud changes):

- Compute Engine, "GPU machine types": https://cloud.google.com/compute/docs/gpus
  (GPUs attachable to N1 and, per GPU count, the vCPU and memory maxima of the N1 VM);
- Compute Engine, "Accelerator-optimized machine family":
  https://cloud.google.com/compute/docs/accelerator-optimized-machines
  (G2, A2 High/Ultra, A3 High/Mega/Ultra shapes: GPUs, vCPUs, memory);
- Compute Engine, "General-purpose machine family" (N1 predefined types: 3.75 GB per
  vCPU standard, 6.5 GB highmem, 0.9 GB highcpu);
- Vertex AI, "Specify the machine configuration for a pipeline step":
  https://cloud.google.com/vertex-ai/docs/pipelines/machine-types (CPU limit up to 96,
  memory limit up to 624 GB; used for steps without an accelerator);
- GKE, "Plan node sizes" / node allocatable resources:
  https://cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes (CPU and memory
  that GKE reserves on each node; a pod must fit in what is left).

N1 is listed by its predefined machine types only (custom N1 shapes are not modelled), so a
request is accepted only when a predefined type of the accelerator's family hosts it.
Memory figures are Compute Engine "GB", which are GiB (2**30 bytes; e.g. n1-standard-1 is
3.75 GB = 3840 MiB).
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 2**30


@dataclass(frozen=True)
class Accelerator:
    """One GPU model: its GKE node-label name, its Vertex AI type and its machine family."""

    name: str
    vertex_type: str
    family: str


@dataclass(frozen=True)
class MachineShape:
    """A machine type with the GPUs it carries (or can carry, for N1)."""

    name: str
    vcpus: int
    memory_gib: float
    accelerator: str
    accelerator_count: int


ACCELERATORS: dict[str, Accelerator] = {
    a.name: a
    for a in (
        Accelerator("nvidia-tesla-t4", "NVIDIA_TESLA_T4", "N1"),
        Accelerator("nvidia-tesla-v100", "NVIDIA_TESLA_V100", "N1"),
        Accelerator("nvidia-tesla-p100", "NVIDIA_TESLA_P100", "N1"),
        Accelerator("nvidia-l4", "NVIDIA_L4", "G2"),
        Accelerator("nvidia-tesla-a100", "NVIDIA_TESLA_A100", "A2 High"),
        Accelerator("nvidia-a100-80gb", "NVIDIA_A100_80GB", "A2 Ultra"),
        Accelerator("nvidia-h100-80gb", "NVIDIA_H100_80GB", "A3 High"),
        Accelerator("nvidia-h100-mega-80gb", "NVIDIA_H100_MEGA_80GB", "A3 Mega"),
        Accelerator("nvidia-h200-141gb", "NVIDIA_H200_141GB", "A3 Ultra"),
    )
}

#: GPUs attached to N1 VMs: GPU count -> (max vCPUs, max memory GB) of the VM.
N1_GPU_LIMITS: dict[str, dict[int, tuple[int, float]]] = {
    "nvidia-tesla-t4": {1: (48, 312), 2: (48, 312), 4: (96, 624)},
    "nvidia-tesla-v100": {1: (12, 78), 2: (24, 156), 4: (48, 312), 8: (96, 624)},
    "nvidia-tesla-p100": {1: (16, 104), 2: (32, 208), 4: (64, 208)},
}

#: N1 predefined machine types: (series, GB per vCPU, vCPU sizes).
N1_SERIES = (
    ("n1-standard", 3.75, (1, 2, 4, 8, 16, 32, 64, 96)),
    ("n1-highmem", 6.5, (2, 4, 8, 16, 32, 64, 96)),
    ("n1-highcpu", 0.9, (2, 4, 8, 16, 32, 64, 96)),
)

#: Accelerator-optimized shapes: the GPUs come with the machine type.
_FIXED_SHAPES = (
    # G2: NVIDIA L4
    MachineShape("g2-standard-4", 4, 16, "nvidia-l4", 1),
    MachineShape("g2-standard-8", 8, 32, "nvidia-l4", 1),
    MachineShape("g2-standard-12", 12, 48, "nvidia-l4", 1),
    MachineShape("g2-standard-16", 16, 64, "nvidia-l4", 1),
    MachineShape("g2-standard-32", 32, 128, "nvidia-l4", 1),
    MachineShape("g2-standard-24", 24, 96, "nvidia-l4", 2),
    MachineShape("g2-standard-48", 48, 192, "nvidia-l4", 4),
    MachineShape("g2-standard-96", 96, 384, "nvidia-l4", 8),
    # A2 High: NVIDIA A100 40GB
    MachineShape("a2-highgpu-1g", 12, 85, "nvidia-tesla-a100", 1),
    MachineShape("a2-highgpu-2g", 24, 170, "nvidia-tesla-a100", 2),
    MachineShape("a2-highgpu-4g", 48, 340, "nvidia-tesla-a100", 4),
    MachineShape("a2-highgpu-8g", 96, 680, "nvidia-tesla-a100", 8),
    MachineShape("a2-megagpu-16g", 96, 1360, "nvidia-tesla-a100", 16),
    # A2 Ultra: NVIDIA A100 80GB
    MachineShape("a2-ultragpu-1g", 12, 170, "nvidia-a100-80gb", 1),
    MachineShape("a2-ultragpu-2g", 24, 340, "nvidia-a100-80gb", 2),
    MachineShape("a2-ultragpu-4g", 48, 680, "nvidia-a100-80gb", 4),
    MachineShape("a2-ultragpu-8g", 96, 1360, "nvidia-a100-80gb", 8),
    # A3 High: NVIDIA H100 80GB
    MachineShape("a3-highgpu-1g", 26, 234, "nvidia-h100-80gb", 1),
    MachineShape("a3-highgpu-2g", 52, 468, "nvidia-h100-80gb", 2),
    MachineShape("a3-highgpu-4g", 104, 936, "nvidia-h100-80gb", 4),
    MachineShape("a3-highgpu-8g", 208, 1872, "nvidia-h100-80gb", 8),
    # A3 Mega: NVIDIA H100 80GB Mega
    MachineShape("a3-megagpu-8g", 208, 1872, "nvidia-h100-mega-80gb", 8),
    # A3 Ultra: NVIDIA H200 141GB
    MachineShape("a3-ultragpu-8g", 224, 2952, "nvidia-h200-141gb", 8),
)

#: Vertex AI Pipelines: limits of a step that asks for no accelerator.
VERTEX_CPU_ONLY_MAX_VCPUS = 96
VERTEX_CPU_ONLY_MAX_MEMORY_GIB = 624


def _n1_shapes() -> tuple[MachineShape, ...]:
    shapes = []
    for accelerator, limits in N1_GPU_LIMITS.items():
        for count, (max_vcpus, max_memory) in limits.items():
            for series, gib_per_vcpu, sizes in N1_SERIES:
                for vcpus in sizes:
                    memory = vcpus * gib_per_vcpu
                    if vcpus <= max_vcpus and memory <= max_memory:
                        shapes.append(
                            MachineShape(f"{series}-{vcpus}", vcpus, memory, accelerator, count)
                        )
    return tuple(shapes)


#: Every machine shape that hosts a GPU, N1 combinations included.
GPU_SHAPES: tuple[MachineShape, ...] = _n1_shapes() + _FIXED_SHAPES


def shapes_for(accelerator: str, count: int | None = None) -> list[MachineShape]:
    """Shapes carrying ``accelerator`` (``count`` of them, when given), smallest first."""
    return sorted(
        (
            s
            for s in GPU_SHAPES
            if s.accelerator == accelerator and (count is None or s.accelerator_count == count)
        ),
        key=lambda s: (s.vcpus, s.memory_gib, s.name),
    )


def valid_counts(accelerator: str) -> list[int]:
    """GPU counts one machine of ``accelerator``'s family can host."""
    return sorted({s.accelerator_count for s in shapes_for(accelerator)})


def gke_allocatable(shape: MachineShape) -> tuple[float, float]:
    """(vCPUs, GiB) left for pods on a GKE node of ``shape`` after GKE's reservations."""
    cpu_reserved = 0.0
    for upto, share in ((1, 0.06), (2, 0.01), (4, 0.005), (float("inf"), 0.0025)):
        lower = {1: 0, 2: 1, 4: 2}.get(upto, 4)
        cpu_reserved += max(0.0, min(shape.vcpus, upto) - lower) * share
    memory = shape.memory_gib
    memory_reserved = 0.0
    for lower, upper, share in (
        (0, 4, 0.25), (4, 8, 0.20), (8, 16, 0.10), (16, 128, 0.06), (128, float("inf"), 0.02)
    ):
        memory_reserved += max(0.0, min(memory, upper) - lower) * share
    eviction_threshold_gib = 100 / 1024
    return shape.vcpus - cpu_reserved, memory - memory_reserved - eviction_threshold_gib
