"""End-to-end benchmark: `gkeflow run` vs. the same four logic functions in one process.

Prints each step's wall time under kfp.local, the total, and the ratio of that total to
the four logic functions (prepare, train, evaluate, register) called directly in one
fresh Python process (imports included in both). The ratio is the orchestration overhead:
one subprocess, one TensorFlow import and artifact I/O per step.

Then caching: a cold `gkeflow run` (empty output directory, caching on) and the same run
again on unchanged data. ``cached_ratio`` is the re-run's total over the cold total; the
steps served from cache (preparation and training, keyed on the data fingerprint) are
compared step by step in ``cached_steps_ratio`` (their time in the re-run, zero when served
from cache, over their cold time); the fingerprint, evaluation and registration always run.

    python bench/e2e.py [--epochs N]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STEP_LINE = re.compile(r"✓ (\S+) success in ([0-9.]+)s")
CACHED_LINE = re.compile(r"✓ (\S+) cached")

DIRECT = """
import time, sys
from pathlib import Path
started = time.perf_counter()
from gkeflow.components.prepare.logic import EMBEDDED_PENGUINS, prepare
from gkeflow.components.train.logic import TrainParams, train
from gkeflow.components.evaluate.logic import evaluate
from gkeflow.components.register.logic import register
out = Path(sys.argv[1])
prepared = prepare(EMBEDDED_PENGUINS, out / "dataset", "species")
train(out / "dataset", prepared.schema, out / "model", TrainParams(epochs=int(sys.argv[2])))
result = evaluate(out / "dataset", prepared.schema, out / "model", 0.8)
register(out / "model", str(out / "model"), "penguins-classifier", result.scalar_metrics(),
         "bench", f"sqlite:///{out / 'registry.db'}")
print(f"direct_total_s={time.perf_counter() - started:.3f}")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    args = parser.parse_args()
    gkeflow = shutil.which("gkeflow", path=str(Path(sys.executable).parent)) or "gkeflow"

    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        run = subprocess.run(
            [gkeflow, "run", "--epochs", str(args.epochs), "--output", f"{tmp}/e2e", "--no-cache"],
            capture_output=True, text=True, check=False,
        )
        e2e_total = time.perf_counter() - started
        if run.returncode != 0:
            sys.exit(f"gkeflow run failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
        steps = STEP_LINE.findall(run.stdout)

        direct = subprocess.run(
            [sys.executable, "-c", DIRECT, f"{tmp}/direct", str(args.epochs)],
            capture_output=True, text=True, check=False,
        )
        if direct.returncode != 0:
            sys.exit(f"direct run failed:\n{direct.stderr[-3000:]}")
        direct_total = float(re.search(r"direct_total_s=([0-9.]+)", direct.stdout).group(1))

        runs = []
        for attempt in ("cold", "cached"):
            started = time.perf_counter()
            cached_run = subprocess.run(
                [gkeflow, "run", "--epochs", str(args.epochs), "--output", f"{tmp}/cache"],
                capture_output=True, text=True, check=False)
            seconds = time.perf_counter() - started
            if cached_run.returncode != 0:
                sys.exit(f"{attempt} gkeflow run failed:\n{cached_run.stdout[-3000:]}")
            ran = {name: float(s) for name, s in STEP_LINE.findall(cached_run.stdout)}
            runs.append((seconds, ran, CACHED_LINE.findall(cached_run.stdout)))

    print(f"epochs: {args.epochs}")
    for name, seconds in steps:
        print(f"  {name:<16} {float(seconds):7.2f} s")
    print(f"  {'total (gkeflow run)':<16} {e2e_total:7.2f} s")
    print(f"  {'direct (4 logic fns, 1 process)':<16} {direct_total:7.2f} s")
    print(f"e2e_total_s={e2e_total:.3f} overhead_ratio={e2e_total / direct_total:.3f}")

    (cold_s, cold_steps, _), (warm_s, warm_steps, served) = runs
    cacheable = [name for name in served if name in cold_steps]
    cold_part = sum(cold_steps[name] for name in cacheable)
    warm_part = sum(warm_steps.get(name, 0.0) for name in cacheable)
    print("caching (same data twice):")
    for name, seconds in cold_steps.items():
        again = "cached" if name in served else f"{warm_steps.get(name, 0.0):.2f} s"
        print(f"  {name:<16} {seconds:7.2f} s -> {again}")
    print(f"  {'total':<16} {cold_s:7.2f} s -> {warm_s:.2f} s")
    print(f"cold_total_s={cold_s:.3f} cached_total_s={warm_s:.3f} "
          f"cached_ratio={warm_s / cold_s:.3f} "
          f"cached_steps_ratio={(warm_part / cold_part) if cold_part else float('nan'):.3f} "
          f"cached_steps={','.join(cacheable) or 'none'}")


if __name__ == "__main__":
    main()
