"""model_type gbdt: XGBoost's trees as TensorFlow ops, training on the prepared splits, the
raw-feature SavedModel it exports (evaluation, serving check, the gate against a Keras
champion), kill and resume, and its refusals."""

from __future__ import annotations

import json
import os
import signal

import numpy as np
import pytest

xgb = pytest.importorskip("xgboost")

from gkeflow.components.train.params import TrainParams  # noqa: E402
from gkeflow.components.train.trees import (  # noqa: E402
    measure_intercept,
    numpy_margin,
    read_forest,
    tree_margin,
)

TYPES = ["q", "q", "q", "c", "c"]


def _table(kind: str, rows: int = 1500, seed: int = 0):
    """Numbers with missing values, a 70-value and a 3-value categorical column (codes), and
    a label that depends on all of them."""
    rng = np.random.default_rng(seed)
    numbers = rng.normal(size=(rows, 3)).astype(np.float32)
    numbers[rng.random(rows) < 0.1, 0] = np.nan
    wide = rng.integers(0, 70, rows).astype(np.float32)
    wide[rng.random(rows) < 0.1] = np.nan
    narrow = rng.integers(0, 3, rows).astype(np.float32)
    matrix = np.column_stack([numbers, wide, narrow])
    score = (numbers[:, 1] + (wide % 3 == 0) + narrow + np.nan_to_num(numbers[:, 0])
             + rng.normal(size=rows) * 0.3)
    label = {"binary": (score > 0.5).astype(int),
             "multiclass": np.digitize(score, [-0.5, 0.5, 1.5]),
             "regression": score}[kind]
    return matrix, label


@pytest.mark.parametrize("kind,objective", [("binary", {"objective": "binary:logistic"}),
                                            ("multiclass", {"objective": "multi:softprob",
                                                            "num_class": 4}),
                                            ("regression", {"objective": "reg:squarederror"})])
def test_trees_as_tensorflow_ops_give_xgboosts_margins(kind, objective):
    import tensorflow as tf

    matrix, label = _table(kind)
    train = xgb.DMatrix(matrix, label=label, feature_types=TYPES, enable_categorical=True)
    booster = xgb.train({**objective, "max_depth": 5, "max_cat_to_onehot": 4, "seed": 1},
                        train, 15)
    forest = read_forest(booster, measure_intercept(booster, train))
    # fresh rows: values never seen, unknown category codes, missing everywhere
    scored, _ = _table(kind, rows=400, seed=5)
    scored[:20, 3] = 300.0
    scored[20:40, :] = np.nan
    expected = booster.predict(xgb.DMatrix(scored, feature_types=TYPES,
                                           enable_categorical=True), output_margin=True)
    expected = expected.reshape(len(scored), -1)
    assert forest.depth == 5 and forest.groups == expected.shape[1]
    np.testing.assert_allclose(numpy_margin(forest, scored), expected, rtol=1e-5, atol=1e-5)
    walked = tree_margin(forest, tf.constant(scored), tf).numpy()
    np.testing.assert_allclose(walked, expected, rtol=1e-5, atol=1e-5)


def test_categorical_sets_send_their_members_right():
    # one tree, one categorical split: the members of the node's set go right
    matrix = np.array([[c] for c in range(8)] * 20, np.float32)
    label = np.isin(matrix[:, 0], [1, 4, 6]).astype(float)
    booster = xgb.train({"objective": "reg:squarederror", "max_depth": 1, "eta": 1.0,
                         "max_cat_to_onehot": 1, "lambda": 0.0},
                        xgb.DMatrix(matrix, label=label, feature_types=["c"],
                                    enable_categorical=True), 1)
    forest = read_forest(booster, measure_intercept(booster, xgb.DMatrix(
        matrix, feature_types=["c"], enable_categorical=True)))
    margins = numpy_margin(forest, np.arange(8, dtype=np.float32)[:, None]).reshape(-1)
    high = margins > margins.mean()
    assert set(np.flatnonzero(high)) == {1, 4, 6}


@pytest.fixture(scope="module")
def trained_gbdt(prepared_penguins, tmp_path_factory):
    from gkeflow.components.train.logic import train

    dataset_dir, prepared = prepared_penguins
    model_dir = tmp_path_factory.mktemp("gbdt") / "model"
    result = train(dataset_dir, prepared.schema, model_dir,
                   TrainParams(model_type="gbdt", gbdt_rounds=300, refit=False))
    return model_dir, result


