"""Accelerator steps sized to their machine: CPU and memory a GPU step asks for when it
does not set them, and a note when a set value leaves most of the machine idle.

A step with ``auto_size`` (train-model by default; setting ``cpu`` or ``memory`` turns it
off) on an accelerator-optimised machine (A2, A3, A4, G2, G4: the GPUs fix the machine) asks
for what that machine gives a pod: on GKE the node's allocatable after GKE's reservations
(:func:`~gkeflow.pipelines.compute.accelerators.gke_allocatable`) less
:data:`DAEMONSET_ALLOWANCE` for the system DaemonSets on every node (logging, metrics, the
GPU device plugin, kube-proxy); on Vertex AI the machine's shape up to the 96 vCPUs and
624 GiB a pipeline step may name (the CustomJob gets the whole machine either way: the
values only choose it). N1 GPUs attach to a machine of any size, so an N1 step keeps its
own CPU and memory. Values are rounded down (whole vCPUs, whole GiB) so the pod still fits.
"""

from __future__ import annotations

import math
from dataclasses import replace

from gkeflow.pipelines.compute import accelerators as acc
from gkeflow.pipelines.compute.compute_profile import ComputeProfile
from gkeflow.pipelines.compute.units import cpu_cores, memory_bytes

#: (vCPUs, GiB) left for GKE's system DaemonSets on a GPU node (their requests together
#: stay under this on the node pools gkeflow targets; set cpu and memory when yours run more).
DAEMONSET_ALLOWANCE = (1.0, 2.0)
#: Below this share of the machine's CPU or memory, plan notes the rest sits idle.
IDLE_SHARE = 0.5


def machine_room(shape: acc.MachineShape, target: str) -> tuple[int, int]:
    """(whole vCPUs, whole GiB) a step on ``shape`` can ask for on ``target``."""
    if target == "gke":
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


def sized(profile: ComputeProfile, target: str) -> ComputeProfile:
    """``profile`` with CPU and memory of its machine when ``auto_size`` is on and the GPUs
    fix the machine; unchanged otherwise."""
    shape = fixed_machine(profile) if profile.auto_size and target in ("gke", "vertex") \
        else None
    if shape is None:
        return profile
    vcpus, gib = machine_room(shape, target)
    return replace(profile, cpu=str(vcpus), memory=f"{gib}Gi")


def idle_note(step: str, profile: ComputeProfile, target: str) -> str:
    """A plan note when a set CPU or memory leaves most of the step's machine idle."""
    shape = fixed_machine(profile)
    if shape is None or profile.auto_size or target not in ("gke", "vertex"):
        return ""
    vcpus, gib = machine_room(shape, target)
    cpu, memory = cpu_cores(profile.cpu), memory_bytes(profile.memory) / 2**30
    idle = [f"{asked:g} of the {room} {what}" for what, asked, room in
            (("vCPUs", cpu, vcpus), ("GiB", round(memory, 1), gib)) if asked < IDLE_SHARE * room]
    if not idle:
        return ""
    return (f"{step} asks for {' and '.join(idle)} its {shape.name} can give: the rest "
            f"is paid for and idle, and the GPUs may wait for input; drop cpu and memory to "
            f"size it to the machine")
