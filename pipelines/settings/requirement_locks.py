"""The images' requirement locks (``images/requirements-<flavour>.lock``): where they are and
the pins they hold. Writing and checking them: :mod:`gkeflow.pipelines.targets.image_locks`."""

from __future__ import annotations

import re
from pathlib import Path

_PIN_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;\\]+)")


def normalise(name: str) -> str:
    """PEP 503 name: ``Google_Cloud.Storage`` -> ``google-cloud-storage``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_path(images_dir: Path, flavour: str) -> Path:
    """``images/requirements-<flavour>.lock``."""
    return images_dir / f"requirements-{flavour}.lock"


def read_pins(lock: Path) -> dict[str, tuple[str, list[str]]]:
    """Lock file -> {normalised name: (version, [sha256 hashes])}."""
    pins: dict[str, tuple[str, list[str]]] = {}
    current = None
    for raw in lock.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _PIN_RE.match(line)
        if match:
            current = normalise(match.group(1))
            pins[current] = (match.group(3), [])
        for digest in re.findall(r"--hash=sha256:([0-9a-f]{64})", line):
            if current is not None:
                pins[current][1].append(digest)
    return pins
