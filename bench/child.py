"""Run one measurement of a bench script in a fresh process and read back its figures.

A bench script measures each case in a child (``<script> --child NAME ARGS...``) so that
peak RSS belongs to that case alone; the child prints one JSON line with ``rows`` and
``seconds``, and :func:`measure` adds ``peak_rss_mib`` and ``rows_per_s``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def measure(script: str, name: str, *args) -> dict:
    """Run ``script --child name args`` and return its figures plus peak RSS (MiB)."""
    process = subprocess.Popen(
        [sys.executable, script, "--child", name, *map(str, args)],
        stdout=subprocess.PIPE, cwd=REPO, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        raise SystemExit(f"{name} failed (status {status})")
    result = json.loads(output.decode().strip().splitlines()[-1])
    result["peak_rss_mib"] = usage.ru_maxrss / 1024
    result["rows_per_s"] = result["rows"] / result["seconds"] if result["seconds"] else 0.0
    return result
