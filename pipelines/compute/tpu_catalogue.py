"""The Cloud TPU generations GKE and Vertex AI offer, their slices and how to get them: data
and pure look-ups (standard library only).

A slice is named by its generation and topology (``2x4`` in 2D, ``2x2x2`` in 3D); chips
follow from the topology, hosts from chips / chips per VM, and the machine type from both.
Consumption options use the compute profile's ``scheduling`` names (``standard``, ``spot``,
``flex-start``, ``reservation``).

Sources, cited per entry by key (all read 2026-12-02):

- ``gke-plan``: GKE, "Plan TPUs in GKE",
  https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus: single-host versus
  multi-host slices, node labels ``cloud.google.com/gke-tpu-accelerator`` and
  ``cloud.google.com/gke-tpu-topology``.
- ``gke-about``: GKE, "About TPUs in GKE",
  https://cloud.google.com/kubernetes-engine/docs/concepts/tpus: "GKE also supports Spot VMs
  and using reserved Cloud TPU".
- ``gke-ironwood``: GKE, "About Ironwood (TPU7x) in GKE",
  https://docs.cloud.google.com/kubernetes-engine/docs/concepts/tpu-ironwood: GKE 1.34.0+;
  multi-host node pools take a workload policy instead of ``--tpu-topology``; four chips per VM.
- ``tpu-v5e``: Cloud TPU, "TPU v5e", https://docs.cloud.google.com/tpu/docs/v5e: 2D slices
  1x1 .. 16x16 with their host counts; ct5lp-hightpu-1t / 4t / 8t (24 / 112 / 224 vCPUs,
  48 / 192 / 384 GB).
- ``tpu-v6e``: Cloud TPU, "TPU v6e", https://docs.cloud.google.com/tpu/docs/v6e: 8 chips
  per host, 256-chip Pod, 2D torus, 1536 GiB DRAM per host.
- ``tpu-v5p``: Cloud TPU, "Supported TPU configurations" (v5p),
  https://cloud.google.com/tpu/docs/supported-tpu-configurations: 2x2x1 (1 machine),
  2x2x2 (2), 2x4x4 (8), 4x4x4 (16, one cube) .. 16x16x24 (1536 machines, 96 cubes), the
  largest single slice.
- ``tpu-types``: Cloud TPU, "TPU types and topologies",
  https://cloud.google.com/tpu/docs/types-topologies: 3D topologies AxBxC with A<=B<=C, each
  <= 4 or a multiple of 4.
- ``tpu-regions``: Cloud TPU, "TPU regions and zones", https://cloud.google.com/tpu/docs/regions
  (US and Europe tables; the Asia-Pacific rows were not read).
- ``tpu-consume``: Cloud TPU, "Cloud TPU consumption options",
  https://cloud.google.com/tpu/docs/consumption-options: reservations for all TPU versions,
  on demand, Spot.
- ``tpu-flex``: Cloud TPU, "Request Cloud TPUs using Flex-start",
  https://cloud.google.com/tpu/docs/request-using-flex-start: "You can only request
  Flex-start TPU v6e and v5e in the specified zones": v6e asia-northeast1-b, us-east5-a;
  v5e (training) us-west4-a.
- ``tpu7x``: Cloud TPU, "TPU7x (Ironwood)", https://docs.cloud.google.com/tpu/docs/tpu7x:
  use through GKE or Compute Engine; All Capacity mode reservations.
- ``vertex-tpu``: Vertex AI, "Training with TPU accelerators",
  https://cloud.google.com/vertex-ai/docs/training/training-with-tpu-vm: "you can specify
  TPU v2, TPU v3, or TPU v5e VMs"; TPU v6e supported; ``MachineSpec.tpu_topology``
  ("Corresponds to the TPU topologies available from GKE").
- ``gce-machine-types``: Compute Engine's machine types as ``gcloud compute machine-types
  list`` prints them (``CPUS`` = ``guestCpus``; ``MEMORY_GB`` = ``memoryMb`` converted to GiB:
  gcloud's format is ``memoryMb.size(units_in=MiB, units_out=GiB, precision=2)``), recorded in
  Cyclenerd/google-cloud-pricing-cost-calculator ``tools/machinetypes.csv`` at commit
  dac31281f2a4575f0a8bff20ac04fc71a5ff2190 (the file last changed 2026-07-01; read
  2026-12-03): ct5lp-hightpu-1t / 4t / 8t 24 / 112 / 224 vCPUs, 48 / 192 / 384 GiB;
  ct6e-standard-1t / 4t / 8t 44 / 180 / 360 vCPUs, 176 / 720 / 1440 GiB; ct5p-hightpu-4t 208
  vCPUs, 448 GiB; tpu7x-standard-1t / 4t 56 / 224 vCPUs, 240 / 960 GiB. ct4p-hightpu-4t
  (v4) is not in that version.
- ``gce-machine-types-2025``: the same file at commit
  51d634bd53d04251520b25199c785b4ba8db9e90 (2025-10-30), the last version that lists
  ct4p-hightpu-4t (us-central2): 240 vCPUs, 407 GiB (listed from 2023-11-10; the next
  listing, 2025-10-31, dropped it).
- ``xpk``: AI-Hypercomputer/xpk ``src/xpk/core/system_characteristics.py`` at commit
  367c838253bea41e7d7716145ad6513f44c1a21e: GKE accelerator labels and machine types
  (``tpu-v5-lite-podslice`` ct5lp-hightpu-4t, ``tpu-v6e-slice`` ct6e-standard-1t / 4t,
  ``tpu-v5p-slice`` ct5p-hightpu-4t, ``tpu-v4-podslice`` ct4p-hightpu-4t, ``tpu7x``
  tpu7x-standard-1t / 4t), multi-host v5e / v6e topologies 2x4 .. 16x16 on 4-chip VMs, 3D
  topologies up to 64 cubes (v4) and 144 cubes (TPU7x).

Host vCPUs and memory (``TpuMachine.vcpus`` / ``memory_gib``, in GiB) are the VM's, from the
Compute Engine API (``gce-machine-types``); each machine names its source (``TpuMachine.source``).
The v5e page says "GB" for 48 / 192 / 384; the API's ``memoryMb`` shows they are GiB. The v6e
page's "1536 GiB DRAM per host" is the physical host's; the ct6e-standard-8t VM has 1440 GiB.
The v4 host (ct4p-hightpu-4t) comes from an older listing (``gce-machine-types-2025``): the
current one no longer has it. A host whose vCPUs or memory were not recorded would be noted
in ``plan`` as unchecked (:func:`gkeflow.pipelines.compute.tpu_profile.unchecked_host_limits`).

Vertex AI: only single-host slices of v5e and v6e are recorded (the page read documents those
VMs; multi-host TPU CustomJobs were not confirmed).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

STANDARD, SPOT, FLEX_START, RESERVATION = "standard", "spot", "flex-start", "reservation"
CONSUMPTION = (STANDARD, SPOT, FLEX_START, RESERVATION)
GKE, VERTEX = "gke", "vertex"
TARGETS = (GKE, VERTEX)
DATE_READ = "2026-12-02"
#: Source key of the TPU hosts' vCPUs and memory (see the module docstring).
_GCE = "gce-machine-types"


@dataclass(frozen=True)
class TpuMachine:
    """A TPU VM shape: its machine type and the chips it carries."""

    name: str
    chips: int
    vcpus: int | None = None
    memory_gib: float | None = None
    #: source key of ``vcpus`` / ``memory_gib`` ("" while they are unknown).
    source: str = ""


@dataclass(frozen=True)
class Generation:
    """One TPU generation as GKE and Vertex AI offer it."""

    name: str
    gke_label: str
    dims: int
    #: topology -> machine type of its VMs, in the order messages list them.
    topologies: dict[str, str]
    machines: tuple[TpuMachine, ...]
    #: consumption option -> zones where documented (empty: "where the generation is").
    consumption: dict[str, tuple[str, ...]]
    zones: tuple[str, ...]
    sources: tuple[str, ...]
    vertex_topologies: tuple[str, ...] = ()
    note: str = ""
    date_read: str = DATE_READ


def _cube_topologies(max_cubes: int, nondecreasing: bool = True) -> list[str]:
    """3D topologies: 2x2x1, 2x2x2, 2x2x4, 2x4x4, then AxBxC of multiples of 4 within
    ``max_cubes`` 4x4x4 cubes (``tpu-types``, ``xpk``), smallest first."""
    shapes = [(2, 2, 1), (2, 2, 2), (2, 2, 4), (2, 4, 4)]
    sizes = range(4, 257, 4)
    for a in sizes:
        for b in sizes:
            for c in sizes:
                if nondecreasing and not a <= b <= c:
                    continue
                if (a // 4) * (b // 4) * (c // 4) <= max_cubes:
                    shapes.append((a, b, c))
    shapes[4:] = sorted(shapes[4:], key=lambda s: (prod(s), s))
    return ["x".join(map(str, s)) for s in shapes]


def _single_and_multi(single: dict[str, str], multi_machine: str,
                      multi: tuple[str, ...]) -> dict[str, str]:
    topologies = dict(single)
    for topology in multi:
        topologies.setdefault(topology, multi_machine)
    return topologies


_2D_MULTI = ("4x4", "4x8", "8x8", "8x16", "16x16")

GENERATIONS: tuple[Generation, ...] = (
    Generation(
        "tpu-v5e", "tpu-v5-lite-podslice", 2,
        _single_and_multi({"1x1": "ct5lp-hightpu-1t", "2x2": "ct5lp-hightpu-4t",
                           "2x4": "ct5lp-hightpu-8t"}, "ct5lp-hightpu-4t", _2D_MULTI),
        (TpuMachine("ct5lp-hightpu-1t", 1, 24, 48, _GCE),
         TpuMachine("ct5lp-hightpu-4t", 4, 112, 192, _GCE),
         TpuMachine("ct5lp-hightpu-8t", 8, 224, 384, _GCE)),
        {STANDARD: (), SPOT: (), FLEX_START: ("us-west4-a",), RESERVATION: ()},
        ("us-central1-a", "us-south1-a", "us-west1-c", "us-west4-a"),
        ("gke-plan", "gke-about", "tpu-v5e", "tpu-regions", "tpu-consume", "tpu-flex",
         "vertex-tpu", "xpk", _GCE),
        vertex_topologies=("1x1", "2x2", "2x4"),
        note="2x4 also runs as two ct5lp-hightpu-4t hosts (xpk); the catalogue takes the "
             "single 8-chip VM"),
    Generation(
        "tpu-v6e", "tpu-v6e-slice", 2,
        _single_and_multi({"1x1": "ct6e-standard-1t", "2x2": "ct6e-standard-4t",
                           "2x4": "ct6e-standard-8t"}, "ct6e-standard-4t", _2D_MULTI),
        (TpuMachine("ct6e-standard-1t", 1, 44, 176, _GCE),
         TpuMachine("ct6e-standard-4t", 4, 180, 720, _GCE),
         TpuMachine("ct6e-standard-8t", 8, 360, 1440, _GCE)),
        {STANDARD: (), SPOT: (), FLEX_START: ("asia-northeast1-b", "us-east5-a"),
         RESERVATION: ()},
        ("us-central1-b", "us-east1-d", "us-east5-a", "us-east5-b", "europe-west4-a"),
        ("gke-plan", "gke-about", "tpu-v6e", "tpu-regions", "tpu-consume", "tpu-flex",
         "vertex-tpu", "xpk", _GCE),
        vertex_topologies=("1x1", "2x2", "2x4"),
        note="2x4 also runs as two ct6e-standard-4t hosts (xpk); the catalogue takes the "
             "single 8-chip VM"),
    Generation(
        "tpu-v5p", "tpu-v5p-slice", 3, dict.fromkeys(_cube_topologies(96), "ct5p-hightpu-4t"),
        (TpuMachine("ct5p-hightpu-4t", 4, 208, 448, _GCE),),
        {STANDARD: (), SPOT: (), RESERVATION: ()},
        ("us-central1-a", "us-east5-a"),
        ("gke-plan", "gke-about", "tpu-v5p", "tpu-types", "tpu-regions", "tpu-consume", "xpk",
         _GCE),
        note="single slices up to 16x16x24 (96 cubes); no flex-start (tpu-flex lists v5e and "
             "v6e only)"),
    Generation(
        "tpu-v4", "tpu-v4-podslice", 3,
        dict.fromkeys(_cube_topologies(64), "ct4p-hightpu-4t"),
        (TpuMachine("ct4p-hightpu-4t", 4, 240, 407, "gce-machine-types-2025"),),
        {STANDARD: (), SPOT: (), RESERVATION: ()},
        ("us-central2-b",),
        ("gke-plan", "tpu-types", "tpu-regions", "tpu-consume", "xpk",
         "gce-machine-types-2025"),
        note="us-central2-b only; the host's vCPUs and memory are from the 2025-10-30 "
             "machine-type listing (later listings no longer have ct4p-hightpu-4t)"),
    Generation(
        "tpu7x", "tpu7x", 3,
        {"1x1x1": "tpu7x-standard-1t",
         **dict.fromkeys(_cube_topologies(144), "tpu7x-standard-4t")},
        (TpuMachine("tpu7x-standard-1t", 1, 56, 240, _GCE),
         TpuMachine("tpu7x-standard-4t", 4, 224, 960, _GCE)),
        {RESERVATION: ()},
        (),
        ("gke-ironwood", "tpu7x", "tpu-consume", "xpk", _GCE),
        note="Ironwood; zones and options other than reservations were not confirmed in the "
             "pages read; multi-host node pools need a workload policy (GKE 1.34+)"),
)

_BY_NAME = {g.name: g for g in GENERATIONS}
_ALIASES = {"v5e": "tpu-v5e", "v5litepod": "tpu-v5e", "v5p": "tpu-v5p", "v6e": "tpu-v6e",
            "trillium": "tpu-v6e", "v4": "tpu-v4", "ironwood": "tpu7x", "tpu-v7x": "tpu7x",
            **{g.gke_label: g.name for g in GENERATIONS}}


@dataclass(frozen=True)
class SliceShape:
    """What a topology of a generation amounts to."""

    chips: int
    hosts: int
    chips_per_host: int
    machine_type: str

    @property
    def multi_host(self) -> bool:
        return self.hosts > 1

    def __iter__(self):  # (chips, hosts, chips_per_host, machine_type)
        return iter((self.chips, self.hosts, self.chips_per_host, self.machine_type))


def tpu_generation(name: str) -> Generation:
    """The generation named ``name`` (``tpu-v6e``, ``v6e``, ``trillium`` or its GKE label)."""
    key = name.strip().lower()
    known = _BY_NAME.get(key) or _BY_NAME.get(_ALIASES.get(key, ""))
    if known is None:
        raise ValueError(f"unknown TPU generation {name!r}; choose one of "
                         f"{', '.join(_BY_NAME)}")
    return known


def _check_target(target: str) -> None:
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; choose one of {', '.join(TARGETS)}")


def valid_topologies(generation: str, target: str = GKE) -> list[str]:
    """The topologies ``generation`` offers on ``target``, smallest first."""
    _check_target(target)
    gen = tpu_generation(generation)
    if target == VERTEX:
        return list(gen.vertex_topologies)
    return list(gen.topologies)


def _listed(topologies: list[str], limit: int = 12) -> str:
    shown = ", ".join(topologies[:limit])
    return shown + (f", ... ({len(topologies)} in all)" if len(topologies) > limit else "")


def slice_shape(generation: str, topology: str, target: str = GKE) -> SliceShape:
    """(chips, hosts, chips per host, machine type) of ``topology`` on ``generation``."""
    gen = tpu_generation(generation)
    valid = valid_topologies(gen.name, target)
    key = topology.strip().lower()
    if key not in valid:
        where = "on Vertex AI" if target == VERTEX else "on GKE"
        if not valid:
            raise ValueError(f"{gen.name} is not offered {where}; use the other target")
        raise ValueError(f"topology {topology!r} is not valid for {gen.name} {where}; "
                         f"choose one of {_listed(valid)}")
    machine_type = gen.topologies[key]
    per_host = next(m.chips for m in gen.machines if m.name == machine_type)
    chips = prod(int(d) for d in key.split("x"))
    return SliceShape(chips, chips // per_host, per_host, machine_type)


def consumption_options(generation: str) -> list[str]:
    """The consumption options documented for ``generation``, in catalogue order."""
    gen = tpu_generation(generation)
    return [o for o in CONSUMPTION if o in gen.consumption]


def vertex_machine_spec(generation: str, topology: str) -> dict[str, str]:
    """The Vertex AI CustomJob ``machine_spec`` of a single-host slice."""
    shape = slice_shape(generation, topology, VERTEX)
    return {"machine_type": shape.machine_type, "tpu_topology": topology.strip().lower()}
