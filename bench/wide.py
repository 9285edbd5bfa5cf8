"""Wide and long tables through `gkeflow run`: the training steps' and evaluate-model's
seconds for 300 rows x 2,000 numeric columns and 3,000 rows x 20, with the Keras model alone
(`--model-type mlp`) and the default (`auto`: gbdt, mlp and linear, each in a step of its
own, then train-model choosing). train_s adds up every training step (kfp.local runs them
one after the other; on a cluster the candidates run side by side: longest_train_s is then
the longest candidate plus the choice).

    python bench/wide.py
"""

from __future__ import annotations

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


def step_seconds(output: str, step: str) -> float:
    found = re.search(rf"✓ {step} success in ([0-9.]+)s", output)
    return float(found.group(1)) if found else float("nan")


def training_seconds(output: str) -> tuple[float, float]:
    """(every training step's seconds added up, the longest candidate's plus the choice)."""
    steps = dict(re.findall(r"✓ (train-[a-z-]+) success in ([0-9.]+)s", output))
    seconds = {step: float(value) for step, value in steps.items()}
    candidates = [value for step, value in seconds.items() if step != "train-model"]
    return sum(seconds.values()), max(candidates, default=0.0) + seconds.get("train-model", 0.0)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="gkeflow-bench-wide-") as scratch:
        for rows, columns in SHAPES:
            data = Path(scratch) / f"t{rows}x{columns}.csv"
            make_table(data, rows, columns)
            for model_type in ("mlp", "auto"):
                done = subprocess.run(
                    [sys.executable, "-m", "gkeflow.pipelines.cli.main", "run", "--data",
                     str(data), "--label", "label", "--model-type", model_type, "--no-cache",
                     "--output", str(Path(scratch) / "out")],
                    capture_output=True, text=True, check=True)
                train, longest = training_seconds(done.stdout)
                evaluate = step_seconds(done.stdout, "evaluate-model")
                print(f"rows={rows} columns={columns} model_type={model_type} "
                      f"train_s={train:.1f} longest_train_s={longest:.1f} "
                      f"evaluate_s={evaluate:.1f} train_evaluate_s={train + evaluate:.1f}",
                      flush=True)


if __name__ == "__main__":
    main()
