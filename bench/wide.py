"""Wide and long tables through `gkeflow run`: the training steps' and evaluate-model's
seconds for 300 rows x 2,000 numeric columns and 3,000 rows x 20, with the Keras model alone
(`--model-type mlp`) and the default (`auto`: gbdt, mlp and linear, each in a step of its
own, then train-model choosing), with the steps started each way of :data:`VARIANTS` (one
at a time and side by side, each a fresh Python or a fork of one that imported TensorFlow).
train_evaluate_s: from the first training step's start to evaluate-model's end; run_s: the
whole `gkeflow run`.

    python bench/wide.py                          # every variant
    python bench/wide.py side-fresh side-forked   # those only
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

SHAPES = ((300, 2000), (3000, 20))


def make_table(path: Path, rows: int, columns: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, columns))
    y = np.where(x[:, 0] + x[:, 1] - x[:, 2] + rng.normal(0, 0.3, rows) > 0, "yes", "no")
    with open(path, "w") as out:
        out.write(",".join([f"c{i}" for i in range(columns)] + ["label"]) + "\n")
        for values, label in zip(x, y, strict=True):
            out.write(",".join(f"{v:.4f}" for v in values) + f",{label}\n")


STAMP = re.compile(r"^(\d\d):(\d\d):(\d\d\.\d+) - INFO - (Executing task|Task) '([^']+)'")


def step_seconds(output: str, step: str) -> float:
    found = re.search(rf"✓ {step} success in ([0-9.]+)s", output)
    return float(found.group(1)) if found else float("nan")


def train_evaluate_wall(log: Path) -> float:
    """Seconds from the first training step's start to evaluate-model's end, read from the
    run's log (kfp.local stamps each task's start and end): the candidates' steps run side
    by side where the machine allows, so their seconds do not add up."""
    first = last = None
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        found = STAMP.match(re.sub(r"\x1b\[[0-9;]*m", "", line))
        if not found:
            continue
        hours, minutes, seconds, kind, task = found.groups()
        at = int(hours) * 3600 + int(minutes) * 60 + float(seconds)
        if kind == "Executing task" and task.startswith("train-") and first is None:
            first = at
        if kind == "Task" and task == "evaluate-model":
            last = at
    return float("nan") if first is None or last is None else (last - first) % 86400


#: How the steps start: one at a time, each a fresh Python (kfp.local's own way); side by
#: side, each fresh; side by side, each a fork of one process that imported TensorFlow (the
#: default of `gkeflow run`).
VARIANTS = {
    "one-fresh": {"GKEFLOW_LOCAL_STEPS": "1", "GKEFLOW_LOCAL_FORKS": "0"},
    "side-fresh": {"GKEFLOW_LOCAL_FORKS": "0"},
    "side-forked": {},
}


def main() -> None:
    variants = sys.argv[1:] or list(VARIANTS)
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"unknown variant(s) {', '.join(unknown)}: choose among "
                         f"{', '.join(VARIANTS)}")
    with tempfile.TemporaryDirectory(prefix="gkeflow-bench-wide-") as scratch:
        for rows, columns in SHAPES:
            data = Path(scratch) / f"t{rows}x{columns}.csv"
            make_table(data, rows, columns)
            for model_type in ("mlp", "auto"):
                for variant in variants:
                    env = {k: v for k, v in os.environ.items()
                           if k not in ("GKEFLOW_LOCAL_STEPS", "GKEFLOW_LOCAL_FORKS")}
                    done = subprocess.run(
                        [sys.executable, "-m", "gkeflow.pipelines.cli.main", "run", "--data",
                         str(data), "--label", "label", "--model-type", model_type,
                         "--no-cache", "--output", str(Path(scratch) / "out")],
                        capture_output=True, text=True, check=True,
                        env={**env, **VARIANTS[variant]})
                    log = Path(re.search(r"Log:\s+(\S+)", done.stdout).group(1))
                    total = re.search(r"Total:\s+([0-9.]+)s", done.stdout)
                    print(f"rows={rows} columns={columns} model_type={model_type} "
                          f"steps={variant} "
                          f"evaluate_s={step_seconds(done.stdout, 'evaluate-model'):.1f} "
                          f"train_evaluate_s={train_evaluate_wall(log):.1f} "
                          f"run_s={float(total.group(1)) if total else float('nan'):.1f}",
                          flush=True)


if __name__ == "__main__":
    main()
