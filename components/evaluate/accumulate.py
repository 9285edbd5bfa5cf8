"""Metrics accumulated batch by batch, in memory that does not grow with the rows.

:class:`MetricAccumulator` takes ``(true class indices, class probabilities)`` one batch
at a time and keeps only sums: the confusion matrix, the log-loss sum, the calibration
bins (count, correct, confidence sum), and one :class:`~.scores.ScoreHistogram` per class
for the ROC and precision-recall curves. Everything but the curves is exact (up to
floating-point summation order); the curves and AUCs are exact while a class has at most
``max_bins`` distinct scores and carry a computed error bound beyond (see ``scores``).
"""

from __future__ import annotations

import math

import numpy as np

from gkeflow.components.evaluate.metrics import (
    CALIBRATION_BINS,
    PROBABILITY_FLOOR,
    ClassMetrics,
    Curve,
    MetricsError,
    MetricSet,
    mean_defined,
    prf,
    resolve_positive_class,
    validate_inputs,
)
from gkeflow.components.evaluate.scores import HistogramCurve, ScoreHistogram, class_bins


def check_batch(true: np.ndarray, probabilities: np.ndarray, n_labels: int) -> None:
    """Raise :class:`MetricsError` for a batch the metrics cannot use."""
    if probabilities.ndim != 2:
        raise MetricsError(
            f"probabilities must be a 2-D array [examples, classes]; got shape "
            f"{probabilities.shape}")
    if len(true) != probabilities.shape[0]:
        raise MetricsError(f"{len(true)} true labels but {probabilities.shape[0]} predictions")
    if probabilities.shape[1] != n_labels:
        raise MetricsError(
            f"label-count mismatch: the model outputs {probabilities.shape[1]} class "
            f"probabilities but the label vocabulary has {n_labels} labels")
    if len(true) and (true.min() < 0 or true.max() >= n_labels):
        raise MetricsError(
            f"true class indices must lie in [0, {n_labels - 1}]; got "
            f"{int(true.min())}..{int(true.max())}")
    if not np.all(np.isfinite(probabilities)):
        raise MetricsError("the model produced non-finite probabilities (NaN or inf)")


