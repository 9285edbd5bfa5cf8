"""model_type linear (ridge and logistic regression, exported as the raw-feature SavedModel)
and model_type auto (the candidates trained, the best on the eval split kept, said why,
a failed candidate left out)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gkeflow.components.train.params import TrainParams


def test_ridge_solves_the_penalised_least_squares_problem():
    from gkeflow.components.train.linear import fit_ridge

    rng = np.random.default_rng(3)
    x = rng.normal(size=(200, 4))
    z = x @ np.array([1.0, -2.0, 0.5, 0.0]) + 0.7 + rng.normal(0, 0.1, 200)
    for l2 in (0.0001, 0.3):
        weights = fit_ridge(x, z, l2)
        residual = x @ weights[:-1, 0] + weights[-1, 0] - z
        # the penalised normal equations hold: the gradient is zero (bias unpenalised)
        np.testing.assert_allclose(x.T @ residual / 200 + l2 * weights[:-1, 0], 0, atol=1e-8)
        assert abs(residual.mean()) < 1e-8
    assert np.abs(fit_ridge(x, z, 0.3)[:-1]).sum() < np.abs(fit_ridge(x, z, 0.0001)[:-1]).sum()


def test_logistic_regression_reaches_its_optimum():
    from gkeflow.components.train.linear import fit_logistic, softmax

    rng = np.random.default_rng(4)
    x = rng.normal(size=(300, 3))
    y = np.argmax(x @ rng.normal(size=(3, 3)) + rng.normal(0, 0.5, (300, 3)), axis=1)
    l2 = 0.01
    weights = fit_logistic(x, y, 3, l2)
    probabilities = softmax(x @ weights[:-1] + weights[-1])
    onehot = np.eye(3)[y]
    gradient = x.T @ (probabilities - onehot) / 300 + l2 * weights[:-1]
    np.testing.assert_allclose(gradient, 0, atol=1e-4)
    np.testing.assert_allclose((probabilities - onehot).mean(axis=0), 0, atol=1e-4)
    assert np.mean(probabilities.argmax(axis=1) == y) > 0.7


@pytest.mark.parametrize("label", ["species", "body_mass_g"])
def test_linear_model_exports_a_raw_feature_savedmodel(label, tmp_path):
    from gkeflow.components.prepare.logic import EMBEDDED_PENGUINS, prepare
    from gkeflow.components.train.exported import ExportedModel
    from gkeflow.components.train.linear import L2_GRID
    from gkeflow.components.train.logic import train

    prepared = prepare(EMBEDDED_PENGUINS, tmp_path / "dataset", label)
    result = train(tmp_path / "dataset", prepared.schema, tmp_path / "model",
                   TrainParams(model_type="linear"))
    metadata = json.loads((tmp_path / "model" / "gkeflow_model.json").read_text())
    assert metadata["model_family"] == "linear" and metadata["l2"] in L2_GRID
    assert set(metadata["l2_eval_losses"]) == {f"{v:g}" for v in L2_GRID}
    model = ExportedModel(tmp_path / "model")
    rows = [{"species": "Gentoo", "island": "Biscoe", "bill_length_mm": 48.0,
             "bill_depth_mm": 15.0, "flipper_length_mm": 222.0, "body_mass_g": 5500.0,
             "sex": "male"}, {}]
    predicted = model.predict_rows(rows)
    if label == "species":
        assert result.metrics["eval_accuracy"] > 0.9 and predicted[0] == "Gentoo"
    else:
        assert result.metrics["eval_rmse"] < 450 and 4800 < predicted[0] < 6500
        assert 3000 < predicted[1] < 5500  # all missing: near the mean


def test_auto_keeps_the_best_candidate_on_the_eval_split(prepared_penguins, tmp_path):
    from gkeflow.components.train.exported import ExportedModel
    from gkeflow.components.train.logic import train

    dataset_dir, prepared = prepared_penguins
    result = train(dataset_dir, prepared.schema, tmp_path / "model",
                   TrainParams(model_type="auto", epochs=3, gbdt_rounds=100),
                   checkpoint_dir=tmp_path / "checkpoints")
    metadata = json.loads((tmp_path / "model" / "gkeflow_model.json").read_text())
    selection = metadata["model_selection"]
    assert selection["metric"] == "eval_loss"
    assert list(selection["candidates"]) == ["gbdt", "mlp", "linear"]
    losses = {n: c["eval_loss"] for n, c in selection["candidates"].items()}
    assert selection["chosen"] == min(losses, key=losses.get)
    # the winner's own export: trees and linear say their family, a Keras export none
    assert metadata.get("model_family", "keras") == {"gbdt": "gbdt", "linear": "linear"}.get(
        selection["chosen"], "keras")
    assert result.metrics["eval_loss"] == pytest.approx(losses[selection["chosen"]])
    assert {f"candidate_{n}_eval_loss" for n in losses} <= set(result.metrics)
    assert result.strategy.startswith(f"auto: {selection['chosen']} (")
    assert "the eval split" in selection["reason"]
    assert ExportedModel(tmp_path / "model").predict_rows([{"island": "Dream"}])
    assert not (tmp_path / "checkpoints").exists() or not any(
        (tmp_path / "checkpoints").rglob("state.json"))


def test_a_failed_candidate_is_left_out_and_every_failure_fails_the_step(prepared_penguins,
                                                                          tmp_path, capsys):
    from gkeflow.components.train.candidates import NoCandidateTrained
    from gkeflow.components.train.logic import train
    from gkeflow.components.train.regression import LabelTransformError

    dataset_dir, prepared = prepared_penguins
    result = train(dataset_dir, prepared.schema, tmp_path / "model",
                   TrainParams(model_type="auto", candidates="mlp,linear",
                               hidden_units=(0,)))
    printed = capsys.readouterr().out
    assert "gkeflow-progress: candidate mlp failed (ValueError:" in printed
    assert "the others go on" in printed
    assert result.strategy.startswith("auto: linear (")
    selection = json.loads((tmp_path / "model" / "gkeflow_model.json").read_text())[
        "model_selection"]
    assert selection["candidates"]["mlp"]["status"] == "failed"
    with pytest.raises(NoCandidateTrained, match="every candidate failed"):
        train(dataset_dir, prepared.schema, tmp_path / "none",
              TrainParams(model_type="auto", candidates="mlp,wide_deep", hidden_units=(0,)))
    assert not (tmp_path / "none").exists()
    from gkeflow.components.prepare.logic import prepare

    rng = np.random.default_rng(0)
    lines = ["x,y"] + [f"{v:.3f},{v * 2 - 1:.3f}" for v in rng.normal(size=300)]
    (tmp_path / "signed.csv").write_text("\n".join(lines) + "\n")
    signed = prepare(str(tmp_path / "signed.csv"), tmp_path / "signed", "y")
    # a data error fails the step at once, in one line, whichever family meets it first
    with pytest.raises(LabelTransformError, match="needs a positive label"):
        train(tmp_path / "signed", signed.schema, tmp_path / "log",
              TrainParams(model_type="auto", label_transform="log", candidates="linear,gbdt"))


def test_candidates_are_planned_for_the_host():
    from gkeflow.components.train.candidates import plan_candidates

    assert plan_candidates(TrainParams(model_type="auto"), False, 1) == (
        ["gbdt", "mlp", "linear"], [])
    chosen, left_out = plan_candidates(TrainParams(model_type="auto"), True, 1)
    assert chosen == ["mlp"] and left_out[0].startswith("gbdt: trains on CPUs or GPUs")
    chosen, left_out = plan_candidates(TrainParams(model_type="auto", user_module="m.py",
                                                   candidates="gbdt,user"), False, 2)
    assert chosen == ["user"] and "across 2 workers" in left_out[0]
    # a user's module alone trains alone; named among the candidates it is compared
    assert plan_candidates(TrainParams(model_type="auto", user_module="m.py"), False, 1) == (
        ["user"], [])
    assert plan_candidates(TrainParams(model_type="auto", user_module="m.py",
                                       candidates="user,linear"), False, 1) == (
        ["user", "linear"], [])
    with pytest.raises(ValueError, match="unknown model family 'svm'"):
        TrainParams(model_type="auto", candidates="gbdt,svm")


def test_greedy_ensemble_weights_blend_complementary_candidates():
    from gkeflow.components.train.ensemble import eval_error, greedy_weights

    rng = np.random.default_rng(8)
    truth = rng.normal(size=400)
    # two candidates with independent errors, and a poor one
    first, second = truth + rng.normal(0, 1, 400), truth + rng.normal(0, 1, 400)
    poor = truth + rng.normal(0, 3, 400)
    predictions = {"a": first[:, None], "b": second[:, None], "poor": poor[:, None]}
    weights, value = greedy_weights(predictions, truth, regression=True)
    assert sum(weights.values()) == pytest.approx(1.0)
    assert set(weights) >= {"a", "b"} and weights.get("poor", 0) < 0.2
    best_single = min(eval_error(p, truth, True) for p in predictions.values())
    assert value < best_single * 0.85  # averaging independent errors: about 1/sqrt(2)
    # one candidate that is right everywhere takes all the weight
    exact = {"exact": np.eye(3)[[0, 1, 2, 1]] * 0.98 + 0.0066, "b": np.full((4, 3), 1 / 3)}
    weights, _ = greedy_weights(exact, np.array([0, 1, 2, 1]), regression=False)
    assert weights == {"exact": 1.0}


def _auto_on_two_columns(folder, x1, x2, y):
    """``model_type: auto`` with the trees and the linear model on a table x1, x2 -> y: its
    result and gkeflow_model.json."""
    from gkeflow.components.prepare.logic import prepare
    from gkeflow.components.train.logic import train

    (folder / "table.csv").write_text("x1,x2,y\n" + "".join(
        f"{a:.4f},{b:.4f},{c:.4f}\n" for a, b, c in zip(x1, x2, y, strict=True)))
    prepared = prepare(str(folder / "table.csv"), folder / "dataset", "y")
    result = train(folder / "dataset", prepared.schema, folder / "model",
                   TrainParams(model_type="auto", candidates="gbdt,linear"))
    return result, json.loads((folder / "model" / "gkeflow_model.json").read_text())


def test_candidates_the_eval_rows_cannot_tell_apart_are_averaged():
    """The one-standard-error rule: a candidate whose per-row losses exceed the best's by
    less than one standard error of the paired difference is as good, on these rows."""
    from gkeflow.components.train.ensemble import indistinguishable, row_losses

    rng = np.random.default_rng(3)
    truth = rng.normal(size=40)
    a = truth + rng.normal(0, 1.0, 40)
    b = truth + rng.normal(0, 1.05, 40)  # as good, within the noise of 40 rows
    poor = truth + rng.normal(0, 4.0, 40)
    predictions = {"a": a[:, None], "b": b[:, None], "poor": poor[:, None]}
    close = indistinguishable(predictions, truth, regression=True)
    losses = {n: row_losses(p, truth, True) for n, p in predictions.items()}
    for name in ("a", "b"):  # the rule, as the figures give it
        best = min(losses, key=lambda n: losses[n].mean())
        gap = losses[name] - losses[best]
        assert (name in close) == (name == best or gap.mean() < gap.std(ddof=1) / np.sqrt(40))
    assert set(close) == {"a", "b"}
    # with many rows the same gap is real: only the best is left
    truth = rng.normal(size=40000)
    many = {"a": (truth + rng.normal(0, 1.0, 40000))[:, None],
            "b": (truth + rng.normal(0, 1.05, 40000))[:, None]}
    assert indistinguishable(many, truth, regression=True) == ["a"]
    # classes: log loss per row; a candidate sure of the wrong class is told apart
    labels = np.array([0, 1, 2, 1] * 10)
    right = np.eye(3)[labels] * 0.9 + 0.1 / 3
    wrong = np.eye(3)[(labels + 1) % 3] * 0.9 + 0.1 / 3
    assert indistinguishable({"right": right, "wrong": wrong}, labels,
                             regression=False) == ["right"]


def test_auto_averages_candidates_the_eval_split_cannot_tell_apart(tmp_path):
    from gkeflow.components.evaluate.model_card import model_selection_section
    from gkeflow.components.train.exported import ExportedModel

    # a noisy linear target on few rows: trees and the line are equally good on 40 eval rows
    rng = np.random.default_rng(5)
    x1, x2 = rng.uniform(-2, 2, 200), rng.uniform(-2, 2, 200)
    y = 0.3 * x1 + 0.2 * x2 + rng.normal(0, 2.0, 200)
    result, metadata = _auto_on_two_columns(tmp_path, x1, x2, y)
    assert metadata["model_family"] == "ensemble"
    assert metadata["ensemble"] == {"gbdt": 0.5, "linear": 0.5}
    assert "cannot tell gbdt and linear apart" in metadata["model_selection"]["reason"]
    assert "cannot tell gbdt and linear apart" in model_selection_section(tmp_path / "model")
    assert result.strategy.startswith("auto: ensemble of gbdt 0.50, linear 0.50")
    assert np.isfinite(ExportedModel(tmp_path / "model").predict_rows([{"x1": 1.0}])[0])


def test_an_ensemble_serves_the_weighted_average_of_its_members(prepared_penguins, tmp_path):
    from gkeflow.components.deploy.servable import check_servable
    from gkeflow.components.evaluate.logic import evaluate
    from gkeflow.components.train.ensemble import export_ensemble
    from gkeflow.components.train.exported import ExportedModel
    from gkeflow.components.train.logic import train

    dataset_dir, prepared = prepared_penguins
    for family in ("gbdt", "linear"):
        train(dataset_dir, prepared.schema, tmp_path / family,
              TrainParams(model_type=family, gbdt_rounds=50))
    metadata = json.loads((tmp_path / "gbdt" / "gkeflow_model.json").read_text())
    export_ensemble(tmp_path / "blend", {"gbdt": tmp_path / "gbdt",
                                         "linear": tmp_path / "linear"},
                    {"gbdt": 0.7, "linear": 0.3}, {**metadata, "model_family": "ensemble"})
    from gkeflow.components.prepare.reader import load_split
    from gkeflow.components.train.inputs import to_model_inputs

    inputs = to_model_inputs(load_split(dataset_dir, "test", prepared.schema), prepared.schema)
    expected = (0.7 * ExportedModel(tmp_path / "gbdt").predict_proba(inputs)
                + 0.3 * ExportedModel(tmp_path / "linear").predict_proba(inputs))
    np.testing.assert_allclose(ExportedModel(tmp_path / "blend").predict_proba(inputs),
                               expected, rtol=1e-5, atol=1e-6)
    result = evaluate(dataset_dir, prepared.schema, tmp_path / "blend", min_accuracy=0.0)
    assert check_servable(tmp_path / "blend",
                          json.loads(result.to_json())["sample_predictions"]).rows > 0


def test_auto_serves_an_ensemble_when_it_beats_every_candidate(tmp_path):
    from gkeflow.components.evaluate.model_card import model_selection_section
    from gkeflow.components.train.exported import ExportedModel

    # a linear trend with a step: the line suits the linear model, the step the trees
    rng = np.random.default_rng(1)
    x1, x2 = rng.uniform(-2, 2, 300), rng.uniform(-2, 2, 300)
    y = 2 * x1 + 1.5 * x2 + np.where(x2 > 0.5, 1.0, 0.0) + rng.normal(0, 0.5, 300)
    result, metadata = _auto_on_two_columns(tmp_path, x1, x2, y)
    assert metadata["model_family"] == "ensemble"
    assert set(metadata["ensemble"]) == {"gbdt", "linear"}
    assert sum(metadata["ensemble"].values()) == pytest.approx(1.0)
    singles = [c["eval_rmse"] for c in metadata["model_selection"]["candidates"].values()]
    assert result.metrics["eval_rmse"] < min(singles)
    assert result.strategy.startswith("auto: ensemble of gbdt")
    assert "beats the best single candidate" in model_selection_section(tmp_path / "model")
    value = ExportedModel(tmp_path / "model").predict_rows([{"x1": 1.0, "x2": 1.0}])[0]
    assert 3.5 < value < 5.5  # 2 + 1.5 + 1
