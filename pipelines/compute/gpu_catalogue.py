"""The GPU families of Google Cloud, their machine shapes and how each can be obtained: data only.

Each :class:`Family` names its GPU as GKE labels it (``cloud.google.com/gke-accelerator``)
and as Vertex AI spells it (``google.cloud.aiplatform_v1.AcceleratorType``; every name
below exists in that enum of google-cloud-aiplatform 2.7), the machine shapes that carry
it (vCPUs, memory, GPUs per machine), the consumption options Google offers for it and,
beside the entry, the sources it was checked against and when. The logic that reads this
table lives in :mod:`gkeflow.pipelines.compute.accelerators`.

Consumption options use the compute profile's ``scheduling`` names: ``standard`` (on
demand), ``spot``, ``flex-start`` (Dynamic Workload Scheduler) and ``reservation``.

Sources, cited per entry by key:

- ``gpus``: Compute Engine, "GPU machine types", https://cloud.google.com/compute/docs/gpus
  (read 2026-11-30): N1 GPUs and, per GPU count, the vCPU and memory maxima of the N1 VM;
  "A4X: offers machine types that have up to 140 vCPUs and 884 GB of memory".
- ``aom``: Compute Engine, "Accelerator-optimized machine family",
  https://cloud.google.com/compute/docs/accelerator-optimized-machines (read 2026-11-30):
  series A4X, A4, A3, A2, G4, G2 and their shapes.
- ``flex``: Compute Engine, "About Flex-start VMs",
  https://cloud.google.com/compute/docs/instances/about-flex-start-vms (read 2026-11-30):
  "Flex-start VMs support all accelerator-optimized machine types (except A4X and G4)";
  run for up to seven days.
- ``consume``: AI Hypercomputer, "Consumption options",
  https://cloud.google.com/ai-hypercomputer/docs/consumption-models (read 2026-11-30):
  flex-start and Spot on "any GPU machine except A4X"; future reservations for A4X, A4
  and A3 Ultra.
- ``resbound``: Compute Engine, "About reservation-bound instances" (read 2026-11-30):
  A4X, A4, A3 Ultra, A3 Mega, A3 High with 8 GPUs and A3 Edge take reserved capacity.
- ``vertex-dws``: Vertex AI, "Schedule training jobs based on resource availability",
  https://cloud.google.com/vertex-ai/docs/training/schedule-jobs-dws (read 2026-11-30):
  flex-start for jobs that request "L4, A100, H100, H200, or B200 GPUs" with a timeout of
  7 days or less.
- ``vertex-a4x``: Vertex AI training clusters, "Compute resources" (read 2026-11-30):
  A4X (a4x-highgpu-4g) has ARM CPUs; "All training jobs must use a container image that is
  built for the ARM architecture".
- ``skypilot``: skypilot-org/skypilot ``sky/catalog/gcp_catalog.py`` at commit
  005261080a6b8102f3d95ff2147a855250f40272 (read 2026-11-30): GPU count -> machine type
  for A100, A100-80GB, L4, H100, H100-MEGA, H200, B200; N1 maxima per GPU count for T4,
  V100, P4 and P100 (P100 x 4: "except for us-east1-c, europe-west1-d, europe-west1-b").
  A SkyPilot unit test for G4 maps RTXPRO6000 x 1/2/4/8 to g4-standard-48/96/192/384.
- ``skypilot-vms``: skypilot-org/skypilot-catalog ``catalogs/v8/gcp/vms.csv`` at commits
  006059e0f18acb1341e22a27751e9f80df6ba92f and 8427bbff988abdd050a9f51addd314ef31cb4e85
  (generated from the Compute Engine API; read 2026-11-30): vCPUs and GiB of a2-*,
  a3-edgegpu-8g, a3-highgpu-*, a3-ultragpu-8g (224 / 2952), a4-highgpu-8g (224 / 3968),
  g2-standard-*, n1-*. It lists no g4-* or a4x-* rows: the G4 and A4X vCPU / GB figures
  rest on ``aom`` alone.
- ``aiplatform``: ``google.cloud.aiplatform_v1.AcceleratorType`` of google-cloud-aiplatform
  2.7 (installed; checked 2026-11-30 by tests/unit/test_gpu_catalogue.py).

Memory figures are Compute Engine "GB", which are GiB (2**30 bytes; e.g. n1-standard-1 is
3.75 GB = 3840 MiB).
"""

