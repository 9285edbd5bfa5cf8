"""Streamed evaluation: metrics accumulated batch by batch equal the exact in-memory ones,
score histograms stay within their stated error bound once bins merge, and the memory of
the accumulation does not grow with the rows."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pandas as pd
import pytest

from gkeflow.components.evaluate.accumulate import MetricAccumulator
from gkeflow.components.evaluate.logic import evaluate, slice_metrics
from gkeflow.components.evaluate.metrics import (
    average_precision,
    expected_calibration_error,
    log_loss,
    roc_auc,
    roc_curve,
)
from gkeflow.components.evaluate.scores import ScoreHistogram, score_keys
from gkeflow.components.evaluate.slices import SliceAccumulator, as_keys


def _predictions(n: int, classes: int = 3, seed: int = 0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    true = rng.integers(0, classes, n)
    logits = rng.normal(0, 1, (n, classes))
    logits[np.arange(n), true] += rng.uniform(-1, 6, n)
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return true, (e / e.sum(axis=1, keepdims=True)).astype(dtype)


def _pairwise_auc(is_positive, scores):
    """Mann-Whitney: P(score of a positive > score of a negative), ties count half."""
    pos, neg = np.sort(scores[is_positive]), np.sort(scores[~is_positive])
    below = np.searchsorted(neg, pos, side="left")
    ties = np.searchsorted(neg, pos, side="right") - below
    return float((below + ties / 2).sum() / (len(pos) * len(neg)))


def test_score_keys_order_scores_exactly():
    rng = np.random.default_rng(1)
    s = np.r_[0.0, 1.0, 0.5, np.nextafter(0.5, 0), np.nextafter(0.5, 1), 1e-300,
              1 - 1e-16, rng.random(1000), rng.random(1000) ** 40, 1 - rng.random(1000) ** 40]
    order = np.argsort(s, kind="stable")
    keys = score_keys(s)
    assert np.all(np.diff(keys[order]) >= 0)
    assert len(np.unique(keys)) == len(np.unique(s))


@pytest.mark.parametrize("batch", [1, 7, 1000, 100_000])
def test_batches_accumulate_to_the_exact_metrics(batch):
    true, probs = _predictions(5000)
    acc = MetricAccumulator(["a", "b", "c"])
    for start in range(0, len(true), batch):
        acc.update(true[start:start + batch], probs[start:start + batch])
    m = acc.result()
    p64 = probs.astype(np.float64)
    assert m.examples == 5000 and m.curves_exact
    assert m.auc_error_bound == {"roc_auc": 0.0, "pr_auc": 0.0}
    assert m.log_loss == pytest.approx(log_loss(true, p64), rel=1e-12)
    assert m.ece == pytest.approx(expected_calibration_error(true, p64), rel=1e-12)
    assert m.accuracy == np.mean(p64.argmax(axis=1) == true)
    for i, label in enumerate("abc"):
        is_i = true == i
        assert m.per_class[label].roc_auc == pytest.approx(roc_auc(is_i, p64[:, i]), abs=1e-12)
        assert m.per_class[label].roc_auc == pytest.approx(_pairwise_auc(is_i, p64[:, i]),
                                                           abs=1e-12)
        assert m.per_class[label].pr_auc == pytest.approx(
            average_precision(is_i, p64[:, i]), abs=1e-12)
    label, curve = acc.roc("b")
    exact = roc_curve(true == 1, p64[:, 1])
    assert np.array_equal(curve.thresholds, exact.thresholds)
    assert np.array_equal(curve.fpr, exact.fpr) and np.array_equal(curve.tpr, exact.tpr)


@pytest.mark.parametrize("max_bins", [64, 1024])
def test_merged_bins_give_exact_points_and_aucs_within_the_stated_bound(max_bins):
    true, probs = _predictions(60_000, classes=2, seed=3, dtype=np.float64)
    histogram = ScoreHistogram(max_bins)
    for start in range(0, len(true), 4096):
        histogram.add(probs[start:start + 4096, 1], true[start:start + 4096] == 1)
    assert histogram.bins <= max_bins and histogram.shift > 0
    c = histogram.curve()
    assert not c.exact
    is_pos, scores = true == 1, probs[:, 1]
    exact_auc, exact_ap = roc_auc(is_pos, scores), average_precision(is_pos, scores)
    assert abs(c.roc_auc - exact_auc) <= c.roc_auc_error + 1e-12
    assert abs(c.pr_auc - exact_ap) <= c.pr_auc_error + 1e-12
    # the bound is useful, not vacuous: finer bins, tighter bound
    assert c.roc_auc_error < (0.02 if max_bins == 64 else 0.002)
    assert c.pr_auc_error < (0.05 if max_bins == 64 else 0.005)
    # every point is an exact operating point of the whole test split
    for fpr, tpr, threshold in zip(c.fpr, c.tpr, c.thresholds, strict=True):
        chosen = scores >= threshold
        assert (chosen & ~is_pos).sum() / (~is_pos).sum() == fpr
        assert (chosen & is_pos).sum() / is_pos.sum() == tpr
    assert np.all(np.diff(c.thresholds) < 0) and (c.fpr[-1], c.tpr[-1]) == (1, 1)


def test_histograms_merge_like_one_pass():
    true, probs = _predictions(20_000, classes=2, seed=4, dtype=np.float64)
    whole, a, b = ScoreHistogram(256), ScoreHistogram(256), ScoreHistogram(256)
    whole.add(probs[:, 1], true == 1)
    a.add(probs[:9000, 1], true[:9000] == 1)
    b.add(probs[9000:, 1], true[9000:] == 1)
    a.merge(b)
    assert a.shift == whole.shift
    assert np.array_equal(a.pos, whole.pos) and np.array_equal(a.low, whole.low)


def test_slices_do_not_depend_on_batching():
    rng = np.random.default_rng(5)
    n = 3000
    frame = pd.DataFrame({
        "colour": rng.choice(["red", "blue", None, "green"], n),
        "shop": [f"s{v}" for v in rng.integers(0, 60, n)],
    })
    true, probs = _predictions(n, seed=5)
    whole = slice_metrics(frame, ["colour", "shop"], true, probs, probs[:, ::-1])
    acc = SliceAccumulator(["colour", "shop"], 3)
    for start in range(0, n, 128):
        part = slice(start, start + 128)
        acc.update({c: as_keys(frame[c][part].tolist()) for c in ("colour", "shop")},
                   true[part], probs[part].argmax(axis=1), probs[part],
                   probs[part, ::-1].argmax(axis=1))
    assert_same_slices(acc.result(), whole)
    shops = [s for s in whole if s.column == "shop"]
    assert len(shops) == 25 and sum(s.examples for s in shops) == n
    # automatic columns: dropped once they show more than 20 values
    auto = SliceAccumulator(["colour", "shop"], 3, auto=True)
    auto.update({c: np.array([str(v).encode() for v in frame[c]], dtype=object)
                 for c in ("colour", "shop")}, true, probs.argmax(axis=1), probs)
    assert {s.column for s in auto.result()} == {"colour"}


def assert_same_slices(got, expected, rel=1e-9, atol=1e-12):
    assert [(s.column, s.value, s.examples) for s in got] == \
        [(s.column, s.value, s.examples) for s in expected]
    for a, b in zip(got, expected, strict=True):
        assert (a.accuracy, a.f1_macro, a.log_loss) == pytest.approx(
            (b.accuracy, b.f1_macro, b.log_loss), rel=rel, abs=atol)
        if b.champion_accuracy is None:
            assert a.champion_accuracy is None
        else:
            assert a.champion_accuracy == pytest.approx(b.champion_accuracy, rel=rel, abs=atol)


def _accumulate_peak(rows: int, batch: int = 2048) -> int:
    """Peak traced bytes while accumulating ``rows`` synthetic predictions, slices included
    (an identifier-like slice column among them), predictions made batch by batch."""
    tracemalloc.start()
    try:
        acc = MetricAccumulator(["a", "b", "c"], max_bins=2048)
        slices = SliceAccumulator(["region", "customer"], 3, max_values=500)
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        for start in range(0, rows, batch):
            n = min(batch, rows - start)
            true, probs = _predictions(n, seed=start, dtype=np.float64)
            ids = np.arange(start, start + n)
            predicted = acc.update(true, probs)
            slices.update({"region": np.array([b"r%d" % (i % 7) for i in ids], dtype=object),
                           "customer": np.array([b"c%d" % i for i in ids], dtype=object)},
                          true, predicted, probs)
        acc.result()
        slices.result()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def test_accumulation_memory_does_not_grow_with_rows():
    small, large = _accumulate_peak(10_000), _accumulate_peak(200_000)
    assert large <= 1.2 * small + (256 << 10), (small, large)


def test_streamed_evaluation_equals_the_in_memory_computation(prepared_penguins,
                                                              trained_penguins):
    from gkeflow.components.evaluate.accumulate import compute_metrics
    from gkeflow.components.prepare.reader import load_split
    from gkeflow.components.train.exported import ExportedModel
    from gkeflow.components.train.inputs import encode_labels, to_model_inputs

    dataset_dir, prepared = prepared_penguins
    schema = prepared.schema
    test = load_split(dataset_dir, "test", schema)
    model = ExportedModel(trained_penguins[0])
    true = encode_labels(test, schema)
    probs = model.predict_proba(to_model_inputs(test, schema))
    expected = compute_metrics(true, probs, schema.label_vocabulary)
    streamed = evaluate(dataset_dir, schema, trained_penguins[0], batch_rows=7)
    assert streamed.metrics.confusion_matrix == expected.confusion_matrix
    # float32 probabilities near 0 and 1 differ in their last bits between batch sizes, and
    # a log loss of ~1e-5 inherits that as a relative error of ~1e-3: compare absolutely.
    assert streamed.metrics.overall() == pytest.approx(expected.overall(), rel=0, abs=1e-4)
    assert streamed.metrics.curves_exact
    slices = slice_metrics(test, ["island", "sex"], true, probs)
    assert_same_slices(streamed.slices, slices, rel=0, atol=1e-4)
