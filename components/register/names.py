"""Validation and sanitising of the names registries accept: labels, retry keys, metric labels.

The rules are the strictest of the supported registries (Vertex AI labels: lower-case
letters, digits, ``_`` and ``-``, at most 63 characters, keys start with a letter), so a
label that passes here is accepted by every backend.
"""

from __future__ import annotations

import hashlib
import math
import re

from gkeflow.components.register.local_registry import RegistryError

LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
MAX_LABELS = 64

#: Labels the suite writes itself; users may not set them.
RETRY_KEY_LABEL = "gkeflow-retry-key"
RUN_ID_LABEL = "gkeflow-run-id"
TASK_LABEL = "gkeflow-task"
METRIC_LABEL_PREFIX = "metric-"
RESERVED_PREFIXES = ("gkeflow-", METRIC_LABEL_PREFIX)


def validate_labels(labels: dict[str, str]) -> None:
    """Raise :class:`RegistryError` naming the first label no registry would accept."""
    for key, value in labels.items():
        if not LABEL_KEY.match(key):
            raise RegistryError(
                f"invalid label key {key!r}: use 1-63 lower-case letters, digits, '_' and '-', "
                "starting with a letter"
            )
        if not isinstance(value, str) or not LABEL_VALUE.match(value):
            raise RegistryError(
                f"invalid value {value!r} for label {key!r}: use at most 63 lower-case letters, "
                "digits, '_' and '-'"
            )
        if key.startswith(RESERVED_PREFIXES):
            raise RegistryError(
                f"label {key!r} uses a reserved prefix ({', '.join(RESERVED_PREFIXES)}); "
                "the registry step writes those itself"
            )


def sanitise_label_value(text: str) -> str:
    """Any text -> a valid label value (lower-case, ``[a-z0-9_-]``, at most 63 characters)."""
    value = re.sub(r"[^a-z0-9_-]+", "-", text.lower()).strip("-")
    if len(value) > 63:
        digest = hashlib.sha1(text.encode()).hexdigest()[:8]
        value = f"{value[:54]}-{digest}"
    return value


def sanitise_label_key(text: str) -> str:
    """Any text -> a valid label key."""
    key = sanitise_label_value(text) or "x"
    return key if key[0].isalpha() else f"k{key}"[:63]


def retry_key(name: str, run_id: str, task_key: str) -> str:
    """Stable key of one registration attempt (model, pipeline run, task): 40 hex characters."""
    return hashlib.sha1(f"{name}\x00{run_id}\x00{task_key}".encode()).hexdigest()


def metric_to_label(value: float) -> str:
    """``0.9123`` -> ``"0_9123"``: a float as a label value, exactly reversible."""
    return repr(float(value)).replace(".", "_").replace("+", "")


def metric_from_label(text: str) -> float:
    return float(text.replace("_", "."))


def metric_labels(metrics: dict[str, float], room: int) -> dict[str, str]:
    """Up to ``room`` ``metric-<name>`` labels for the finite metrics, in name order."""
    labels: dict[str, str] = {}
    for name in sorted(metrics):
        value = float(metrics[name])
        if len(labels) >= room or not math.isfinite(value):
            continue
        key = sanitise_label_key(f"{METRIC_LABEL_PREFIX}{name}")[:63]
        labels[key] = metric_to_label(value)
    return labels
