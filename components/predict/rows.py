"""Input rows as the model takes them: typed per the training schema, bad rows set aside.

A record batch from a data source (CSV cells as text, Parquet and BigQuery typed) becomes
the model's raw inputs (float32 with NaN for missing numbers, text with "" for missing
categories), keyed by the model's input names. Rows are rejected, with a reason, as data
preparation rejects them: a numeric feature that is not a number, text that is not valid
UTF-8, a missing key. Missing feature columns are scored as missing values (the model
imputes them) and reported as drift.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gkeflow.components.prepare.batch import FLOAT32_MAX
from gkeflow.components.prepare.logic import Schema
from gkeflow.components.prepare.sources import NULL_VALUES
from gkeflow.components.prepare.values import to_float as text_to_float

_NULLS = pa.array(NULL_VALUES, pa.string())


@dataclass
class TypedRows:
    """One batch: model inputs for every row, and per-row rejection reasons (-1 = kept)."""

    n: int
    numeric: dict[str, np.ndarray]  # column -> float64, NaN = missing
    text: dict[str, pa.Array]  # column -> string array, null = missing
    reason: np.ndarray
    reasons: list[str] = field(default_factory=list)
    key: pa.Array | None = None  # the key column as text, when there is one

    def reject(self, mask: np.ndarray, reason: str) -> None:
        mask = mask & (self.reason < 0)
        if mask.any():
            self.reason[mask] = len(self.reasons)
            self.reasons.append(reason)

    @property
    def kept(self) -> np.ndarray:
        return self.reason < 0


def _strings(array: pa.Array) -> pa.Array:
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_dictionary(array.type):
        array = array.cast(array.type.value_type)
    if pa.types.is_string(array.type):
        return array
    if pa.types.is_large_string(array.type):
        return array.cast(pa.string())
    if pa.types.is_binary(array.type) or pa.types.is_large_binary(array.type):
        return array.cast(pa.binary()).view(pa.string())
    if pa.types.is_floating(array.type):  # 3.0 -> "3", as a CSV would hold it
        # NaN and infinities are missing; only whole numbers an int64 holds exactly are
        # written without their ".0"
        array = pc.if_else(pc.is_finite(array), array, pa.scalar(None, array.type))
        exact = pc.fill_null(pc.less_equal(pc.abs(array), 2.0 ** 53), False)
        as_int = pc.cast(pc.if_else(exact, array, pa.scalar(0, array.type)), pa.int64(),
                         safe=False)
        whole = pc.and_(exact, pc.equal(pc.cast(as_int, array.type), array))
        return pc.if_else(whole, pc.cast(as_int, pa.string()), pc.cast(array, pa.string()))
    return pc.cast(array, pa.string())


def _bad_utf8(array: pa.Array) -> np.ndarray | None:
    try:
        array.validate(full=True)
        return None
    except pa.ArrowInvalid:
        bad = np.zeros(len(array), dtype=bool)
        for i, value in enumerate(array.view(pa.binary()).to_pylist()):
            if value is not None:
                try:
                    value.decode("utf-8")
                except UnicodeDecodeError:
                    bad[i] = True
        return bad


def to_float(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """float64 (NaN = missing) and the mask of values that are not numbers."""
    n = len(array)
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_integer(array.type) or pa.types.is_floating(array.type) \
            or pa.types.is_decimal(array.type):
        values = pc.cast(array, pa.float64()).to_numpy(zero_copy_only=False)
        return values.astype(np.float64, copy=False), np.zeros(n, dtype=bool)
    if pa.types.is_boolean(array.type):
        return pc.cast(array, pa.float64()).to_numpy(zero_copy_only=False), np.zeros(n, bool)
    strings = _strings(array)
    strings = pc.if_else(pc.is_in(pc.utf8_trim_whitespace(strings), _NULLS),
                         pa.scalar(None, pa.string()), strings)
    return text_to_float(strings)  # what a number is: as data preparation reads it


def type_rows(batch: pa.RecordBatch, schema: Schema, key_column: str = "") -> TypedRows:
    """Type ``batch`` per ``schema``'s features (and the key column), rejecting bad rows."""
    n = batch.num_rows
    rows = TypedRows(n=n, numeric={}, text={}, reason=np.full(n, -1, dtype=np.int32))
    present = set(batch.schema.names)
    for column in schema.features:
        if column.name not in present:
            if column.type == "numeric":
                rows.numeric[column.name] = np.full(n, np.nan)
            else:
                rows.text[column.name] = pa.nulls(n, pa.string())
            continue
        array = batch.column(column.name)
        is_text = not (pa.types.is_integer(array.type) or pa.types.is_floating(array.type)
                       or pa.types.is_boolean(array.type) or pa.types.is_decimal(array.type))
        if is_text:
            array = _strings(array)
            bad = _bad_utf8(array)
            if bad is not None:
                rows.reject(bad, f"column {column.name!r}: not valid UTF-8")
                array = pc.if_else(pa.array(bad), pa.scalar(None, pa.binary()),
                                   array.view(pa.binary())).view(pa.string())
        if column.type == "numeric":
            values, not_number = to_float(array)
            rows.reject(not_number, f"column {column.name!r}: not a number")
            # infinities and numbers beyond float32 (the model's inputs) are missing
            # values, as data preparation made them for training
            with np.errstate(invalid="ignore"):
                usable = ~not_number & (np.abs(values) <= FLOAT32_MAX)
            rows.numeric[column.name] = np.where(usable, values, np.nan)
        else:
            strings = _strings(array)
            strings = pc.if_else(pc.fill_null(pc.equal(strings, ""), False),
                                 pa.scalar(None, pa.string()), strings)
            rows.text[column.name] = strings
    if key_column:
        key = _strings(batch.column(key_column))
        bad = _bad_utf8(key)
        if bad is not None:
            rows.reject(bad, f"column {key_column!r}: not valid UTF-8")
            key = pc.if_else(pa.array(bad), pa.scalar(None, pa.binary()),
                             key.view(pa.binary())).view(pa.string())
        missing = np.asarray(pc.fill_null(pc.equal(key, ""), True).to_numpy(
            zero_copy_only=False), dtype=bool)
        rows.reject(missing, f"missing key {key_column!r}")
        rows.key = key
    return rows


def model_inputs(rows: TypedRows, schema: Schema, names: dict[str, str],
                 keep: np.ndarray) -> dict[str, np.ndarray]:
    """The kept rows' raw features keyed by the model's input names."""
    inputs: dict[str, np.ndarray] = {}
    take = pa.array(np.flatnonzero(keep))
    for column in schema.features:
        if column.type == "numeric":
            inputs[names[column.name]] = rows.numeric[column.name][keep].astype(np.float32)
        else:
            values = pc.fill_null(rows.text[column.name].take(take), "")
            inputs[names[column.name]] = values.to_numpy(zero_copy_only=False)
    return inputs


def row_texts(batch: pa.RecordBatch, indices: np.ndarray) -> list[str]:
    """The given rows as comma-joined text (the rejects file's ``row`` column)."""
    taken = batch.take(pa.array(indices))
    parts = []
    for array in taken.columns:
        parts.append(pc.cast(_strings(array), pa.string()).view(pa.binary()))
    joined = pc.binary_join_element_wise(*parts, b",", null_handling="replace",
                                         null_replacement=b"")
    return [v.decode("utf-8", "backslashreplace") for v in joined.to_pylist()]
