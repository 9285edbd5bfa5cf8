"""The order pytest-xdist's workers run the tests in: the longest test files first, shared
out so that each worker starts on an equal share of the long ones.

``--dist worksteal`` hands each worker a contiguous share of the collected tests and lets
an idle worker take the back half of the longest queue. In collection order the long
pipeline and Ray tests come last (tests/local), so one worker ran them alone for the last
minute of the run. Here each worker's share starts with its long files (shared out
longest first, each to the share with the least time so far) and ends with the short
ones, which are what gets stolen at the end. A file's tests stay together (module
fixtures are built once). The time of each file is from ``tests/durations.json``, which
``pytest --record-durations`` rewrites from a whole run; files it does not know count one
second a test.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

DURATIONS = Path(__file__).resolve().parent / "durations.json"
UNKNOWN_TEST_S = 1.0


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def known_durations(path: Path = DURATIONS) -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(path.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def shares(items: list, workers: int, durations: dict[str, float]) -> list:
    """``items`` reordered for ``workers`` contiguous shares (the first ``len // workers``
    for the first worker, as worksteal splits them): each share its long files first."""
    if workers < 2 or len(items) < 2 * workers:
        return items
    files: dict[str, list] = defaultdict(list)
    for item in items:
        files[file_of(item.nodeid)].append(item)

    def seconds(name: str) -> float:
        return durations.get(name, UNKNOWN_TEST_S * len(files[name]))

    sizes = [len(items) // workers] * workers
    sizes[-1] += len(items) - sum(sizes)
    loads, counts = [0.0] * workers, [0] * workers
    heads: list[list] = [[] for _ in range(workers)]
    tails: list[list] = [[] for _ in range(workers)]
    ranked = sorted(files, key=lambda name: (-seconds(name), name))
    long_files = ranked[: len(ranked) // 4]  # the quarter that takes most of the time
    for name in long_files:
        fits = [w for w in range(workers) if counts[w] + len(files[name]) <= sizes[w]]
        worker = min(fits or range(workers), key=lambda w: loads[w])
        heads[worker].extend(files[name])
        loads[worker] += seconds(name)
        counts[worker] += len(files[name])
    rest = [item for name in ranked[len(long_files):] for item in files[name]]
    for worker in range(workers):
        room = max(0, sizes[worker] - counts[worker])
        tails[worker], rest = rest[:room], rest[room:]
    tails[-1].extend(rest)
    return [item for worker in range(workers) for item in heads[worker] + tails[worker]]


def pytest_addoption(parser):
    parser.addoption("--record-durations", action="store_true",
                     help="rewrite tests/durations.json (seconds per test file) from this run")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    items[:] = shares(items, workers, known_durations())


class DurationRecorder:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report):
        self.seconds[file_of(report.nodeid)] += report.duration

    def pytest_sessionfinish(self, session, exitstatus):
        if os.environ.get("PYTEST_XDIST_WORKER"):  # the controller has every report
            return
        DURATIONS.write_text(json.dumps(
            {name: round(s, 1) for name, s in sorted(self.seconds.items())}, indent=0) + "\n")


def pytest_configure(config):
    if config.getoption("record_durations", False):
        config.pluginmanager.register(DurationRecorder(), "gkeflow-durations")
