"""The values of a compute profile's fields: the errors compute requests raise, and the parsing
and checking of CPU and memory quantities, durations, booleans, accelerator names, scheduling
and service accounts, each failing with a :class:`ComputeError` that names the field."""

from __future__ import annotations

import math
import re
from typing import Any

from gkeflow.pipelines.compute import accelerators as acc
from gkeflow.pipelines.compute import tpu_profile
from gkeflow.pipelines.compute.units import MEMORY_RE

TARGETS = ("gke", "vertex", "local")

#: GKE accelerator name -> Vertex AI accelerator type.
GKE_TO_VERTEX_ACCELERATOR = {name: a.vertex_type for name, a in acc.ACCELERATORS.items()}
VERTEX_TO_GKE_ACCELERATOR = {v: k for k, v in GKE_TO_VERTEX_ACCELERATOR.items()}

_CPU_RE = re.compile(r"^([0-9]*[.])?[0-9]+m?$")
_DURATION_RE = re.compile(r"^([0-9]+)\s*(s|m|h|d)?$")
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


class ComputeError(ValueError):
    """A compute request that cannot be satisfied; the message names the step."""


class PipelineUnfit(ComputeError):
    """One pipeline cannot take, on one target, the compute asked for a step it shares with
    others (the sweep's trials and ``train-model``); the other pipelines still compile.
    The message names the pipeline, the target and why, in one line."""


def format_gib(n_bytes: float) -> str:
    return f"{n_bytes / acc.GIB:.1f} GiB"


def format_duration(seconds: int) -> str:
    if seconds == 0:
        return "0s"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def canonical_accelerator(name: str) -> str:
    """GKE spelling of an accelerator (Vertex spellings are aliases); unknown names unchanged."""
    if not name or name in GKE_TO_VERTEX_ACCELERATOR:
        return name
    if tpu_profile.tpu_name(name):
        return tpu_profile.tpu_name(name)
    return VERTEX_TO_GKE_ACCELERATOR.get(name.upper(), name)


def to_bool(field: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ComputeError(f"{field} must be true or false; got {value!r}")


def to_int(field: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ComputeError(f"{field} must be a whole number; got {value!r}")
    if isinstance(value, str):
        if not re.fullmatch(r"-?[0-9]+", value.strip()):
            raise ComputeError(f"{field} must be a whole number; got {value!r}")
        value = int(value)
    return value


def to_float(field: str, value: Any) -> float:
    if isinstance(value, bool):
        raise ComputeError(f"{field} must be a number; got {value!r}")
    try:
        result = float(value)
    except (TypeError, ValueError):
        raise ComputeError(f"{field} must be a number; got {value!r}") from None
    if not math.isfinite(result):
        raise ComputeError(f"{field} must be a finite number; got {value!r}")
    return result


def to_seconds(field: str, value: Any) -> int:
    """A duration (90, "30s", "10m", "2h", "1d") in seconds; ComputeError names ``field``."""
    if isinstance(value, bool):
        raise ComputeError(f"{field} must be a duration such as 90, 30s, 10m, 2h; got {value!r}")
    if isinstance(value, int):
        return value
    match = _DURATION_RE.match(value.strip()) if isinstance(value, str) else None
    if not match:
        raise ComputeError(f"{field} must be a duration such as 90, 30s, 10m, 2h; got {value!r}")
    return int(match.group(1)) * _DURATION_UNITS[match.group(2) or "s"]


_ACCOUNT_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def to_account(value: Any) -> str:
    """A Kubernetes service account name (a DNS subdomain)."""
    text = value.strip() if isinstance(value, str) else value
    if not isinstance(text, str) or len(text) > 253 or not _ACCOUNT_RE.match(text):
        raise ComputeError(
            "worker_service_account must name a Kubernetes service account (lowercase "
            f"letters, digits, '-' and '.'), e.g. gkeflow-worker; got {value!r}")
    return text


SCHEDULING = ("standard", "spot", "flex-start", "reservation")

def to_scheduling(value: Any, spot: bool) -> str:
    text = value.strip().lower().replace("_", "-") if isinstance(value, str) else value
    if text not in SCHEDULING:
        raise ComputeError(f"scheduling must be one of {', '.join(SCHEDULING)}; got {value!r}")
    if spot and text not in ("standard", "spot"):
        raise ComputeError(f"spot: true contradicts scheduling: {text}; keep one of them")
    return "spot" if spot else text


def to_duration_text(field: str, value: Any) -> str:
    """A duration kept as written ("" for none), checked to parse."""
    if value in ("", None):
        return ""
    seconds = to_seconds(field, value)
    return format_duration(seconds)


def to_cpu(value: Any) -> str:
    if isinstance(value, bool):
        raise ComputeError(f"cpu must be a CPU quantity such as 2, 0.5 or 500m; got {value!r}")
    if isinstance(value, (int, float)):
        value = f"{value:g}"
    if not isinstance(value, str) or not _CPU_RE.match(value):
        raise ComputeError(f"cpu must be a CPU quantity such as 2, 0.5 or 500m; got {value!r}")
    return value


def to_memory(field: str, value: Any, allow_empty: bool = False) -> str:
    if allow_empty and value in ("", None):
        return ""
    if isinstance(value, str) and MEMORY_RE.match(value):
        return value
    if isinstance(value, (int, str)) and re.fullmatch(r"[0-9]+", str(value)):
        raise ComputeError(f"{field} {value!r} has no unit; write e.g. {value}G or {value}Gi")
    raise ComputeError(f"{field} must be a memory quantity such as 8G or 8Gi; got {value!r}")
