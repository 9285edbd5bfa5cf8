"""The ROC curve the Kubeflow UI shows: each point's threshold gives back its FPR and TPR."""

from __future__ import annotations

import json

import numpy as np
import pytest
from google.protobuf import json_format, struct_pb2
from kfp import dsl

from gkeflow.components.evaluate.metrics import positive_class_roc, roc_points


def _confident_model(n: int = 4000, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """True classes and float32 softmax probabilities of a confident three-class model."""
    rng = np.random.default_rng(seed)
    true = rng.integers(0, 3, n)
    logits = rng.normal(0, 1, (n, 3)).astype(np.float32)
    logits[np.arange(n), true] += rng.uniform(4, 30, n).astype(np.float32)  # mostly sure
    wrong = rng.random(n) < 0.03
    logits[wrong] = logits[wrong][:, ::-1]  # a few confident mistakes
    shifted = logits - logits.max(axis=1, keepdims=True)
    probs = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
    return true, probs.astype(np.float32)


def _logged(points: dict[str, list[float]]) -> list[dict]:
    """What the UI reads: log_roc_curve's metadata after its JSON and protobuf Struct trip."""
    artifact = dsl.ClassificationMetrics(name="classification_metrics")
    artifact.log_roc_curve(**points)
    struct = json_format.Parse(json.dumps(artifact.metadata), struct_pb2.Struct())
    return json_format.MessageToDict(struct)["confidenceMetrics"]


def _rates_at(is_positive: np.ndarray, scores: np.ndarray, threshold: float):
    predicted = scores >= threshold
    return (predicted & ~is_positive).sum() / (~is_positive).sum(), \
        (predicted & is_positive).sum() / is_positive.sum()


@pytest.mark.parametrize("positive_class", ["b", "c"])
def test_each_logged_threshold_reproduces_its_fpr_and_tpr_on_the_test_split(positive_class):
    true, probs = _confident_model()
    label, curve = positive_class_roc(true, probs, ["a", "b", "c"], positive_class)
    is_positive = true == ["a", "b", "c"].index(label)
    scores = probs[:, ["a", "b", "c"].index(label)].astype(np.float64)
    logged = _logged(roc_points(curve))
    assert len(logged) == len(curve) and 100 < len(logged) <= 200
    for point in logged:
        fpr, tpr = _rates_at(is_positive, scores, point["confidenceThreshold"])
        assert (fpr, tpr) == (point["falsePositiveRate"], point["recall"]), point
    thresholds = [p["confidenceThreshold"] for p in logged]
    assert len(set(thresholds)) == len(thresholds)  # no two points read the same threshold
    # Six decimals, as before, merge the confident model's tiny thresholds and misplace
    # points: this data would have caught it.
    rounded = [round(t, 6) for t in thresholds]
    assert len(set(rounded)) < len(rounded)
    assert any(_rates_at(is_positive, scores, r) != _rates_at(is_positive, scores, t)
               for r, t in zip(rounded, thresholds, strict=True))
