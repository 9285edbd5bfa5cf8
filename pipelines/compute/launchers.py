"""Per-step settings of the steps that launch and follow a job: ``call_timeout_s`` and
``retry_budget_s`` of :class:`~gkeflow.pipelines.compute.profiles.ComputeProfile`.

A launcher step (a Vertex AI CustomJob or a GKE JobSet running ``train-model``, the Vizier
tuning job, Vertex AI batch prediction) retries every API call it makes
(:mod:`gkeflow.components.cloud.retry`): ``call_timeout_s`` abandons one call,
``retry_budget_s`` bounds the retries of one operation. Set per step in gkeflow.yaml's
``compute:`` (or ``--compute``), they are compiled into the step: the CustomJob launcher's
``--call-timeout`` / ``--retry-budget``, the other components' parameters of the same
names. 0 keeps the launcher's default (``GKEFLOW_CALL_TIMEOUT_S`` / ``GKEFLOW_RETRY_BUDGET_S``
in its environment, else 60 s and 900 s).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Any

from gkeflow.pipelines.settings.platforms import platform

#: (least, most) seconds when set. A call shorter than a second times out on a healthy
#: API; a budget past a day leaves a run whose API is gone hanging for that long.
LIMITS_S = {"call_timeout_s": (1.0, 3600.0), "retry_budget_s": (10.0, 86400.0)}
#: The CustomJob launcher's command-line flags for the same settings.
FLAGS = {"call_timeout_s": "--call-timeout", "retry_budget_s": "--retry-budget"}
#: Steps that always launch and follow a Vertex AI job (their components take the
#: settings); ``train-model`` does when a training engine runs it.
VERTEX_LAUNCHER_STEPS = ("tune-with-vizier", "batch-predict-vertex")


def _seconds(field: str, value: Any) -> float:
    low, high = LIMITS_S[field]
    text = value.strip().removesuffix("s") if isinstance(value, str) else value
    try:
        if isinstance(text, bool):
            raise TypeError
        seconds = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"{field} must be a number of seconds; got {value!r}") from None
    if seconds != 0 and not (math.isfinite(seconds) and low <= seconds <= high):
        raise ValueError(f"{field} must be 0 (the launcher's default) or {low:g} to {high:g} "
                         f"seconds; got {value!r}")
    return seconds


def checked(call_timeout_s: Any, retry_budget_s: Any) -> dict[str, float]:
    """Both settings as seconds.

    Raises:
        ValueError: one line naming the key: not a number, out of range, or a budget
            shorter than one call.
    """
    call, budget = (_seconds("call_timeout_s", call_timeout_s),
                    _seconds("retry_budget_s", retry_budget_s))
    if 0 < budget < call:
        raise ValueError(f"retry_budget_s {budget:g} is shorter than call_timeout_s {call:g}: "
                         "one slow call would spend it; raise retry_budget_s")
    return {"call_timeout_s": call, "retry_budget_s": budget}


def settings(profile) -> dict[str, float]:
    """The settings ``profile`` sets, by the launcher components' parameter names; empty
    when both keep the launcher's default."""
    return {name: getattr(profile, name) for name in LIMITS_S if getattr(profile, name)}


def flags(profile) -> list[str]:
    """The CustomJob launcher's ``--call-timeout`` / ``--retry-budget`` for ``profile``."""
    return [part for name, seconds in settings(profile).items()
            for part in (FLAGS[name], f"{seconds:g}")]


def unapplied_note(profiles: Mapping, target: str, engine_steps: Collection[str]) -> str:
    """A note naming the steps that set them but launch nothing on ``target``; "" if none.

    ``engine_steps``: the steps a training engine runs on ``target`` (and so launch).
    """
    launching = set(engine_steps) | (set(VERTEX_LAUNCHER_STEPS) if platform(target).managed
                                     else set())
    idle = [step for step, profile in profiles.items()
            if settings(profile) and step not in launching
            and step not in VERTEX_LAUNCHER_STEPS]  # those are not in pipelines elsewhere
    if not idle:
        return ""
    return (f"call_timeout_s and retry_budget_s apply to steps that launch and follow a job "
            f"(on {target}: {', '.join(sorted(launching)) or 'none here'}); not applied: "
            f"{', '.join(idle)}")
