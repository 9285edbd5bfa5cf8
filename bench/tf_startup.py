"""TensorFlow start-up: the CPU time a fresh process spends importing ml_dtypes and TensorFlow
(with Keras), as every training, evaluation and serving step pays it.

Each figure is the median over ``--runs`` fresh processes of the child's user+system CPU
seconds (``resource.getrusage`` after the import), so the machine's other load moves it
little. With ``--baseline DIR`` the same imports also run with ``DIR`` first on
``PYTHONPATH`` (a folder holding another ml_dtypes, say: ``pip install --target DIR
ml_dtypes==0.7.0``), alternating with the plain runs, and the ratio baseline/current is
printed.

    python bench/tf_startup.py [--runs 5] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

PROBE = """
import json, resource, time
t = time.perf_counter()
import {module}
wall = time.perf_counter() - t
{extra}
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({{"cpu": usage.ru_utime + usage.ru_stime, "wall": wall,
                  "version": __import__("ml_dtypes").__version__}}))
"""


def one(module: str, extra: str, path: str | None) -> dict:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    if path:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (path, env.get("PYTHONPATH")) if p)
    out = subprocess.run([sys.executable, "-c", PROBE.format(module=module, extra=extra)],
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--baseline", help="a folder put first on PYTHONPATH for the baseline")
    args = parser.parse_args()
    cases = [("ml_dtypes", "ml_dtypes", ""), ("tensorflow + keras", "tensorflow", "import keras")]
    for label, module, extra in cases:
        current, baseline = [], []
        for _ in range(args.runs):
            current.append(one(module, extra, None))
            if args.baseline:
                baseline.append(one(module, extra, args.baseline))
        cpu = statistics.median(r["cpu"] for r in current)
        line = (f"{label:20} ml_dtypes {current[0]['version']}: {cpu:.2f} CPU-s "
                f"(median of {args.runs})")
        if baseline:
            base = statistics.median(r["cpu"] for r in baseline)
            line += (f"; baseline ml_dtypes {baseline[0]['version']}: {base:.2f} CPU-s; "
                     f"ratio {base / cpu:.2f}, {base - cpu:+.2f} CPU-s per process")
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
