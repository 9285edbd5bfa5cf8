"""`sweep.engine: ray` really runs Ray Tune on a local Ray instance under kfp.local: the
trials of the same grid, poor ones stopped early by ASHA (fewer epochs trained in all than
the grid to its end, which is what ParallelFor trains), the best finished trial selected,
evaluated and registered; tracked on a real MLflow server, every trial a nested run of the
pipeline run with its curves logged epoch by epoch as it trained, a stopped trial's run
ended KILLED."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from gkeflow.components import yamlio
from gkeflow.components.register.local_registry import LocalRegistry
from gkeflow.components.sweep.logic import SWEEP_FILE
from tests.cli.test_cli import gkeflow

pytestmark = pytest.mark.slow

EPOCHS = 6
#: With one trial at a time ASHA decides in a fixed order: the first trial (a good rate)
#: trains to its end; the far too low rates fall behind it after their first epoch.
CONFIG = """
parameters: {dev: {}}
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


def test_a_ray_tune_sweep_stops_poor_trials_early_and_registers_the_best(tmp_path,
                                                                        mlflow_server):
    config = yamlio.load(CONFIG)
    config["tracking"] = {"dev": {"mlflow": {"experiment": "ray-sweep",
                                             "tracking_uri": mlflow_server.url}}}
    (tmp_path / "gkeflow.yaml").write_text(yaml.safe_dump(config))
    out = tmp_path / "out"
    result = gkeflow("run", "--pipeline", "sweep", "--config", str(tmp_path / "gkeflow.yaml"),
                     "--env", "dev", "--output", str(out), "--epochs", str(EPOCHS), "--param",
                     "early_stopping_patience=0",
                     # the local registry, not the tracking server's
                     "--param", f"registry_uri=sqlite:///{out}/registry.db", cwd=tmp_path)
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

    # every trial a nested run of the pipeline run, with its curves as it trained
    experiment = mlflow_server.api("experiments/get-by-name",
                                   experiment_name="ray-sweep")["experiment"]
    runs = [mlflow_server.run(r["info"]["run_id"]) for r in
            mlflow_server.search_runs(experiment["experiment_id"], "")]
    trials = {r["tags"].get("gkeflow.task"): r for r in runs
              if r["tags"].get("gkeflow.task", "").startswith("trial-")}
    assert set(trials) == {"trial-000", "trial-001", "trial-002", "trial-003"}
    parent = trials["trial-000"]["tags"]["mlflow.parentRunId"]
    assert {r["tags"]["mlflow.parentRunId"] for r in trials.values()} == {parent}
    first = trials["trial-000"]
    assert first["info"]["status"] == "FINISHED" and first["params"]["learning_rate"] == "0.05"
    points = mlflow_server.metric_points(first["info"]["run_id"], "loss")
    assert [step for step, _, _ in points] == list(range(1, EPOCHS + 1))
    assert len({stamp for _, stamp, _ in points}) == EPOCHS, "each logged as its epoch ended"
    stopped = trials["trial-001"]
    assert stopped["info"]["status"] == "KILLED"
    assert stopped["tags"]["gkeflow.sweep.status"] == "stopped"
    assert trials[best]["tags"]["gkeflow.sweep.best"] == "true"


GBDT = """
sweep:
  engine: ray
  algorithm: random
  max_trials: 3
  parallel_trials: 3
  seed: 7
  parameters:
    gbdt_max_depth: {type: int, min: 2, max: 6}
    gbdt_learning_rate: {type: loguniform, min: 0.02, max: 0.3}
    gbdt_subsample: {type: uniform, min: 0.5, max: 1.0}
"""


def test_a_ray_sweep_of_gradient_boosted_trees_over_three_parameters(tmp_path):
    """An integer, a log-uniform and a uniform parameter of the trees, three trials at once:
    each trial trains gbdt with its own values (in its report and its model), none fails on
    a type, and the best is registered."""
    (tmp_path / "gkeflow.yaml").write_text(GBDT)
    out = tmp_path / "out"
    result = gkeflow("run", "--pipeline", "sweep", "--model-type", "gbdt", "--config",
                     str(tmp_path / "gkeflow.yaml"), "--output", str(out), "--param",
                     f"registry_uri=sqlite:///{out}/registry.db", cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "Traceback" not in result.stdout + result.stderr
    [version] = LocalRegistry(out / "registry.db").list(name="penguins-classifier")
    summary = json.loads((Path(version.uri) / SWEEP_FILE).read_text())
    rows = summary["trials"]
    assert len(rows) == 3 and {row["status"] for row in rows} == {"succeeded"}
    depths = [row["gbdt_max_depth"] for row in rows]
    assert all(isinstance(d, int) and 2 <= d <= 6 for d in depths), rows
    assert all(0.5 <= row["gbdt_subsample"] <= 1.0 for row in rows)
    assert all(0.02 <= row["gbdt_learning_rate"] <= 0.3 for row in rows)
    assert len({row["trial_id"] for row in rows}) == 3
    model = json.loads((Path(version.uri) / "gkeflow_model.json").read_text())
    assert model["model_family"] == "gbdt", model


@pytest.mark.parametrize("algorithm", ["grid", "random", "bayesian"])
def test_ray_searches_integer_list_and_real_parameters_together(tmp_path, algorithm):
    """batch_size (an integer), hidden_units (layer sizes) and learning_rate (a real) in one
    search space, on each search algorithm: every trial trains with values of its
    parameter's type and the best is registered."""
    config = {"sweep": {"engine": "ray", "algorithm": algorithm, "max_trials": 2,
                        "parallel_trials": 2, "seed": 3, "parameters": {
                            "batch_size": ({"type": "choice", "values": [16, 32]}
                                           if algorithm != "grid" else
                                           {"type": "int", "min": 16, "max": 16}),
                            "hidden_units": {"type": "choice", "values": ["16", "32,16"]},
                            "learning_rate": ({"type": "choice", "values": [0.01]}
                                              if algorithm == "grid" else
                                              {"type": "loguniform", "min": 0.005,
                                               "max": 0.05})}}}
    (tmp_path / "gkeflow.yaml").write_text(yaml.safe_dump(config))
    out = tmp_path / "out"
    result = gkeflow("run", "--pipeline", "sweep", "--config", str(tmp_path / "gkeflow.yaml"),
                     "--output", str(out), "--epochs", "1", "--param",
                     f"registry_uri=sqlite:///{out}/registry.db", cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "Traceback" not in result.stdout + result.stderr
    [version] = LocalRegistry(out / "registry.db").list(name="penguins-classifier")
    rows = json.loads((Path(version.uri) / SWEEP_FILE).read_text())["trials"]
    # none fails (a type the trial cannot take would); the scheduler may stop one early
    statuses = [row["status"] for row in rows]
    assert len(rows) == 2 and "succeeded" in statuses and "failed" not in statuses, rows
    for row in rows:
        assert row["batch_size"] in (16, 32) and isinstance(row["batch_size"], int)
        assert str(row["hidden_units"]).replace(" ", "") in ("16", "32,16", "[16]", "[32,16]")
        assert 0.005 <= float(row["learning_rate"]) <= 0.05
