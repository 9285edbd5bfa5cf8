"""What a pipeline's steps get on a target, with the engine that runs training chosen here:
:func:`plan` (one row per step, for `gkeflow plan`) and :func:`target_notes` (requests the
target does not honour, and what an engine launches instead)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gkeflow.pipelines.compute import capacity, launchers, pod_rules, tpu_profile
from gkeflow.pipelines.compute.engines import engine_for, training_engine, training_steps
from gkeflow.pipelines.compute.machine_fit import idle_note
from gkeflow.pipelines.compute.profiles import (
    GKE_TO_VERTEX_ACCELERATOR,
    GPU_RESOURCE,
    ComputeProfile,
    fitting_shape,
    format_duration,
)
from gkeflow.pipelines.settings.platforms import Unsupported, platform

#: A plain step's request each unsupported feature reads (what the note is about).
ASKS = {
    Unsupported.RESOURCES: lambda p: p.uses_gpu or p.spot or p.timeout_s or p.retries,
    Unsupported.STEP_SPOT: lambda p: p.spot,
    Unsupported.STEP_TIMEOUT: lambda p: p.timeout_s,
    Unsupported.SHM_SIZE: lambda p: p.shm_size,
    Unsupported.STEP_CAPACITY: lambda p: p.scheduling in ("flex-start", "reservation"),
}


def target_notes(profiles: Mapping[str, ComputeProfile], target: str,
                 engine_steps: tuple[str, ...] | None = None) -> list[str]:
    """Requests that ``target`` cannot honour, said out loud rather than dropped silently;
    ``engine_steps``: the steps a training engine may run (none in a sweep's trials;
    default: the steps that train)."""
    where = platform(target)
    if engine_steps is None:
        engine_steps = training_steps(profiles)
    # A step an engine runs (a Vertex AI CustomJob) honours spot and timeout itself.
    engine_run = {step for step, profile in profiles.items()
                  if step in engine_steps and training_engine(target, profile) is not None}
    honours_itself = engine_run if where.managed else set()
    notes = []
    for feature, applies in ASKS.items():
        if not where.ignores(feature):
            continue
        steps = [step for step, profile in profiles.items()
                 if applies(profile) and step not in honours_itself]
        if steps:
            notes.append(f"{where.why(feature)}: {', '.join(steps)}")
    tpu_pods = [step for step, p in profiles.items() if p.uses_tpu and step not in engine_run
                and where.kubernetes]
    for step in tpu_pods:  # a single-host slice: one pod
        notes.append(f"{step} runs as one pod on a single-host slice: "
                     f"{tpu_profile.describe(profiles[step], target)}")
    notes += [note for step, p in profiles.items() if p.uses_tpu and where.cloud
              and (note := tpu_profile.unchecked_host_limits(step, p, target))]
    for step in sorted(engine_run):  # what the training step really launches, and so costs
        notes.append(training_engine(target, profiles[step]).describe(profiles[step], step))
    note = launchers.unapplied_note(profiles, target, set() if where.local
                                    else engine_run)  # local workers follow no job
    notes += [idle for step, p in profiles.items() if (idle := idle_note(step, p, target))]
    if where.pod_rules is not None and where.kubernetes:
        notes.append(pod_rules.rules_note(target))
        notes += [line for step, p in profiles.items()
                  if step not in engine_run and (line := pod_rules.adjustment(step, p, target))]
    return notes + ([note] if note else []) + capacity.capacity_notes(profiles, target)


@dataclass(frozen=True)
class PlanRow:
    """What one step requests on one target, as text for a table."""

    step: str
    image: str
    cpu: str
    memory: str
    accelerator: str
    count: str
    capacity: str
    nodes: str
    gpus: str
    queue: str
    disk: str
    retries: str
    caching: str
    timeout: str
    shm: str
    machine: str


def plan(
    profiles: Mapping[str, ComputeProfile], target: str, images: Mapping[str, str]
) -> list[PlanRow]:
    """One :class:`PlanRow` per step: what is requested on ``target`` (validated profiles)."""
    rows, where = [], platform(target)
    for step, p in profiles.items():
        # On Vertex AI a CustomJob runs the training step and honours spot and timeout.
        custom_job = where.managed and engine_for(target, profiles, step) is not None
        if where.accelerator_types:
            accelerator = GKE_TO_VERTEX_ACCELERATOR.get(p.accelerator, "") if p.uses_gpu else ""
        else:
            accelerator = f"{GPU_RESOURCE} ({p.accelerator})" if p.uses_gpu else ""
        if p.uses_gpu:
            shape = fitting_shape(p, target)
            machine = shape.name if shape else "none fits"
            if where.kubernetes and shape:
                machine = f"{shape.name} or larger"
        elif custom_job:  # the job's machine, fitted to the request
            machine = engine_for(target, profiles, step).machine(p)
        elif where.managed:
            machine = f"chosen by {where.title}"
        else:
            machine = "any node pool" if where.node_pools else f"{where.title} sizes the node"
        scheduling, nodes, gpus = capacity.describe(p, target)
        if p.uses_tpu and where.cloud:  # hosts x chips per host, chips of all slices
            tpu = tpu_profile.shape(p, target)
            shown = tpu_profile.TPU_RESOURCE if where.kubernetes else "TPU"
            accelerator = f"{shown} ({p.accelerator} {p.topology})"
            nodes = f"{p.replicas * tpu.hosts} x {tpu.chips_per_host}"
            gpus = f"{p.replicas * tpu.chips} chips"
            machine = tpu.machine_type
        if where.ignores(Unsupported.STEP_CAPACITY) and p.scheduling != "standard" \
                and not custom_job:
            scheduling += f" (not applied on {where.title})"
        queue = (f"not applied ({p.queue})" if where.ignores(Unsupported.QUEUE) else p.queue
                 ) if p.queue else "-"
        from gkeflow.pipelines.compute.scratch import describe_disk

        # a JobSet's pods request their ephemeral storage
        own_pods = where.kubernetes and engine_for(target, profiles, step) is not None
        disk = p.ephemeral_storage if own_pods and p.ephemeral_storage else describe_disk(
            p, target)
        retries = (
            f"{p.retries} (backoff {format_duration(p.retry_backoff_s)} x"
            f"{p.retry_backoff_factor:g}, max {format_duration(p.retry_max_duration_s)})"
            if p.retries else "0"
        )
        if p.timeout_s:
            enforced = not (where.ignores(Unsupported.STEP_TIMEOUT)
                            or where.ignores(Unsupported.RESOURCES)) or custom_job
            timeout = (format_duration(p.timeout_s) if enforced
                       else f"not enforced ({format_duration(p.timeout_s)} asked)")
        else:
            timeout = "none"
        shm = (p.effective_shm_size if where.kubernetes and p.uses_gpu else "") or "-"
        billed = pod_rules.fitted(p, target)  # what the platform schedules (Autopilot's rules)
        rows.append(PlanRow(
            step=step, image=images.get(step, ""), cpu=billed.cpu, memory=billed.memory,
            accelerator=accelerator or "-", count=str(p.accelerator_count),
            capacity=scheduling, nodes=nodes, gpus=gpus, queue=queue, disk=disk,
            retries=retries, caching="on" if p.caching else "off", timeout=timeout,
            shm=shm, machine=machine,
        ))
    return rows
