"""The test suite's wall time and idle cores by number of pytest-xdist workers.

Runs the suite (``pytest -n N --dist worksteal``, as ``make test`` does) once for each
``--workers`` count, back to back, the first count being the baseline. While each run goes,
``/proc/stat`` is read once a second: the idle core-seconds are the cores' idle and iowait
time while the run lasted. Before and after each run a fixed single-threaded Python loop is
timed, to show how fast the machine was then (its speed moves within minutes; compare runs
whose loop times are close). Prints one line per run and each run's wall time as a ratio of
the baseline's.

    python bench/suite_workers.py [--workers 2,3] [-- PYTEST ARGUMENTS]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time


def loop_seconds() -> float:
    """CPU seconds of a fixed Python loop (the machine's speed right now)."""
    started = time.process_time()
    total = 0
    for i in range(20_000_000):
        total += i * i
    return time.process_time() - started


def _idle_and_total() -> tuple[int, int]:
    with open("/proc/stat", encoding="ascii") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    return fields[3] + fields[4], sum(fields)


def run(workers: int, extra: list[str]) -> dict:
    """One run of the suite with ``workers`` workers: wall, idle core-seconds, exit code."""
    cores = len(os.sched_getaffinity(0))
    idle = [0.0]
    done = threading.Event()

    def sample() -> None:
        last = _idle_and_total()
        while not done.wait(1.0):
            now = _idle_and_total()
            ticks = now[1] - last[1]
            if ticks:
                idle[0] += (now[0] - last[0]) / ticks * cores
            last = now

    before = loop_seconds()
    sampler = threading.Thread(target=sample, daemon=True)
    started = time.monotonic()
    sampler.start()
    code = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", str(workers),
                           "--dist", "worksteal", *extra], check=False,
                          stdout=subprocess.DEVNULL).returncode
    wall = time.monotonic() - started
    done.set()
    sampler.join()
    return {"workers": workers, "wall": wall, "idle": idle[0], "code": code,
            "loop": (before, loop_seconds())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="2,3",
                        help="comma-separated worker counts; the first is the baseline")
    parser.add_argument("pytest_args", nargs="*", help="after --: passed to pytest")
    args = parser.parse_args()
    results = [run(int(n), args.pytest_args) for n in args.workers.split(",")]
    baseline = results[0]["wall"]
    for r in results:
        print(f"{r['workers']} workers: {r['wall']:.0f} s wall ({r['wall'] / baseline:.2f} x "
              f"the baseline), {r['idle']:.0f} idle core-s, exit {r['code']}, loop "
              f"{r['loop'][0]:.2f} s before / {r['loop'][1]:.2f} s after")


if __name__ == "__main__":
    main()
