"""A compute profile's TPU slice: validated against :mod:`.tpu_catalogue` and described.

A step asks for a TPU slice with ``accelerator: tpu-v6e`` (any generation or alias the
catalogue knows) and ``topology: 4x4``; chips, hosts, chips per host and the machine type
follow from both. ``replicas`` > 1 is that many slices (Multislice) of ``train-model`` on GKE:
one Job per slice in a JobSet, trained on Keras' JAX backend, the default on TPUs
(TensorFlow's ``TPUStrategy`` drives one slice: ``components/train/tpu.py`` refuses more).
Vertex AI's CustomJobs take one slice, so there it is refused before anything is compiled.
Functions take the profile duck-typed (``p``) so
that :mod:`.profiles` can call them without an import cycle.

On Vertex AI, flex-start is refused for TPUs: "Schedule training jobs based on resource
availability" (https://cloud.google.com/vertex-ai/docs/training/schedule-jobs-dws, read
2026-12-02) requires the job to request L4, A100, H100, H200 or B200 GPUs. Spot stays: "Use
Spot VMs with training" excludes TPU Pods only, and Vertex AI runs single-host slices here.
"""

from __future__ import annotations

from gkeflow.pipelines.compute import tpu_catalogue as tc
from gkeflow.pipelines.compute.units import cpu_cores, memory_bytes
from gkeflow.pipelines.settings.platforms import platform

TPU_RESOURCE = "google.com/tpu"
GKE_TPU_ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
GKE_TPU_TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
#: JobSet annotation that gives each Job of a multi-host slice a node pool of its own.
EXCLUSIVE_TOPOLOGY_ANNOTATION = "alpha.jobset.sigs.k8s.io/exclusive-topology"
GKE_NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"
#: The port a TPU host serves its chips on (``components/train/tpu.py``).
TPU_PORT = 8470
#: The step that trains across several slices (Multislice: a JobSet on GKE, on JAX).
MULTISLICE_STEP = "train-model"
_GIB = 2**30
_OPTION_TEXT = {tc.STANDARD: "on demand", tc.SPOT: "as Spot", tc.FLEX_START: "with flex-start",
                tc.RESERVATION: "from a reservation"}


def tpu_name(accelerator: str) -> str:
    """The catalogue name of a TPU ``accelerator`` (``v6e`` -> ``tpu-v6e``); "" if not a TPU."""
    if not accelerator:
        return ""
    try:
        return tc.tpu_generation(accelerator).name
    except ValueError:
        return ""


def generations() -> list[str]:
    return [g.name for g in tc.GENERATIONS]


def shape(p, target: str = tc.GKE) -> tc.SliceShape:
    """The slice of a valid TPU profile on ``target`` (``local`` reads as GKE)."""
    return tc.slice_shape(p.accelerator, p.topology, platform(target).tpu_offers)


def multi_host(p) -> bool:
    """Whether ``p`` asks for a slice of several hosts (on GKE: a JobSet)."""
    return bool(getattr(p, "uses_tpu", False)) and shape(p).multi_host


def single_host_topologies(p) -> list[str]:
    """The single-host topologies of ``p``'s generation on GKE."""
    gen = tc.tpu_generation(p.accelerator)
    return [t for t in gen.topologies if not tc.slice_shape(gen.name, t).multi_host]


def _machine(generation: str, machine_type: str) -> tc.TpuMachine:
    gen = tc.tpu_generation(generation)
    return next(m for m in gen.machines if m.name == machine_type)


def _room(machine: tc.TpuMachine, target: str) -> tuple[float | None, float | None]:
    """(vCPUs, GiB) a pod may ask for on one host: on GKE what the node leaves after GKE's
    reservations, elsewhere the VM; None where the catalogue does not record it."""
    if not platform(target).kubernetes:
        return machine.vcpus, machine.memory_gib
    from gkeflow.pipelines.compute.accelerators import gke_allocatable_exact

    millicores, memory = gke_allocatable_exact(machine.vcpus or 0,
                                               round((machine.memory_gib or 0) * _GIB))
    return (millicores / 1000 if machine.vcpus is not None else None,
            memory / _GIB if machine.memory_gib is not None else None)