def test_gbdt_trains_on_the_splits_and_exports_a_raw_feature_savedmodel(
        prepared_penguins, trained_gbdt):
    from gkeflow.components.evaluate.logic import evaluate
    from gkeflow.components.train.exported import ExportedModel

    dataset_dir, prepared = prepared_penguins
    model_dir, result = trained_gbdt
    assert result.backend == "xgboost" and "xgboost hist on cpu" in result.strategy
    assert result.metrics["eval_accuracy"] > 0.9 and result.metrics["eval_loss"] < 0.4
    assert 1 <= result.best_epoch <= result.epochs_run <= 300
    assert len(result.history["train_mlogloss"]) == result.epochs_run
    metadata = json.loads((model_dir / "gkeflow_model.json").read_text())
    assert metadata["model_family"] == "gbdt" and metadata["framework"] == "tensorflow"
    assert metadata["trees"]["trees"] == 3 * result.best_epoch  # a tree per class and round
    model = ExportedModel(model_dir)
    rows = [{"island": "Biscoe", "bill_length_mm": 48.0, "bill_depth_mm": 15.0,
             "flipper_length_mm": 220.0, "body_mass_g": 5400.0, "sex": "male"},
            {"island": "no such island"}, {}]
    probabilities = model.predict_proba(
        {f["input"]: np.array([r.get(f["name"], np.nan if f["type"] == "numeric" else "")
                               for r in rows], dtype=np.float32 if f["type"] == "numeric"
                              else object) for f in metadata["features"]})
    assert probabilities.shape == (3, 3)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)
    assert model.predict_rows(rows[:1]) == ["Gentoo"]
    evaluation = evaluate(dataset_dir, prepared.schema, model_dir, min_accuracy=0.8)
    assert evaluation.passed and evaluation.metrics.accuracy > 0.9


def test_gbdt_model_passes_the_servability_check(prepared_penguins, trained_gbdt):
    from gkeflow.components.deploy.servable import check_servable
    from gkeflow.components.evaluate.logic import evaluate

    dataset_dir, prepared = prepared_penguins
    model_dir, _ = trained_gbdt
    result = evaluate(dataset_dir, prepared.schema, model_dir, min_accuracy=0.0)
    sample = json.loads(result.to_json())["sample_predictions"]
    report = check_servable(model_dir, sample)
    assert report.rows == len(sample["rows"]) and report.max_difference <= 1e-5


def test_the_gate_compares_a_gbdt_challenger_with_a_keras_champion(
        prepared_penguins, trained_penguins, trained_gbdt, tmp_path):
    from gkeflow.components.evaluate.logic import evaluate
    from gkeflow.components.register.local_registry import LocalRegistry

    dataset_dir, prepared = prepared_penguins
    uri = f"sqlite:///{tmp_path / 'registry.db'}"
    LocalRegistry(uri).register("penguins", str(trained_penguins[0]), {}, run_id="keras")
    result = evaluate(dataset_dir, prepared.schema, trained_gbdt[0], min_accuracy=0.5,
                      model_name="penguins", registry_uri=uri, regression_tolerance=0.05)
    assert result.champion is not None and result.champion.version == 1
    # the same metric on the same test rows for both families
    assert result.champion.metrics.examples == result.metrics.examples
    assert any("champion penguins v1" in reason for reason in result.decision.reasons)


def test_gbdt_regression_predicts_in_the_labels_units(prepared_penguins, tmp_path):
    from gkeflow.components.prepare.logic import EMBEDDED_PENGUINS, prepare
    from gkeflow.components.train.exported import ExportedModel
    from gkeflow.components.train.logic import train

    dataset_dir = tmp_path / "dataset"
    prepared = prepare(EMBEDDED_PENGUINS, dataset_dir, "body_mass_g")
    assert prepared.schema.regression
    for transform in ("none", "log"):
        model_dir = tmp_path / f"model-{transform}"
        result = train(dataset_dir, prepared.schema, model_dir,
                       TrainParams(model_type="gbdt", gbdt_rounds=200,
                                   label_transform=transform))
        suffix = "_rmse_log" if transform == "log" else "_rmse"
        assert f"eval{suffix}" in result.metrics
        values = ExportedModel(model_dir).predict_rows(
            [{"species": "Gentoo", "flipper_length_mm": 225.0, "sex": "male"},
             {"species": "Adelie", "flipper_length_mm": 185.0, "sex": "female"}])
        assert 4500 < values[0] < 6500 and 2700 < values[1] < 4200


