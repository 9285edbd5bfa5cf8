"""Which task a label asks for: classification or regression, decided from its values
before any step spends time, with the reason shown to the user.

``auto`` reads the label's values (the prepare step's sample of rows):

- numbers with many distinct values -> regression;
- text, booleans, or few distinct whole numbers (ratings 1-5, 0/1 flags) -> classification;
- an identifier-like label (unique whole numbers in increasing order; text with nearly
  one value per row) or more classes than :data:`MAX_CLASSES` -> refused, naming the count
  and ``task``, since neither task can learn it.

A forced task is checked for what cannot work at all: regression on a label with values
that are not numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from gkeflow.components.prepare.sources import DataError

TASKS = ("auto", "classification", "regression")
#: More classes than this, found by ``auto``, are refused (a forced classification may).
MAX_CLASSES = 100
#: Whole numbers with at most this many distinct values are classes under ``auto``.
MAX_INTEGER_CLASSES = 20
#: Text with more distinct values than this share of the rows is identifier-like.
IDENTIFIER_FRACTION = 0.9
#: ... once there are more than this many rows to tell.
IDENTIFIER_MIN_ROWS = 50
#: A label whose values are numbers but for at most this share is numeric under ``auto``.
NON_NUMBER_TOLERANCE = 0.05


@dataclass(frozen=True)
class TaskChoice:
    """The task and why, in words the run's first lines and the data report show."""

    task: str
    reason: str


def check_task(task: str) -> str:
    if task not in TASKS:
        from gkeflow.components.did_you_mean import did_you_mean

        raise DataError(f"unknown task {task!r}{did_you_mean(task, TASKS)}; "
                        f"valid: {', '.join(TASKS)}")
    return task


def label_numbers(values: pa.Array) -> tuple[np.ndarray, int]:
    """The label's present values as float64 and how many present values are no numbers
    (booleans are no numbers: they are classes)."""
    from gkeflow.components.prepare.values import as_strings, to_float

    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_boolean(values.type):
        return np.zeros(0), len(values) - values.null_count
    if not (pa.types.is_integer(values.type) or pa.types.is_floating(values.type)):
        values = as_strings(values)
    numbers, bad = to_float(values)
    return numbers[~bad & ~np.isnan(numbers)], int(np.count_nonzero(bad))


def _distinct_text(values: pa.Array) -> int:
    from gkeflow.components.prepare.values import as_strings

    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    texts = {s.strip() for s in as_strings(values).to_pylist() if s is not None and s.strip()}
    return len(texts)


