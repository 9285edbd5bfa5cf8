"""Accelerator steps sized to their machine: CPU and memory a GPU or TPU step asks for when
it does not set them, and a note when a set value leaves most of the machine idle.

A step with ``auto_size`` (train-model by default; setting ``cpu`` or ``memory`` turns it
off) on an accelerator-optimised machine (A2, A3, A4, G2, G4: the GPUs fix the machine) asks
for what that machine gives a pod: on GKE the node's allocatable after GKE's reservations
(:func:`~gkeflow.pipelines.compute.accelerators.gke_allocatable`) less
:data:`DAEMONSET_ALLOWANCE` for the system DaemonSets on every node (logging, metrics, the
GPU device plugin, kube-proxy); on Vertex AI the machine's shape up to the 96 vCPUs and
624 GiB a pipeline step may name (the CustomJob gets the whole machine either way: the
values only choose it). N1 GPUs attach to a machine of any size, so an N1 step keeps its
own CPU and memory. A TPU step asks for one host of its slice (``ct6e-standard-4t`` for a
v6e 2x2): on GKE its allocatable less the same allowance, on Vertex AI the host VM. Values
are rounded down (whole vCPUs, whole GiB) so the pod still fits.
"""

from __future__ import annotations

import math
from dataclasses import replace

from gkeflow.pipelines.compute import accelerators as acc
from gkeflow.pipelines.compute.compute_profile import ComputeProfile
from gkeflow.pipelines.compute.units import cpu_cores, memory_bytes
from gkeflow.pipelines.settings.platforms import platform

#: (vCPUs, GiB) left for GKE's system DaemonSets on a GPU node (their requests together
#: stay under this on the node pools gkeflow targets; set cpu and memory when yours run more).
DAEMONSET_ALLOWANCE = (1.0, 2.0)
#: Below this share of the machine's CPU or memory, plan notes the rest sits idle.
IDLE_SHARE = 0.5


def machine_room(shape: acc.MachineShape, target: str) -> tuple[int, int]:
    """(whole vCPUs, whole GiB) a step on ``shape`` can ask for on ``target``."""
    if platform(target).kubernetes:
        vcpus, gib = acc.gke_allocatable(shape)
        vcpus, gib = vcpus - DAEMONSET_ALLOWANCE[0], gib - DAEMONSET_ALLOWANCE[1]
    else:
        vcpus = min(shape.vcpus, acc.VERTEX_STEP_MAX_VCPUS)
        gib = min(shape.memory_gib, acc.VERTEX_STEP_MAX_MEMORY_GIB)
    return max(1, math.floor(vcpus)), max(1, math.floor(gib))


def fixed_machine(profile: ComputeProfile) -> acc.MachineShape | None:
    """The one machine type the step's GPUs come on (None for N1 GPUs, TPUs and CPU steps)."""
    if not profile.uses_gpu or profile.uses_tpu:
        return None
    shapes = acc.shapes_for(profile.accelerator, profile.accelerator_count)
    if not shapes or any(s.name.startswith("n1-") for s in shapes):
        return None
    return shapes[0]


def tpu_room(profile: ComputeProfile, target: str) -> tuple[str, int, int] | None:
    """(machine type, whole vCPUs, whole GiB) a pod on one host of the step's TPU slice can
    ask for: on GKE the node's allocatable less :data:`DAEMONSET_ALLOWANCE`, on Vertex AI
    the host VM; None for other steps, or where the catalogue lacks the host's size."""
    if not profile.uses_tpu or not platform(target).cloud:
        return None
    from gkeflow.pipelines.compute import tpu_profile

    try:
        found = tpu_profile.host_room(profile, target)
    except (ValueError, LookupError, StopIteration):  # validation names the bad field
        return None
    if found is None:
        return None
    machine, vcpus, gib = found
    if platform(target).kubernetes:
        vcpus, gib = vcpus - DAEMONSET_ALLOWANCE[0], gib - DAEMONSET_ALLOWANCE[1]
    return machine, max(1, math.floor(vcpus)), max(1, math.floor(gib))


def room(profile: ComputeProfile, target: str) -> tuple[str, int, int] | None:
    """(machine type, vCPUs, GiB) the step's accelerators fix and a pod there can ask for:
    a GPU step's accelerator-optimised machine or a TPU slice's host; None otherwise."""
    shape = fixed_machine(profile) if platform(target).cloud else None
    if shape is not None:
        return (shape.name, *machine_room(shape, target))
    return tpu_room(profile, target)


def sized(profile: ComputeProfile, target: str) -> ComputeProfile:
    """``profile`` with CPU and memory of its machine when ``auto_size`` is on and the GPUs
    fix the machine (or it is a TPU slice's host); unchanged otherwise."""
    found = room(profile, target) if profile.auto_size else None
    if found is None:
        return profile
    _machine, vcpus, gib = found
    return replace(profile, cpu=str(vcpus), memory=f"{gib}Gi")


def idle_note(step: str, profile: ComputeProfile, target: str) -> str:
    """A plan note when a set CPU or memory leaves most of the step's machine idle."""
    found = room(profile, target)
    if found is None or profile.auto_size:
        return ""
    name, vcpus, gib = found
    cpu, memory = cpu_cores(profile.cpu), memory_bytes(profile.memory) / 2**30
    idle = [f"{asked:g} of the {room} {what}" for what, asked, room in
            (("vCPUs", cpu, vcpus), ("GiB", round(memory, 1), gib)) if asked < IDLE_SHARE * room]
    if not idle:
        return ""
    return (f"{step} asks for {' and '.join(idle)} its {name} can give: the rest "
            f"is paid for and idle, and the accelerators may wait for input; drop cpu and "
            f"memory to size it to the machine")