def test_a_killed_gbdt_training_resumes_from_its_last_committed_round(prepared_penguins,
                                                                      tmp_path):
    from gkeflow.components.train.checkpoint import Preempted
    from gkeflow.components.train.exported import ExportedModel
    from gkeflow.components.train.logic import train

    dataset_dir, prepared = prepared_penguins
    params = TrainParams(model_type="gbdt", gbdt_rounds=120, gbdt_checkpoint_every=10,
                         gbdt_early_stopping_rounds=0)
    whole = train(dataset_dir, prepared.schema, tmp_path / "whole", params)

    class KillAtRound:
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 45:  # SIGTERM mid-training, as a Spot preemption sends it
                os.kill(os.getpid(), signal.SIGTERM)

    checkpoints = tmp_path / "checkpoints"
    with pytest.raises(Preempted, match="after round 46"):
        train(dataset_dir, prepared.schema, tmp_path / "killed", params,
              checkpoint_dir=checkpoints, live=lambda sampler: [KillAtRound()])
    state = json.loads((checkpoints / "state.json").read_text())
    assert state["rounds_completed"] == 46 and (checkpoints / state["booster_file"]).exists()
    assert not (tmp_path / "killed").exists()  # no half-written model
    resumed = train(dataset_dir, prepared.schema, tmp_path / "resumed", params,
                    checkpoint_dir=checkpoints)
    assert resumed.resumed_from_epoch == 46 and resumed.epochs_run == 120
    assert resumed.history["eval_mlogloss"] == pytest.approx(whole.history["eval_mlogloss"],
                                                             rel=1e-6)
    assert not checkpoints.exists()  # removed after success
    rows = [{"island": "Dream", "bill_length_mm": 45.0}, {"sex": "female"}]
    np.testing.assert_allclose(
        ExportedModel(tmp_path / "resumed").predict_proba(_inputs(rows, prepared.schema)),
        ExportedModel(tmp_path / "whole").predict_proba(_inputs(rows, prepared.schema)),
        rtol=1e-6, atol=1e-7)


def _inputs(rows, schema):
    from gkeflow.components.train.inputs import input_names

    names = input_names(schema)
    return {names[c.name]: np.array(
        [r.get(c.name, np.nan if c.type == "numeric" else "") for r in rows],
        dtype=np.float32 if c.type == "numeric" else object) for c in schema.features}


