"""Image build benchmark: a cold CPU image build against a rebuild after a change to the
user's included code only (the layer order keeps the locked packages cached).

    .venv/bin/python bench/images.py          # needs podman and the base image (make image-base)

Prints one line: ``cold_build_s``, ``user_change_rebuild_s``, ``rebuild_ratio`` (rebuild /
cold; the rebuild still runs the import check, which imports TensorFlow), ``cpu_image_gb``
(uncompressed).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gkeflow.pipelines.targets.image_build import assemble_context

REFERENCE = "localhost/gkeflow-cpu:bench"


def _build(context: Path, no_cache: bool) -> float:
    command = ["podman", "build", "--isolation=chroot", "--layers", "--tag", REFERENCE,
               "--file", str(context / "Dockerfile"), str(context)]
    if no_cache:
        command.insert(2, "--no-cache")
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"podman build failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return time.monotonic() - started


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        module = Path(tmp) / "bench_model.py"
        module.write_text("VERSION = 1\n")
        cold = _build(assemble_context(Path(tmp) / "cold", "cpu", None, [module]).parent, True)
        module.write_text("VERSION = 2\n")
        warm = _build(assemble_context(Path(tmp) / "warm", "cpu", None, [module]).parent, False)
    size = json.loads(subprocess.run(["podman", "image", "inspect", REFERENCE],
                                     capture_output=True, text=True, check=True).stdout)[0]["Size"]
    print(f"cold_build_s={cold:.1f} user_change_rebuild_s={warm:.1f} "
          f"rebuild_ratio={warm / cold:.3f} cpu_image_gb={size / 1e9:.2f}")


if __name__ == "__main__":
    main()
