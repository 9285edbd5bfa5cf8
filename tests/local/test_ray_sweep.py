"""`sweep.engine: ray` really runs Ray Tune on a local Ray instance under kfp.local: the
trials of the same grid, poor ones stopped early by ASHA (fewer epochs trained in all than
the grid to its end, which is what ParallelFor trains), the best finished trial selected,
evaluated and registered."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gkeflow.components.register.local_registry import LocalRegistry
from gkeflow.components.sweep.logic import SWEEP_FILE
from tests.cli.test_cli import gkeflow

pytestmark = pytest.mark.slow

EPOCHS = 6
#: With one trial at a time ASHA decides in a fixed order: the first trial (a good rate)
#: trains to its end; the far too low rates fall behind it after their first epoch.
CONFIG = """
sweep:
  engine: ray
  scheduler: asha
  algorithm: grid
  max_trials: 4
  parallel_trials: 1
  metric: eval_accuracy
  parameters:
    learning_rate: {type: choice, values: [0.05, 0.00002, 0.00005, 0.03]}
"""


def test_a_ray_tune_sweep_stops_poor_trials_early_and_registers_the_best(tmp_path):
    (tmp_path / "gkeflow.yaml").write_text(CONFIG)
    out = tmp_path / "out"
    result = gkeflow("run", "--pipeline", "sweep", "--config", str(tmp_path / "gkeflow.yaml"),
                     "--output", str(out), "--epochs", str(EPOCHS), "--param",
                     "early_stopping_patience=0", cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    stdout = " ".join(result.stdout.split())
    assert "sweep of 4 trials, 1 at a time" in stdout
    [log] = (out / "logs").glob("run-*.log")
    found = re.search(r"Ray Tune: (\d+) of 4 trials stopped early; (\d+) epochs trained in all "
                      r"\(every trial to its end: (\d+) at most\)", log.read_text())
    assert found, log.read_text()[-4000:]
    stopped, trained, grid = map(int, found.groups())
    # ParallelFor trains the same grid to its end: 4 x EPOCHS epochs
    assert grid == 4 * EPOCHS and stopped >= 1 and trained < grid
    assert f"{stopped} of 4 trials stopped early by the scheduler" in stdout
    assert "stopped early by the scheduler after 1 epoch(s)" in stdout
    assert re.search(r"Best trial: trial-00[03]", stdout), stdout[-3000:]
    [version] = LocalRegistry(out / "registry.db").list(name="penguins-classifier")
    best = version.labels["sweep-trial"]
    assert best in ("trial-000", "trial-003")  # a finished trial with a good rate
    summary = json.loads((Path(version.uri) / SWEEP_FILE).read_text())
    statuses = {row["trial_id"]: row["status"] for row in summary["trials"]}
    assert statuses["trial-000"] == "succeeded" and statuses["trial-001"] == "stopped"
    assert (Path(version.uri) / "saved_model.pb").is_file()
