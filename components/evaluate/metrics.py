"""Classification metrics over predicted class probabilities, in plain NumPy.

Every function takes integer class indices ``true`` (shape ``[n]``) and, where it
needs them, ``probabilities`` (shape ``[n, classes]``, rows summing to 1). A metric
that is undefined on the data (ROC AUC of a class absent from the test split) is
``None``, never NaN, so nothing non-finite reaches JSON.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

#: The ROC curve logged for the Kubeflow UI keeps at most this many points.
MAX_CURVE_POINTS = 200
#: Equal-width confidence bins of the expected calibration error.
CALIBRATION_BINS = 10
#: Overall metrics where a smaller value is better.
LOWER_IS_BETTER = frozenset({"log_loss", "ece"})
#: Overall metric names, as they appear in the ``Metrics`` artifact.
OVERALL_METRICS = (
    "accuracy", "precision_macro", "recall_macro", "f1_macro",
    "log_loss", "roc_auc", "pr_auc", "ece",
)
PROBABILITY_FLOOR = 1e-15


class MetricsError(ValueError):
    """Inputs the metrics cannot be computed from; the message says what is wrong."""


@dataclass
class ClassMetrics:
    precision: float
    recall: float
    f1: float
    support: int
    roc_auc: float | None
    pr_auc: float | None


@dataclass
class Curve:
    """An ROC curve: false positive rate, true positive rate and the threshold of each point.

    A point means "predict the positive class when its probability >= threshold".
    """

    fpr: np.ndarray
    tpr: np.ndarray
    thresholds: np.ndarray

    def __len__(self) -> int:
        return len(self.fpr)


@dataclass
class MetricSet:
    """All metrics of one model on one set of examples."""

    labels: list[str]
    examples: int
    accuracy: float
    precision_macro: float
    recall_macro: float
    f1_macro: float
    log_loss: float
    roc_auc: float | None
    pr_auc: float | None
    ece: float
    per_class: dict[str, ClassMetrics]
    confusion_matrix: list[list[int]]
    #: Most the reported roc_auc and pr_auc can differ from the exact ones (0 when exact).
    auc_error_bound: dict[str, float] = field(
        default_factory=lambda: {"roc_auc": 0.0, "pr_auc": 0.0})
    #: Whether every curve has one point per distinct score (no score bins merged).
    curves_exact: bool = True

    def overall(self) -> dict[str, float | None]:
        """The overall metrics by their stable names (None where undefined)."""
        return {name: getattr(self, name) for name in OVERALL_METRICS}

    def scalars(self) -> dict[str, float]:
        """Short, stable names -> finite values, for the ``Metrics`` artifact."""
        values: dict[str, float | None] = dict(self.overall())
        values["test_examples"] = float(self.examples)
        for label, key in metric_keys(self.labels).items():
            m = self.per_class[label]
            values[f"precision_{key}"] = m.precision
            values[f"recall_{key}"] = m.recall
            values[f"f1_{key}"] = m.f1
            if len(self.labels) > 2:
                values[f"roc_auc_{key}"] = m.roc_auc
                values[f"pr_auc_{key}"] = m.pr_auc
        return {k: float(v) for k, v in values.items() if v is not None and math.isfinite(v)}


def metric_key(text: str) -> str:
    """A label or value as a metric-name fragment: letters, digits and '_'."""
    return re.sub(r"[^A-Za-z0-9]+", "_", str(text)).strip("_") or "blank"


#: Fragments a label cannot take: ``precision_macro``... are the overall metrics.
RESERVED_KEYS = frozenset({"macro"})


def metric_keys(labels: list[str]) -> dict[str, str]:
    """Label -> unique metric-name fragment (a clash, with another label or with an overall
    metric's name, gets the label's index appended)."""
    keys: dict[str, str] = {}
    for index, label in enumerate(labels):
        key = metric_key(label)
        if key in keys.values() or key in RESERVED_KEYS:
            key = f"{key}_{index}"
        keys[label] = key
    return keys


def validate_inputs(true: np.ndarray, probabilities: np.ndarray, labels: list[str]) -> None:
    """Raise :class:`MetricsError` with a clear message for inputs metrics cannot use."""
    true = np.asarray(true)
    probabilities = np.asarray(probabilities)
    if probabilities.ndim != 2:
        raise MetricsError(
            f"probabilities must be a 2-D array [examples, classes]; got shape "
            f"{probabilities.shape}"
        )
    if len(true) != probabilities.shape[0]:
        raise MetricsError(f"{len(true)} true labels but {probabilities.shape[0]} predictions")
    if len(true) == 0:
        raise MetricsError("cannot evaluate on an empty test split")
    if probabilities.shape[1] != len(labels):
        raise MetricsError(
            f"label-count mismatch: the model outputs {probabilities.shape[1]} class "
            f"probabilities but the label vocabulary has {len(labels)} labels {list(labels)}"
        )
    if len(labels) < 2:
        raise MetricsError(f"classification needs at least 2 labels; got {list(labels)}")
    if true.min() < 0 or true.max() >= len(labels):
        raise MetricsError(
            f"true class indices must lie in [0, {len(labels) - 1}]; got "
            f"{int(true.min())}..{int(true.max())}"
        )
    if not np.all(np.isfinite(probabilities)):
        raise MetricsError("the model produced non-finite probabilities (NaN or inf)")


def confusion_matrix(true: np.ndarray, predicted: np.ndarray, n_classes: int) -> np.ndarray:
    """Rows are true classes, columns predicted classes."""
    matrix = np.zeros((n_classes, n_classes), dtype=np.int64)
    np.add.at(matrix, (np.asarray(true), np.asarray(predicted)), 1)
    return matrix


def roc_curve(is_positive: np.ndarray, scores: np.ndarray) -> Curve:
    """The full ROC curve, one point per distinct score plus the (0, 0) start.

    The start point's threshold is 1.0, or just above the top score when that is 1.0,
    so every threshold is finite.
    """
    is_positive = np.asarray(is_positive, dtype=bool)
    scores = np.asarray(scores, dtype=np.float64)
    order = np.argsort(-scores, kind="mergesort")
    scores, is_positive = scores[order], is_positive[order]
    last_of_each = np.r_[np.flatnonzero(np.diff(scores)), len(scores) - 1]
    tp = np.cumsum(is_positive)[last_of_each]
    fp = (last_of_each + 1) - tp
    positives, negatives = int(is_positive.sum()), int((~is_positive).sum())
    top = float(scores[0])
    start = 1.0 if top < 1.0 else float(np.nextafter(top, np.inf))
    return Curve(
        fpr=np.r_[0.0, fp / negatives if negatives else np.zeros(len(fp))],
        tpr=np.r_[0.0, tp / positives if positives else np.zeros(len(tp))],
        thresholds=np.r_[start, scores[last_of_each]],
    )


def roc_auc(is_positive: np.ndarray, scores: np.ndarray) -> float | None:
    """Area under the ROC curve (ties count half); None without both classes present."""
    is_positive = np.asarray(is_positive, dtype=bool)
    if is_positive.all() or not is_positive.any():
        return None
    curve = roc_curve(is_positive, scores)
    return float(np.sum(np.diff(curve.fpr) * (curve.tpr[1:] + curve.tpr[:-1]) / 2))


def average_precision(is_positive: np.ndarray, scores: np.ndarray) -> float | None:
    """Area under the precision-recall curve as average precision: sum of (R_k - R_k-1) P_k.

    None when the class has no positive example.
    """
    is_positive = np.asarray(is_positive, dtype=bool)
    if not is_positive.any():
        return None
    curve = roc_curve(is_positive, scores)
    positives = int(is_positive.sum())
    negatives = len(is_positive) - positives
    tp = curve.tpr[1:] * positives
    fp = curve.fpr[1:] * negatives
    precision = tp / np.maximum(tp + fp, 1)
    recall_gain = np.diff(np.r_[0.0, curve.tpr[1:]])
    return float(np.sum(recall_gain * precision))


def log_loss(true: np.ndarray, probabilities: np.ndarray) -> float:
    """Mean negative log-probability of the true class (probabilities floored at 1e-15)."""
    picked = np.asarray(probabilities, dtype=np.float64)[np.arange(len(true)), true]
    return float(-np.mean(np.log(np.clip(picked, PROBABILITY_FLOOR, 1.0))))


def expected_calibration_error(true: np.ndarray, probabilities: np.ndarray,
                               bins: int = CALIBRATION_BINS) -> float:
    """Top-label ECE: sum over equal-width confidence bins [k/B, (k+1)/B) of
    (examples in bin / all) * |accuracy in bin - mean confidence in bin|."""
    probabilities = np.asarray(probabilities, dtype=np.float64)
    confidence = probabilities.max(axis=1)
    correct = probabilities.argmax(axis=1) == np.asarray(true)
    index = np.minimum((confidence * bins).astype(int), bins - 1)
    total = 0.0
    for b in np.unique(index):
        in_bin = index == b
        total += in_bin.sum() * abs(correct[in_bin].mean() - confidence[in_bin].mean())
    return float(total / len(confidence))


def prf(matrix: np.ndarray, i: int) -> tuple[float, float, float, int]:
    tp = int(matrix[i, i])
    predicted = int(matrix[:, i].sum())
    actual = int(matrix[i, :].sum())
    precision = tp / predicted if predicted else 0.0
    recall = tp / actual if actual else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1, actual


def mean_defined(values: list[float | None]) -> float | None:
    defined = [v for v in values if v is not None]
    return float(np.mean(defined)) if defined else None


def resolve_positive_class(labels: list[str], positive_class: str) -> str:
    """``positive_class`` checked against ``labels``; empty means the last label."""
    if not positive_class:
        return labels[-1]
    if positive_class not in labels:
        raise MetricsError(
            f"positive_class {positive_class!r} is not in the label vocabulary {list(labels)}"
        )
    return positive_class


def positive_class_roc(true: np.ndarray, probabilities: np.ndarray, labels: list[str],
                       positive_class: str = "",
                       max_points: int = MAX_CURVE_POINTS) -> tuple[str, Curve]:
    """The ROC curve of one class against the rest, downsampled to ``max_points``."""
    from gkeflow.components.evaluate.scores import ScoreHistogram

    label = resolve_positive_class(labels, positive_class)
    i = labels.index(label)
    histogram = ScoreHistogram()
    histogram.add(np.asarray(probabilities)[:, i], np.asarray(true) == i)
    c = histogram.curve()
    return label, downsample_curve(Curve(c.fpr, c.tpr, c.thresholds), max_points)


def downsample_curve(curve: Curve, max_points: int = MAX_CURVE_POINTS) -> Curve:
    """At most ``max_points`` evenly spaced points of ``curve``, first and last kept."""
    if max_points < 2:
        raise MetricsError(f"a curve needs at least 2 points; got max_points={max_points}")
    if len(curve) <= max_points:
        return curve
    keep = np.unique(np.round(np.linspace(0, len(curve) - 1, max_points)).astype(int))
    return Curve(curve.fpr[keep], curve.tpr[keep], curve.thresholds[keep])


def roc_points(curve: Curve) -> dict[str, list[float]]:
    """``curve`` as the lists ``ClassificationMetrics.log_roc_curve`` takes, unrounded.

    Every value is the exact double the curve holds (Python's ``repr`` of a float round-trips,
    and KFP stores metadata as doubles), so predicting the positive class when its
    probability is >= a point's threshold gives back that point's FPR and TPR on the test
    split. Rounding thresholds to a few decimals would merge the many tiny thresholds of a
    confident model (all reading 0.0) and move others past neighbouring scores.
    """
    return {
        "fpr": [float(v) for v in curve.fpr],
        "tpr": [float(v) for v in curve.tpr],
        "threshold": [float(v) for v in curve.thresholds],
    }
