"""The trees' minimum leaf weight (``gbdt_min_child_weight``; for squared error, the fewest
rows in a leaf) on the regression tables of ``bench/quality.py``, each over 3 splits (as
``--splits 3``): gkeflow's ``gbdt`` test RMSE against the best of the three default GBDT
baselines, averaged over the splits, per table and as a geometric mean. About 3 minutes.

    python bench/gbdt_leaf_weight.py                 # 1, 5 and 20
    python bench/gbdt_leaf_weight.py --weights 1,3 --tables hitters,boston
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import quality  # noqa: E402  (bench/quality.py: the tables and their splits)

GBDT_BASELINES = ("xgboost", "lightgbm", "hist_gb")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--weights", default="1,5,20")
    parser.add_argument("--tables", default="", help="comma-separated; default every "
                        "regression table")
    parser.add_argument("--splits", type=int, default=3)
    args = parser.parse_args(argv)
    weights = [float(w) for w in args.weights.split(",")]
    ratios: dict[tuple[str, float], list[float]] = {}
    names = []
    with tempfile.TemporaryDirectory(prefix="gkeflow-leaf-weight-") as scratch:
        for table in quality.TABLES:
            if args.tables and table.name not in args.tables.split(","):
                continue
            for split in range(args.splits):
                for weight in weights:
                    work = Path(scratch) / f"{table.name}-{split}-{weight}"
                    work.mkdir()
                    with contextlib.redirect_stdout(io.StringIO()):
                        result = quality.run_table(
                            table, ["gbdt"], list(GBDT_BASELINES), work, split,
                            settings={"gbdt_min_child_weight": weight})
                    if result["task"] != "regression":
                        break
                    models = result["models"]
                    best = min(quality.primary(models[b]) for b in GBDT_BASELINES)
                    ratios.setdefault((table.name, weight), []).append(
                        quality.primary(models["gkeflow_gbdt"]) / best)
            if (table.name, weights[0]) in ratios:
                names.append(table.name)
    for weight in weights:
        per = [sum(ratios[n, weight]) / len(ratios[n, weight]) for n in names]
        mean = math.exp(sum(map(math.log, per)) / len(per))
        print(f"min_child_weight={weight:g}: geomean {mean:.3f}; "
              + " ".join(f"{n}={r:.3f}" for n, r in zip(names, per, strict=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
