"""One record batch typed per the schema, with a rejection reason per row."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gkeflow.components.prepare.csv_reader import NULL_VALUES, RowOrigin
from gkeflow.components.prepare.schema import Schema
from gkeflow.components.prepare.splits import (
    SplitRatios,
    combine_hashes,
    hash_categorical,
    hash_numeric,
)
from gkeflow.components.prepare.values import (
    as_strings,
    dictionary_codes,
    fast_float,
    is_text_dictionary,
    null_invalid_utf8,
    to_float,
)

#: The largest float32: the model's inputs are float32.
FLOAT32_MAX = float(np.finfo(np.float32).max)


@dataclass
class Plan:
    schema: Schema
    header: list[str]
    ratios: SplitRatios
    key_column: str
    fixed_labels: bool  # labels outside schema.label_vocabulary are rejected
    reject_unseen: bool
    rows_per_shard: int
    lower_labels: bool = False  # merge label values that differ only by case


def _unusable(type_: pa.DataType) -> bool:
    """Nested, binary and other types that are neither numbers nor text."""
    return not (pa.types.is_integer(type_) or pa.types.is_floating(type_)
                or pa.types.is_string(type_) or pa.types.is_large_string(type_)
                or pa.types.is_boolean(type_) or pa.types.is_temporal(type_)
                or pa.types.is_decimal(type_) or is_text_dictionary(type_)
                or pa.types.is_null(type_))


def _normalise_labels(indices: np.ndarray, dictionary: list,
                      lower: bool) -> tuple[np.ndarray, list]:
    """Label values without surrounding whitespace (and lower-cased when ``lower``);
    values that become equal merge, empty ones become missing."""
    cleaned = [v.strip().lower() if lower else v.strip() for v in dictionary]
    if cleaned == dictionary:
        return indices, dictionary
    values: list[str] = []
    position: dict[str, int] = {}
    remap = np.empty(len(dictionary) + 1, dtype=np.int64)
    for i, value in enumerate(cleaned):
        if not value:
            remap[i] = -1
            continue
        if value not in position:
            position[value] = len(values)
            values.append(value)
        remap[i] = position[value]
    remap[remap < 0] = len(values)
    remap[-1] = len(values)
    return remap[indices], values


class Batch:
    """One record batch, typed per the schema, with per-row rejection reasons."""

    def __init__(self, batch: pa.RecordBatch, plan: Plan, origin: RowOrigin):
        self.n = batch.num_rows
        self.raw = batch
        self.origin = origin
        self.nonfinite: Counter = Counter()  # per numeric column: inf/NaN values made missing
        self.reason = np.full(self.n, -1, dtype=np.int32)
        self.reason_texts: list[str] = []
        self.reason_columns: list[str | None] = []
        self.numeric: dict[str, np.ndarray] = {}
        self.categorical: dict[str, tuple[np.ndarray, list]] = {}
        schema = plan.schema
        for column in schema.columns:
            array = batch.column(column.name)
            if isinstance(array, pa.ChunkedArray):
                array = array.combine_chunks()
            if _unusable(array.type):  # e.g. a nested Parquet column: ignored, not read
                self.categorical[column.name] = (np.zeros(self.n, dtype=np.int64), [])
                continue
            if column.type == "numeric":
                values = fast_float(array)
                if values is not None:  # all numbers (so ASCII): nothing to reject
                    self.numeric[column.name] = self._finite(column.name, values,
                                                             array.null_count)
                    continue
            elif is_text_dictionary(array.type):  # the CSV reader's dictionary-encoded text
                indices, dictionary, bad_utf8 = dictionary_codes(array)
                if bad_utf8 is not None:
                    self.reject(bad_utf8, f"column {column.name!r}: not valid UTF-8",
                                column.name)
                self.categorical[column.name] = (indices, dictionary)
                continue
            array, bad_utf8 = null_invalid_utf8(array)
            if bad_utf8 is not None:
                self.reject(bad_utf8, f"column {column.name!r}: not valid UTF-8", column.name)
            if column.type == "numeric":
                values, bad = to_float(array)
                not_numbers = int(np.count_nonzero(bad))
                if not_numbers:
                    what = "label" if column.role == "label" else "column"
                    self.reject(bad, f"{what} {column.name!r}: not a number", column.name)
                    values[bad] = np.nan
                # a rejected value is neither missing nor non-finite: it is not counted
                self.numeric[column.name] = self._finite(
                    column.name, values, _missing_count(array) + not_numbers)
            else:
                strings = as_strings(array)
                strings = pc.if_else(pc.equal(strings, ""), pa.scalar(None, pa.string()),
                                     strings)
                encoded = pc.dictionary_encode(strings)
                dictionary = encoded.dictionary.to_pylist()
                indices = encoded.indices.fill_null(len(dictionary)).to_numpy(
                    zero_copy_only=False).astype(np.int64, copy=False)
                self.categorical[column.name] = (indices, dictionary)
        if schema.regression:  # a number: missing or no number rejects the row
            self.reject(np.isnan(self.numeric[schema.label]),
                        f"missing label {schema.label!r}", schema.label)
        else:
            self._check_classes(schema, plan)
        self.unseen: Counter = Counter()
        for column in schema.features:
            if column.type == "categorical" and column.vocabulary:
                indices, dictionary = self.categorical[column.name]
                known = set(column.vocabulary)
                unseen = np.array([v not in known for v in dictionary] + [False])
                mask = unseen[indices]
                if mask.any():
                    self.unseen[column.name] += int(mask.sum())
                    if plan.reject_unseen:
                        self.reject(mask, f"column {column.name!r}: unseen category",
                                    column.name)
        if plan.key_column:
            if plan.key_column in self.numeric:
                missing_key = np.isnan(self.numeric[plan.key_column])
            else:
                indices, dictionary = self.categorical[plan.key_column]
                missing_key = indices == len(dictionary)
            self.reject(missing_key, f"missing key {plan.key_column!r}", plan.key_column)

    def _check_classes(self, schema: Schema, plan: Plan) -> None:
        """A class label: trimmed (and lower-cased when asked); missing, or outside an
        expected schema's classes, rejects the row."""
        label_indices, label_dictionary = _normalise_labels(
            *self.categorical[schema.label], plan.lower_labels)
        self.categorical[schema.label] = (label_indices, label_dictionary)
        null = len(label_dictionary)
        self.reject(label_indices == null, f"missing label {schema.label!r}", schema.label)
        if plan.fixed_labels:
            known = set(schema.label_vocabulary)
            outside = np.array([v not in known for v in label_dictionary] + [False])
            self.reject(outside[label_indices],
                        f"label {schema.label!r} value not in the expected set "
                        f"{schema.label_vocabulary}", schema.label)

    def _finite(self, name: str, values: np.ndarray, missing: int) -> np.ndarray:
        """The values with inf, NaN and numbers beyond float32's range (the model reads
        float32: they would be infinite there) as missing (NaN); how many were not nulls
        is counted."""
        finite = np.isfinite(values)
        if values.size and (np.max(values, where=finite, initial=0.0) > FLOAT32_MAX
                            or np.min(values, where=finite, initial=0.0) < -FLOAT32_MAX):
            finite &= np.abs(np.where(finite, values, 0.0)) <= FLOAT32_MAX  # rare: look closer
        nonfinite = values.size - int(np.count_nonzero(finite))
        if nonfinite > missing:
            self.nonfinite[name] += nonfinite - missing
            values = np.where(finite, values, np.nan)
        return values

    def reject(self, mask: np.ndarray, reason: str, column: str | None) -> None:
        mask = mask & (self.reason < 0)
        if mask.any():
            self.reason[mask] = len(self.reason_texts)
            self.reason_texts.append(reason)
            self.reason_columns.append(column)

    def row_hashes(self, plan: Plan) -> np.ndarray:
        names = [plan.key_column] if plan.key_column else plan.header
        hashes = []
        for name in names:
            if name in self.numeric:
                hashes.append(hash_numeric(self.numeric[name]))
            else:
                indices, dictionary = self.categorical[name]
                hashes.append(hash_categorical(indices, dictionary))
        return combine_hashes(hashes)

    def rejected(self, rows: np.ndarray) -> tuple[list[int], list[bytes]]:
        """Line numbers and original bytes of these rows (for sources without text, such
        as Parquet, the cells joined with commas)."""
        lines = self.origin.lines[rows].tolist()
        raws = self.origin.raw(rows)
        if raws is not None:
            return lines, raws
        taken = self.raw.take(pa.array(rows))
        parts = []
        for array in taken.columns:
            if _unusable(array.type):
                parts.append(pa.array([str(v) for v in array.to_pylist()], pa.binary()))
                continue
            strings = array.view(pa.binary()) if pa.types.is_string(array.type) else pc.cast(
                as_strings(array), pa.binary())
            parts.append(strings)
        joined = pc.binary_join_element_wise(*parts, b",", null_handling="replace",
                                             null_replacement=b"")
        return lines, joined.to_pylist()


def _missing_count(array: pa.Array) -> int:
    """Values of a text array that are missing (null or a null spelling such as NA)."""
    if not (pa.types.is_string(array.type) or pa.types.is_large_string(array.type)):
        return array.null_count
    trimmed = pc.utf8_trim_whitespace(array)
    return array.null_count + int(pc.sum(pc.is_in(trimmed, pa.array(NULL_VALUES))).as_py() or 0)
