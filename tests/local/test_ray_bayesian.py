"""`algorithm: bayesian` with `engine: ray` really searches with Optuna's TPE sampler on a
local Ray instance: the trials are listed in the order the search made them, each with
hyperparameters drawn inside the declared space (typed as training takes them), every one
reported, and the best one selectable like any sweep's."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("ray", reason="Ray Tune is not installed (pip install -e '.[dev]')")
pytest.importorskip("optuna", reason="Optuna is not installed (pip install -e '.[dev]')")
pytestmark = pytest.mark.slow

SPACE = {"learning_rate": {"type": "loguniform", "min": 0.001, "max": 0.1},
         "batch_size": {"type": "int", "min": 16, "max": 32, "step": 16},
         "hidden_units": {"type": "choice", "values": ["8", "8,4"]},
         "epochs": {"type": "int", "min": 1, "max": 2}}


def test_a_bayesian_search_draws_each_trial_inside_the_space(prepared_penguins, tmp_path):
    from gkeflow.components.sweep.logic import select
    from gkeflow.components.sweep.ray_settings import TuneSettings
    from gkeflow.components.sweep.ray_tune import run_tune
    from gkeflow.pipelines.settings.sweep_config import expand_trials, parse_sweep

    sweep = parse_sweep({"engine": "ray", "algorithm": "bayesian", "max_trials": 3,
                         "parallel_trials": 1, "seed": 7, "parameters": SPACE})
    trials = expand_trials(sweep)
    assert trials == [{"trial_id": f"trial-00{i}"} for i in range(3)], "ids only"
    dataset_dir, prepared = prepared_penguins
    (tmp_path / "schema.json").write_text(prepared.schema.to_json())
    lines: list[str] = []
    ran, reports = run_tune(
        dataset_dir, tmp_path / "schema.json", trials,
        {"early_stopping_patience": 0},
        TuneSettings(scheduler="none", parallel_trials=1, search="bayesian", seed=7),
        tmp_path / "out", echo=lines.append, space=sweep.model_dump()["parameters"])
    assert "Bayesian search (Optuna TPE)" in lines[0]
    ids = [t["trial_id"] for t in ran]
    assert len(set(ids)) == 3 and all(i.startswith("trial-") for i in ids)
    for trial in ran:
        assert 0.001 <= trial["learning_rate"] <= 0.1
        assert trial["batch_size"] in (16, 32) and trial["epochs"] in (1, 2)
        assert trial["hidden_units"] in ("8", "8,4")
        assert isinstance(trial["epochs"], int)
    assert len({t["learning_rate"] for t in ran}) == 3, "each trial drawn anew"
    parsed = [json.loads(r) for r in reports]
    assert [r["trial_id"] for r in parsed] == ids
    assert all(r["status"] == "succeeded" for r in parsed)
    assert [r["metrics"]["epochs_run"] for r in parsed] == [t["epochs"] for t in ran]
    selection = select(ran, reports, "eval_accuracy", "maximize", list(SPACE))
    assert selection.best.trial_id in {t["trial_id"] for t in ran}
    assert set(selection.rows[0]) >= {"learning_rate", "batch_size", "epochs"}
