"""Whether compute profiles can run: :func:`profile_problems` lists everything wrong with one
step's profile on a target (machine shapes, accelerators, TPU slices, capacity, retries) and
:func:`validate_profiles` raises for a whole pipeline before anything is compiled."""

from __future__ import annotations

from collections.abc import Mapping

from gkeflow.pipelines.compute import accelerators as acc
from gkeflow.pipelines.compute import capacity, pod_rules, tpu_profile
from gkeflow.pipelines.compute.compute_profile import ComputeProfile
from gkeflow.pipelines.compute.profile_values import (
    GKE_TO_VERTEX_ACCELERATOR,
    ComputeError,
    format_gib,
)
from gkeflow.pipelines.compute.units import cpu_cores, memory_bytes
from gkeflow.pipelines.compute.wording import counted
from gkeflow.pipelines.settings.platforms import names, platform


def _accelerator_choices(target: str) -> str:
    """The accelerators a step can ask for on ``target`` with the GPU counts of a machine
    (those whose machines run the suite's images), spelt as the target spells them first."""
    names = acc.runnable()
    types = platform(target).accelerator_types
    first = [GKE_TO_VERTEX_ACCELERATOR[n] if types else n for n in names]
    other = [n if types else GKE_TO_VERTEX_ACCELERATOR[n] for n in names]
    listed = ", ".join(f"{shown} (x {_counts(name)})" for shown, name in zip(first, names,
                                                                          strict=True))
    spelling = "GKE" if types else "Vertex AI"
    return f"{listed}; the {spelling} spellings also work: {', '.join(dict.fromkeys(other))}"


def _counts(accelerator: str) -> str:
    return ", ".join(str(c) for c in acc.valid_counts(accelerator))


def fitting_shape(profile: ComputeProfile, target: str) -> acc.MachineShape | None:
    """The smallest machine shape that hosts ``profile`` on ``target``; None if there is none.

    On GKE the pod must fit in a node's allocatable resources (what GKE leaves after its
    own reservations); on Vertex AI the request must fit the machine.
    """
    cpu, memory_gib = cpu_cores(profile.cpu), memory_bytes(profile.memory) / acc.GIB
    for shape in acc.shapes_for(profile.accelerator, profile.accelerator_count):
        vcpus, gib = acc.gke_allocatable(shape) if platform(target).kubernetes else (
            shape.vcpus, shape.memory_gib)
        if cpu <= vcpus and memory_gib <= gib:
            return shape
    return None


