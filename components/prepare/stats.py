"""Streaming column statistics, merged across record batches and input files."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

#: Distinct values counted per categorical column; beyond it new values are only counted
#: as "other" so memory stays bounded on identifier-like columns.
MAX_TRACKED_VALUES = 100_000
TOP_VALUES = 10


@dataclass
class NumericStats:
    count: int = 0
    missing: int = 0
    mean: float = 0.0
    m2: float = 0.0
    min: float = math.inf
    max: float = -math.inf

    def update(self, values: np.ndarray) -> None:
        present = values[~np.isnan(values)]
        self.count += values.size
        self.missing += values.size - present.size
        self._merge(present.size, *(_moments(present) if present.size else (0.0, 0.0)),
                    float(present.min()) if present.size else math.inf,
                    float(present.max()) if present.size else -math.inf)

    def _merge(self, n: int, mean: float, m2: float, lo: float, hi: float) -> None:
        present = self.count - self.missing - n  # present values before this update
        total = present + n
        if n == 0:
            return
        delta = mean - self.mean
        self.mean += delta * n / total
        self.m2 += m2 + delta * delta * present * n / total
        self.min = min(self.min, lo)
        self.max = max(self.max, hi)

    def merge(self, other: NumericStats) -> None:
        n = other.count - other.missing
        self.count += other.count
        self.missing += other.missing
        self._merge(n, other.mean, other.m2, other.min, other.max)

    def to_dict(self) -> dict:
        present = self.count - self.missing
        return {
            "count": self.count,
            "missing": self.missing,
            "min": self.min if present else None,
            "max": self.max if present else None,
            "mean": self.mean if present else None,
            "std": math.sqrt(self.m2 / present) if present else None,
        }


def update_numeric_stats(stats: list[NumericStats], values: np.ndarray) -> None:
    """``stats[k].update(values[k])`` for every row k of a 2-D array, in a few vectorised
    passes (one row per column, NaN = missing)."""
    if values.shape[1] == 0:
        return
    missing = np.isnan(values)
    n = values.shape[1]
    absent = missing.sum(axis=1)
    present = n - absent
    filled = np.where(missing, 0.0, values)
    means = filled.sum(axis=1) / np.maximum(present, 1)
    np.subtract(filled, means[:, None], out=filled)
    filled[missing] = 0.0
    m2 = np.einsum("ij,ij->i", filled, filled)
    lows, highs = np.fmin.reduce(values, axis=1), np.fmax.reduce(values, axis=1)
    for k, column in enumerate(stats):
        column.count += n
        column.missing += int(absent[k])
        if present[k]:
            column._merge(int(present[k]), float(means[k]), float(m2[k]), float(lows[k]),
                          float(highs[k]))


def _moments(values: np.ndarray) -> tuple[float, float]:
    mean = float(values.mean())
    return mean, float(((values - mean) ** 2).sum())


@dataclass
class CategoricalStats:
    count: int = 0
    missing: int = 0
    values: Counter = field(default_factory=Counter)
    untracked: int = 0  # occurrences of values beyond MAX_TRACKED_VALUES distinct ones

    def add_counts(self, counts: dict[str, int], missing: int) -> None:
        self.missing += missing
        self.count += missing
        for value, n in counts.items():
            self.count += n
            if value in self.values or len(self.values) < MAX_TRACKED_VALUES:
                self.values[value] += n
            else:
                self.untracked += n

    def merge(self, other: CategoricalStats) -> None:
        self.add_counts(other.values, other.missing)
        self.untracked += other.untracked
        self.count += other.untracked

    def to_dict(self) -> dict:
        return {
            "count": self.count,
            "missing": self.missing,
            "distinct": len(self.values) if not self.untracked else f">={len(self.values)}",
            "top": [[v, n] for v, n in self.values.most_common(TOP_VALUES)],
        }
