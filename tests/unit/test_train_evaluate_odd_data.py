"""Training and evaluation on data that is legal but unusual: columns named like Python
keywords or like the preprocessor's own layers, a feature with no value in the train split,
numbers beyond float32, a class the test split lacks, a label named like an overall metric."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from gkeflow.components.evaluate.accumulate import compute_metrics
from gkeflow.components.prepare.logic import ColumnSchema, Schema, prepare
from gkeflow.components.train.exported import ExportedModel
from gkeflow.components.train.inputs import input_names
from gkeflow.components.train.logic import TrainParams, train
from gkeflow.components.train.models import feature_stats_from_prepared


def test_keyword_names_get_a_trailing_underscore():
    schema = Schema("y", ["p", "q"], [
        ColumnSchema("class", "categorical", "feature", True),
        ColumnSchema("from", "numeric", "feature", True),
        ColumnSchema("class_", "numeric", "feature", True),
        ColumnSchema("y", "categorical", "label", False),
    ])
    assert input_names(schema) == {"class": "class_", "from": "from_", "class_": "class__2"}


@pytest.fixture(scope="module")
def odd_columns(tmp_path_factory):
    """Columns named like keywords and like the preprocessor's layers, trained one epoch."""
    rng = random.Random(7)
    header = "class,a,a_norm,features,reshape,huge,y"
    rows = []
    for i in range(240):
        a = rng.gauss(0, 1)
        huge = "1e39" if i % 7 == 0 else f"{rng.gauss(0, 1) * 1e30:.3e}"
        rows.append(f"{rng.choice('uv')},{a:.3f},{rng.random():.3f},{rng.random():.3f},"
                    f"{rng.choice('rst')},{huge},{'p' if a > 0 else 'q'}")
    root = tmp_path_factory.mktemp("odd")
    (root / "odd.csv").write_text("\n".join([header, *rows]) + "\n")
    prepared = prepare(str(root / "odd.csv"), root / "dataset", "y")
    model_dir = root / "model"
    train(root / "dataset", prepared.schema, model_dir,
          TrainParams(epochs=1, early_stopping_patience=0))
    return root, prepared, model_dir


def test_columns_named_like_keywords_and_layers_train_export_and_serve(odd_columns):
    _, prepared, model_dir = odd_columns
    model = ExportedModel(model_dir)
    inputs = {f["input"] for f in model.metadata["features"]}
    assert {"class_", "a", "a_norm", "features", "reshape"} <= inputs
    predictions = model.predict_rows([{"class": "u", "a": 1.5, "a_norm": 0.2, "features": 0.1,
                                       "reshape": "r", "huge": 1e30}, {"class": "v"}])
    assert all(p in ("p", "q") for p in predictions)


def test_numbers_beyond_float32_are_missing_values_counted_as_non_finite(odd_columns):
    root, prepared, _ = odd_columns
    stats = json.loads((root / "dataset" / "stats.json").read_text())
    assert stats["nonfinite_values"] == {"huge": 35}  # every 7th of 240 rows: 1e39
    assert any("'huge': 35 non-finite values" in p and "float32" in p
               for p in prepared.problems)
    assert all(abs(split["columns"]["huge"]["max"]) < 3.5e38
               for split in stats["splits"].values())


def test_a_numeric_feature_without_train_values_is_fitted_as_unit_scale(tmp_path):
    schema = Schema("y", ["p", "q"], [ColumnSchema("b", "numeric", "feature", True),
                                      ColumnSchema("y", "categorical", "label", False)])
    (tmp_path / "stats.json").write_text(json.dumps({"splits": {"train": {"columns": {
        "b": {"count": 10, "missing": 10, "min": None, "max": None, "mean": None,
              "std": None}}}}}))
    assert feature_stats_from_prepared(schema, tmp_path).numeric == {"b": (0.0, 1.0)}


def test_macro_metrics_average_the_classes_the_test_split_has_or_predicts():
    labels = ["maj", "min", "other"]
    true = np.array([0, 0, 0, 2, 2])
    probabilities = np.array([[0.9, 0.05, 0.05]] * 3 + [[0.1, 0.1, 0.8]] * 2)
    metrics = compute_metrics(true, probabilities, labels)
    assert metrics.accuracy == 1.0
    assert (metrics.precision_macro, metrics.recall_macro, metrics.f1_macro) == (1.0, 1.0, 1.0)
    # a class predicted but absent from the split counts (its precision is 0)
    wrong = probabilities.copy()
    wrong[0] = [0.1, 0.8, 0.1]
    missed = compute_metrics(true, wrong, labels)
    assert missed.precision_macro == pytest.approx((1.0 + 0.0 + 1.0) / 3, abs=1e-12)


def test_a_label_named_like_an_overall_metric_does_not_replace_it():
    labels = ["macro", "micro", "other"]
    true = np.array([0, 0, 1, 1, 2, 2])
    probabilities = np.eye(3)[[0, 0, 1, 2, 2, 2]] * 0.9 + 0.1 / 3
    scalars = compute_metrics(true, probabilities, labels).scalars()
    assert scalars["precision_macro"] == pytest.approx((1.0 + 1.0 + 2 / 3) / 3, abs=1e-12)
    assert scalars["precision_macro_0"] == 1.0 and scalars["recall_micro"] == 0.5