def profile_problems(
    step: str, profile: ComputeProfile, target: str, image_has_gpu: bool | None = None,
    multi_node_steps: tuple[str, ...] = capacity.MULTI_NODE_STEPS,
) -> list[str]:
    """Everything wrong with ``profile`` for ``step`` on ``target``; empty when it is valid.

    ``multi_node_steps`` names the steps that may run on more than one machine.
    """
    problems = []
    p = profile
    if target not in names():
        return [f"unknown target {target!r}; valid: {', '.join(names())}"]
    if cpu_cores(p.cpu) <= 0:
        problems.append(f"{step}: cpu must be more than 0; got {p.cpu!r}")
    if memory_bytes(p.memory) <= 0:
        problems.append(f"{step}: memory must be more than 0; got {p.memory!r}")
    accelerator_ok = True
    if p.uses_tpu:
        accelerator_ok = False  # no GPU shape checks: the slice is checked instead
        problems.extend(tpu_profile.tpu_problems(step, p, target, multi_node_steps))
    elif p.topology:
        problems.append(f"{step}: topology {p.topology} applies to TPU steps only; set "
                        f"accelerator to one of {', '.join(tpu_profile.generations())} or drop "
                        "topology")
    if not p.uses_tpu and p.accelerator and p.accelerator not in acc.ACCELERATORS:
        accelerator_ok = False
        from gkeflow.components.did_you_mean import did_you_mean

        # a typo of a name (one letter off), not another GPU (k80 is no t4)
        hint = did_you_mean(p.accelerator, [*acc.ACCELERATORS, *tpu_profile.generations()],
                            cutoff=0.9)
        problems.append(
            f"{step}: unknown accelerator {p.accelerator!r}{hint}; valid: "
            f"{_accelerator_choices(target)}; TPUs (with a topology): "
            f"{', '.join(tpu_profile.generations())}"
        )
    elif p.accelerator and not p.uses_tpu and not acc.runs_the_images(p.accelerator):
        accelerator_ok = False  # nothing else to say about machines it cannot start on
        problems.append(acc.architecture_problem(step, p.accelerator))
    if p.accelerator_count < 0:
        problems.append(f"{step}: accelerator_count must be >= 0; got {p.accelerator_count}")
    elif p.accelerator_count and not p.accelerator:
        problems.append(
            f"{step}: asks for {counted(p.accelerator_count, 'GPU')} but names no accelerator; "
            f"set accelerator to one of {', '.join(acc.runnable())}"
        )
    elif p.accelerator and accelerator_ok and p.accelerator_count == 0:
        problems.append(
            f"{step}: accelerator {p.accelerator} with accelerator_count 0; "
            f"valid counts for {p.accelerator}: {_counts(p.accelerator)} "
            f"(or drop the accelerator for a CPU-only step)"
        )
    elif p.accelerator and accelerator_ok:
        family = acc.ACCELERATORS[p.accelerator].family
        if p.accelerator_count not in acc.valid_counts(p.accelerator):
            problems.append(
                f"{step}: {p.accelerator} x {p.accelerator_count} fits no machine; the {family} "
                f"family hosts {p.accelerator} in counts of {_counts(p.accelerator)}"
            )
        elif cpu_cores(p.cpu) > 0 and fitting_shape(p, target) is None:
            shapes = acc.shapes_for(p.accelerator, p.accelerator_count)
            if platform(target).kubernetes:
                limits = {s.name: acc.gke_allocatable(s) for s in shapes}
                where = "GKE nodes leave pods"
            else:
                limits = {s.name: (s.vcpus, s.memory_gib) for s in shapes}
                where = "machines offer"
            largest = max(limits, key=lambda name: limits[name])
            problems.append(
                f"{step}: cpu {p.cpu} and memory {p.memory} "
                f"({format_gib(memory_bytes(p.memory))}) fit no {family} machine with "
                f"{p.accelerator} x {p.accelerator_count}; with that accelerator {where} at most "
                f"{max(v[0] for v in limits.values()):.4g} vCPUs and "
                f"{max(v[1] for v in limits.values()):.1f} GiB (largest machine: {largest}, "
                f"{limits[largest][0]:.4g} vCPUs with {limits[largest][1]:.1f} GiB)"
            )
        if image_has_gpu is False:
            problems.append(
                f"{step}: asks for {p.accelerator} but runs in a CPU-only image, "
                "which cannot use a GPU; drop the accelerator or run the step in the GPU image"
            )
    over = [f"{name} {value}" for name, value, too_much in (
        ("cpu", p.cpu, cpu_cores(p.cpu) > acc.VERTEX_STEP_MAX_VCPUS),
        ("memory", p.memory, memory_bytes(p.memory) > acc.VERTEX_STEP_MAX_MEMORY_GIB * acc.GIB))
        if too_much]
    if platform(target).managed and capacity.runs_as_pipeline_step(p) and over and not p.uses_tpu:
        problems.append(
            f"{step}: {' and '.join(over)} exceed{'s' if len(over) == 1 else ''} what Vertex "
            f"AI Pipelines gives a step {'with' if p.uses_gpu else 'without'} accelerator: at "
            f"most {acc.VERTEX_STEP_MAX_VCPUS} vCPUs and {acc.VERTEX_STEP_MAX_MEMORY_GIB} GiB"
        )
    if p.shm_size:
        if not p.uses_gpu:
            problems.append(
                f"{step}: shm_size {p.shm_size} is applied to GPU steps only; this step asks "
                "for no GPU"
            )
        elif memory_bytes(p.shm_size) >= memory_bytes(p.memory):
            problems.append(
                f"{step}: shm_size {p.shm_size} must be smaller than memory {p.memory} "
                "(a memory-backed /dev/shm counts against the memory limit)"
            )
    if cpu_cores(p.cpu) > 0 and memory_bytes(p.memory) > 0:
        problems.extend(pod_rules.problems(step, p, target))
    if p.replicas < 1:
        problems.append(f"{step}: replicas must be >= 1; got {p.replicas}")
    if not (p.uses_tpu and p.replicas > 1):  # said once, as slices, by tpu_problems
        problems.extend(capacity.capacity_problems(step, p, target, multi_node_steps))
    if p.max_wait and p.scheduling != "flex-start":
        problems.append(
            f"{step}: max_wait applies to scheduling=flex-start only; this step's scheduling "
            f"is {p.scheduling}"
        )
    if p.timeout_s < 0:
        problems.append(f"{step}: timeout_s must be >= 0 (0 for no limit); got {p.timeout_s}")
    if p.retries < 0:
        problems.append(f"{step}: retries must be >= 0; got {p.retries}")
    if p.retry_backoff_s < 0 or p.retry_max_duration_s < 0:
        problems.append(f"{step}: retry durations must be >= 0")
    if p.retry_backoff_factor < 1:
        problems.append(
            f"{step}: retry_backoff_factor must be >= 1 (1 keeps the wait constant; the KFP "
            f"SDK silently turns 0 into 2); got {p.retry_backoff_factor:g}"
        )
    if p.retries > 0 and p.retry_max_duration_s < p.retry_backoff_s:
        problems.append(
            f"{step}: retry_max_duration_s {p.retry_max_duration_s} is shorter than "
            f"retry_backoff_s {p.retry_backoff_s}, so no retry would ever start"
        )
    return problems


def validate_profiles(
    profiles: Mapping[str, ComputeProfile],
    target: str,
    gpu_images: Mapping[str, bool] | None = None,
    multi_node_steps: tuple[str, ...] = capacity.MULTI_NODE_STEPS,
) -> None:
    """Raise :class:`ComputeError` listing every invalid step.

    Args:
        profiles: Step -> its compute profile.
        target: gke, vertex or local.
        gpu_images: Step -> whether its image can use a GPU.
        multi_node_steps: Steps that may have replicas > 1 (the training step by default).
    """
    problems = []
    for step, profile in profiles.items():
        has_gpu = (gpu_images or {}).get(step)
        problems.extend(profile_problems(step, profile, target, has_gpu, multi_node_steps))
    if problems:
        raise ComputeError(
            f"invalid compute for target {target}:\n" + "\n".join(f"  - {p}" for p in problems)
        )
