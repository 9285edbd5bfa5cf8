"""Accelerators, the machine shapes that host them and what GKE leaves to pods on them.

The data (families, shapes, consumption options, each with its sources) is in
:mod:`gkeflow.pipelines.compute.gpu_catalogue`; this module answers questions about it: which
shapes carry a GPU in a given count, which consumption options a request can use, and how
much CPU and memory a GKE node of a shape leaves for pods.

GKE allocatable resources follow the model GKE's cluster autoscaler uses to predict a new
node (kubernetes/autoscaler ``cluster-autoscaler/cloudprovider/gce/reserved.go`` at commit
729ba955a1b62444d44848bf822004face224e8f, read 2026-11-30), which matches GKE,
"Plan node sizes" / "Standard cluster architecture: node allocatable resources"
(https://cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes, e.g. 4 vCPUs
leave 3920m):

- capacity memory = physical memory - the kernel's share (``physical / 64 + 16 MiB``, plus
  64 MiB of software IO TLB above 3 GiB: about 1.6 % + 80 MiB);
- kube-reserved memory = 255 MiB at or under 1000 MiB, else 25 % of the first 4 "GB",
  20 % of the next 4, 10 % of the next 8, 6 % of the next 112 and 2 % above 128 "GB" of
  the physical memory, where a "GB" is 1000 MiB (GKE's own unit, kept in the model "to
  predict the end result accurately");
- eviction threshold: 100 MiB;
- kube-reserved CPU = 6 % of the first core, 1 % of the next, 0.5 % of the next 2 and
  0.25 % of every core above 4 (millicores, truncated).

System DaemonSets (logging, the NVIDIA device plugin) take a little more on real nodes;
that share depends on cluster add-ons and is not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass

from gkeflow.pipelines.compute import gpu_catalogue as cat
from gkeflow.pipelines.compute.gpu_catalogue import (  # noqa: F401  (re-exported)
    FAMILIES,
    N1_GPU_LIMITS,
    N1_SERIES,
    VERTEX_STEP_MAX_MEMORY_GIB,
    VERTEX_STEP_MAX_VCPUS,
    ZONE_LIMITS,
    Family,
    MachineShape,
)

GIB = 2**30
MIB = 2**20

#: Kept for callers of the former names; Vertex caps every pipeline step the same way.
VERTEX_CPU_ONLY_MAX_VCPUS = VERTEX_STEP_MAX_VCPUS
VERTEX_CPU_ONLY_MAX_MEMORY_GIB = VERTEX_STEP_MAX_MEMORY_GIB


@dataclass(frozen=True)
class Accelerator:
    """One GPU model: its GKE node-label name, its Vertex AI type and its machine family."""

    name: str
    vertex_type: str
    family: str
    cpu_arch: str = cat.X86_64


def _accelerators() -> dict[str, Accelerator]:
    result: dict[str, Accelerator] = {}
    for family in FAMILIES:
        known = result.get(family.accelerator)
        name = f"{known.family} or {family.name}" if known else family.name
        result[family.accelerator] = Accelerator(
            family.accelerator, family.vertex_type, name, family.cpu_arch)
    return result


ACCELERATORS: dict[str, Accelerator] = _accelerators()

#: Every machine shape that hosts a GPU, N1 combinations included.
GPU_SHAPES: tuple[MachineShape, ...] = tuple(s for f in FAMILIES for s in f.shapes)

_FAMILY_OF_SHAPE: dict[tuple[str, str], Family] = {
    (s.name, s.accelerator): f for f in FAMILIES for s in f.shapes}


def family_of(shape: MachineShape) -> Family:
    """The family ``shape`` belongs to."""
    return _FAMILY_OF_SHAPE[(shape.name, shape.accelerator)]


def consumption_of(shape: MachineShape) -> frozenset[str]:
    """The consumption options (scheduling names) Google offers ``shape`` under."""
    return shape.consumption or family_of(shape).consumption


def shapes_for(accelerator: str, count: int | None = None) -> list[MachineShape]:
    """Shapes carrying ``accelerator`` (``count`` of them, when given), smallest first; of
    shapes the same size, the one of the family the catalogue lists first (the general
    one: A3 High's a3-highgpu-8g before A3 Edge's a3-edgegpu-8g)."""
    order = {shape: index for index, shape in enumerate(GPU_SHAPES)}
    return sorted(
        (
            s
            for s in GPU_SHAPES
            if s.accelerator == accelerator and (count is None or s.accelerator_count == count)
        ),
        key=lambda s: (s.vcpus, s.memory_gib, order[s]),
    )


def valid_counts(accelerator: str) -> list[int]:
    """GPU counts one machine of ``accelerator``'s family can host."""
    return sorted({s.accelerator_count for s in shapes_for(accelerator)})


