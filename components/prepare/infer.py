"""Schema inference from a sample of rows, and validation against an expected schema."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from gkeflow.components.prepare.schema import ColumnSchema, Schema
from gkeflow.components.prepare.sources import DataError
from gkeflow.components.prepare.values import (
    NUMERIC_MIN_FRACTION,
    as_strings,
    null_invalid_utf8,
    parses_as_numbers,
    to_float,
)

#: The first rows every input is sampled for (types, roles, the task), at most.
SAMPLE_ROWS = 10_000
#: A text column is identifier-like when it has more than this many distinct values and
#: they are at least IDENTIFIER_FRACTION of its (present) values.
IDENTIFIER_MIN_DISTINCT = 20
IDENTIFIER_FRACTION = 0.5


def _unreadable_type(type_: pa.DataType) -> str:
    """Why a column of this Arrow type cannot be a feature ("" when it can)."""
    if pa.types.is_nested(type_):
        return f"nested values ({type_}) are not supported"
    if pa.types.is_binary(type_) or pa.types.is_large_binary(type_) \
            or pa.types.is_fixed_size_binary(type_):
        return "binary values are not supported"
    return ""


def _infer_column(name: str, array: pa.Array) -> ColumnSchema:
    """One column's type and role from its sampled values."""
    unreadable = _unreadable_type(array.type)
    if unreadable:
        return ColumnSchema(name, "categorical", "ignored", True, note=unreadable)
    array, _ = null_invalid_utf8(array)
    present = array.drop_null() if not pa.types.is_string(array.type) else pc.drop_null(
        pc.if_else(pc.equal(array, ""), pa.scalar(None, array.type), array))
    nullable = len(present) < len(array)
    if len(present) == 0:
        return ColumnSchema(name, "categorical", "ignored", True, note="all values missing")
    numeric = parses_as_numbers(present, NUMERIC_MIN_FRACTION)
    kind = "numeric" if numeric else "categorical"
    strings = as_strings(present)
    distinct = pc.count_distinct(strings).as_py()
    if distinct == 1 and len(array) > 1:
        value = strings[0].as_py()
        return ColumnSchema(name, kind, "ignored", nullable,
                            note=f"constant: every value is {value!r}"
                                 + (" or missing" if nullable else ""))
    if numeric:
        values, bad = to_float(present)
        values = values[~bad & ~np.isnan(values)]
        if (values.size > 50 and np.all(values == np.round(values))
                and np.all(np.diff(values) > 0)):
            return ColumnSchema(name, kind, "ignored", nullable,
                                note="identifier-like: unique whole numbers in increasing order")
        return ColumnSchema(name, kind, "feature", nullable)
    if distinct == len(present) and distinct > 50:
        return ColumnSchema(name, kind, "ignored", nullable,
                            note="identifier-like: every value is unique"
                                 + _dates_hint(present))
    if distinct > IDENTIFIER_MIN_DISTINCT and distinct >= IDENTIFIER_FRACTION * len(present):
        return ColumnSchema(name, kind, "ignored", nullable,
                            note=f"identifier-like: {distinct} distinct values in "
                                 f"{len(present)} rows" + _dates_hint(present))
    return ColumnSchema(name, kind, "feature", nullable)


def _dates_hint(present: pa.Array) -> str:
    """What to do with a column of dates or times that is ignored as an identifier ("" when
    its values are not all dates): no calendar features are derived from it."""
    if pa.types.is_temporal(present.type):
        first = present[0].as_py()
    else:
        strings = as_strings(present)
        try:
            pc.cast(strings, pa.timestamp("s"))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return ""
        first = strings[0].as_py()
    return (f" (dates, such as {str(first)!r}: no calendar features are derived from them; "
            "add columns such as the year, month and weekday to learn from them)")


def sample_table(batches: list[tuple[str, pa.RecordBatch]]) -> pa.Table:
    """The sampled batches of every file as one table. Files may type a column
    differently (Parquet int64 in one, double in another; CSV text beside Parquet
    numbers): numbers are widened, and a column still typed differently is read as text,
    as a CSV column is; inference then decides its type from the values."""
    schemas = {batch.schema for _, batch in batches}
    if len(schemas) == 1:
        return pa.Table.from_batches([batch for _, batch in batches])
    tables = [pa.Table.from_batches([batch]) for _, batch in batches]
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        pass
    names = tables[0].column_names
    mixed = [n for n in names if len({t.schema.field(n).type for t in tables}) > 1]
    as_text = []
    for (source, _), table in zip(batches, tables, strict=True):
        for name in mixed:
            column = table.column(name)
            try:
                text = pc.cast(column, pa.string())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise DataError(f"column {name!r} of {source} is {column.type}, unlike the "
                                f"other files' {name!r}, and cannot be read as text: {exc}"
                                ) from exc
            table = table.set_column(names.index(name), name, text)
        as_text.append(table)
    return pa.concat_tables(as_text, promote_options="permissive")


def infer_from_table(table: pa.Table, label_column: str, max_vocabulary: int) -> Schema:
    names = table.column_names
    if label_column not in names:
        raise DataError(
            f"label column {label_column!r} not found; available columns: {', '.join(names)}"
        )
    columns: list[ColumnSchema] = []
    for name in names:
        array = table.column(name).combine_chunks()
        if name == label_column:
            unreadable = _unreadable_type(array.type)
            if unreadable:
                raise DataError(f"label column {name!r}: {unreadable}")
            array, _ = null_invalid_utf8(array)
            columns.append(ColumnSchema(name, "categorical", "label", array.null_count > 0))
            continue
        columns.append(_infer_column(name, array))
    return Schema(label=label_column, label_vocabulary=[], columns=columns)


