"""Choosing the best trial: direction, deterministic ties, failed trials, the exported model."""

from __future__ import annotations

import json
import math

import pytest

from gkeflow.components.sweep.logic import (
    SWEEP_FILE,
    NoSuccessfulTrial,
    export_best_model,
    registry_labels,
    select,
    sweep_card_section,
)
from gkeflow.components.train.report import trial_report

TRIALS = [{"trial_id": f"trial-{i:03d}", "learning_rate": lr, "batch_size": float(bs)}
          for i, (lr, bs) in enumerate([(1e-5, 32), (0.01, 32), (0.1, 64), (0.3, 16)])]


def _report(i: int, accuracy: float | None = None, loss: float = 0.5, error: str = "") -> str:
    metrics = {} if accuracy is None else {"eval_accuracy": accuracy, "eval_loss": loss}
    return trial_report(f"trial-{i:03d}", f"/models/{i}", metrics, error)


def test_best_by_direction_and_table_sorted_best_first():
    reports = [_report(0, 0.4, 1.2), _report(1, 0.8, 0.4), _report(2, 0.9, 0.6),
               _report(3, 0.7, 0.3)]
    best = select(TRIALS, reports, "eval_accuracy", "maximize")
    assert best.best.trial_id == "trial-002"
    assert [r["trial_id"] for r in best.rows] == ["trial-002", "trial-001", "trial-003",
                                                  "trial-000"]
    assert [r["rank"] for r in best.rows] == [1, 2, 3, 4]
    by_loss = select(TRIALS, reports, "eval_loss", "minimize")
    assert by_loss.best.trial_id == "trial-003"
    # integers come back as integers; only the varying hyperparameters are columns
    assert best.best.hyperparameters == {"learning_rate": 0.1, "batch_size": 64}
    assert set(best.rows[0]) == {"rank", "trial_id", "status", "eval_accuracy",
                                 "learning_rate", "batch_size", "error"}


def test_regressor_trials_named_on_accuracy_are_compared_on_rmse_lower_first(capsys):
    reports = [trial_report(f"trial-{i:03d}", f"/models/{i}",
                            {"eval_rmse": rmse, "eval_loss": 0.1})
               for i, rmse in enumerate([310.0, 250.0, 420.0, 275.0])]
    best = select(TRIALS, reports, "eval_accuracy", "maximize")
    assert (best.metric, best.direction) == ("eval_rmse", "minimize")
    assert best.best.trial_id == "trial-001"
    assert [r["eval_rmse"] for r in best.rows] == [250.0, 275.0, 310.0, 420.0]
    assert "compared on eval_rmse, minimized" in capsys.readouterr().out
    # a classifier's trials stay on the metric named
    assert select(TRIALS, [_report(0, 0.4), _report(1, 0.8)], "eval_accuracy",
                  "maximize").metric == "eval_accuracy"


def test_ties_go_to_the_lower_trial_id_whatever_the_report_order():
    reports = [_report(3, 0.9), _report(1, 0.9), _report(2, 0.9), _report(0, 0.5)]
    for order in (reports, list(reversed(reports))):
        assert select(TRIALS, order, "eval_accuracy", "maximize").best.trial_id == "trial-001"


def test_failed_missing_and_nan_trials_rank_last_and_do_not_stop_the_sweep():
    reports = [_report(0, error="ValueError: batch_size must be >= 1"), _report(2, 0.6),
               _report(3, math.nan), None]
    selection = select(TRIALS, reports, "eval_accuracy", "maximize")
    assert selection.best.trial_id == "trial-002"
    rows = {r["trial_id"]: r for r in selection.rows}
    assert rows["trial-000"]["status"] == "failed" and rows["trial-000"]["rank"] is None
    assert "batch_size must be >= 1" in rows["trial-000"]["error"]
    assert rows["trial-001"]["status"] == "missing"
    assert rows["trial-003"]["eval_accuracy"] is None
    assert [r["trial_id"] for r in selection.rows][0] == "trial-002"
    assert selection.summary()["failed"] == 3 and selection.summary()["succeeded"] == 1


def test_every_trial_failed_is_an_error_naming_each_trial():
    reports = [_report(i, error=f"RuntimeError: boom {i}") for i in range(4)]
    with pytest.raises(NoSuccessfulTrial) as info:
        select(TRIALS, reports, "eval_accuracy", "maximize")
    assert "every trial failed" in str(info.value)
    assert all(f"trial-{i:03d}: RuntimeError: boom {i}" in str(info.value) for i in range(4))


def test_bad_direction_is_refused():
    with pytest.raises(ValueError, match="maximize or minimize"):
        select(TRIALS, [_report(0, 0.5)], "eval_accuracy", "up")


def test_exported_model_carries_the_sweep_and_the_card_shows_it(tmp_path):
    for i in range(4):
        (tmp_path / f"m{i}").mkdir()
        (tmp_path / f"m{i}" / "saved_model.pb").write_text(f"model {i}")
    reports = [_report(i, 0.5 + i / 10) for i in range(3)] + [_report(3, error="boom")]
    selection = select(TRIALS, reports, "eval_accuracy", "maximize",
                       tuned=["learning_rate"])
    out = export_best_model(selection, {f"/models/{i}": tmp_path / f"m{i}" for i in range(4)},
                            tmp_path / "best")
    assert (out / "saved_model.pb").read_text() == "model 2"
    summary = json.loads((out / SWEEP_FILE).read_text())
    assert summary["best_trial"] == "trial-002" and summary["hyperparameters"]["batch_size"] == 64
    assert [r["trial_id"] for r in summary["trials"]][-1] == "trial-003"
    assert not (tmp_path / "best.partial").exists()
    card = sweep_card_section(out)
    assert "## Hyperparameter sweep" in card and "**trial-002**" in card
    assert "| 1 | trial-002 | succeeded | 0.7000 | 0.1 |" in card and "boom" in card
    assert sweep_card_section(tmp_path / "m0") == ""
    with pytest.raises(FileNotFoundError, match="trial-002"):
        export_best_model(selection, {}, tmp_path / "nowhere")


def test_the_winner_becomes_registry_labels_every_registry_accepts():
    from gkeflow.components.register.logic import parse_labels
    from gkeflow.components.register.names import validate_labels

    trials = [{"trial_id": "trial-000", "learning_rate": 1e-05, "hidden_units": "64,32",
               "batch_size": 64.0}]
    labels = registry_labels(select(trials, [_report(0, 0.5)], "eval_accuracy", "maximize"))
    assert labels == ("sweep-trial=trial-000,hp-batch_size=64,hp-hidden_units=64-32,"
                      "hp-learning_rate=1e-05")
    validate_labels(parse_labels(labels))
    assert registry_labels(select(TRIALS, [_report(2, 0.9)], "eval_accuracy", "maximize")) == (
        "sweep-trial=trial-002,hp-batch_size=64,hp-learning_rate=0_1")
