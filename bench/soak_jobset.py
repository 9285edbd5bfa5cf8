"""Soak of the GKE JobSet launcher: a JobSet of many simulated hours, followed over real HTTP
against the strict fake Kubernetes API (``tests/integration/fake_kube.py``) while it injects
random transient faults on every call: 429/5xx, connections reset, answers lost, reads that
hang past the client's timeout, watch streams cut mid-event, 410 Gone (status and event).

Time is simulated: each 1-second watch window stands for ``WINDOW_S`` simulated seconds and
lasts ``REAL_WINDOW_S`` real ones; the retry policy's backoff advances the simulated clock;
a hung read costs its real (short) timeout and a minute of simulated time. Six hours take
about a minute here.

``soak(seed, hours, fault_rate)`` returns ``soak_calls`` (requests the launcher made),
``faults_injected``, ``jobs_created`` (must be 1), ``spurious_stops`` (deletes of a JobSet
that had not ended: must be 0) and ``max_gap_s`` (the longest simulated time between two
answered reads of the JobSet), plus details. ``bench/launchers.py`` prints its line;
``python bench/soak_jobset.py --hours 6`` runs it alone.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.integration.soak import SimClock  # noqa: E402  (one simulated clock for every soak)

#: Simulated seconds per watch window, and the real seconds one lasts.
WINDOW_S, REAL_WINDOW_S = 15.0, 0.01
#: The client's real per-call timeout, and how long a hung read hangs (real seconds).
CALL_TIMEOUT_S, HANG_S = 0.3, 0.5


def soak(seed: int = 0, hours: float = 6.0, fault_rate: float = 0.02) -> dict:
    """Follow one JobSet of ``hours`` simulated hours with ``fault_rate`` random faults."""
    import logging

    from gkeflow.components.cloud.retry import RetryPolicy
    from gkeflow.components.scaleout import storage
    from gkeflow.components.scaleout.jobset_launcher import launch
    from tests.integration.fake_kube import FakeKube, KubeFaults
    from tests.integration.kube_helpers import api_for, manifest

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    clock = SimClock()
    jitter = random.Random(seed)
    policy = RetryPolicy(call_timeout_s=CALL_TIMEOUT_S, sleep=clock.sleep, clock=clock,
                         jitter=lambda delay: jitter.uniform(delay / 2, delay))
    faults = KubeFaults(rate=fault_rate, seed=seed, hang_s=HANG_S)
    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="gkeflow-soak-") as scratch:
        output = str(Path(scratch) / "model")

        def publish(_jobset):
            source = Path(scratch) / "chief"
            source.mkdir(exist_ok=True)
            (source / "saved_model.pb").write_bytes(b"model")
            storage.publish(source, output, {"workers": 2})

        with FakeKube(on_complete=publish, faults=faults, clock=clock,
                      duration_s=hours * 3600, time_scale=REAL_WINDOW_S,
                      sim_scale=WINDOW_S) as kube:
            summary = launch(api_for(kube), manifest(), output, policy=policy, window_s=1,
                             echo=lines.append)
    return {"launcher": "jobset", "soak_calls": len(kube.requests),
            "faults_injected": faults.total, "jobs_created": len(kube.created),
            "spurious_stops": sum(state == "Running" for state in kube.deleted_states),
            "max_gap_s": round(kube.max_gap_s, 1), "simulated_s": round(clock.now, 1),
            "followed_to_end": summary == {"workers": 2},
            "deleted_after_end": kube.deleted_states.count("Completed"),
            "fault_kinds": dict(sorted(faults.injected.items())),
            "retry_lines": sum("retrying in" in line for line in lines),
            "log_reads": kube.count("GET", "log")}


def line(result: dict) -> str:
    """The one line ``bench/launchers.py`` prints."""
    return (f"launcher={result['launcher']} soak_calls={result['soak_calls']} "
            f"faults_injected={result['faults_injected']} "
            f"jobs_created={result['jobs_created']} "
            f"spurious_stops={result['spurious_stops']} max_gap_s={result['max_gap_s']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hours", type=float, default=6.0)
    parser.add_argument("--fault-rate", type=float, default=0.02)
    parser.add_argument("--json", action="store_true", help="Print every figure as JSON.")
    args = parser.parse_args(argv)
    result = soak(args.seed, args.hours, args.fault_rate)
    print(json.dumps(result) if args.json else line(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