def column_names(value: str | list[str] | tuple[str, ...]) -> list[str]:
    """Column names from a comma-separated string (or a list), blanks dropped."""
    items = value.split(",") if isinstance(value, str) else list(value)
    return [item.strip() for item in items if item.strip()]


def _separator_hint(header: list[str]) -> str:
    """A note when the header reads as one column holding another separator."""
    if len(header) != 1:
        return ""
    for separator, name in ((";", "semicolons"), ("\t", "tabs"), ("|", "pipes")):
        if separator in header[0]:
            return (f" (the header is one column: the file seems separated by {name}; "
                    "gkeflow reads comma-separated values, so save it with commas)")
    return ""


def check_column_names(header: list[str], label_column: str, key_column: str = "",
                       exclude_columns=(), feature_columns=()) -> None:
    """DataError naming any unknown or conflicting column, with the available ones."""
    available = ", ".join(header)
    named = {"label_column": [label_column] if label_column else [],
             "key_column": [key_column] if key_column else [],
             "exclude_columns": column_names(exclude_columns),
             "feature_columns": column_names(feature_columns)}
    for parameter, names in named.items():
        unknown = [n for n in names if n not in header]
        if unknown:
            from gkeflow.components.did_you_mean import did_you_mean

            raise DataError(f"{parameter}: unknown column(s) {', '.join(map(repr, unknown))}"
                            f"{did_you_mean(unknown[0], header)}; "
                            f"available columns: {available}{_separator_hint(header)}")
    for parameter in ("exclude_columns", "feature_columns"):
        if label_column in named[parameter]:
            raise DataError(f"{parameter} names the label column {label_column!r}")
    both = set(named["exclude_columns"]) & set(named["feature_columns"])
    if both:
        raise DataError(f"columns both excluded and named as features: "
                        f"{', '.join(sorted(both))}")


def apply_column_roles(schema: Schema, key_column: str = "", exclude_columns=(),
                       feature_columns=()) -> None:
    """The roles the user chose over the inferred ones: the key column gets the role
    ``key`` (not a feature, unless named in ``feature_columns``: a feature can be the key),
    excluded columns are ignored; with ``feature_columns``, exactly those are features."""
    excluded = set(column_names(exclude_columns))
    features = set(column_names(feature_columns))
    for column in schema.columns:
        if column.role == "label":
            continue
        if column.name in features:
            if column.role == "ignored" and column.note.startswith(
                    ("nested", "binary", "all values missing")):
                raise DataError(f"feature_columns: column {column.name!r} cannot be a "
                                f"feature ({column.note})")
            column.role, column.note = "feature", ""
        elif column.name in excluded:
            column.role, column.note = "ignored", "excluded by exclude_columns"
        elif key_column and column.name == key_column:
            column.role, column.note = "key", KEY_NOTE
        elif features:
            column.role, column.note = "ignored", "not in feature_columns"


KEY_NOTE = "the key column: splits rows, identifies them in predictions; not a feature"
#: Notes of roles the user chose (not reported as problems).
CHOSEN_NOTES = ("excluded by exclude_columns", "not in feature_columns", KEY_NOTE)


def infer_schema(frame: pd.DataFrame, label_column: str, max_vocabulary: int = 1000) -> Schema:
    """Classify a frame's columns as numeric or categorical; the label is categorical."""
    table = pa.Table.from_pandas(frame.astype(object).where(frame.notna(), None),
                                 preserve_index=False)
    schema = infer_from_table(table, label_column, max_vocabulary)
    for column in schema.columns:
        if column.type == "categorical" and column.role != "ignored":
            counts = frame[column.name].dropna().astype(str).value_counts()
            column.vocabulary = sorted(counts.index[:max_vocabulary].tolist())
    schema.label_vocabulary = schema.column(label_column).vocabulary
    check_label_vocabulary(schema)
    if not schema.features:
        raise DataError("no usable feature columns besides the label")
    return schema


def check_label_vocabulary(schema: Schema) -> None:
    if len(schema.label_vocabulary) < 2:
        raise DataError(
            f"label column {schema.label!r} needs at least 2 distinct values to train a "
            f"classifier; found {schema.label_vocabulary}"
        )


def validate_against(expected: Schema, header: list[str], sample: pa.Table,
                     label_column: str) -> tuple[Schema, list[str]]:
    """The schema to prepare with, given an expected one; and the problems found.

    Missing feature or label columns are errors; extra columns are ignored (and
    reported); columns whose type changed are reported, and their rows that do not
    fit the expected type are rejected row by row.
    """
    problems: list[str] = []
    if expected.label != label_column:
        raise DataError(
            f"the expected schema's label is {expected.label!r}, not {label_column!r}"
        )
    required = [c.name for c in expected.columns if c.role in ("feature", "label")]
    missing = [name for name in required if name not in header]
    if missing:
        raise DataError(
            f"columns missing from the data that the expected schema requires: "
            f"{', '.join(missing)}; the data has: {', '.join(header)}"
        )
    known = {c.name: c for c in expected.columns}
    columns = []
    for name in header:
        if name not in known:
            problems.append(f"extra column {name!r} is not in the expected schema; ignored")
            columns.append(ColumnSchema(name, "categorical", "ignored", True,
                                        note="not in the expected schema"))
            continue
        want = ColumnSchema(**asdict(known[name]))
        if (want.role != "ignored" and want.type == "numeric" and len(sample)
                and name in sample.column_names):
            present = sample.column(name).drop_null()
            if len(present) and not parses_as_numbers(present):
                problems.append(
                    f"type change: column {name!r} was numeric and now has text values; "
                    f"rows with text in it are rejected"
                )
        columns.append(want)
    schema = Schema(label=expected.label, label_vocabulary=list(expected.label_vocabulary),
                    columns=columns, task=expected.task)
    return schema, problems
