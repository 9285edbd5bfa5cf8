"""Per-slice metrics (accuracy, macro F1, log loss, champion accuracy) accumulated over
batches of the test split.

Each slice column keeps, per distinct value, a confusion matrix, a log-loss sum and the
champion's correct count: exact sums, so the result does not depend on how the rows were
batched. Memory is bounded: a column keeps at most ``max_values`` distinct values; rows of
values first seen after that are counted in one overflow slot, reported in "(other)".
Automatically chosen columns (``slice_columns=""``) are dropped as soon as they show more
than :data:`AUTO_SLICE_MAX_VALUES` distinct values. A column with more than
:data:`MAX_SLICE_VALUES` values reports its most frequent ones (ties: by value) and pools
the rest as "(other)"; that choice is exact unless the column overflowed ``max_values``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Slice columns chosen automatically (``slice_columns=""``) have at most this many values.
AUTO_SLICE_MAX_VALUES = 20
#: A slice column keeps its most frequent values; the rest are pooled as "(other)".
MAX_SLICE_VALUES = 25
#: Confusion-matrix cells kept per slice column (8 bytes each): bounds its distinct values.
SLICE_CELLS_PER_COLUMN = 1 << 20
MISSING_VALUE = "(missing)"
OTHER_VALUES = "(other)"


@dataclass
class SliceMetrics:
    column: str
    value: str
    examples: int
    accuracy: float
    f1_macro: float
    log_loss: float
    champion_accuracy: float | None = None


def max_slice_values(n_classes: int, cells: int = SLICE_CELLS_PER_COLUMN) -> int:
    """Distinct values one slice column may track under its memory budget."""
    return max(4 * MAX_SLICE_VALUES, cells // (n_classes * n_classes))


def as_keys(values) -> np.ndarray:
    """Slice values as an object array of bytes, b"" for missing (None, NaN, "")."""
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        if v is None or (isinstance(v, float) and v != v):
            out[i] = b""
        elif isinstance(v, bytes):
            out[i] = v
        else:
            out[i] = str(v).encode("utf-8")
    return out


class _Column:
    def __init__(self, n_classes: int, max_values: int):
        self.index: dict[bytes, int] = {}
        self.max_values = max_values
        self.n = n_classes
        self.matrix = np.zeros((0, n_classes, n_classes), np.int64)
        self.log_loss = np.zeros(0, np.float64)
        self.champion_correct = np.zeros(0, np.int64)
        self.overflow = -1  # slot of values beyond max_values, once needed

    def _grow(self, slots: int) -> None:
        extra = slots - len(self.log_loss)
        if extra > 0:
            self.matrix = np.concatenate([self.matrix, np.zeros((extra, self.n, self.n),
                                                                np.int64)])
            self.log_loss = np.r_[self.log_loss, np.zeros(extra)]
            self.champion_correct = np.r_[self.champion_correct, np.zeros(extra, np.int64)]

    def slots_of(self, keys: np.ndarray) -> np.ndarray:
        unique, inverse = np.unique(keys, return_inverse=True)
        slots = np.empty(len(unique), np.int64)
        for i, key in enumerate(unique):
            slot = self.index.get(key)
            if slot is None:
                if len(self.index) < self.max_values:
                    slot = self.index[key] = len(self.log_loss)
                    self._grow(slot + 1)
                else:
                    if self.overflow < 0:
                        self.overflow = len(self.log_loss)
                        self._grow(self.overflow + 1)
                    slot = self.overflow
            slots[i] = slot
        return slots[inverse.reshape(-1)]

    @property
    def distinct(self) -> int:
        return len(self.index) + (self.overflow >= 0)


class SliceAccumulator:
    """Per-slice sums for some categorical columns, batch by batch.

    Args:
        columns: The slice columns.
        n_classes: Size of the label vocabulary.
        auto: The columns were chosen automatically: drop those with more than
            AUTO_SLICE_MAX_VALUES distinct values.
        max_values: Distinct values tracked per column; default from the memory budget.
    """

    def __init__(self, columns: list[str], n_classes: int, auto: bool = False,
                 max_values: int = 0):
        self.auto = auto
        limit = AUTO_SLICE_MAX_VALUES + 1 if auto else (max_values or max_slice_values(n_classes))
        self.columns = {c: _Column(n_classes, limit) for c in columns}
        self.with_champion = False

    def update(self, values: dict[str, np.ndarray], true: np.ndarray, predicted: np.ndarray,
               probabilities: np.ndarray, champion_predicted: np.ndarray | None = None) -> None:
        """Count one batch: each column's raw values (bytes, b"" missing), the true and
        predicted class indices, the class probabilities and the champion's predictions."""
        from gkeflow.components.evaluate.metrics import PROBABILITY_FLOOR

        true = np.asarray(true, np.int64)
        if not len(true):
            return
        picked = np.asarray(probabilities, np.float64)[np.arange(len(true)), true]
        losses = -np.log(np.clip(picked, PROBABILITY_FLOOR, 1.0))
        right = None
        if champion_predicted is not None:
            self.with_champion = True
            right = (np.asarray(champion_predicted) == true).astype(np.int64)
        for name in list(self.columns):
            column = self.columns[name]
            slots = column.slots_of(np.asarray(values[name], dtype=object))
            if self.auto and column.distinct > AUTO_SLICE_MAX_VALUES:
                del self.columns[name]
                continue
            np.add.at(column.matrix, (slots, true, predicted), 1)
            size = len(column.log_loss)
            column.log_loss += np.bincount(slots, weights=losses, minlength=size)
            if right is not None:
                column.champion_correct += np.bincount(slots, weights=right,
                                                       minlength=size).astype(np.int64)

    def result(self) -> list[SliceMetrics]:
        """Metrics per column and value (values sorted; rare ones pooled as "(other)")."""
        results = []
        for name, column in self.columns.items():
            named = {(k.decode("utf-8", "replace") if k else MISSING_VALUE): slot
                     for k, slot in column.index.items()}
            counts = {v: int(column.matrix[s].sum()) for v, s in named.items()}
            pooled = [column.overflow] if column.overflow >= 0 else []
            if column.distinct > MAX_SLICE_VALUES:
                ranked = sorted(named, key=lambda v: (-counts[v], v))
                keep = set(ranked[:MAX_SLICE_VALUES - 1])
                pooled += [named.pop(v) for v in ranked if v not in keep]
            groups = {v: [s] for v, s in named.items()}
            if pooled:
                groups[OTHER_VALUES] = groups.get(OTHER_VALUES, []) + pooled
            for value in sorted(groups):
                slots = groups[value]
                results.append(_metrics(name, value, column.matrix[slots].sum(axis=0),
                                        float(column.log_loss[slots].sum()),
                                        int(column.champion_correct[slots].sum()),
                                        self.with_champion))
        return results


def _metrics(column: str, value: str, matrix: np.ndarray, log_loss: float,
             champion_correct: int, with_champion: bool) -> SliceMetrics:
    examples = int(matrix.sum())
    actual, predicted = matrix.sum(axis=1), matrix.sum(axis=0)
    seen = np.flatnonzero((actual + predicted) > 0)  # classes true or predicted in the slice
    f1s = [2 * matrix[c, c] / (actual[c] + predicted[c]) for c in seen]
    return SliceMetrics(
        column=column, value=value, examples=examples,
        accuracy=float(np.trace(matrix) / examples), f1_macro=float(np.mean(f1s)),
        log_loss=log_loss / examples,
        champion_accuracy=champion_correct / examples if with_champion else None,
    )
