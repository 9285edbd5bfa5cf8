"""evaluate logic: metrics against hand-computed values, and the real model on the test split."""

from __future__ import annotations

import numpy as np
import pytest

from components.evaluate.logic import classification_metrics, evaluate, render_report


def test_metrics_match_hand_computed_values():
    # true:      a a a b b c
    # predicted: a a b b c c
    true = np.array([0, 0, 0, 1, 1, 2])
    predicted = np.array([0, 0, 1, 1, 2, 2])
    result = classification_metrics(true, predicted, ["a", "b", "c"], min_accuracy=0.5)
    assert result.accuracy == pytest.approx(4 / 6)
    assert result.confusion_matrix == [[2, 1, 0], [0, 1, 1], [0, 0, 1]]
    a, b, c = (result.per_class[k] for k in "abc")
    assert (a.precision, a.recall) == (1.0, pytest.approx(2 / 3))
    assert (b.precision, b.recall) == (0.5, 0.5)
    assert (c.precision, c.recall) == (0.5, 1.0)
    assert c.f1 == pytest.approx(2 * 0.5 * 1.0 / 1.5)
    assert result.passed
    assert not classification_metrics(true, predicted, ["a", "b", "c"], 0.7).passed


def test_class_never_predicted_has_zero_precision_not_nan():
    result = classification_metrics(np.array([0, 1]), np.array([0, 0]), ["a", "b"], 0.0)
    assert result.per_class["b"].precision == 0.0 and result.per_class["b"].f1 == 0.0
    assert all(np.isfinite(v) for v in result.scalar_metrics().values())


def test_length_mismatch_and_empty_are_errors():
    with pytest.raises(ValueError, match="3 true labels but 2 predictions"):
        classification_metrics(np.array([0, 1, 1]), np.array([0, 1]), ["a", "b"], 0.5)
    with pytest.raises(ValueError, match="empty"):
        classification_metrics(np.array([], int), np.array([], int), ["a", "b"], 0.5)


def test_evaluate_real_model(prepared_penguins, trained_penguins):
    dataset_dir, prepared = prepared_penguins
    model_dir, _ = trained_penguins
    result = evaluate(dataset_dir, prepared.schema, model_dir, min_accuracy=0.8)
    assert result.examples == prepared.split_rows["test"]
    assert int(np.sum(result.confusion_matrix)) == result.examples
    assert result.accuracy > 0.85 and result.passed
    report = render_report(result)
    assert "# Evaluation: PASSED" in report and "| **Gentoo** |" in report


def test_min_accuracy_out_of_range(prepared_penguins, trained_penguins):
    dataset_dir, prepared = prepared_penguins
    with pytest.raises(ValueError, match="min_accuracy"):
        evaluate(dataset_dir, prepared.schema, trained_penguins[0], min_accuracy=1.5)
