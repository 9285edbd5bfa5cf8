"""Wall and process CPU time of the prepare logic on one CSV, for A/B comparisons of two
checkouts on the same file (run each in turn, alternating).

Usage: ``.venv/bin/python bench/prepare_ab.py FILE LABEL [--runs N]``; the file comes from
``bench/prepare.py``'s ``generate`` (label column ``label``).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("file")
    parser.add_argument("name", help="what to call this checkout in the output")
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    from gkeflow.components.prepare.logic import prepare

    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            started, cpu = time.perf_counter(), time.process_time()
            result = prepare(args.file, Path(tmp) / "out", "label")
            print(f"{args.name}: wall {time.perf_counter() - started:.2f}s, CPU "
                  f"{time.process_time() - cpu:.2f}s, rows {result.rows_read}", flush=True)


if __name__ == "__main__":
    main()