from __future__ import annotations

from dataclasses import dataclass

STANDARD, SPOT, FLEX_START, RESERVATION = "standard", "spot", "flex-start", "reservation"
#: Every consumption option, in the order messages list them.
CONSUMPTION = (STANDARD, SPOT, FLEX_START, RESERVATION)
ALL = frozenset(CONSUMPTION)
NO_FLEX = frozenset({STANDARD, SPOT, RESERVATION})
NOT_ON_DEMAND = frozenset({SPOT, FLEX_START, RESERVATION})

X86_64, ARM64 = "x86_64", "arm64"


@dataclass(frozen=True)
class MachineShape:
    """A machine type with the GPUs it carries (or can carry, for N1).

    ``consumption`` overrides the family's options for this shape (empty: the family's).
    """

    name: str
    vcpus: int
    memory_gib: float
    accelerator: str
    accelerator_count: int
    consumption: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Family:
    """One machine series (or N1 with one attachable GPU model) and how it can be obtained."""

    name: str
    accelerator: str
    vertex_type: str
    shapes: tuple[MachineShape, ...]
    consumption: frozenset[str]
    sources: tuple[str, ...]
    cpu_arch: str = X86_64
    note: str = ""


#: GPUs attached to N1 VMs: GPU count -> (max vCPUs, max memory GB) of the VM (``gpus``,
#: ``skypilot``). P100 x 4 is 96 / 624 except in the zones of :data:`ZONE_LIMITS`.
N1_GPU_LIMITS: dict[str, dict[int, tuple[int, float]]] = {
    "nvidia-tesla-t4": {1: (48, 312), 2: (48, 312), 4: (96, 624)},
    "nvidia-tesla-v100": {1: (12, 78), 2: (24, 156), 4: (48, 312), 8: (96, 624)},
    "nvidia-tesla-p100": {1: (16, 104), 2: (32, 208), 4: (96, 624)},
    "nvidia-tesla-p4": {1: (24, 156), 2: (48, 312), 4: (96, 624)},
}

#: (accelerator, count) -> ((max vCPUs, max GB), zones) where a smaller limit applies.
ZONE_LIMITS: dict[tuple[str, int], tuple[tuple[int, float], tuple[str, ...]]] = {
    ("nvidia-tesla-p100", 4): ((64, 208), ("us-east1-c", "europe-west1-b", "europe-west1-d")),
}

#: N1 predefined machine types: (series, GB per vCPU, vCPU sizes) (Compute Engine,
#: "General-purpose machine family", read 2026-11-29). Memory is a whole number of MiB, as the
#: Compute Engine API reports it (skypilot-vms: n1-highcpu-2 has 1.7998046875 GiB = 1843 MiB,
#: not 1.8). Custom N1 shapes are not modelled.
N1_SERIES = (
    ("n1-standard", 3.75, (1, 2, 4, 8, 16, 32, 64, 96)),
    ("n1-highmem", 6.5, (2, 4, 8, 16, 32, 64, 96)),
    ("n1-highcpu", 0.9, (2, 4, 8, 16, 32, 64, 96)),
)


def _n1_shapes(accelerator: str) -> tuple[MachineShape, ...]:
    shapes = []
    for count, (max_vcpus, max_memory) in N1_GPU_LIMITS[accelerator].items():
        for series, gib_per_vcpu, sizes in N1_SERIES:
            for vcpus in sizes:
                memory = round(vcpus * gib_per_vcpu * 1024) / 1024  # whole MiB, as the API
                if vcpus <= max_vcpus and memory <= max_memory:
                    shapes.append(
                        MachineShape(f"{series}-{vcpus}", vcpus, memory, accelerator, count))
    return tuple(shapes)


def _fixed(accelerator: str, *rows: tuple) -> tuple[MachineShape, ...]:
    """Shapes from rows (name, vCPUs, GB, GPUs[, consumption options of that shape])."""
    return tuple(
        MachineShape(row[0], row[1], row[2], accelerator, row[3],
                     frozenset(row[4]) if len(row) > 4 else frozenset())
        for row in rows
    )


