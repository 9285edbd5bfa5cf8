"""Closing a prepared dataset once every row is counted, the same way for one pod and for
the fan-out merge: the vocabularies fixed from all rows, the whole-file checks (rejected
rows, missing values, the label's classes), the problems the data report lists, and the
stats.json document."""

from __future__ import annotations

import math
from collections import Counter

from gkeflow.components.prepare.infer import CHOSEN_NOTES, SAMPLE_ROWS, check_label_vocabulary
from gkeflow.components.prepare.rejects import RejectLog
from gkeflow.components.prepare.schema import Schema
from gkeflow.components.prepare.sources import DataError, EmptySplit
from gkeflow.components.prepare.splits import SPLITS

#: A label class with fewer rows than this is reported (too few to learn or evaluate).
MIN_CLASS_ROWS = 5


def _finalise_schema(schema: Schema, stats: dict, inferred: bool,
                     max_vocabulary: int) -> None:
    for column in schema.columns:
        totals = [stats[split][column.name] for split in SPLITS]
        count = sum(s.count for s in totals)
        missing = sum(s.missing for s in totals)
        if inferred or column.role in ("ignored", "key"):
            column.nullable = missing > 0
        if column.type == "categorical" and inferred and column.role in ("feature", "label"):
            counts: Counter = Counter()
            for s in totals:
                counts.update(s.values)
            if column.role == "label":
                column.vocabulary = sorted(counts)
            else:
                column.vocabulary = sorted(v for v, _ in counts.most_common(max_vocabulary))
        if column.role == "ignored" and column.note == "all values missing" and missing < count:
            column.note = f"no values in the first {SAMPLE_ROWS} rows"
    if schema.regression:
        return
    if inferred:
        schema.label_vocabulary = list(schema.column(schema.label).vocabulary)
    else:
        schema.column(schema.label).vocabulary = list(schema.label_vocabulary)



def finish_dataset(schema: Schema, stats, rows_read: int, split_rows: dict, rejects,
                   unseen: Counter, nonfinite: Counter, problems: list[str], *,
                   inferred: bool, max_vocabulary: int, reject_unseen: bool,
                   max_rejected_fraction: float, max_missing_fraction: float) -> dict:
    """Close a prepared dataset once every row is counted, the same way for one pod and for
    the fan-out merge: vocabularies fixed from all rows, the whole-file checks, the problems
    the report lists, and the stats.json document.

    Raises:
        DataError: too many rejected rows or missing values, or an unusable label.
    """
    _finalise_schema(schema, stats, inferred, max_vocabulary)
    if not schema.regression:
        check_label_vocabulary(schema)
    check_fractions(schema, stats, rows_read, rejects, max_rejected_fraction,
                    max_missing_fraction)
    for name, n in unseen.most_common():
        problems.append(
            f"column {name!r}: {n} values not in the expected vocabulary"
            + (" (rejected)" if reject_unseen else " (kept; the model maps them "
               "to its out-of-vocabulary bucket)")
        )
    for name, n in sorted(nonfinite.items()):
        problems.append(f"column {name!r}: {n} non-finite values (inf, -inf, NaN, or "
                        f"beyond float32's range) treated as missing")
    if not schema.regression:
        problems.extend(label_problems(schema, stats))
    for column in schema.columns:
        if column.role == "ignored" and column.note and column.note not in CHOSEN_NOTES:
            problems.append(f"column {column.name!r} ignored: {column.note}")
    return {
        "rows_read": rows_read,
        "rejected_rows": rejects.count,
        "rejected_reasons": dict(rejects.reasons.most_common()),
        "nonfinite_values": dict(sorted(nonfinite.items())),
        "split_rows": split_rows,
        "splits": {
            split: {
                "count": split_rows[split],
                "columns": {name: s.to_dict() for name, s in stats[split].items()},
            }
            for split in SPLITS
        },
    }


