"""A platform's rules for a pod's requests, applied before a step is compiled, planned or
priced (GKE Autopilot's: :mod:`gkeflow.pipelines.settings.autopilot`).

:func:`fitted` gives the profile the platform will actually schedule and bill (requests
raised to the minimums and into the CPU:memory ratio, CPU rounded up); :func:`problems`
refuses what the platform would reject (above its maximums) in one line per step;
:func:`adjustment` says what changed, for ``plan``'s notes. A platform without rules gets
its profiles back unchanged.
"""

from __future__ import annotations

import math
from dataclasses import replace

from gkeflow.pipelines.compute.compute_profile import ComputeProfile
from gkeflow.pipelines.compute.units import cpu_cores, memory_bytes
from gkeflow.pipelines.settings.platforms import PodRules, platform

MIB = 2**20
GIB = 2**30


def _accelerated(profile: ComputeProfile) -> bool:
    return profile.uses_gpu or profile.uses_tpu


def _fit(profile: ComputeProfile, rules: PodRules) -> tuple[float, int]:
    """(vCPUs, memory bytes) after ``rules``."""
    asked = memory_bytes(profile.memory)
    cpu = max(cpu_cores(profile.cpu), rules.cpu_min)
    memory = max(asked, int(rules.memory_min_gib * GIB))
    if not _accelerated(profile):  # the ratio binds general-purpose pods only
        if memory > cpu * rules.gib_per_cpu_max * GIB:
            cpu = memory / (rules.gib_per_cpu_max * GIB)
        cpu = math.ceil(round(cpu / rules.cpu_step, 9)) * rules.cpu_step
        memory = max(memory, int(cpu * rules.gib_per_cpu_min * GIB))
    return cpu, memory if memory == asked else math.ceil(memory / MIB) * MIB


def _cpu_text(cpu: float) -> str:
    return f"{cpu:g}" if cpu == int(cpu) or cpu >= 1 else f"{round(cpu * 1000)}m"


def _memory_text(memory: int) -> str:
    return f"{memory // GIB}Gi" if memory % GIB == 0 else f"{memory // MIB}Mi"


def fitted(profile: ComputeProfile, target: str) -> ComputeProfile:
    """``profile`` as ``target`` schedules and bills it (itself where nothing changes)."""
    rules = platform(target).pod_rules
    if rules is None:
        return profile
    cpu, memory = _fit(profile, rules)
    if cpu == cpu_cores(profile.cpu) and memory == memory_bytes(profile.memory):
        return profile
    changes = {}
    if cpu != cpu_cores(profile.cpu):
        changes["cpu"] = _cpu_text(cpu)
    if memory != memory_bytes(profile.memory):
        changes["memory"] = _memory_text(memory)
    return replace(profile, **changes)


def adjustment(step: str, profile: ComputeProfile, target: str) -> str:
    """One line on what ``target``'s rules change in ``step``'s requests; "" for nothing."""
    after = fitted(profile, target)
    if after is profile:
        return ""
    changed = [f"{name} {getattr(profile, name)} -> {getattr(after, name)}"
               for name in ("cpu", "memory") if getattr(after, name) != getattr(profile, name)]
    return (f"{step}: {platform(target).title} requests {', '.join(changed)} (its minimums, "
            "CPU:memory ratio and CPU rounding; billed as requested)")


def problems(step: str, profile: ComputeProfile, target: str) -> list[str]:
    """What ``target`` would reject in ``step``'s requests, each naming the fix."""
    rules = platform(target).pod_rules
    if rules is None or _accelerated(profile):
        return []  # an accelerator pod's ceiling is its machine (checked as on Standard)
    cpu, memory = _fit(profile, rules)
    found = []
    if cpu > rules.cpu_max:
        found.append(f"{step}: cpu {profile.cpu} (with the CPU:memory ratio, {cpu:g} vCPU) "
                     f"is above {rules.title}'s maximum of {rules.cpu_max:g} vCPU; lower it "
                     "(or its memory), or add an accelerator")
    if memory > rules.memory_max_gib * GIB:
        found.append(f"{step}: memory {profile.memory} is above {rules.title}'s maximum of "
                     f"{rules.memory_max_gib:g} GiB; lower it, or add an accelerator")
    return found


def accelerator_selectors(profile: ComputeProfile, target: str) -> dict[str, str]:
    """Node selectors ``target`` wants on a GPU pod besides the accelerator's own."""
    rules = platform(target).pod_rules
    if rules is None or not profile.uses_gpu:
        return {}
    return dict(rules.accelerator_selectors)


def rules_note(target: str) -> str:
    """One plan note stating ``target``'s rules and their source; "" without rules."""
    rules = platform(target).pod_rules
    if rules is None:
        return ""
    return (f"{rules.title}: requests = limits; at least {_cpu_text(rules.cpu_min)} vCPU and "
            f"{rules.memory_min_gib:g} GiB, {rules.gib_per_cpu_min:g}-"
            f"{rules.gib_per_cpu_max:g} GiB per vCPU, CPU in steps of "
            f"{_cpu_text(rules.cpu_step)}, at most {rules.cpu_max:g} vCPU and "
            f"{rules.memory_max_gib:g} GiB without an accelerator ({rules.source}, read "
            f"{rules.read})")