class MetricAccumulator:
    """Every overall and per-class metric of one model, accumulated over batches.

    Args:
        labels: The label vocabulary (class index i is ``labels[i]``).
        max_bins: Bins per class score histogram; default: a share of
            :data:`~.scores.TOTAL_SCORE_BINS`.
    """

    def __init__(self, labels: list[str], max_bins: int = 0):
        if len(labels) < 2:
            raise MetricsError(f"classification needs at least 2 labels; got {list(labels)}")
        self.labels = list(labels)
        n = len(labels)
        self.matrix = np.zeros((n, n), dtype=np.int64)
        self.log_loss_sum = 0.0
        self.ece_count = np.zeros(CALIBRATION_BINS, np.int64)
        self.ece_correct = np.zeros(CALIBRATION_BINS, np.int64)
        self.ece_confidence = np.zeros(CALIBRATION_BINS, np.float64)
        bins = max_bins or class_bins(n)
        self.histograms = [ScoreHistogram(bins) for _ in range(n)]

    @property
    def examples(self) -> int:
        return int(self.matrix.sum())

    def update(self, true: np.ndarray, probabilities: np.ndarray) -> np.ndarray:
        """Count one batch; returns its predicted class indices (for slices)."""
        true = np.asarray(true).astype(np.int64)
        probabilities = np.asarray(probabilities, dtype=np.float64)
        check_batch(true, probabilities, len(self.labels))
        predicted = probabilities.argmax(axis=1)
        if not len(true):
            return predicted
        np.add.at(self.matrix, (true, predicted), 1)
        picked = probabilities[np.arange(len(true)), true]
        self.log_loss_sum += float(-np.sum(np.log(np.clip(picked, PROBABILITY_FLOOR, 1.0))))
        confidence = probabilities.max(axis=1)
        index = np.minimum((confidence * CALIBRATION_BINS).astype(int), CALIBRATION_BINS - 1)
        self.ece_count += np.bincount(index, minlength=CALIBRATION_BINS)
        self.ece_correct += np.bincount(index, weights=predicted == true,
                                        minlength=CALIBRATION_BINS).astype(np.int64)
        self.ece_confidence += np.bincount(index, weights=confidence, minlength=CALIBRATION_BINS)
        for i, histogram in enumerate(self.histograms):
            histogram.add(probabilities[:, i], true == i)
        return predicted

    def curves(self) -> list[HistogramCurve]:
        return [h.curve() for h in self.histograms]

    def roc(self, positive_class: str = "") -> tuple[str, Curve]:
        """One class's full ROC curve against the rest (one point per score bin)."""
        label = resolve_positive_class(self.labels, positive_class)
        c = self.histograms[self.labels.index(label)].curve()
        return label, Curve(c.fpr, c.tpr, c.thresholds)

    def result(self, positive_class: str = "") -> MetricSet:
        """The metrics of everything counted so far."""
        examples = self.examples
        if not examples:
            raise MetricsError("cannot evaluate on an empty test split")
        curves = self.curves()
        per_class: dict[str, ClassMetrics] = {}
        for i, label in enumerate(self.labels):
            precision, recall, f1, support = prf(self.matrix, i)
            per_class[label] = ClassMetrics(precision, recall, f1, support,
                                            curves[i].roc_auc, curves[i].pr_auc)
        if len(self.labels) == 2:
            i = self.labels.index(resolve_positive_class(self.labels, positive_class))
            auc, pr = curves[i].roc_auc, curves[i].pr_auc
            auc_error, pr_error = curves[i].roc_auc_error, curves[i].pr_auc_error
        else:
            auc = mean_defined([c.roc_auc for c in curves])
            pr = mean_defined([c.pr_auc for c in curves])
            auc_error = mean_defined([c.roc_auc_error for c in curves
                                       if c.roc_auc is not None]) or 0.0
            pr_error = mean_defined([c.pr_auc_error for c in curves
                                      if c.pr_auc is not None]) or 0.0
        # macro averages over the classes the test split has or predicts, as scikit-learn
        # does by default: a class absent from both has no precision or recall to average
        present = (self.matrix.sum(axis=0) + self.matrix.sum(axis=1)) > 0
        averaged = [m for m, there in zip(per_class.values(), present, strict=True) if there]
        occupied = self.ece_count > 0
        gaps = np.abs(self.ece_correct[occupied] - self.ece_confidence[occupied])
        return MetricSet(
            labels=list(self.labels),
            examples=examples,
            accuracy=float(np.trace(self.matrix) / examples),
            precision_macro=float(np.mean([m.precision for m in averaged])),
            recall_macro=float(np.mean([m.recall for m in averaged])),
            f1_macro=float(np.mean([m.f1 for m in averaged])),
            log_loss=self.log_loss_sum / examples,
            roc_auc=auc,
            pr_auc=pr,
            ece=float(math.fsum(gaps) / examples),
            per_class=per_class,
            confusion_matrix=self.matrix.tolist(),
            auc_error_bound={"roc_auc": float(auc_error), "pr_auc": float(pr_error)},
            curves_exact=all(c.exact for c in curves),
        )


def compute_metrics(true: np.ndarray, probabilities: np.ndarray, labels: list[str],
                    positive_class: str = "", max_bins: int = 0) -> MetricSet:
    """All metrics of ``probabilities`` against ``true`` over the label vocabulary ``labels``.

    Predictions are the most probable class. Binary problems report ROC AUC and PR AUC of
    ``positive_class`` (default: the last label); multiclass problems report the macro
    average of one-vs-rest AUCs over the classes the test split can score. The arrays are
    counted as one batch of a :class:`MetricAccumulator` (``max_bins`` score
    bins per class; default its budget), the same code that streams a test split.
    """
    true = np.asarray(true).astype(np.int64)
    probabilities = np.asarray(probabilities, dtype=np.float64)
    validate_inputs(true, probabilities, labels)
    resolve_positive_class(labels, positive_class)
    accumulator = MetricAccumulator(labels, max_bins)
    accumulator.update(true, probabilities)
    return accumulator.result(positive_class)
