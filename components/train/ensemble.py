"""A weighted average of ``model_type: auto``'s candidates, when it beats the best of them
on the eval split, exported as one raw-feature SavedModel.

The weights come from greedy ensemble selection with replacement (Caruana et al., 2004, as
AutoML systems use it): start from the best candidate, then repeatedly add the candidate
whose addition lowers the eval metric most, so a weight is a multiple of ``1/steps``. Every
candidate's eval predictions come from a fit that never saw the eval rows, so the choice
is made on held-out rows; the ensemble is kept only when it improves on the best single
candidate by at least :data:`MIN_GAIN`, which keeps a lucky average out.

Before that, on an eval split too small to tell the candidates apart, their plain average:
the candidates whose mean per-row loss exceeds the best's by less than one standard error
of the paired difference (the one-standard-error rule of model selection) are
:func:`indistinguishable` from it, and when there are two or more, the model serves their
equal-weight average rather than one of them picked by chance (over 13 real tables and 3
splits each, `bench/quality.py --splits 3`: the worst table 1.21x -> 1.07x the best default
GBDT's error, the geometric mean 0.965x -> 0.953x; the rules compared in bench/auto_rules.py;
bench/RESULTS.md).

The exported model holds every member's SavedModel and serves the weighted average of
their outputs (class probabilities, or values in the label's units) behind the same
``serve`` and ``serving_default`` signatures.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

#: Additions of greedy selection.
STEPS = 20
#: The relative improvement on the best single candidate an ensemble must reach.
MIN_GAIN = 0.005


def eval_error(predictions: np.ndarray, truth: np.ndarray, regression: bool,
               transform: str = "none") -> float:
    """Log loss of class probabilities, or RMSE of values (of their log under ``log``)."""
    losses = row_losses(predictions, truth, regression, transform)
    return float(np.sqrt(np.mean(losses)) if regression else np.mean(losses))


def row_losses(predictions: np.ndarray, truth: np.ndarray, regression: bool,
               transform: str = "none") -> np.ndarray:
    """Each row's loss, as :func:`eval_error` averages it: the squared error (of the log under
    ``log``) or the log loss."""
    predictions = np.asarray(predictions, np.float64)
    if regression:
        values, target = predictions.reshape(-1), np.asarray(truth, np.float64).reshape(-1)
        if transform == "log":
            values, target = np.log(np.maximum(values, 1e-300)), np.log(target)
        return (values - target) ** 2
    chosen = predictions[np.arange(truth.size), np.asarray(truth, int)]
    return -np.log(np.clip(chosen, 1e-15, 1.0))


def blend(predictions: dict[str, np.ndarray], weights: dict[str, float]) -> np.ndarray:
    """The members' predictions averaged with ``weights``, as the ensemble serves them."""
    return sum(w * np.asarray(predictions[n], np.float64) for n, w in weights.items())


def indistinguishable(predictions: dict[str, np.ndarray], truth: np.ndarray,
                      regression: bool, transform: str = "none",
                      errors: float = 1.0) -> list[str]:
    """The best candidate on the eval rows and those the rows cannot tell from it: their
    mean per-row loss exceeds the best's by less than ``errors`` standard errors of the
    paired difference."""
    losses = {n: row_losses(p, truth, regression, transform) for n, p in predictions.items()}
    names = list(losses)
    best = min(names, key=lambda n: (losses[n].mean(), names.index(n)))
    close = [best]
    for name in names:
        if name == best or losses[name].size < 2:
            continue
        difference = losses[name] - losses[best]
        error = difference.std(ddof=1) / np.sqrt(difference.size)
        if difference.mean() < errors * error:
            close.append(name)
    return sorted(close, key=names.index)


def greedy_weights(predictions: dict[str, np.ndarray], truth: np.ndarray, regression: bool,
                   transform: str = "none", steps: int = STEPS
                   ) -> tuple[dict[str, float], float]:
    """Member -> weight (summing to 1) and the ensemble's eval error."""
    names = list(predictions)
    errors = {n: eval_error(predictions[n], truth, regression, transform) for n in names}
    counts = dict.fromkeys(names, 0)
    first = min(names, key=lambda n: (errors[n], names.index(n)))
    counts[first] = 1
    total = np.asarray(predictions[first], np.float64).copy()
    for size in range(2, steps + 1):
        trial = {n: eval_error((total + predictions[n]) / size, truth, regression, transform)
                 for n in names}
        pick = min(names, key=lambda n: (trial[n], names.index(n)))
        counts[pick] += 1
        total += predictions[pick]
    weights = {n: c / steps for n, c in counts.items() if c}
    return weights, eval_error(blend(predictions, weights), truth, regression, transform)


def export_ensemble(model_dir: Path, members: dict[str, Path], weights: dict[str, float],
                    metadata: dict) -> None:
    """The members' SavedModels behind one signature serving their weighted average;
    ``model_dir`` appears whole or not at all."""
    import tensorflow as tf

    from gkeflow.components._atomic import publish_dir
    from gkeflow.components.train.exported import (
        MODEL_METADATA_FILE,
        SERVING_SIGNATURE,
        raw_signature,
    )

    module = tf.Module(name="gkeflow_ensemble")
    module.members = [tf.saved_model.load(str(members[name])) for name in weights]
    shares = [float(weight) for weight in weights.values()]
    signature = raw_signature(metadata["features"])

    @tf.function(input_signature=[signature])
    def serve(features):
        outputs = [share * tf.cast(getattr(member, SERVING_SIGNATURE)(features), tf.float32)
                   for share, member in zip(shares, module.members, strict=True)]
        return tf.add_n(outputs)

    module.serve = serve
    with publish_dir(Path(model_dir)) as scratch:
        tf.saved_model.save(module, str(scratch), signatures={
            SERVING_SIGNATURE: serve, "serving_default": serve})
        (scratch / MODEL_METADATA_FILE).write_text(json.dumps(metadata, indent=2))
