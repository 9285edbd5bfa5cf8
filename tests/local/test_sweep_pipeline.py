"""`gkeflow run --pipeline sweep --deploy` really runs under kfp.local: four trials, two at
a time, a failing trial tolerated, the best trial chosen on the eval split, registered and
deployed to the local stand-in, which answers like the evaluation."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from gkeflow.components.register.local_registry import LocalRegistry
from gkeflow.components.sweep.logic import SWEEP_FILE
from tests.cli.test_cli import gkeflow

pytestmark = pytest.mark.slow

#: The pipeline's default learning rate (0.01) is not the best in 3 epochs on this data;
#: 1e-5 is far too low; hidden_units "0" makes trial-003 fail while training.
TRIALS = [
    {"trial_id": "trial-000", "learning_rate": 0.00001, "hidden_units": "16"},
    {"trial_id": "trial-001", "learning_rate": 0.01, "hidden_units": "16"},
    {"trial_id": "trial-002", "learning_rate": 0.3, "hidden_units": "16"},
    {"trial_id": "trial-003", "learning_rate": 0.01, "hidden_units": "0"},
]


def _separable_csv(path: Path, rows: int = 200) -> Path:
    rng = random.Random(3)
    lines = ["x1,x2,noise,colour,label"]
    for _ in range(rows):
        x1, x2 = rng.uniform(-1, 1), rng.uniform(-1, 1)
        label = "pos" if x1 + 0.5 * x2 > 0 else "neg"
        lines.append(f"{x1:.4f},{x2:.4f},{rng.uniform(0, 5):.3f},"
                     f"{rng.choice(['red', 'blue'])},{label}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _max_concurrent(log: str, step: str) -> int:
    running = peak = 0
    for line in re.sub(r"\x1b\[[0-9;]*m", "", log).splitlines():
        if f"Executing task '{step}'" in line:
            running += 1
            peak = max(peak, running)
        elif f"Task '{step}' finished" in line:
            running -= 1
    return peak


def test_sweep_picks_the_best_trial_tolerates_a_failed_one_registers_and_deploys_it(tmp_path):
    data = _separable_csv(tmp_path / "separable.csv")
    out = tmp_path / "out"
    result = gkeflow(
        "run", "--pipeline", "sweep", "--data", str(data), "--label", "label",
        "--output", str(out), "--epochs", "3", "--min-accuracy", "0.5",
        "--sweep-param", "learning_rate=0.00001,0.01,0.3", "--sweep-param", "hidden_units=16",
        "--search", "grid", "--parallel-trials", "2", "--metric", "eval_loss",
        "--param", f"trials={json.dumps(TRIALS)}", "--deploy")
    assert result.returncode == 0, result.stdout + result.stderr
    stdout = result.stdout
    assert "sweep of 4 trials, 2 at a time" in stdout
    # the header that names the run comes first, then the data's task under it
    assert stdout.index("gkeflow run: sweep of") < stdout.index("task: classification")
    # the trial table, best first, the failed trial last with its error
    order = [m.group(1) for m in re.finditer(r"│\s+\d*\s+│ (trial-\d{3}) │", stdout)]
    assert sorted(order) == [t["trial_id"] for t in TRIALS] and order[-1] == "trial-003", stdout
    best = order[0]
    assert f"Best trial: {best}" in stdout and "Received: units=0" in stdout
    assert "select-best-trial/best_model (with sweep.json)" in " ".join(stdout.split())
    assert all(re.search(rf"│ train-model{n}\s+│ SUCCESS", stdout)
               for n in ("", " #2", " #3", " #4"))  # every trial in the steps table

    run_dir = next((out / "runs").glob("gkeflow-sweep-*"))
    table = json.loads(json.loads((run_dir / "select-best-trial" / "executor_output.json")
                                  .read_text())["parameterValues"]["table"])
    losses = {row["trial_id"]: row["eval_loss"] for row in table}
    assert losses["trial-003"] is None
    # best first: the table is sorted by the metric, and the chosen trial has the lowest
    assert [losses[t] for t in order[:3]] == sorted(losses[t] for t in order[:3])
    assert losses["trial-000"] > losses[best]  # a rate of 1e-5 learns nothing in 3 epochs

    log = next((out / "logs").iterdir()).read_text()
    # trials ran side by side; kfp.local logs a task's end from its orchestrating thread,
    # after its pool may have started the next trial, so the log can show one more than
    # the limit for an instant: the limit itself is checked in the spec below
    assert _max_concurrent(log, "train-model") >= 2
    from gkeflow.pipelines.definitions.sweep import build_sweep_pipeline, default_sweep

    spec = build_sweep_pipeline("local", sweep=default_sweep().model_copy(
        update={"parallel_trials": 2})).pipeline_spec
    dags = [spec.root.dag, *(c.dag for c in spec.components.values() if c.HasField("dag"))]
    assert [task.iterator_policy.parallelism_limit for dag in dags
            for task in dag.tasks.values() if task.HasField("iterator_policy")] == [2]

    versions = LocalRegistry(out / "registry.db").list(name="separable-classifier")
    assert len(versions) == 1
    rate = next(t["learning_rate"] for t in TRIALS if t["trial_id"] == best)
    assert {k: v for k, v in versions[0].labels.items() if not k.startswith("gkeflow-")} == {
        "sweep-trial": best, "hp-learning_rate": f"{rate:g}".replace(".", "_"),
        "hp-hidden_units": "16", "model_family": "mlp"}
    # what it was trained on and with, resolved at run time: the trials and the best one
    assert versions[0].lineage["training_key"].startswith("sha256:")
    registered = Path(versions[0].uri)
    summary = json.loads((registered / SWEEP_FILE).read_text())
    assert summary["best_trial"] == best
    assert summary["hyperparameters"] == {"learning_rate": rate, "hidden_units": "16"}
    assert [r["trial_id"] for r in summary["trials"]] == order
    assert (registered / "saved_model.pb").is_file()
    card = (run_dir / "evaluate-model" / "model_card").read_text()
    assert "## Hyperparameter sweep" in card and f"**{best}**" in card
    # each trial trained apart, reporting under its own id (its checkpoint key) and model
    reports = [json.loads(json.loads((run_dir / f"for-loop-1-iteration-{i}" / "train-model" /
                                      "executor_output.json").read_text())
                          ["parameterValues"]["Output"]) for i in range(4)]
    assert sorted(r["trial_id"] for r in reports) == [t["trial_id"] for t in TRIALS]
    assert len({r["model_uri"] for r in reports}) == 4

    # the deploy stage served the registered best trial; the stand-in answers as evaluated
    name = "separable-classifier"
    assert f"Deployed:  {name} (local stand-in): {name}@1 100%" in stdout
    request = out / "requests" / f"{name}.json"
    asked = gkeflow("deploy", "local", name, "--output", str(out), "--request", str(request))
    assert asked.returncode == 0, asked.stderr
    answer = json.loads(asked.stdout.strip().splitlines()[-1])
    expected = json.loads((out / "requests" / f"{name}.expected.json").read_text())
    assert answer["classes"] == expected["classes"] and answer["model_version"] == 1