def host_room(p, target: str) -> tuple[str, float, float] | None:
    """(machine type, vCPUs, GiB) of one host of ``p``'s slice that a pod may ask for on
    ``target`` (GKE: the node's allocatable); None where the catalogue lacks either."""
    machine_type = shape(p, target).machine_type
    vcpus, gib = _room(_machine(p.accelerator, machine_type), target)
    if vcpus is None or gib is None:
        return None
    return machine_type, vcpus, gib


def tpu_problems(step: str, p, target: str, tpu_steps: tuple[str, ...]) -> list[str]:
    """Everything wrong with the TPU fields of ``p`` for ``step``; empty when valid."""
    gen = tc.tpu_generation(p.accelerator)
    problems = []
    if step not in tpu_steps:
        problems.append(f"{step}: {gen.name}: only {', '.join(tpu_steps) or 'no step'} trains "
                        "on a TPU; drop accelerator and topology")
    mixed = [name for name, value in (("accelerator_count", p.accelerator_count),
                                      ("shm_size", p.shm_size)) if value]
    if mixed:
        problems.append(f"{step}: {' and '.join(mixed)} (GPU settings) cannot be mixed with "
                        f"TPU {gen.name}; the topology sets the chips: drop {' and '.join(mixed)}")
    if p.replicas > 1 and platform(target).managed:
        problems.append(
            f"{step}: replicas {p.replicas} on {gen.name} asks for {p.replicas} slices "
            "(Multislice), which Vertex AI CustomJobs do not run; use replicas: 1 and a larger "
            "topology, or target gke")
    elif p.replicas > 1 and step != MULTISLICE_STEP:
        problems.append(
            f"{step}: replicas {p.replicas} on {gen.name} asks for {p.replicas} slices "
            f"(Multislice), which only {MULTISLICE_STEP} trains across; use replicas: 1")
    if platform(target).local:
        return problems
    where = platform(target).tpu_offers
    if not p.topology:
        valid = tc.valid_topologies(gen.name, where)
        choices = f"choose one of {', '.join(valid[:12])}" if valid else (
            f"{gen.name} is not offered on {'Vertex AI' if where == tc.VERTEX else 'GKE'}")
        return problems + [f"{step}: accelerator {gen.name} needs a topology; {choices}"]
    try:
        chips, hosts, per_host, machine_type = tc.slice_shape(gen.name, p.topology, where)
    except ValueError as exc:
        return problems + [f"{step}: {exc}"]
    if p.replicas > 1 and hosts == 1 and platform(target).kubernetes:
        # "Multislice only supports multi-host TPU slice node pools" (Deploy TPU Multislices
        # in GKE, read 2026-12-06)
        larger = [t for t in tc.valid_topologies(gen.name, where)
                  if tc.slice_shape(gen.name, t, where).multi_host][:3]
        problems.append(
            f"{step}: replicas {p.replicas} asks for {p.replicas} slices (Multislice), which "
            f"GKE runs on multi-host slices only, and {gen.name} {p.topology} is one host; "
            f"choose a topology of several hosts ({', '.join(larger)}) or replicas: 1")
    offered = tc.consumption_options(gen.name)
    if where == tc.VERTEX:  # Vertex AI's flex-start (DWS) takes GPU jobs only
        offered = [o for o in offered if o != tc.FLEX_START]
    if p.scheduling not in offered:
        on = " on Vertex AI" if where == tc.VERTEX else ""
        problems.append(f"{step}: {gen.name} is not offered {_OPTION_TEXT[p.scheduling]}{on}; "
                        f"use scheduling={', '.join(offered)}")
    machine = _machine(gen.name, machine_type)
    vcpus, gib = _room(machine, target)
    over = []
    if vcpus is not None and cpu_cores(p.cpu) > vcpus:
        over.append(f"cpu {p.cpu}")
    if gib is not None and memory_bytes(p.memory) > gib * _GIB:
        over.append(f"memory {p.memory}")
    if over:
        limits = " and ".join(([f"{vcpus:.4g} vCPUs"] if vcpus is not None else [])
                              + ([f"{gib:.1f} GiB"] if gib is not None else []))
        verb = "does" if len(over) == 1 else "do"
        where = "GKE leaves pods" if platform(target).kubernetes else "the host has"
        problems.append(
            f"{step}: {' and '.join(over)} {verb} not fit one {machine_type} host of "
            f"{gen.name} {p.topology} ({where} at most {limits}); lower them")
    return problems


