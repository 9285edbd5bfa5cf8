"""Kubernetes quantities of a step's compute: CPU cores and memory bytes."""

from __future__ import annotations

import re

MEMORY_RE = re.compile(r"^([0-9]+)(E|Ei|P|Pi|T|Ti|G|Gi|M|Mi|K|Ki)$")
_MEMORY_UNITS = {
    "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}


def cpu_cores(cpu: str) -> float:
    """``"2"`` -> 2.0, ``"500m"`` -> 0.5."""
    return float(cpu[:-1]) / 1000 if cpu.endswith("m") else float(cpu)


def memory_bytes(memory: str) -> int:
    """``"8G"`` -> 8e9, ``"8Gi"`` -> 8 * 2**30 (Kubernetes quantity suffixes)."""
    number, unit = MEMORY_RE.match(memory).groups()
    return int(number) * _MEMORY_UNITS[unit]