FAMILIES: tuple[Family, ...] = (
    # N1 with attachable GPUs: on demand, Spot and reservations; flex-start is for
    # accelerator-optimized types only (flex) and Vertex's list has none of these (vertex-dws).
    Family("N1", "nvidia-tesla-t4", "NVIDIA_TESLA_T4", _n1_shapes("nvidia-tesla-t4"),
           NO_FLEX, ("gpus", "skypilot", "flex", "vertex-dws", "aiplatform")),
    Family("N1", "nvidia-tesla-v100", "NVIDIA_TESLA_V100", _n1_shapes("nvidia-tesla-v100"),
           NO_FLEX, ("gpus", "skypilot", "flex", "vertex-dws", "aiplatform")),
    Family("N1", "nvidia-tesla-p100", "NVIDIA_TESLA_P100", _n1_shapes("nvidia-tesla-p100"),
           NO_FLEX, ("gpus", "skypilot", "flex", "vertex-dws", "aiplatform"),
           note="P100 x 4 is limited to 64 vCPUs / 208 GB in us-east1-c, europe-west1-b "
                "and europe-west1-d"),
    Family("N1", "nvidia-tesla-p4", "NVIDIA_TESLA_P4", _n1_shapes("nvidia-tesla-p4"),
           NO_FLEX, ("gpus", "skypilot", "flex", "vertex-dws", "aiplatform")),
    # G2: NVIDIA L4 (aom, skypilot-vms; skypilot maps L4 x 1 to g2-standard-4..32 and
    # x2/x4/x8 to 24/48/96).
    Family("G2", "nvidia-l4", "NVIDIA_L4", _fixed(
        "nvidia-l4",
        ("g2-standard-4", 4, 16, 1), ("g2-standard-8", 8, 32, 1),
        ("g2-standard-12", 12, 48, 1), ("g2-standard-16", 16, 64, 1),
        ("g2-standard-32", 32, 128, 1), ("g2-standard-24", 24, 96, 2),
        ("g2-standard-48", 48, 192, 4), ("g2-standard-96", 96, 384, 8),
    ), ALL, ("aom", "skypilot", "flex", "vertex-dws", "aiplatform")),
    # G4: NVIDIA RTX PRO 6000 Blackwell Server Edition; no flex-start (flex: "except A4X and
    # G4"); GPUs per shape from skypilot's G4 test, vCPU / GB from aom (not in skypilot-vms).
    Family("G4", "nvidia-rtx-pro-6000", "NVIDIA_RTX_PRO_6000", _fixed(
        "nvidia-rtx-pro-6000",
        ("g4-standard-48", 48, 180, 1), ("g4-standard-96", 96, 360, 2),
        ("g4-standard-192", 192, 720, 4), ("g4-standard-384", 384, 1440, 8),
    ), NO_FLEX, ("aom", "skypilot", "flex", "consume", "aiplatform")),
    # A2 High: NVIDIA A100 40GB (skypilot-vms: vCPUs and GiB of every shape).
    Family("A2 High", "nvidia-tesla-a100", "NVIDIA_TESLA_A100", _fixed(
        "nvidia-tesla-a100",
        ("a2-highgpu-1g", 12, 85, 1), ("a2-highgpu-2g", 24, 170, 2),
        ("a2-highgpu-4g", 48, 340, 4), ("a2-highgpu-8g", 96, 680, 8),
        ("a2-megagpu-16g", 96, 1360, 16),
    ), ALL, ("aom", "skypilot", "skypilot-vms", "flex", "vertex-dws", "aiplatform")),
    # A2 Ultra: NVIDIA A100 80GB (skypilot-vms).
    Family("A2 Ultra", "nvidia-a100-80gb", "NVIDIA_A100_80GB", _fixed(
        "nvidia-a100-80gb",
        ("a2-ultragpu-1g", 12, 170, 1), ("a2-ultragpu-2g", 24, 340, 2),
        ("a2-ultragpu-4g", 48, 680, 4), ("a2-ultragpu-8g", 96, 1360, 8),
    ), ALL, ("aom", "skypilot", "skypilot-vms", "flex", "vertex-dws", "aiplatform")),
    # A3 High: NVIDIA H100 80GB. Only a3-highgpu-8g is offered on demand and for
    # reservations (resbound: "A3 High with 8 GPUs"); 1g/2g/4g are Spot or flex-start only.
    Family("A3 High", "nvidia-h100-80gb", "NVIDIA_H100_80GB", _fixed(
        "nvidia-h100-80gb",
        ("a3-highgpu-1g", 26, 234, 1, (SPOT, FLEX_START)),
        ("a3-highgpu-2g", 52, 468, 2, (SPOT, FLEX_START)),
        ("a3-highgpu-4g", 104, 936, 4, (SPOT, FLEX_START)),
        ("a3-highgpu-8g", 208, 1872, 8),
    ), ALL, ("aom", "skypilot", "skypilot-vms", "resbound", "flex", "vertex-dws", "aiplatform")),
    # A3 Edge: the same H100 80GB and GKE label as A3 High, one shape (skypilot-vms:
    # a3-edgegpu-8g, 208 vCPUs, 1872 GiB).
    Family("A3 Edge", "nvidia-h100-80gb", "NVIDIA_H100_80GB", _fixed(
        "nvidia-h100-80gb", ("a3-edgegpu-8g", 208, 1872, 8),
    ), ALL, ("aom", "skypilot-vms", "resbound", "flex", "vertex-dws", "aiplatform")),
    # A3 Mega: NVIDIA H100 80GB Mega.
    Family("A3 Mega", "nvidia-h100-mega-80gb", "NVIDIA_H100_MEGA_80GB", _fixed(
        "nvidia-h100-mega-80gb", ("a3-megagpu-8g", 208, 1872, 8),
    ), ALL, ("aom", "skypilot", "resbound", "flex", "vertex-dws", "aiplatform")),
    # A3 Ultra: NVIDIA H200 141GB (skypilot-vms: 224 vCPUs, 2952 GiB): reservation, Spot or
    # flex-start; not on demand.
    Family("A3 Ultra", "nvidia-h200-141gb", "NVIDIA_H200_141GB", _fixed(
        "nvidia-h200-141gb", ("a3-ultragpu-8g", 224, 2952, 8),
    ), NOT_ON_DEMAND, ("aom", "skypilot", "consume", "resbound", "flex", "vertex-dws",
                       "aiplatform")),
    # A4: NVIDIA B200 (skypilot-vms: 224 vCPUs, 3968 GiB): reservation, Spot or flex-start;
    # not on demand.
    Family("A4", "nvidia-b200", "NVIDIA_B200", _fixed(
        "nvidia-b200", ("a4-highgpu-8g", 224, 3968, 8),
    ), NOT_ON_DEMAND, ("aom", "skypilot", "consume", "resbound", "flex", "vertex-dws",
                       "aiplatform")),
    # A4X: NVIDIA GB200 Grace Blackwell with Arm CPUs (140 vCPUs, 884 GB); reservations only
    # (consume: flex-start and Spot on "any GPU machine except A4X").
    Family("A4X", "nvidia-gb200", "NVIDIA_GB200", _fixed(
        "nvidia-gb200", ("a4x-highgpu-4g", 140, 884, 4),
    ), frozenset({RESERVATION}), ("gpus", "aom", "consume", "resbound", "vertex-a4x",
                                  "aiplatform"),
           cpu_arch=ARM64),
)

#: Vertex AI Pipelines: "You can specify at most 96 CPUs" and "At most 624GB is supported";
#: "CustomJob supports specific machine types that limit you to a maximum of 96 CPUs and
#: 624GB of memory" (Vertex AI, "Specify the machine configuration for a pipeline step",
#: https://cloud.google.com/vertex-ai/docs/pipelines/machine-types, read 2026-11-30). The
#: page states no other limit for steps with GPUs, so it applies to every pipeline step.
VERTEX_STEP_MAX_VCPUS = 96
VERTEX_STEP_MAX_MEMORY_GIB = 624

#: Flex-start capacity runs for at most seven days (flex, vertex-dws).
FLEX_START_MAX_RUN_S = 7 * 86400

#: CPU architectures the suite's images are built for: `gkeflow images build` builds
#: images/{cpu,gpu}.Dockerfile from x86-64 lock files with no --platform, so each image is
#: single-architecture linux/amd64. Add ARM64 here once an Arm image is built.
IMAGE_ARCHITECTURES = frozenset({X86_64})
