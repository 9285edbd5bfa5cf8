"""Regression end to end below the pipeline: a numeric label prepared with its rejects
counted, a regressor trained and exported in the label's units, evaluated against the mean
predictor and a ridge regression fitted on the same rows, and gated on its own metrics."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gkeflow.components.evaluate.policy import Champion, EvaluationError
from gkeflow.components.evaluate.regression import (
    RegressionPolicy,
    decide_regression,
    evaluate_regression,
    parse_regression_thresholds,
)
from gkeflow.components.prepare.logic import prepare
from gkeflow.components.train.exported import ExportedModel
from gkeflow.components.train.logic import TrainParams, train


def make_prices_csv(path: Path, rows: int = 1500, seed: int = 11) -> pd.DataFrame:
    """Flat prices in euros: size, rooms, a district, a mild curve and noise; a few labels
    missing or unreadable."""
    rng = np.random.default_rng(seed)
    size = rng.uniform(20, 160, rows)
    rooms = rng.integers(1, 6, rows)
    district = rng.choice(["north", "south", "east", "west"], rows)
    effect = pd.Series(district).map({"north": 40_000, "south": -25_000, "east": 0,
                                      "west": 15_000}).to_numpy()
    price = (60_000 + 2_600 * size + 9_000 * rooms + effect + 4 * (size - 90) ** 2
             + rng.normal(0, 12_000, rows))
    frame = pd.DataFrame({"size_m2": size.round(1), "rooms": rooms, "district": district,
                          "price_eur": price.round(0).astype("int64").astype(object)})
    frame.loc[[4, 9], "price_eur"] = None
    frame.loc[[13], "price_eur"] = "on request"
    frame.to_csv(path, index=False)
    return frame


@pytest.fixture(scope="module")
def prices(tmp_path_factory):
    folder = tmp_path_factory.mktemp("prices")
    frame = make_prices_csv(folder / "flats.csv")
    prepared = prepare(str(folder / "flats.csv"), folder / "dataset", "price_eur")
    return folder, frame, prepared


def test_a_numeric_label_is_prepared_for_regression_with_its_rejects_counted(prices):
    folder, frame, prepared = prices
    assert prepared.schema.task == "regression" and prepared.schema.label_vocabulary == []
    assert prepared.schema.column("price_eur").type == "numeric"
    assert prepared.rows_read == len(frame)
    assert prepared.rows_read == sum(prepared.split_rows.values()) + prepared.rejected_rows
    assert prepared.rejected_reasons == {"missing label 'price_eur'": 2,
                                         "label 'price_eur': not a number": 1}
    report = (folder / "dataset" / "report.md").read_text()
    assert "**Task:** regression of `price_eur`" in report and "## Label" in report
    assert "Quantiles over the first" in report and "skew" in report


def _ridge_rmse(dataset: Path, frame: pd.DataFrame) -> float:
    """A ridge regression fitted on the train rows, scored on the test rows (the same
    split, read back from the prepared shards)."""
    from sklearn.linear_model import Ridge

    from gkeflow.components.prepare.reader import load_split
    from gkeflow.components.prepare.schema import Schema

    schema = Schema.load(dataset)

    def design(split):
        rows = load_split(dataset, split, schema)
        x = pd.get_dummies(rows[["size_m2", "rooms", "district"]], columns=["district"])
        return x.astype(float), rows["price_eur"].astype(float).to_numpy()

    x_train, y_train = design("train")
    x_test, y_test = design("test")
    x_test = x_test.reindex(columns=x_train.columns, fill_value=0.0)
    model = Ridge(alpha=1.0).fit(x_train, y_train)
    return float(np.sqrt(np.mean((model.predict(x_test) - y_test) ** 2)))


@pytest.mark.slow
def test_a_regressor_predicts_in_euros_and_rivals_ridge_regression(prices, tmp_path):
    folder, frame, prepared = prices
    dataset = folder / "dataset"
    result = train(dataset, prepared.schema, tmp_path / "model",
                   TrainParams(epochs=40, batch_size=32, learning_rate=0.01,
                               early_stopping_patience=8))
    assert "train_rmse" in result.metrics and "eval_rmse" in result.metrics
    model = ExportedModel(tmp_path / "model")
    assert model.regression and model.metadata["label_scaling"]["transform"] == "none"
    [value] = model.predict_rows([{"size_m2": 80.0, "rooms": 3, "district": "north"}])
    assert isinstance(value, float) and 150_000 < value < 450_000  # in euros, not z-scores

    evaluation = evaluate_regression(dataset, prepared.schema, tmp_path / "model")
    ridge = _ridge_rmse(dataset, frame)
    assert evaluation.metrics["rmse"] <= 1.25 * ridge, (evaluation.metrics, ridge)
    assert evaluation.metrics["rmse"] < evaluation.baseline["rmse"]
    assert 0.5 < evaluation.metrics["r2"] <= 1 and evaluation.metrics["mape"] is not None
    assert evaluation.passed, evaluation.decision.reasons
    assert {s.value for s in evaluation.slices if s.column == "district"} == {
        "north", "south", "east", "west"}
    scalars = evaluation.scalar_metrics()
    assert {"rmse", "mae", "r2", "baseline_rmse", "residual_p50"} <= set(scalars)
    assert json.loads(evaluation.to_json())["task"] == "regression"


@pytest.mark.slow
def test_a_log_transformed_label_is_learned_in_logs_and_predicted_in_units(tmp_path):
    rng = np.random.default_rng(5)
    x = rng.normal(size=800)
    y = np.exp(2.0 + 0.8 * x + rng.normal(0, 0.1, 800))  # skewed, positive
    pd.DataFrame({"x": x.round(4), "g": rng.choice(["a", "b"], 800),
                  "y": y.round(4)}).to_csv(tmp_path / "skewed.csv", index=False)
    prepared = prepare(str(tmp_path / "skewed.csv"), tmp_path / "d", "y")
    train(tmp_path / "d", prepared.schema, tmp_path / "m",
          TrainParams(epochs=30, label_transform="log", loss="huber"))
    model = ExportedModel(tmp_path / "m")
    assert model.metadata["label_scaling"]["transform"] == "log"
    values = model.predict_rows([{"x": v, "g": "a"} for v in (-1.0, 0.0, 1.0)])
    expected = np.exp(2.0 + 0.8 * np.array([-1.0, 0.0, 1.0]))
    assert all(v > 0 for v in values)
    assert np.all(np.abs(np.log(values) - np.log(expected)) < 0.35), (values, expected)


def test_log_of_a_label_that_is_not_positive_is_refused(prices, tmp_path):
    from gkeflow.components.train.regression import label_scaling

    folder, _, prepared = prices
    schema = prepared.schema
    stats = json.loads((folder / "dataset" / "stats.json").read_text())
    assert stats["splits"]["train"]["columns"]["price_eur"]["min"] > 0
    schema_copy = type(schema).from_json(schema.to_json())
    bad = tmp_path / "bad"
    bad.mkdir()
    stats["splits"]["train"]["columns"]["price_eur"]["min"] = -1.0
    (bad / "stats.json").write_text(json.dumps(stats))
    with pytest.raises(ValueError, match="label_transform log needs a positive label"):
        label_scaling(bad, schema_copy, "log")


def test_the_gate_requires_beating_the_mean_predictor():
    policy = RegressionPolicy()
    base = {"rmse": 100.0, "mae": 80.0}
    assert decide_regression({"rmse": 90.0}, base, None, None, policy).blessed
    rejected = decide_regression({"rmse": 97.0}, base, None, None, policy)
    assert not rejected.blessed and "mean predictor" in rejected.reasons[0]


def test_the_margin_over_the_mean_predictor_is_a_setting_named_in_the_refusal():
    from gkeflow.components.evaluate.policy import EvaluationError

    base = {"rmse": 100.0}
    strict = RegressionPolicy.from_parameters("", "", 0.01, 0.2)
    refused = decide_regression({"rmse": 85.0}, base, None, None, strict)
    assert not refused.blessed
    assert ("rmse 85 > 80 (the mean predictor's 100 less 20%; baseline_margin sets the "
            "margin)") in refused.reasons[0]
    assert decide_regression({"rmse": 99.0}, base, None, None,
                             RegressionPolicy.from_parameters("", "", 0.01, 0.0)).blessed
    with pytest.raises(EvaluationError, match="baseline_margin must be in"):
        RegressionPolicy.from_parameters("", "", 0.01, 1.0)


def test_thresholds_and_the_champion_know_which_way_is_better():
    champion = Champion("m", 3, "uri", ("champion",))
    policy = RegressionPolicy.from_parameters("rmse<=60,r2>=0.5", "", 0.05)
    assert policy.comparison_metric == "rmse"  # a classification metric means: the default
    base = {"rmse": 100.0}
    better = decide_regression({"rmse": 50.0, "r2": 0.8}, base, champion, {"rmse": 55.0},
                               policy)
    assert better.blessed
    slightly_worse = decide_regression({"rmse": 57.0, "r2": 0.8}, base, champion,
                                       {"rmse": 55.0}, policy)  # 3.6% worse, tolerance 5%
    assert slightly_worse.blessed
    worse = decide_regression({"rmse": 59.0, "r2": 0.8}, base, champion, {"rmse": 55.0},
                              policy)
    assert not worse.blessed and "beyond the tolerance" in worse.reasons[-1]
    missed = decide_regression({"rmse": 70.0, "r2": 0.4}, base, None, None, policy)
    assert [c.ok for c in missed.checks] == [True, False, False, True]
    by_r2 = RegressionPolicy.from_parameters("", "r2", 0.0)
    assert not decide_regression({"rmse": 50.0, "r2": 0.7}, base, champion, {"r2": 0.75},
                                 by_r2).blessed  # r2: higher is better


def test_regression_thresholds_name_regression_metrics():
    assert [str(t) for t in parse_regression_thresholds("rmse<=250, mape<=0.1")] == [
        "rmse<=250", "mape<=0.1"]
    with pytest.raises(EvaluationError, match="not a regression metric"):
        parse_regression_thresholds("accuracy>=0.9")


@pytest.mark.slow
def test_wide_and_deep_and_a_user_module_train_regressors(prices, tmp_path):
    folder, _, prepared = prices
    dataset = folder / "dataset"
    wide = train(dataset, prepared.schema, tmp_path / "wide", TrainParams(
        epochs=2, model_type="wide_deep"))
    assert "eval_rmse" in wide.metrics
    assert ExportedModel(tmp_path / "wide").regression
    module = tmp_path / "my_regressor.py"
    module.write_text(
        "import keras\n\n"
        "def build_model(schema, hparams):\n"
        "    assert hparams['task'] == 'regression' and hparams['num_classes'] == 1\n"
        "    inputs = keras.Input(shape=(hparams['input_dim'],))\n"
        "    hidden = keras.layers.Dense(8, activation='relu')(inputs)\n"
        "    return keras.Model(inputs, keras.layers.Dense(1)(hidden))\n")
    own = train(dataset, prepared.schema, tmp_path / "own", TrainParams(
        epochs=2, user_module=str(module)))
    assert "eval_rmse" in own.metrics
    [value] = ExportedModel(tmp_path / "own").predict_rows(
        [{"size_m2": 80.0, "rooms": 3, "district": "north"}])
    assert isinstance(value, float)
    wrong = tmp_path / "wrong.py"
    wrong.write_text(
        "import keras\n\n"
        "def build_model(schema, hparams):\n"
        "    inputs = keras.Input(shape=(hparams['input_dim'],))\n"
        "    return keras.Model(inputs, keras.layers.Dense(3, activation='softmax')(inputs))\n")
    with pytest.raises(ValueError, match="must output one value per row"):
        train(dataset, prepared.schema, tmp_path / "wrong", TrainParams(
            epochs=1, user_module=str(wrong)))


def test_the_residuals_kept_are_bounded_and_their_quantiles_hold():
    """Beyond sample_size residuals a uniform sample is kept: memory stays bounded, the
    metrics stay exact over every row, and the quantiles stay close to the exact ones."""
    import numpy as np

    from gkeflow.components.evaluate.regression import RegressionAccumulator

    rng = np.random.default_rng(7)
    actual = rng.normal(0.0, 1.0, 200_000)
    predicted = actual + rng.normal(0.0, 2.0, actual.size)
    bounded = RegressionAccumulator(0.0, sample_size=20_000)
    whole = RegressionAccumulator(0.0, sample_size=actual.size)
    for start in range(0, actual.size, 4096):
        part = slice(start, start + 4096)
        bounded.update(actual[part], predicted[part])
        whole.update(actual[part], predicted[part])
    assert bounded._residuals.values.size == 20_000 and bounded.residuals_sampled
    assert not whole.residuals_sampled
    assert bounded.metrics() == whole.metrics()
    exact, approx = whole.residual_quantiles(), bounded.residual_quantiles()
    for name, value in exact.items():  # sd of the p5/p95 estimate here is about 0.03
        assert abs(approx[name] - value) < 0.15, (name, approx[name], value)


def test_the_prediction_summary_keeps_a_bounded_sample_for_its_quantiles(tmp_path):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from gkeflow.components.predict.summary import summarize_values

    values = np.random.default_rng(3).normal(10.0, 1.0, 50_000)
    path = tmp_path / "predictions.parquet"
    pq.write_table(pa.table({"predicted_value": values}), path, row_group_size=4096)
    lines, metrics = summarize_values(path, sample_size=5_000)
    exact_lines, exact = summarize_values(path, sample_size=50_000)
    assert metrics["rows"] == exact["rows"] == 50_000
    assert metrics["mean_predicted_value"] == exact["mean_predicted_value"]
    assert abs(metrics["predicted_value_p50"] - exact["predicted_value_p50"]) < 0.1
    assert "a uniform sample of 5,000 of the 50,000 predictions" in "\n".join(lines)
    assert "uniform sample" not in "\n".join(exact_lines)
