"""Score histograms: ROC and precision-recall curves in memory bounded by a bin count.

A :class:`ScoreHistogram` keeps, per bin of scores, the lowest and highest score in it
and how many positive and negative examples fell into it. Bins are defined on a monotone
integer key of the score (its IEEE-754 bit pattern, mirrored above 0.5 so that scores
near 1 get the same relative resolution as scores near 0): the key of a float64 score in
[0, 1] is exact and orders scores as they compare. A histogram starts at full resolution,
one bin per distinct score, so on a test split with at most ``max_bins`` distinct scores
the curves and AUCs are exactly those computed from every score. When a batch brings more
distinct scores than ``max_bins``, the low bits of the keys are dropped (bins merge in
pairs) until it fits again. Scores are binned in groups (at least as many as there are
bins), so memory stays within about ``2 * max_bins`` entries of 4 numbers whatever the
number of rows.

Accuracy once bins have merged:

- every curve point is an exact operating point: its threshold is the lowest score of its
  bin, and "predict positive when score >= threshold" selects exactly the bins from that
  one up, so the point's FPR and TPR are those of the threshold on the whole test split;
  the curve only has fewer points (one per bin, not per distinct score);
- ROC AUC treats the positive/negative pairs inside one bin as ties (half credit); the
  exact AUC differs by at most ``0.5 * sum(pos_b * neg_b) / (P * N)`` over the bins that
  hold more than one distinct score (:attr:`HistogramCurve.roc_auc_error`);
- average precision takes each bin's precision at its end; inside a bin the precision of
  the exact step curve lies between ``TP_above / (TP_above + FP_b)`` and
  ``TP_b / (TP_b + FP_above)``, which bounds the error (:attr:`HistogramCurve.pr_auc_error`);
- with ``shift`` bits dropped, a bin spans at most a relative ``2**(shift - 52)`` of the
  distance of its scores to 0 (below 0.5) or to 1 (above 0.5). Model scores are float32,
  whose keys already have 29 zero low bits, so up to ``shift`` 29 nothing merges.

Both bounds are computed from the histogram and reported with the metrics; they are 0 while
the histogram is exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Bins of all per-class histograms of one model together (32 bytes each: 32 MiB).
TOTAL_SCORE_BINS = 1 << 20
#: A class's histogram keeps at least this many bins, however many classes there are.
MIN_CLASS_BINS = 4096
_HALF_BITS = int(np.float64(0.5).view(np.int64))


def class_bins(n_classes: int, total: int = TOTAL_SCORE_BINS) -> int:
    """Bins per class histogram under the budget ``total``."""
    return max(MIN_CLASS_BINS, total // max(1, n_classes))


def score_keys(scores: np.ndarray) -> np.ndarray:
    """Monotone int64 keys of scores clipped to [0, 1]: equal keys iff equal scores."""
    s = np.clip(np.asarray(scores, dtype=np.float64), 0.0, 1.0) + 0.0  # no -0.0
    low = s < 0.5
    keys = np.where(low, s, 1.0 - s).view(np.int64)  # 1 - s is exact for s in [0.5, 1]
    return np.where(low, keys, 2 * _HALF_BITS - keys)


@dataclass
class HistogramCurve:
    """An ROC curve read from a histogram, its AUCs and their error bounds."""

    fpr: np.ndarray
    tpr: np.ndarray
    thresholds: np.ndarray
    roc_auc: float | None
    pr_auc: float | None
    roc_auc_error: float
    pr_auc_error: float
    exact: bool


class ScoreHistogram:
    """Positive and negative counts per score bin of one class (one-vs-rest), bounded.

    Args:
        max_bins: Most bins kept; more distinct scores than this merge neighbouring bins.
    """

    def __init__(self, max_bins: int = TOTAL_SCORE_BINS // 2):
        if max_bins < 2:
            raise ValueError(f"a score histogram needs at least 2 bins; got {max_bins}")
        self.max_bins = max_bins
        self.shift = 0  # low key bits dropped
        self.low = np.zeros(0, np.float64)   # lowest score per bin, ascending
        self.high = np.zeros(0, np.float64)  # highest score per bin
        self.pos = np.zeros(0, np.int64)
        self.neg = np.zeros(0, np.int64)
        # scores not yet binned: merged in once they are as many as max(bins, 4096), so
        # binning costs O(1) per row amortised and memory stays within ~2 max_bins entries
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []
        self._pending_rows = 0

    @property
    def bins(self) -> int:
        self._flush()
        return len(self.low)

    def add(self, scores: np.ndarray, is_positive: np.ndarray) -> None:
        """Count a batch of scores and whether each example belongs to the class."""
        scores = np.clip(np.asarray(scores, dtype=np.float64), 0.0, 1.0) + 0.0
        if scores.size == 0:
            return
        self._pending.append((scores, np.asarray(is_positive, dtype=bool)))
        self._pending_rows += scores.size
        if self._pending_rows >= max(len(self.low), 4096, min(self.max_bins, 1 << 16)):
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        scores = np.concatenate([s for s, _ in self._pending])
        positive = np.concatenate([p for _, p in self._pending]).astype(np.int64)
        self._pending, self._pending_rows = [], 0
        self._absorb(scores, scores, positive, 1 - positive)

    def merge(self, other: ScoreHistogram) -> None:
        """Add another histogram's counts (e.g. of another part of the test split)."""
        other._flush()
        self._flush()
        self.shift = max(self.shift, other.shift)
        self._absorb(other.low, other.high, other.pos, other.neg)

    def _absorb(self, low, high, pos, neg) -> None:
        low = np.concatenate([self.low, low])
        high = np.concatenate([self.high, high])
        pos = np.concatenate([self.pos, pos])
        neg = np.concatenate([self.neg, neg])
        order = np.argsort(low, kind="stable")  # two sorted runs: a merge
        low, high, pos, neg = low[order], high[order], pos[order], neg[order]
        keys = score_keys(low)
        while True:
            binned = keys >> self.shift
            starts = np.r_[0, np.flatnonzero(np.diff(binned)) + 1]
            if len(starts) <= self.max_bins:
                break
            self.shift += 1
        self.low = low[starts]
        self.high = np.maximum.reduceat(high, starts)
        self.pos = np.add.reduceat(pos, starts)
        self.neg = np.add.reduceat(neg, starts)

    def curve(self) -> HistogramCurve:
        """The ROC curve (one point per bin, from the top score down), AUCs and bounds.

        The first point is (0, 0) at threshold 1.0, or just above the top score when that
        is 1.0, so every threshold is finite. AUCs are None where undefined: ROC AUC
        without both positives and negatives, PR AUC without positives.
        """
        self._flush()
        pos, neg = self.pos[::-1], self.neg[::-1]
        tp, fp = np.cumsum(pos), np.cumsum(neg)
        positives = int(tp[-1]) if len(tp) else 0
        negatives = int(fp[-1]) if len(fp) else 0
        top = float(self.high[-1]) if self.bins else 0.0
        start = 1.0 if top < 1.0 else float(np.nextafter(top, np.inf))
        tpr = np.r_[0.0, tp / positives if positives else np.zeros(len(tp))]
        fpr = np.r_[0.0, fp / negatives if negatives else np.zeros(len(fp))]
        thresholds = np.r_[start, self.low[::-1]]
        multi = (self.low != self.high)[::-1]
        roc = pr = None
        roc_error = pr_error = 0.0
        if positives and negatives:
            roc = float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))
            roc_error = float(0.5 * np.sum((pos * neg)[multi]) / (positives * negatives))
        if positives:
            precision = tp / np.maximum(tp + fp, 1)
            pr = float(np.sum(pos / positives * precision))
            tp_above, fp_above = tp - pos, fp - neg
            lowest = tp_above / np.maximum(tp_above + fp, 1)
            highest = tp / np.maximum(tp + fp_above, 1)
            gap = np.maximum(highest - precision, precision - lowest)
            pr_error = float(np.sum((pos / positives * gap)[multi]))
        return HistogramCurve(fpr, tpr, thresholds, roc, pr, min(roc_error, 1.0),
                              min(pr_error, 1.0), exact=not multi.any())
