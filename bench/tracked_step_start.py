"""What a tracked step spends loading MLflow's client at its start, inside a built image,
with the bytecode the image build writes (images/warm.py) against a baseline without it.

    .venv/bin/python bench/tracked_step_start.py [IMAGE] [--repeat N]
        # default: localhost/gkeflow:image-test (make image-test builds it); needs podman
        # (root: the image is mounted and run in a chroot, as the image tests do)

The baseline runs the same command with ``PYTHONPYCACHEPREFIX`` pointing at an empty
folder, so Python finds none of the image's bytecode and compiles MLflow's modules as a
step did before they were compiled at build time. Prints the CPU seconds of each run and
the ratio of the medians.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.images.rootfs import run_in_image  # noqa: E402

LOAD = ("import time; t = time.process_time(); from mlflow import MlflowClient; "
        "MlflowClient('http://127.0.0.1:9')._tracking_client.store; "
        "import mlflow.store.artifact.http_artifact_repo; print(time.process_time() - t)")


def cpu_seconds(image: str, baseline: bool) -> float:
    prefix = ["env", "PYTHONPYCACHEPREFIX=/tmp/no-bytecode"] if baseline else []
    done = run_in_image(image, [*prefix, "python", "-c", LOAD], {})
    if done.returncode != 0:
        raise SystemExit(f"the image could not load MLflow: {done.stdout[-500:]}")
    return float(done.stdout.split()[-1])


def main(argv: list[str]) -> int:
    repeat = int(argv[argv.index("--repeat") + 1]) if "--repeat" in argv else 3
    names = [a for a in argv if not a.startswith("--") and not a.isdigit()]
    image = names[0] if names else "localhost/gkeflow:image-test"
    compiled, baseline = [], []
    for _ in range(repeat):  # alternated, so load on the machine hits both alike
        compiled.append(cpu_seconds(image, baseline=False))
        baseline.append(cpu_seconds(image, baseline=True))
    print(f"image {image}: MLflow client loaded in "
          f"{', '.join(f'{s:.2f}' for s in compiled)} CPU-s with the image's bytecode, "
          f"{', '.join(f'{s:.2f}' for s in baseline)} CPU-s without (baseline)")
    print(f"median {statistics.median(compiled):.2f} s vs {statistics.median(baseline):.2f} s: "
          f"ratio {statistics.median(baseline) / statistics.median(compiled):.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