def check_fractions(schema: Schema, stats: dict, rows_read: int, rejects,
                     max_rejected_fraction: float, max_missing_fraction: float) -> None:
    """Raise :class:`DataError` when too many rows were rejected or a feature misses too
    many values (the whole-file checks after every row is read)."""
    fraction = rejects.count / rows_read
    if fraction > max_rejected_fraction:
        columns = ", ".join(f"{c} ({n})" for c, n in rejects.columns.most_common(10)) or "-"
        reasons = dict(rejects.reasons.most_common(5))
        more = len(rejects.reasons) - len(reasons)
        raise DataError(
            f"{rejects.count} of {rows_read} rows rejected ({fraction:.1%}), above the limit "
            f"of {max_rejected_fraction:.1%}; reasons: {reasons}"
            + (f" and {more} more" if more > 0 else "")
            + f"; columns: {columns}\nsample rows:\n{reject_samples(rejects)}"
        )
    too_sparse = []
    for column in schema.features:
        count = sum(stats[s][column.name].count for s in SPLITS)
        missing = sum(stats[s][column.name].missing for s in SPLITS)
        if count and missing / count > max_missing_fraction:
            too_sparse.append(f"{column.name} ({missing / count:.1%} missing)")
    if too_sparse:
        raise DataError(
            f"feature columns miss more values than max_missing_fraction="
            f"{max_missing_fraction:.1%} allows: {', '.join(too_sparse)}"
        )


def label_problems(schema: Schema, stats: dict) -> list[str]:
    """Label values that differ only by case, and classes with very few rows."""
    counts: Counter = Counter()
    for split in SPLITS:
        counts.update(stats[split][schema.label].values)
    problems = []
    groups: dict[str, list[str]] = {}
    for value in sorted(counts):
        groups.setdefault(value.casefold(), []).append(value)
    for variants in groups.values():
        if len(variants) > 1:
            shown = ", ".join(f"{v!r} ({counts[v]} rows)" for v in variants)
            problems.append(f"label {schema.label!r}: values that differ only by case: "
                            f"{shown}; set merge_label_case to merge them")
    numbers: dict[float, list[str]] = {}
    for value in sorted(counts):
        try:
            numbers.setdefault(float(value), []).append(value)
        except ValueError:
            continue
    for variants in numbers.values():
        if len(variants) > 1:
            shown = ", ".join(f"{v!r} ({counts[v]} rows)" for v in variants)
            problems.append(f"label {schema.label!r}: one number written differently: "
                            f"{shown}; they are separate classes unless written alike")
    for value, n in sorted(counts.items()):
        if n < MIN_CLASS_ROWS:
            problems.append(f"label {schema.label!r}: class {value!r} has only {n} rows "
                            f"(fewer than {MIN_CLASS_ROWS}); too few to learn or evaluate")
    tested = stats["test"][schema.label].values
    if sum(tested.values()):
        absent = sorted(set(counts) - {v for v, n in tested.items() if n})
        if absent:
            problems.append(f"label {schema.label!r}: no row of class(es) "
                            f"{', '.join(map(repr, absent))} in the test split: their "
                            "precision and recall are not measured")
    return problems


def check_splits(split_rows: dict[str, int], by_key: bool) -> None:
    """EmptySplit when the train or the test split holds no row (identical rows, or rows
    sharing a key, share a split: few distinct ones can leave one empty)."""
    empty = [split for split in ("train", "test") if not split_rows.get(split)]
    if not empty:
        return
    shown = ", ".join(f"{split} {split_rows.get(split, 0)}" for split in SPLITS)
    unit = "key" if by_key else "row"
    raise EmptySplit(
        f"the {' and '.join(empty)} split{'s are' if len(empty) > 1 else ' is'} empty "
        f"({shown} rows, by the hash of each {unit}: identical {unit}s share a split); add "
        "distinct rows or change the split ratios", dict(split_rows))


def reason_summary(rejects: RejectLog) -> str:
    return "; ".join(f"{reason}: {n}" for reason, n in rejects.reasons.most_common(5))


def reject_samples(rejects: RejectLog) -> str:
    return "\n".join(f"  {reason}: {text[:120]}" for reason, text in rejects.samples)


def strict_json(value):
    """``value`` with every non-finite float replaced by None (so it is strict JSON)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    return value


def train_column_stats(dataset_dir, column: str) -> dict | None:
    """What ``stats.json`` of a prepared dataset records of ``column`` on the train split
    (count, missing, mean, std, ...); None when the file or the column is not there."""
    import json
    from pathlib import Path

    path = Path(dataset_dir) / "stats.json"
    if not path.exists():
        return None
    splits = json.loads(path.read_text(encoding="utf-8")).get("splits", {})
    return splits.get("train", {}).get("columns", {}).get(column)
