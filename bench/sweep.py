"""Sweep benchmark: a sweep's wall time with trials in parallel vs. one after another.

Runs the same sweep pipeline twice under kfp.local on the bundled penguins data, caching
off: once with ``parallel_trials`` trials at a time, once with one at a time (the trials
run one after another, everything else identical). Prints both wall times, their ratio,
the sum of the trial steps' own durations and the machine's load average, since on a
shared machine the speed-up is bounded by the free cores (kfp.local runs at most two
iterations of a ParallelFor at once).

    python bench/sweep.py [--trials 4] [--parallel 2] [--epochs 10]
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import time
from pathlib import Path


def run_sweep(trials: int, parallel: int, epochs: int, out: Path) -> tuple[float, bool]:
    from gkeflow.pipelines.definitions.sweep import build_sweep_pipeline
    from gkeflow.pipelines.settings.sweep_config import parse_sweep
    from gkeflow.pipelines.targets.local import run_local

    rates = [0.0003 * (10 ** (i / max(1, trials - 1) * 2)) for i in range(trials)]
    sweep = parse_sweep({"algorithm": "grid", "max_trials": trials, "parallel_trials": parallel,
                         "parameters": {"learning_rate": {"type": "choice",
                                                          "values": [round(r, 6)
                                                                     for r in rates]}}})
    pipeline = build_sweep_pipeline("local", sweep=sweep)
    started = time.perf_counter()
    result = run_local({"epochs": epochs, "min_accuracy": 0.0,
                        "registry_uri": f"sqlite:///{out / 'registry.db'}"}, out,
                       enable_caching=False, pipeline=pipeline)
    return time.perf_counter() - started, result


def trial_seconds(log: str) -> float:
    """Sum of the trial steps' durations, from kfp.local's start/finish lines."""
    clean = re.sub(r"\x1b\[[0-9;]*m", "", log)
    total, starts = 0.0, []
    for line in clean.splitlines():
        stamp = line[:12]
        if "Executing task 'train-model'" in line:
            starts.append(_seconds(stamp))
        elif "Task 'train-model' finished" in line and starts:
            total += _seconds(stamp) - starts.pop(0)
    return total


def _seconds(stamp: str) -> float:
    h, m, s = stamp.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        figures = {}
        for label, parallel in (("sequential", 1), ("parallel", args.parallel)):
            seconds, result = run_sweep(args.trials, parallel, args.epochs, Path(tmp) / label)
            if not result.ok:
                raise SystemExit(f"{label} sweep failed: {result.error} (log {result.log_path})")
            figures[label] = seconds
            steps = trial_seconds(result.log_path.read_text())
            figures[f"{label}_trial_steps"] = steps
            print(f"{label}: {seconds:.1f}s wall, trial steps {steps:.1f}s")
    print(f"sweep_parallel_s={figures['parallel']:.1f} sweep_sequential_s="
          f"{figures['sequential']:.1f} speedup={figures['sequential'] / figures['parallel']:.2f} "
          f"trials={args.trials} parallel_trials={args.parallel} epochs={args.epochs} "
          f"cores={os.cpu_count()} load_before={load_before:.1f} "
          f"load_after={os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
