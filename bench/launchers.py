"""Soak benchmark of the launchers: a job of ``--hours`` simulated hours (default 6) followed
with 20 s polls while the fake API injects ``--fault-rate`` (default 2 %) random transient
faults on every call: 429/500/502/503/504, connections reset, create or read answers lost
after the server acted, reads that hang past the call timeout.

Prints one line per launcher::

    launcher=<name> soak_calls=... faults_injected=... jobs_created=1 spurious_stops=0 max_gap_s=...

``max_gap_s`` is the longest simulated time between two successful status reads. The Vertex
AI launchers (CustomJob, HyperparameterTuningJob, BatchPredictionJob) run against
``tests/integration/fake_vertex_jobs.py`` over real HTTP on loopback, with time simulated
(``tests/integration/soak.py``); the GKE JobSet launcher's soak is ``bench/soak_jobset.py``
when present.

    python bench/launchers.py [--hours 6] [--fault-rate 0.02] [--seed 0]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def jobset_soak():
    """``bench/soak_jobset.py``'s ``soak`` function, or None when it is not there."""
    path = ROOT / "bench" / "soak_jobset.py"
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location("soak_jobset", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.soak


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hours", type=float, default=6.0, help="simulated job length")
    parser.add_argument("--fault-rate", type=float, default=0.02,
                        help="share of calls that fail transiently")
    parser.add_argument("--seed", type=int, default=0, help="seed of the fault schedule")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from tests.integration.soak import LAUNCHERS, line, soak

    failures = 0
    for index, launcher in enumerate(LAUNCHERS):
        started = time.monotonic()
        result = soak(launcher, seed=args.seed + index, hours=args.hours,
                      fault_rate=args.fault_rate)
        print(f"{line(result)} wall_s={time.monotonic() - started:.1f} "
              f"fault_kinds={','.join(f'{k}:{v}' for k, v in result['fault_kinds'].items())}",
              flush=True)
        failures += result["jobs_created"] != 1 or result["spurious_stops"] != 0
    soak_jobset = jobset_soak()
    if soak_jobset is None:
        print("launcher=jobset skipped: bench/soak_jobset.py is not there")
    else:
        result = soak_jobset(seed=args.seed, hours=args.hours, fault_rate=args.fault_rate)
        print(f"launcher=jobset soak_calls={result['soak_calls']} "
              f"faults_injected={result['faults_injected']} "
              f"jobs_created={result['jobs_created']} "
              f"spurious_stops={result['spurious_stops']} max_gap_s={result['max_gap_s']}",
              flush=True)
        failures += result["jobs_created"] != 1 or result["spurious_stops"] != 0
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