def test_gbdt_refusals_name_the_setting(prepared_penguins, tmp_path, monkeypatch):
    from gkeflow.components.train.devices import GpuUnavailableError
    from gkeflow.components.train.gbdt_settings import GbdtSettingsError
    from gkeflow.components.train.logic import train
    from gkeflow.components.train.tpu import TpuUnavailableError

    with pytest.raises(GbdtSettingsError, match="gbdt_max_depth must be in"):
        TrainParams(model_type="gbdt", gbdt_max_depth=0)
    with pytest.raises(GbdtSettingsError, match="gbdt_subsample"):
        TrainParams(model_type="gbdt", gbdt_subsample=1.5)
    TrainParams(model_type="mlp", gbdt_max_depth=0)  # not checked for Keras models
    dataset_dir, prepared = prepared_penguins
    with pytest.raises(TpuUnavailableError, match="not on a TPU"):
        train(dataset_dir, prepared.schema, tmp_path / "m", TrainParams(model_type="gbdt",
                                                                         strategy="tpu"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(GpuUnavailableError, match="asked for a GPU"):
        train(dataset_dir, prepared.schema, tmp_path / "m",
              TrainParams(model_type="gbdt", require_gpu=True))
    # several workers train together (XGBoost's collective: tests/local/test_gbdt_two_workers.py)
    assert not (tmp_path / "m").exists()


def test_gbdt_model_loads_as_an_mlflow_pyfunc_model(trained_gbdt, tmp_path):
    pytest.importorskip("mlflow")
    import mlflow.pyfunc
    import pandas as pd

    from gkeflow.components.train.exported import ExportedModel
    from gkeflow.components.train.mlflow_model import save_mlflow_model

    model_dir, _ = trained_gbdt
    saved = save_mlflow_model(model_dir, tmp_path / "mlflow-model")
    rows = [{"island": "Biscoe", "bill_length_mm": 48.0, "flipper_length_mm": 220.0},
            {"island": "Dream", "bill_length_mm": 50.0, "bill_depth_mm": 19.0}]
    features = ExportedModel(model_dir).metadata["features"]
    frame = pd.DataFrame({f["name"]: pd.Series(
        [r.get(f["name"]) for r in rows],
        dtype="float64" if f["type"] == "numeric" else object) for f in features})
    answer = mlflow.pyfunc.load_model(str(saved)).predict(frame)
    assert answer["prediction"].tolist() == ExportedModel(model_dir).predict_rows(rows)


def test_a_gpu_without_xgboosts_cuda_kernels_trains_on_cpu_or_fails_when_required(
        prepared_penguins, tmp_path, monkeypatch, capsys):
    import sys

    from gkeflow.components.train.devices import GpuUnavailableError
    from gkeflow.components.train.logic import train
    from tests.unit.test_train_utilisation import fake_nvml, gpu

    if xgb.build_info().get("USE_CUDA"):
        pytest.skip("this XGBoost has CUDA kernels: the fallback is for xgboost-cpu")
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([gpu([50])]))  # one GPU visible
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    dataset_dir, prepared = prepared_penguins
    result = train(dataset_dir, prepared.schema, tmp_path / "cpu",
                   TrainParams(model_type="gbdt", gbdt_rounds=20))
    assert "training on the CPU" in capsys.readouterr().out
    assert result.strategy == "xgboost hist on cpu"
    with pytest.raises(GpuUnavailableError, match="no CUDA kernels; run train-model in the GPU"):
        train(dataset_dir, prepared.schema, tmp_path / "gpu",
              TrainParams(model_type="gbdt", require_gpu=True))


def test_refit_fits_the_chosen_rounds_on_train_and_eval(prepared_penguins, trained_gbdt,
                                                        tmp_path):
    from gkeflow.components.train.exported import ExportedModel
    from gkeflow.components.train.logic import train

    dataset_dir, prepared = prepared_penguins
    rows = prepared.split_rows
    result = train(dataset_dir, prepared.schema, tmp_path / "refit",
                   TrainParams(model_type="gbdt", gbdt_rounds=300))
    metadata = json.loads((tmp_path / "refit" / "gkeflow_model.json").read_text())
    assert metadata["refit_on_train_and_eval"] is True
    # a small table: 5-fold cross-validation on the train and eval rows chooses the rounds
    # (an eval split of a few dozen rows picks its best round by luck)
    both = rows["train"] + rows["eval"]
    assert metadata["refit_rounds_from"] == f"5-fold cross-validation on {both} rows"
    assert 1 <= metadata["refit_rounds"] < 2 * 300 + 2000
    assert metadata["trees"]["trees"] == 3 * metadata["refit_rounds"]
    # the eval figures and predictions are the first fit's, which never saw the eval rows
    single, _ = trained_gbdt
    assert result.metrics["eval_loss"] == pytest.approx(
        json.loads((single / "gkeflow_model.json").read_text())["metrics"]["eval_loss"])
    from gkeflow.components.prepare.reader import load_split
    from gkeflow.components.train.inputs import to_model_inputs

    evaluation = load_split(dataset_dir, "eval", prepared.schema)
    np.testing.assert_allclose(
        result.eval_predictions,
        ExportedModel(single).predict_proba(to_model_inputs(evaluation, prepared.schema)),
        rtol=1e-4, atol=1e-5)


def test_cross_validation_folds_hold_out_every_row_once_and_spread_each_class():
    from gkeflow.components.train.gbdt_cv import CV_FOLDS, cv_folds

    labels = np.array([0.0] * 12 + [1.0] * 7 + [2.0] * 31)
    folds = cv_folds(labels, stratified=True, seed=3)
    held = np.concatenate([test for _, test in folds])
    assert len(folds) == CV_FOLDS and sorted(held.tolist()) == list(range(len(labels)))
    for train_rows, test_rows in folds:
        assert not set(train_rows) & set(test_rows)
        assert len(train_rows) + len(test_rows) == len(labels)
        counts = np.bincount(labels[test_rows].astype(int), minlength=3)
        # each class split as evenly as CV_FOLDS folds allow
        assert all(abs(c - n / CV_FOLDS) < 1 for c, n in zip(counts, (12, 7, 31), strict=True))
    same = cv_folds(labels, stratified=True, seed=3)
    assert all((a[1] == b[1]).all() for a, b in zip(folds, same, strict=True))  # seeded
    other = cv_folds(labels, stratified=True, seed=4)
    assert any((a[1] != b[1]).any() for a, b in zip(folds, other, strict=True))


def test_a_larger_table_refits_for_the_eval_split_s_rounds(prepared_penguins, tmp_path,
                                                          monkeypatch):
    from gkeflow.components.train import gbdt_cv
    from gkeflow.components.train.logic import train

    monkeypatch.setattr(gbdt_cv, "CV_ROWS", 100)  # penguins' 291 rows count as many here
    dataset_dir, prepared = prepared_penguins
    rows = prepared.split_rows
    result = train(dataset_dir, prepared.schema, tmp_path / "refit",
                   TrainParams(model_type="gbdt", gbdt_rounds=300))
    metadata = json.loads((tmp_path / "refit" / "gkeflow_model.json").read_text())
    rounds = round(result.best_epoch * (rows["train"] + rows["eval"]) / rows["train"])
    assert metadata["refit_rounds"] == rounds and metadata["trees"]["trees"] == 3 * rounds
    assert metadata["refit_rounds_from"] == "the eval split's best round, scaled to the rows"


def test_only_small_narrow_tables_cross_validate_the_refit_rounds():
    from gkeflow.components.train.gbdt_cv import CV_CELLS, CV_ROWS, cross_validates

    assert cross_validates(291, 7)  # penguins
    assert cross_validates(CV_ROWS, CV_CELLS // CV_ROWS)
    assert not cross_validates(CV_ROWS + 1, 5)  # enough rows: the eval split decides
    assert not cross_validates(252, 2000)  # wide: five more trainings cost more than they give
