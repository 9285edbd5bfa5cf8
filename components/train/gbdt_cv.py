"""The rounds of the trees' refit on small tables: 5-fold cross-validation on the train and
eval rows together, with folds made here (seeded; each class dealt round the folds)."""

from __future__ import annotations

import time

import numpy as np

#: Up to this many train + eval rows, the refit's rounds come from 5-fold cross-validation
#: on them (an eval split of a few dozen rows chooses its best round by luck)...
CV_ROWS = 2000
#: ...and up to this many cells (rows x features): cross-validating a wide table costs five
#: more trainings of it (300 x 2,000: 21 s of a 36 s step), more than its rounds are worth.
CV_CELLS = 200_000


def cross_validates(rows: int, features: int) -> bool:
    """Whether the refit's rounds of a table with ``rows`` train + eval rows and
    ``features`` columns come from cross-validation (small and narrow) or the eval split."""
    return rows <= CV_ROWS and rows * features <= CV_CELLS


CV_FOLDS = 5


def cv_folds(labels: np.ndarray, stratified: bool, seed: int) -> list[tuple]:
    """``CV_FOLDS`` (train rows, held-out rows) index pairs, seeded; with ``stratified`` each
    class is spread over the folds in turn (XGBoost's own stratified folds need
    scikit-learn, which the images leave out)."""
    order = np.random.default_rng(seed).permutation(len(labels))
    if stratified:  # every class dealt round the folds
        order = order[np.argsort(labels[order], kind="stable")]
    fold = np.empty(len(labels), int)
    fold[order] = np.arange(len(labels)) % CV_FOLDS
    everything = np.arange(len(labels))
    return [(everything[fold != k], everything[fold == k]) for k in range(CV_FOLDS)]


def cross_validated_rounds(settings: dict, matrix, patience: int, most: int) -> int:
    """The rounds at which ``CV_FOLDS``-fold cross-validation of ``matrix`` stops improving
    (at most 2000 more than ``most``, the eval split's choice scaled to the rows)."""
    import xgboost as xgb

    started = time.perf_counter()
    history = xgb.cv(settings, matrix, num_boost_round=max(most * 2, most + 2000),
                     folds=cv_folds(matrix.get_label(),
                                    not settings["objective"].startswith("reg:"),
                                    int(settings.get("seed", 0))),
                     early_stopping_rounds=patience)
    rounds = max(1, len(history))
    print(f"{CV_FOLDS}-fold cross-validation on the train and eval rows: {rounds} rounds "
          f"(the eval split alone: {most}) in {time.perf_counter() - started:.1f} s",
          flush=True)
    return rounds