def unchecked_host_limits(step: str, p, target: str) -> str:
    """A note when the catalogue does not record the vCPUs or memory of ``p``'s host: that
    limit is unknown, so cpu or memory is not checked against it (nothing is refused for
    it); "" when both are recorded or ``p`` is no valid TPU slice."""
    try:
        machine_type = shape(p, target).machine_type
    except ValueError:
        return ""
    machine = _machine(p.accelerator, machine_type)
    unknown = [what for what, value in (("vCPUs", machine.vcpus), ("memory",
                                        machine.memory_gib)) if value is None]
    if not unknown:
        return ""
    fields = " and ".join({"vCPUs": "cpu", "memory": "memory"}[u] for u in unknown)
    return (f"{step}: the {' and '.join(unknown)} of one {machine_type} host are unknown "
            f"(not found in the pages the TPU catalogue cites); {fields} not checked against "
            "the host")


def training_image(p) -> str:
    """The declared image a training step with ``p`` runs in: the TPU image
    (JAX for Cloud TPUs) when ``p`` asks for a TPU slice, else the GPU image. The engines
    (GKE pod and JobSet, Vertex AI CustomJob) and ``plan`` read it here; the compiler maps
    and pins it like every declared image."""
    from gkeflow.components.images import GPU_IMAGE, TPU_IMAGE

    return TPU_IMAGE if getattr(p, "uses_tpu", False) else GPU_IMAGE


def describe(p, target: str) -> str:
    """One line for ``plan``: generation, topology, chips, hosts x chips, slices, machine."""
    chips, hosts, per_host, machine_type = shape(p, target)
    capacity = {tc.STANDARD: "on-demand"}.get(p.scheduling, p.scheduling)
    slices = p.replicas
    return (f"{p.accelerator} {p.topology}: {chips} chips on {hosts} x {per_host} "
            f"(hosts x chips per host), {slices} slice{'s' if slices != 1 else ''}, "
            f"{chips * slices} chips in all, machine {machine_type}, {capacity}")


def gke_selectors(p) -> dict[str, str]:
    """Node selectors of a TPU pod on GKE: the generation's label and the topology."""
    return {GKE_TPU_ACCELERATOR_LABEL: tc.tpu_generation(p.accelerator).gke_label,
            GKE_TPU_TOPOLOGY_LABEL: p.topology}


def vertex_machine_spec(p) -> dict[str, str]:
    """``machine_spec`` of a Vertex AI CustomJob on the slice (machine type + topology)."""
    return tc.vertex_machine_spec(p.accelerator, p.topology)


def backend_problem(profiles, parameters) -> str:
    """One line when the training parameters ask a TPU step for what its Keras backend
    cannot do: TensorFlow's TPUStrategy trains within one slice, so ``backend: tensorflow``
    on several slices (Multislice, ``replicas`` > 1) would fail in train-model, after
    preparation ran; gradient-boosted trees and the linear model train on no TPU. "" when
    fine."""
    profile = (profiles or {}).get(MULTISLICE_STEP)
    if profile is None or not profile.uses_tpu:
        return ""
    if parameters.get("backend") == "tensorflow" and profile.replicas > 1:
        return (f"{MULTISLICE_STEP}: backend tensorflow cannot train across the "
                f"{profile.replicas} TPU slices it asks for (TensorFlow's TPUStrategy trains "
                "within one slice); set backend: jax (or auto), or replicas: 1")
    if parameters.get("model_type") in ("gbdt", "linear"):
        return (f"{MULTISLICE_STEP}: model_type {parameters['model_type']} trains on CPUs or "
                "GPUs, not on a TPU; use model_type mlp or auto (the Keras model there), or "
                "give train-model a GPU or CPU profile")
    return ""

