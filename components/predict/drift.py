"""Schema drift between the rows being scored and the training data, as a Markdown report.

Per feature column: whether it is missing from the input, how many values are categories
the training vocabulary does not hold, how many numbers fall outside the training range
(the minimum and maximum seen across the prepared splits), and the share of missing
values against training's. A column's drift is the fraction of scored rows affected: a new
category, a number out of range, or a missing value beyond training's share of them (1.0
for a missing column); the step fails when any column's drift exceeds the threshold.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gkeflow.components.prepare.logic import Schema

TOP_UNSEEN = 5
MAX_TRACKED_UNSEEN = 10_000


@dataclass
class ColumnDrift:
    name: str
    type: str
    missing_column: bool = False
    rows: int = 0
    missing: int = 0
    unseen: int = 0
    below: int = 0
    above: int = 0
    unseen_values: Counter = field(default_factory=Counter)
    low: float = float("nan")
    high: float = float("nan")
    #: The share of missing values in the training data (None: not recorded).
    trained_missing: float | None = None

    @property
    def excess_missing(self) -> int:
        """Missing values beyond the training data's share of them."""
        if self.trained_missing is None:
            return 0
        return max(0, self.missing - math.ceil(self.trained_missing * self.rows))

    @property
    def affected(self) -> int:
        return self.unseen + self.below + self.above + self.excess_missing

    @property
    def fraction(self) -> float:
        if self.missing_column:
            return 1.0
        return self.affected / self.rows if self.rows else 0.0


class DriftTracker:
    """Counts drift over the kept rows of every batch (bounded memory)."""

    def __init__(self, schema: Schema, ranges: dict[str, tuple[float, float]],
                 missing_rates: dict[str, float] | None = None):
        self.schema = schema
        self.ranges = ranges
        self.missing_rates = missing_rates or {}
        self.columns = {c.name: ColumnDrift(c.name, c.type,
                                            trained_missing=self.missing_rates.get(c.name))
                        for c in schema.features}
        self.vocabularies = {c.name: pa.array(c.vocabulary, pa.string())
                             for c in schema.features if c.type == "categorical" and c.vocabulary}
        self.extra_columns: list[str] = []
        for name, (low, high) in ranges.items():
            if name in self.columns:
                self.columns[name].low, self.columns[name].high = low, high

    def header(self, names: list[str]) -> None:
        """The input's columns: features it lacks, and columns the schema does not know."""
        for column in self.columns.values():
            column.missing_column = column.name not in names
        known = {c.name for c in self.schema.columns}
        self.extra_columns = [n for n in names if n not in known]

    def update(self, numeric: dict[str, np.ndarray], text: dict[str, pa.Array],
               keep: np.ndarray) -> None:
        take = pa.array(np.flatnonzero(keep)) if not keep.all() else None
        n = int(keep.sum())
        for column in self.columns.values():
            column.rows += n
            if column.missing_column or n == 0:
                continue
            if column.type == "numeric":
                values = numeric[column.name][keep]
                nan = np.isnan(values)
                column.missing += int(nan.sum())
                if column.name in self.ranges:
                    with np.errstate(invalid="ignore"):
                        column.below += int((values < column.low).sum())
                        column.above += int((values > column.high).sum())
            else:
                values = text[column.name]
                if take is not None:
                    values = values.take(take)
                column.missing += values.null_count
                vocabulary = self.vocabularies.get(column.name)
                if vocabulary is None:
                    continue
                outside = pc.and_(pc.invert(pc.is_in(values, vocabulary)),
                                  pc.is_valid(values))
                count = pc.sum(outside).as_py() or 0
                if count:
                    column.unseen += count
                    if len(column.unseen_values) < MAX_TRACKED_UNSEEN:
                        column.unseen_values.update(values.filter(outside).to_pylist())

    def worst(self) -> tuple[str, float]:
        if not self.columns:
            return "", 0.0
        column = max(self.columns.values(), key=lambda c: c.fraction)
        return column.name, column.fraction

    def over(self, threshold: float) -> list[ColumnDrift]:
        return [c for c in self.columns.values() if c.fraction > threshold]

    def metrics(self) -> dict[str, float]:
        name, worst = self.worst()
        return {
            "drift_max_fraction": round(worst, 6),
            "drift_missing_columns": sum(c.missing_column for c in self.columns.values()),
            "drift_unseen_values": sum(c.unseen for c in self.columns.values()),
            "drift_out_of_range_values": sum(c.below + c.above for c in self.columns.values()),
        }


def _pct(n: int, total: int) -> str:
    return f"{n} ({n / total:.1%})" if total else str(n)


def render_drift_report(tracker: DriftTracker, threshold: float, *, model: str, data: str,
                        counts: dict[str, int], notes: list[str],
                        reject_reasons: dict[str, int]) -> str:
    """The Markdown report the Kubeflow UI shows."""
    over = tracker.over(threshold)
    verdict = (f"**FAILED**: drift above {threshold:.0%} in "
               + ", ".join(f"`{c.name}` ({c.fraction:.1%})" for c in over)
               if over else f"**OK**: every column's drift is at most {threshold:.0%}")
    lines = [
        "# Scoring report", "",
        f"- Model: `{model}`", f"- Data: `{data}`",
        f"- Rows read: {counts['rows_read']}, scored: {counts['rows_scored']}, "
        f"rejected: {counts['rows_rejected']}",
        f"- Drift: {verdict}", "",
    ]
    if reject_reasons:
        lines += ["## Rejected rows", "", "| reason | rows |", "|---|---:|"]
        lines += [f"| {reason} | {n} |" for reason, n in
                  sorted(reject_reasons.items(), key=lambda kv: -kv[1])]
        lines.append("")
    lines += ["## Drift against the training data", "",
              "| column | type | drift | missing values | new categories "
              "| below / above training range | examples |",
              "|---|---|---:|---|---:|---|---|"]
    for column in sorted(tracker.columns.values(), key=lambda c: -c.fraction):
        if column.missing_column:
            lines.append(f"| `{column.name}` | {column.type} | 100% | **column missing** "
                         "(scored as missing) | | | |")
            continue
        trained = tracker.missing_rates.get(column.name)
        missing = (f"{column.missing} ({column.missing / column.rows:.1%}; training "
                   f"{trained:.1%})" if trained is not None and column.rows
                   else _pct(column.missing, column.rows))
        if column.type == "numeric":
            rng = (f"{column.below} / {column.above} (training {column.low:g} to "
                   f"{column.high:g})" if column.name in tracker.ranges else "not checked")
            lines.append(f"| `{column.name}` | numeric | {column.fraction:.1%} | {missing} | "
                         f"| {rng} | |")
        else:
            examples = ", ".join(f"`{v}` ({n})" for v, n in
                                 column.unseen_values.most_common(TOP_UNSEEN))
            unseen = (_pct(column.unseen, column.rows) if column.name in tracker.vocabularies
                      else "not checked")
            lines.append(f"| `{column.name}` | categorical | {column.fraction:.1%} | {missing} "
                         f"| {unseen} | | {examples} |")
    lines.append("")
    if tracker.extra_columns:
        lines += ["Columns not in the training schema (ignored): "
                  + ", ".join(f"`{n}`" for n in tracker.extra_columns), ""]
    if notes:
        lines += ["## Notes", ""] + [f"- {note}" for note in notes] + [""]
    return "\n".join(lines)