def runs_the_images(accelerator: str) -> bool:
    """Whether the suite's images can start on the machines of ``accelerator`` (their CPU
    architecture is one the images are built for)."""
    known = ACCELERATORS.get(accelerator)
    return known is not None and known.cpu_arch in cat.IMAGE_ARCHITECTURES


def runnable() -> list[str]:
    """The accelerators a step can ask for: those whose machines run the suite's images."""
    return [name for name in ACCELERATORS if runs_the_images(name)]


def architecture_problem(step: str, accelerator: str) -> str:
    """The one message for an accelerator whose machines cannot run the images; "" if none."""
    known = ACCELERATORS.get(accelerator)
    if known is None or runs_the_images(accelerator):
        return ""
    return (f"{step}: {accelerator} runs only on {known.family} machines, whose CPUs are "
            f"{known.cpu_arch} (Arm); the suite's images are built for "
            f"{', '.join(sorted(cat.IMAGE_ARCHITECTURES))} only and cannot start there. Use "
            "nvidia-b200 (A4, x86) for Blackwell GPUs, or build an Arm image first")


def ordered(options) -> list[str]:
    """Consumption options in the catalogue's order (standard, spot, flex-start, reservation)."""
    return [o for o in cat.CONSUMPTION if o in options]


def zone_limit_note(accelerator: str, count: int, vcpus: float, memory_gib: float) -> str:
    """A caveat when the request exceeds a limit that holds only in some zones; else ""."""
    limit = ZONE_LIMITS.get((accelerator, count))
    if not limit:
        return ""
    (max_vcpus, max_memory), zones = limit
    if vcpus <= max_vcpus and memory_gib <= max_memory:
        return ""
    return (f"{accelerator} x {count} with more than {max_vcpus} vCPUs or {max_memory:g} GB "
            f"cannot run in {', '.join(zones)}")


# ---------------------------------------------------------------------------------------------
# GKE allocatable (reserved.go)

_KERNEL_RESERVED_RATIO = 64
_KERNEL_RESERVED_MIB = 16
_SWIOTLB_MIB = 64
_SWIOTLB_THRESHOLD = 3 * GIB
_EVICTION_HARD_MIB = 100
_MB_PER_GB = 1000  # GKE's "GB" is 1000 MiB
_MEMORY_BRACKETS = ((0, 0.25), (4 * _MB_PER_GB, 0.2), (8 * _MB_PER_GB, 0.1),
                    (16 * _MB_PER_GB, 0.06), (128 * _MB_PER_GB, 0.02))
_CPU_BRACKETS = ((0, 0.06), (1000, 0.01), (2000, 0.005), (4000, 0.0025))


def _reserved(capacity: int, brackets) -> int:
    """Marginal rates per bracket, summed as a float and truncated (reserved.go)."""
    reserved = 0.0
    for i, (threshold, rate) in enumerate(brackets):
        upper = capacity
        if i < len(brackets) - 1 and brackets[i + 1][0] < capacity:
            upper = brackets[i + 1][0]
        if (upper - threshold) * rate > 0:
            reserved += (upper - threshold) * rate
    return int(reserved)


def kernel_reserved_bytes(physical: int) -> int:
    """Memory the Linux kernel keeps on a node with ``physical`` bytes."""
    reserved = physical // _KERNEL_RESERVED_RATIO + _KERNEL_RESERVED_MIB * MIB
    if physical > _SWIOTLB_THRESHOLD:
        reserved += _SWIOTLB_MIB * MIB
    return reserved


def kube_reserved_memory_bytes(physical: int) -> int:
    """GKE's kube-reserved memory for ``physical`` bytes."""
    mib = physical // MIB
    if mib <= 0:
        return 0
    if mib <= _MB_PER_GB:
        return 255 * MIB
    return _reserved(mib, _MEMORY_BRACKETS) * MIB


def kube_reserved_millicores(millicores: int) -> int:
    """GKE's kube-reserved CPU for a node of ``millicores``."""
    return _reserved(millicores, _CPU_BRACKETS)


def gke_allocatable_exact(vcpus: int, memory_bytes: int) -> tuple[int, int]:
    """(millicores, bytes) a GKE node with ``vcpus`` and ``memory_bytes`` leaves for pods."""
    millicores = vcpus * 1000
    memory = (memory_bytes - kernel_reserved_bytes(memory_bytes)
              - kube_reserved_memory_bytes(memory_bytes) - _EVICTION_HARD_MIB * MIB)
    return millicores - kube_reserved_millicores(millicores), memory


def gke_allocatable(shape: MachineShape) -> tuple[float, float]:
    """(vCPUs, GiB) left for pods on a GKE node of ``shape`` after GKE's reservations."""
    millicores, memory = gke_allocatable_exact(shape.vcpus, round(shape.memory_gib * GIB))
    return millicores / 1000, memory / GIB