def decide_task(values: pa.Array, requested: str, label: str) -> TaskChoice:
    """The task for label column ``label`` with (sampled) ``values``.

    Raises:
        DataError: a label neither task can learn, or regression on values that are not
            numbers; one line naming the count and ``task``.
    """
    check_task(requested)
    if requested != "auto":
        # a task the data would have chosen anyway (as `gkeflow run` passes the one it
        # decided before the run) keeps the data's reason; only a forced one is "asked for"
        try:
            chosen = decide_task(values, "auto", label)
        except DataError:
            chosen = None
        if chosen is not None and chosen.task == requested:
            return chosen
    numbers, not_numbers = label_numbers(values)
    rows = len(numbers) + not_numbers
    if requested == "regression":
        # stray values that are no numbers are rejected rows (counted, with their reason);
        # a label mostly of text is no number to predict
        if not_numbers * 2 > rows:
            raise DataError(f"task regression needs a numeric label, but {not_numbers} of "
                            f"{rows} values of {label!r} are not numbers; check --label, "
                            "or use --task classification")
        if numbers.size < 2 or np.unique(numbers).size < 2:
            raise DataError(f"label {label!r} has fewer than 2 distinct values; a regressor "
                            "needs a varying target: check --label")
        return TaskChoice("regression", "asked for (--task regression)")
    # a few values that are no numbers among many numbers: a numeric label whose stray
    # values the prepare step rejects (counted, with their reason)
    numeric = bool(numbers.size) and not_numbers <= NON_NUMBER_TOLERANCE * rows
    distinct = int(np.unique(numbers).size) if numeric else _distinct_text(values)
    if requested == "classification":
        return TaskChoice("classification",
                          f"asked for (--task classification): {distinct} classes")
    _refuse_mixed(values, numbers, not_numbers, rows, label)
    whole = bool(numbers.size) and bool(np.all(numbers == np.round(numbers)))
    if numeric:
        if (whole and numbers.size > IDENTIFIER_MIN_ROWS and distinct == numbers.size
                and np.all(np.diff(numbers) > 0)):
            raise DataError(f"label {label!r} looks like a row identifier (unique whole numbers "
                            f"in increasing order, {distinct} values); choose another --label "
                            "or force it with --task regression")
        if distinct <= 2 or (whole and distinct <= MAX_INTEGER_CLASSES):
            return TaskChoice("classification",
                              f"{distinct} distinct {'whole ' if whole else ''}numbers")
        return TaskChoice("regression", f"numbers with {distinct} distinct values")
    if rows > IDENTIFIER_MIN_ROWS and distinct >= IDENTIFIER_FRACTION * rows:
        raise DataError(f"label {label!r} looks like an identifier ({distinct} distinct values "
                        f"in {rows} rows), not a class; choose another --label, or force it "
                        "with --task classification")
    if distinct > MAX_CLASSES:
        raise DataError(f"label {label!r} has {distinct} classes, more than {MAX_CLASSES}; "
                        "check --label, or force it with --task classification")
    kind = "true/false values" if pa.types.is_boolean(values.type) else "text"
    return TaskChoice("classification", f"{kind} with {distinct} distinct values")


#: A label whose rows are at least this fraction numbers and this fraction words mixes them.
MIXED_FRACTION = 0.1


def _refuse_mixed(values: pa.Array, numbers: np.ndarray, not_numbers: int, rows: int,
                  label: str) -> None:
    """DataError for a label mixing numbers (more distinct ones than class codes) with words
    (``12``, ``n/a``, ``twelve``): taken as classes it would train on every number as a class
    of its own."""
    if not rows or numbers.size < MIXED_FRACTION * rows or not_numbers < MIXED_FRACTION * rows:
        return
    distinct = int(np.unique(numbers).size)
    if distinct <= MAX_INTEGER_CLASSES:
        return  # class codes beside class names (1, 2, 3, unknown): classes
    words = sorted({str(v).strip() for v in values.to_pylist()
                    if v is not None and str(v).strip() and _not_number(str(v))})[:3]
    raise DataError(
        f"label {label!r} mixes numbers ({numbers.size} rows, {distinct} distinct) and words "
        f"({not_numbers} rows, e.g. {', '.join(repr(w) for w in words)}): as classes every "
        "number would be a class of its own; clean the label, or use --task regression "
        f"(the {not_numbers} rows whose label is no number are then rejected and counted: "
        "raise --param max_rejected_fraction above their share if needed)")


def _not_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return True
    return False


#: The label quantiles the data report shows for regression.
QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)


def task_summary(schema, sample=None) -> dict:
    """What stats.json and the data report say of the task: which, why, and for regression
    the label's quantiles and skew over the sampled rows (min, max, mean and std over every
    row are the label column's own statistics)."""
    summary: dict = {"task": schema.task, "reason": schema.task_reason}
    if not schema.regression or sample is None:
        return summary
    numbers, _ = label_numbers(sample.column(schema.label))
    numbers = numbers[np.isfinite(numbers)]
    if numbers.size:
        std = float(numbers.std())
        summary["label_sample"] = {
            "rows": int(numbers.size),
            "quantiles": {f"p{round(q * 100)}": float(np.quantile(numbers, q))
                          for q in QUANTILES},
            "skew": (float(np.mean((numbers - numbers.mean()) ** 3)) / std ** 3
                     if std > 0 else 0.0),
        }
    return summary


__all__ = ["MAX_CLASSES", "QUANTILES", "TASKS", "TaskChoice", "check_task", "decide_task",
           "label_numbers", "task_summary"]
