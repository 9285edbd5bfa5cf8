"""Data preparation: stream a source, validate it, split it deterministically, quarantine bad rows.

Plain functions over paths and primitives; the KFP component in ``component.py``
is a thin shell around :func:`prepare`.

The input is read as Arrow record batches (memory is bounded by a few batches, whatever
the input size); several input files are processed in parallel. Each row lands in the
train, eval or test split by a stable 64-bit hash of its key column (or of the whole row),
so the same row goes to the same split on every run and machine. Rows that cannot be
parsed or fail validation are written to ``rejected.csv`` with the reason, and always
``rows read = train + eval + test + rejected``. Everything is written aside and published
with one rename, so a failed or killed step never leaves a split that looks complete.

Output layout (the ``dataset`` artifact)::

    train/part-*.tfrecord.gz   eval/...   test/...   (see gkeflow.components.prepare.records)
    schema.json  stats.json  rejected.csv  report.md
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import queue
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from gkeflow.components._atomic import publish_dir
from gkeflow.components.prepare import records
from gkeflow.components.prepare.records import make_tf_dataset
from gkeflow.components.prepare.sources import (
    EMBEDDED_PENGUINS,
    NULL_VALUES,
    DataError,
    Source,
    resolve_sources,
)
from gkeflow.components.prepare.stats import CategoricalStats, NumericStats, update_numeric_stats

SPLITS = ("train", "eval", "test")
SCHEMA_FILE = "schema.json"
STATS_FILE = "stats.json"
REJECTED_FILE = "rejected.csv"
REPORT_FILE = "report.md"
SAMPLE_ROWS = 10_000
ROWS_PER_SHARD = 250_000
SAMPLE_REJECTS = 5


@dataclass(frozen=True)
class SplitRatios:
    """Fractions of rows for the train, eval and test splits; each > 0, summing to 1."""

    train: float = 0.7
    eval: float = 0.15
    test: float = 0.15

    def __post_init__(self) -> None:
        values = {"train": self.train, "eval": self.eval, "test": self.test}
        bad = {name: v for name, v in values.items() if not (0.0 < v < 1.0)}
        if bad:
            raise ValueError(
                f"split ratios must each be between 0 and 1 (exclusive); got {bad}"
            )
        total = self.train + self.eval + self.test
        if not math.isclose(total, 1.0, abs_tol=1e-6):
            raise ValueError(
                f"split ratios must sum to 1; got train={self.train} + eval={self.eval} "
                f"+ test={self.test} = {total:g}"
            )


@dataclass
class ColumnSchema:
    name: str
    type: str  # "numeric" | "categorical"
    role: str  # "feature" | "label" | "ignored"
    nullable: bool
    vocabulary: list[str] = field(default_factory=list)
    note: str = ""


@dataclass
class Schema:
    label: str
    label_vocabulary: list[str]
    columns: list[ColumnSchema]

    @property
    def features(self) -> list[ColumnSchema]:
        return [c for c in self.columns if c.role == "feature"]

    def column(self, name: str) -> ColumnSchema:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> Schema:
        raw = json.loads(text)
        return cls(
            label=raw["label"],
            label_vocabulary=list(raw["label_vocabulary"]),
            columns=[ColumnSchema(**c) for c in raw["columns"]],
        )

    @classmethod
    def from_yaml(cls, text: str) -> Schema:
        """The same fields as schema.json, written as YAML."""
        import yaml

        raw = yaml.safe_load(text)
        if not isinstance(raw, dict) or "columns" not in raw or "label" not in raw:
            raise DataError("an expected schema needs 'label' and 'columns'")
        columns = []
        for c in raw["columns"]:
            c = dict(c)
            c.setdefault("role", "label" if c["name"] == raw["label"] else "feature")
            c.setdefault("nullable", True)
            c["vocabulary"] = [str(v) for v in c.get("vocabulary") or []]
            columns.append(ColumnSchema(**c))
        return cls(label=raw["label"],
                   label_vocabulary=[str(v) for v in raw.get("label_vocabulary") or []],
                   columns=columns)

    @classmethod
    def load(cls, path: Path) -> Schema:
        """schema.json, a directory holding one, or a YAML file (.yaml/.yml)."""
        path = Path(path)
        if path.is_dir():
            path = path / SCHEMA_FILE
        if not path.exists():
            raise DataError(f"schema file not found: {path}")
        text = path.read_text(encoding="utf-8")
        try:
            if path.suffix in (".yaml", ".yml"):
                return cls.from_yaml(text)
            return cls.from_json(text)
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, DataError):
                raise
            raise DataError(f"invalid schema file {path}: {exc}") from exc


@dataclass
class PrepareResult:
    rows_read: int
    split_rows: dict[str, int]
    rejected_rows: int
    rejected_reasons: dict[str, int]
    schema: Schema
    problems: list[str] = field(default_factory=list)
    stats: dict = field(default_factory=dict)
    shards: dict[str, int] = field(default_factory=dict)


# --- schema inference ----------------------------------------------------------------------

def _as_strings(array: pa.Array) -> pa.Array:
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_dictionary(array.type):
        array = array.cast(array.type.value_type)
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        return array
    if pa.types.is_binary(array.type):
        return array.view(pa.string())
    return pc.cast(array, pa.string())


#: A text column is numeric when at least this fraction of its sampled values are
#: numbers; the rest are then rejected row by row as "not a number".
NUMERIC_MIN_FRACTION = 0.95


def _parses_as_numbers(array: pa.Array, min_fraction: float = 1.0) -> bool:
    """Whether the (non-null) values are numbers; ``min_fraction`` of them at least."""
    if pa.types.is_integer(array.type) or pa.types.is_floating(array.type):
        return True
    if pa.types.is_boolean(array.type) or pa.types.is_temporal(array.type):
        return False
    try:
        pc.cast(_as_strings(array), pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        if min_fraction >= 1.0 or len(array) == 0:
            return False
        _, bad = _to_float(array)
        return 1.0 - bad.mean() >= min_fraction
    return True


def _infer_from_table(table: pa.Table, label_column: str, max_vocabulary: int) -> Schema:
    names = table.column_names
    if label_column not in names:
        raise DataError(
            f"label column {label_column!r} not found; available columns: {', '.join(names)}"
        )
    columns: list[ColumnSchema] = []
    for name in names:
        array, _ = _null_invalid_utf8(table.column(name).combine_chunks())
        present = array.drop_null() if not pa.types.is_string(array.type) else pc.drop_null(
            pc.if_else(pc.equal(array, ""), pa.scalar(None, array.type), array))
        nullable = len(present) < len(array)
        if name == label_column:
            columns.append(ColumnSchema(name, "categorical", "label", nullable))
        elif len(present) == 0:
            columns.append(
                ColumnSchema(name, "categorical", "ignored", True, note="all values missing")
            )
        elif _parses_as_numbers(present, NUMERIC_MIN_FRACTION):
            columns.append(ColumnSchema(name, "numeric", "feature", nullable))
        else:
            distinct = pc.count_distinct(_as_strings(present)).as_py()
            if distinct == len(present) and distinct > 50:
                columns.append(ColumnSchema(
                    name, "categorical", "ignored", nullable,
                    note="every value is unique (an identifier?)",
                ))
                continue
            columns.append(ColumnSchema(name, "categorical", "feature", nullable))
    return Schema(label=label_column, label_vocabulary=[], columns=columns)


def infer_schema(frame: pd.DataFrame, label_column: str, max_vocabulary: int = 1000) -> Schema:
    """Classify a frame's columns as numeric or categorical; the label is categorical."""
    table = pa.Table.from_pandas(frame.astype(object).where(frame.notna(), None),
                                 preserve_index=False)
    schema = _infer_from_table(table, label_column, max_vocabulary)
    for column in schema.columns:
        if column.type == "categorical" and column.role != "ignored":
            counts = frame[column.name].dropna().astype(str).value_counts()
            column.vocabulary = sorted(counts.index[:max_vocabulary].tolist())
    schema.label_vocabulary = schema.column(label_column).vocabulary
    _check_label_vocabulary(schema)
    if not schema.features:
        raise DataError("no usable feature columns besides the label")
    return schema


def _check_label_vocabulary(schema: Schema) -> None:
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
        if want.role != "ignored" and len(sample) and name in sample.column_names:
            present = sample.column(name).drop_null()
            is_numeric = len(present) == 0 or _parses_as_numbers(present)
            if want.type == "numeric" and not is_numeric:
                problems.append(
                    f"type change: column {name!r} was numeric and now has text values; "
                    f"rows with text in it are rejected"
                )
        columns.append(want)
    schema = Schema(label=expected.label, label_vocabulary=list(expected.label_vocabulary),
                    columns=columns)
    return schema, problems


# --- hashing (the deterministic split) -----------------------------------------------------

_M1, _M2, _GOLDEN = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB), np.uint64(
    0x9E3779B97F4A7C15)
_NULL_HASH = np.uint64(0x6A09E667F3BCC909)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijective, well-spread 64-bit mix (of a copy of ``x``)."""
    x = np.array(x, dtype=np.uint64, copy=True)
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(30)
        x *= _M1
        x ^= x >> np.uint64(27)
        x *= _M2
        x ^= x >> np.uint64(31)
    return x


def _hash_text(values: list) -> np.ndarray:
    return np.array(
        [int.from_bytes(hashlib.blake2b(v.encode("utf-8", "surrogateescape"),
                                        digest_size=8).digest(), "little")
         if v is not None else int(_NULL_HASH) for v in values],
        dtype=np.uint64,
    )


def hash_numeric(values: np.ndarray) -> np.ndarray:
    """Stable hash inputs for float64 values: their bits (NaN and -0.0 canonicalised)."""
    values = np.asarray(values, dtype=np.float64) + 0.0
    bits = values.view(np.uint64)
    return np.where(np.isnan(values), _NULL_HASH, bits)  # mixed in combine_hashes


def hash_categorical(indices: np.ndarray, dictionary: list) -> np.ndarray:
    """Stable hashes of text values given as dictionary indices (the last index = null)."""
    return _hash_text(list(dictionary) + [None])[indices]


def _mix_in_place(x: np.ndarray, scratch: np.ndarray) -> None:
    """:func:`_mix` of ``x`` in place (``scratch``: a buffer of the same shape)."""
    with np.errstate(over="ignore"):
        np.right_shift(x, np.uint64(30), out=scratch)
        x ^= scratch
        x *= _M1
        np.right_shift(x, np.uint64(27), out=scratch)
        x ^= scratch
        x *= _M2
        np.right_shift(x, np.uint64(31), out=scratch)
        x ^= scratch


def combine_hashes(column_hashes: list[np.ndarray]) -> np.ndarray:
    n = len(column_hashes[0]) if column_hashes else 0
    row = np.zeros(n, dtype=np.uint64)
    scratch = np.empty(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for i, h in enumerate(column_hashes):
            np.add(h, np.uint64(i + 1) * _GOLDEN, out=scratch)
            row ^= scratch
            _mix_in_place(row, scratch)
    return row


def splits_from_hashes(hashes: np.ndarray, ratios: SplitRatios) -> np.ndarray:
    """0 = train, 1 = eval, 2 = test, by where the hash falls in [0, 2**64)."""
    position = (hashes >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    return (position >= ratios.train).astype(np.int8) + (
        position >= ratios.train + ratios.eval).astype(np.int8)


def assign_splits(frame: pd.DataFrame, ratios: SplitRatios) -> pd.Series:
    """Split a frame's rows by a stable hash of each whole row, independent of row order.

    Numeric (float) columns hash by value, other columns by their text; the same row
    lands in the same split on every run and machine.
    """
    hashes = []
    for name in frame.columns:
        values = frame[name]
        if pd.api.types.is_float_dtype(values):
            hashes.append(hash_numeric(values.to_numpy("float64")))
        else:
            text = [None if pd.isna(v) else str(v) for v in values]
            hashes.append(_hash_text(text))
    codes = splits_from_hashes(combine_hashes(hashes), ratios)
    return pd.Series(np.array(SPLITS)[codes], index=frame.index)


# --- the streaming pass ----------------------------------------------------------------------

class _RejectLog:
    """rejected.csv, written as rows are rejected (thread-safe), with counts and samples."""

    def __init__(self, path: Path):
        self._handle = path.open("w", encoding="utf-8", newline="")
        self._writer = csv.writer(self._handle)
        self._writer.writerow(["source", "reason", "row"])
        self._lock = threading.Lock()
        self.reasons: Counter = Counter()
        self.columns: Counter = Counter()
        self.samples: list[tuple[str, str]] = []

    @property
    def count(self) -> int:
        return sum(self.reasons.values())

    def add(self, source: str, text: str, reason: str, column: str | None = None) -> None:
        self.add_many(source, [text], [reason], [column])

    def add_many(self, source: str, texts, reasons, columns) -> None:
        with self._lock:
            for text, reason, column in zip(texts, reasons, columns, strict=True):
                self._writer.writerow([source, reason, text])
                self.reasons[reason] += 1
                if column:
                    self.columns[column] += 1
                if len(self.samples) < SAMPLE_REJECTS:
                    self.samples.append((reason, text))

    def close(self) -> None:
        self._handle.close()


@dataclass
class _Partial:
    """What one input file contributed."""

    rows_read: int = 0
    split_rows: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SPLITS, 0))
    stats: dict[str, dict[str, NumericStats | CategoricalStats]] = field(default_factory=dict)
    unseen: Counter = field(default_factory=Counter)
    shards: dict[str, list[Path]] = field(default_factory=dict)


@dataclass
class _Plan:
    schema: Schema
    header: list[str]
    ratios: SplitRatios
    key_column: str
    fixed_labels: bool  # labels outside schema.label_vocabulary are rejected
    reject_unseen: bool
    rows_per_shard: int


def _new_stats(schema: Schema) -> dict[str, dict]:
    return {
        split: {c.name: NumericStats() if c.type == "numeric" else CategoricalStats()
                for c in schema.columns}
        for split in SPLITS
    }


def _invalid_utf8(array: pa.Array) -> np.ndarray | None:
    """Row mask of values that are not valid UTF-8, or None when all are valid."""
    if not (pa.types.is_string(array.type) or pa.types.is_large_string(array.type)):
        return None
    try:
        array.validate(full=True)
        return None
    except pa.ArrowInvalid:
        raw = array.view(pa.binary()).to_pylist()
        bad = np.zeros(len(raw), dtype=bool)
        for i, value in enumerate(raw):
            if value is not None:
                try:
                    value.decode("utf-8")
                except UnicodeDecodeError:
                    bad[i] = True
        return bad


def _null_invalid_utf8(array: pa.Array) -> tuple[pa.Array, np.ndarray | None]:
    """The array with invalid UTF-8 values nulled, and their mask (None when all valid)."""
    bad = _invalid_utf8(array)
    if bad is None:
        return array, None
    cleaned = pc.if_else(pa.array(bad), pa.scalar(None, pa.binary()), array.view(pa.binary()))
    return cleaned.view(array.type), bad


def _is_text_dictionary(type_: pa.DataType) -> bool:
    return pa.types.is_dictionary(type_) and (
        pa.types.is_string(type_.value_type) or pa.types.is_large_string(type_.value_type))


def _dictionary_codes(array: pa.DictionaryArray) -> tuple[np.ndarray, list, np.ndarray | None]:
    """Per-row indices into a dictionary of text values (``len(dictionary)`` = missing),
    the values, and the mask of rows whose value is not valid UTF-8 (None when all are).

    Works on the array's own dictionary: each distinct value is checked and decoded once.
    Empty and invalid values count as missing, as :class:`_Batch` treats plain text.
    """
    raw = array.dictionary.view(pa.binary()).to_pylist()
    values: list[str] = []
    remap = np.empty(len(raw) + 1, dtype=np.int64)
    invalid = np.zeros(len(raw) + 1, dtype=bool)
    for i, value in enumerate(raw):
        try:
            text = value.decode("utf-8") if value else None
        except UnicodeDecodeError:
            text = None
            invalid[i] = True
        if text is None:
            remap[i] = -1
        else:
            remap[i] = len(values)
            values.append(text)
    remap[remap < 0] = len(values)
    remap[-1] = len(values)
    indices = array.indices.fill_null(len(raw)).to_numpy(zero_copy_only=False)
    codes = remap[indices]
    return codes, values, (invalid[indices] if invalid.any() else None)


def _fast_float(array: pa.Array) -> np.ndarray | None:
    """float64 values when every value converts (NaN = missing), else None."""
    if pa.types.is_float64(array.type):
        return array.to_numpy(zero_copy_only=False)
    try:
        if pa.types.is_integer(array.type) or pa.types.is_floating(array.type):
            values = pc.cast(array, pa.float64())
        else:
            values = pc.cast(_as_strings(array), pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return values.to_numpy(zero_copy_only=False)


def _to_float(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """float64 values (NaN = missing) and a mask of values that are not numbers."""
    n = len(array)
    if pa.types.is_integer(array.type) or pa.types.is_floating(array.type):
        return pc.cast(array, pa.float64()).to_numpy(zero_copy_only=False).astype(
            np.float64, copy=False), np.zeros(n, dtype=bool)
    strings = _as_strings(array)
    try:
        values = pc.cast(strings, pa.float64())
        return values.to_numpy(zero_copy_only=False), np.zeros(n, dtype=bool)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    out = np.full(n, np.nan)
    bad = np.zeros(n, dtype=bool)
    for i, text in enumerate(strings.to_pylist()):
        if text is None or text.strip() in NULL_VALUES:
            continue
        try:
            out[i] = float(text)
        except ValueError:
            bad[i] = True
    return out, bad


class _Batch:
    """One record batch, typed per the schema, with per-row rejection reasons."""

    def __init__(self, batch: pa.RecordBatch, plan: _Plan, as_text=None):
        self.n = batch.num_rows
        self.raw = batch
        self.as_text = as_text  # None, or a function: the same rows, every cell as text
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
            if column.type == "numeric":
                values = _fast_float(array)
                if values is not None:  # all numbers (so ASCII): nothing to reject
                    self.numeric[column.name] = values
                    continue
            elif _is_text_dictionary(array.type):  # the CSV reader's dictionary-encoded text
                indices, dictionary, bad_utf8 = _dictionary_codes(array)
                if bad_utf8 is not None:
                    self.reject(bad_utf8, f"column {column.name!r}: not valid UTF-8",
                                column.name)
                self.categorical[column.name] = (indices, dictionary)
                continue
            array, bad_utf8 = _null_invalid_utf8(array)
            if bad_utf8 is not None:
                self.reject(bad_utf8, f"column {column.name!r}: not valid UTF-8", column.name)
            if column.type == "numeric":
                values, bad = _to_float(array)
                if bad.any():
                    self.reject(bad, f"column {column.name!r}: not a number", column.name)
                    values[bad] = np.nan
                self.numeric[column.name] = values
            else:
                strings = _as_strings(array)
                strings = pc.if_else(pc.equal(strings, ""), pa.scalar(None, pa.string()),
                                     strings)
                encoded = pc.dictionary_encode(strings)
                dictionary = encoded.dictionary.to_pylist()
                indices = encoded.indices.fill_null(len(dictionary)).to_numpy(
                    zero_copy_only=False).astype(np.int64, copy=False)
                self.categorical[column.name] = (indices, dictionary)
        label_indices, label_dictionary = self.categorical[schema.label]
        null = len(label_dictionary)
        self.reject(label_indices == null, f"missing label {schema.label!r}", schema.label)
        if plan.fixed_labels:
            known = set(schema.label_vocabulary)
            outside = np.array([v not in known for v in label_dictionary] + [False])
            self.reject(outside[label_indices],
                        f"label {schema.label!r} value not in the expected set "
                        f"{schema.label_vocabulary}", schema.label)
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

    def reject(self, mask: np.ndarray, reason: str, column: str | None) -> None:
        mask = mask & (self.reason < 0)
        if mask.any():
            self.reason[mask] = len(self.reason_texts)
            self.reason_texts.append(reason)
            self.reason_columns.append(column)

    def row_hashes(self, plan: _Plan) -> np.ndarray:
        names = [plan.key_column] if plan.key_column else plan.header
        hashes = []
        for name in names:
            if name in self.numeric:
                hashes.append(hash_numeric(self.numeric[name]))
            else:
                indices, dictionary = self.categorical[name]
                hashes.append(hash_categorical(indices, dictionary))
        return combine_hashes(hashes)

    def rejected_texts(self, rows: np.ndarray) -> list[str]:
        raw = self.as_text() if self.as_text is not None else self.raw
        taken = raw.take(pa.array(rows))
        parts = []
        for array in taken.columns:
            strings = array.view(pa.binary()) if pa.types.is_string(array.type) else pc.cast(
                _as_strings(array), pa.binary())
            parts.append(strings)
        joined = pc.binary_join_element_wise(*parts, b",", null_handling="replace",
                                             null_replacement=b"")
        return [v.decode("utf-8", "backslashreplace") for v in joined.to_pylist()]


def _process_batch(raw: pa.RecordBatch, source: Source, plan: _Plan, partial: _Partial,
                   writers: records.SplitWriters, rejects: _RejectLog,
                   as_text=None) -> None:
    if raw.num_rows == 0:
        return
    if raw.schema.names != plan.header:
        raise DataError(
            f"{source.name} has columns {raw.schema.names}, unlike the first input file's "
            f"{plan.header}"
        )
    schema = plan.schema
    batch = _Batch(raw, plan, as_text)
    partial.rows_read += batch.n
    partial.unseen.update(batch.unseen)
    bad_rows = np.flatnonzero(batch.reason >= 0)
    if bad_rows.size:
        rejects.add_many(
            source.name, batch.rejected_texts(bad_rows),
            [batch.reason_texts[batch.reason[i]] for i in bad_rows],
            [batch.reason_columns[batch.reason[i]] for i in bad_rows],
        )
    hashes = batch.row_hashes(plan)
    codes = splits_from_hashes(hashes, plan.ratios)
    codes[bad_rows] = -1
    # the rows grouped by split (rejected first) and, within a split, ordered by 12 low bits
    # of their hash: a pseudo-random order independent of the input's (sorted files come out
    # shuffled, so readers need no per-row shuffle); a 16-bit key sorts by radix in linear
    # time; one gather per column, then each split is a contiguous slice
    key = ((codes + 1).astype(np.uint16) << np.uint16(12)) | (
        hashes & np.uint64(0xFFF)).astype(np.uint16)
    order = np.argsort(key, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(SPLITS) + 1), side="left")
    order = order[bounds[0]:]
    bounds = bounds - bounds[0]
    numeric_names = [c.name for c in schema.columns if c.type == "numeric"]
    numeric = np.empty((len(numeric_names), order.size), dtype=np.float64)
    for row, name in enumerate(numeric_names):
        np.take(batch.numeric[name], order, out=numeric[row])
    numeric32 = numeric.astype(np.float32)
    categorical = {c.name: batch.categorical[c.name][0][order] for c in schema.columns
                   if c.type != "numeric"}
    entries = {  # each dictionary value's protobuf encoding, shared by the blocks
        name: records.bytes_entries([v.encode("utf-8") for v in dictionary] + [b""])
        for name, (_, dictionary) in batch.categorical.items()
    }
    for code, split in enumerate(SPLITS):
        start, stop = int(bounds[code]), int(bounds[code + 1])
        if stop == start:
            continue
        partial.split_rows[split] += stop - start
        stats = partial.stats[split]
        update_numeric_stats([stats[name] for name in numeric_names],
                             numeric[:, start:stop])
        split_categorical = {name: indices[start:stop] for name, indices in categorical.items()}
        _update_categorical_stats(stats, split_categorical, batch)
        _write_blocks(writers, split,
                      {name: numeric32[row, start:stop] for row, name in enumerate(numeric_names)},
                      split_categorical, entries, stop - start)


def _process_source(index: int, source: Source, plan: _Plan, scratch: Path,
                    rejects: _RejectLog, lanes: int = 1) -> list[_Partial]:
    """Stream one input file. With several lanes its batches are dealt round-robin to
    that many threads (each with its own shards), so one large file uses several cores."""
    partials = [_Partial(stats=_new_stats(plan.schema)) for _ in range(lanes + 1)]
    unparsed = partials[-1]  # rows the CSV parser rejected (counted as the lanes parse)
    writers = [records.SplitWriters(scratch, f"part-{index:05d}-{lane}", SPLITS,
                                    plan.rows_per_shard) for lane in range(lanes)]

    unparsed_lock = threading.Lock()

    def reject_unparsed(name: str, text: str, reason: str) -> None:
        rejects.add(name, text, reason)
        with unparsed_lock:
            unparsed.rows_read += 1

    inboxes = [queue.Queue(maxsize=1) for _ in range(lanes)]
    errors: list[BaseException] = []
    failed = threading.Event()

    def lane_main(lane: int) -> None:
        while True:
            parse = inboxes[lane].get()
            if parse is None:
                return
            if failed.is_set():
                continue
            try:
                item = parse()
                if item is None:
                    continue
                raw, as_text = item
                _process_batch(raw, source, plan, partials[lane], writers[lane], rejects,
                               as_text)
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                errors.append(exc)
                failed.set()

    threads = [threading.Thread(target=lane_main, args=(k,), daemon=True)
               for k in range(lanes)]
    for thread in threads:
        thread.start()
    try:
        for i, parse in enumerate(_blocks(source, plan, reject_unparsed)):
            if failed.is_set():
                break
            inboxes[i % lanes].put(parse)
    finally:
        for inbox in inboxes:
            inbox.put(None)
        for thread in threads:
            thread.join()
        for writer in writers:
            try:
                writer.close()
            except BaseException as exc:  # noqa: BLE001 (re-raised)
                errors.append(exc)
    if errors:
        raise errors[0]
    for partial, writer in zip(partials, writers, strict=False):  # one writer per lane used
        partial.shards = writer.paths
    return partials


def _blocks(source, plan: _Plan, reject):
    """A source's blocks, each a function returning ``(batch, as_text)`` or None; numeric
    columns parsed as numbers where the source can (see ``Source.typed_blocks``)."""
    if not hasattr(source, "typed_blocks"):  # e.g. BigQuery: typed by its own schema
        return (lambda batch=batch: (batch, None) for batch in source.batches(reject))
    numeric = [c.name for c in plan.schema.columns if c.type == "numeric"]
    return source.typed_blocks(reject, numeric)


def _update_categorical_stats(stats: dict, categorical: dict[str, np.ndarray],
                              batch: _Batch) -> None:
    for name, indices in categorical.items():
        dictionary = batch.categorical[name][1]
        counts = np.bincount(indices, minlength=len(dictionary) + 1)
        present = np.flatnonzero(counts[:-1])
        stats[name].add_counts({dictionary[i]: int(counts[i]) for i in present},
                               int(counts[-1]))


def _write_blocks(writers: records.SplitWriters, split: str, numeric: dict[str, np.ndarray],
                  categorical: dict[str, np.ndarray], entries: dict[str, list[bytes]],
                  rows: int) -> None:
    """Encode and queue one split's rows of a batch, in blocks of up to BLOCK_ROWS rows;
    ``entries``: per categorical column, its dictionary values' protobuf encodings."""
    step = min(records.BLOCK_ROWS, writers.rows_per_shard)
    for start in range(0, rows, step):
        stop = min(start + step, rows)
        block_numeric = {name: values[start:stop] for name, values in numeric.items()}
        block_categorical = {}
        for name, all_indices in categorical.items():
            indices = all_indices[start:stop]
            encoded = entries[name]
            present = np.bincount(indices, minlength=len(encoded)) > 0
            used = np.flatnonzero(present)  # the block's own, smaller dictionary
            local = (np.cumsum(present) - 1)[indices]
            block_categorical[name] = (records.EncodedValues(encoded[i] for i in used), local)
        writers.write(split, records.encode_block(stop - start, block_numeric,
                                                  block_categorical), stop - start)


# --- the step ------------------------------------------------------------------------------

def _sample(sources: list[Source], problems: list[str]) -> tuple[list[str], pa.Table, list]:
    """The header, the first rows (for type inference) and the non-empty sources."""
    header: list[str] | None = None
    usable = []
    for source in sources:
        try:
            names = source.header()
        except DataError as exc:
            if len(sources) == 1 or "empty" not in str(exc):
                raise
            problems.append(f"{source.name}: empty file, no rows")
            continue
        if header is None:
            header = names
        elif names != header:
            raise DataError(
                f"{source.name} has columns {names}, unlike {sources[0].name}'s {header}"
            )
        usable.append(source)
    if header is None:
        raise DataError("every input file is empty")
    batches, rows = [], 0
    unparsed: list[tuple[str, str]] = []
    for source in usable:
        try:
            for batch in source.batches(lambda _, text, reason: unparsed.append((reason, text)),
                                        prefetch=False):
                batches.append(batch)
                rows += batch.num_rows
                if rows >= SAMPLE_ROWS:
                    break
        except DataError:
            if len(sources) == 1:
                raise
            continue
        if rows >= SAMPLE_ROWS:
            break
    if batches:
        table = pa.Table.from_batches(batches).slice(0, SAMPLE_ROWS)
    elif not unparsed:
        raise DataError(f"data has a header but no data rows: {', '.join(s.name for s in sources)}")
    else:
        samples = "\n".join(f"  {reason}: {text[:120]}" for reason, text in unparsed[:5])
        raise DataError(
            f"no usable rows: all {len(unparsed)} rows were rejected\nsample rows:\n{samples}"
        )
    return header, table, usable


def _finalise_schema(schema: Schema, stats: dict, inferred: bool,
                     max_vocabulary: int) -> None:
    for column in schema.columns:
        totals = [stats[split][column.name] for split in SPLITS]
        count = sum(s.count for s in totals)
        missing = sum(s.missing for s in totals)
        if inferred or column.role == "ignored":
            column.nullable = missing > 0
        if column.type == "categorical" and inferred and column.role != "ignored":
            counts: Counter = Counter()
            for s in totals:
                counts.update(s.values)
            if column.role == "label":
                column.vocabulary = sorted(counts)
            else:
                column.vocabulary = sorted(v for v, _ in counts.most_common(max_vocabulary))
        if column.role == "ignored" and column.note == "all values missing" and missing < count:
            column.note = f"no values in the first {SAMPLE_ROWS} rows"
    if inferred:
        schema.label_vocabulary = list(schema.column(schema.label).vocabulary)
    else:
        schema.column(schema.label).vocabulary = list(schema.label_vocabulary)


def prepare(
    source: str,
    output_dir: Path,
    label_column: str,
    ratios: SplitRatios = SplitRatios(),
    max_rejected_fraction: float = 0.1,
    key_column: str = "",
    expected_schema: Schema | Path | str | None = None,
    max_missing_fraction: float = 1.0,
    reject_unseen_categories: bool = False,
    bq_query: str = "",
    bq_filter: str = "",
    rows_per_shard: int = ROWS_PER_SHARD,
    max_vocabulary: int = 1000,
    workers: int = 0,
    shard_root: str = "",
) -> PrepareResult:
    """Stream ``source`` into TFRecord splits, ``schema.json``, ``stats.json``,
    ``rejected.csv`` and ``report.md`` under ``output_dir`` (published atomically).

    Args:
        source: Local path/glob/directory, gs:// URI or glob, bq://project.dataset.table,
            or embedded://penguins. CSV (optionally .gz) or Parquet.
        output_dir: Where the dataset directory is published.
        label_column: Column holding the class to predict.
        ratios: Train/eval/test fractions.
        max_rejected_fraction: Fail when more than this fraction of rows is rejected.
        key_column: Split by a hash of this column (rows sharing a key share a split);
            empty: by a hash of the whole row.
        expected_schema: A previous run's schema (Schema, schema.json, its directory) or a
            YAML file to validate against; None infers the schema.
        max_missing_fraction: Fail when a feature column misses more than this fraction.
        reject_unseen_categories: With an expected schema, reject rows whose categorical
            values are not in its vocabulary (otherwise they are only counted).
        bq_query: For bq:// sources, a SQL query to run instead of reading the table.
        bq_filter: For bq:// sources, a SQL row filter (the WHERE clause).
        rows_per_shard: Rows per TFRecord shard file.
        max_vocabulary: Most frequent values kept in a categorical column's vocabulary.
        workers: Input files processed in parallel; 0 = one per CPU.
        shard_root: Write the shards there (a gs:// URI or a local directory, see
            ``shard_store``) and only their manifest into ``output_dir``; empty: the
            shards go inside ``output_dir``.
    """
    if not 0.0 <= max_rejected_fraction <= 1.0:
        raise ValueError(f"max_rejected_fraction must be in [0, 1]; got {max_rejected_fraction}")
    if not 0.0 <= max_missing_fraction <= 1.0:
        raise ValueError(f"max_missing_fraction must be in [0, 1]; got {max_missing_fraction}")
    if rows_per_shard < 1:
        raise ValueError(f"rows_per_shard must be >= 1; got {rows_per_shard}")
    if source.startswith("bq://"):
        from gkeflow.components.prepare.bigquery import bigquery_sources

        sources = bigquery_sources(source, query=bq_query, row_filter=bq_filter)
    else:
        if bq_query or bq_filter:
            raise DataError("bq_query and bq_filter apply only to bq:// sources")
        sources = resolve_sources(source)

    problems: list[str] = []
    header, sample, sources = _sample(sources, problems)
    if expected_schema is not None and not isinstance(expected_schema, Schema):
        expected_schema = Schema.load(Path(expected_schema))
    if expected_schema is not None:
        schema, found = validate_against(expected_schema, header, sample, label_column)
        problems.extend(found)
    else:
        schema = _infer_from_table(sample, label_column, max_vocabulary)
        if not schema.features:
            raise DataError("no usable feature columns besides the label")
    if key_column and key_column not in header:
        raise DataError(
            f"key column {key_column!r} not found; available columns: {', '.join(header)}"
        )
    plan = _Plan(schema, header, ratios, key_column, fixed_labels=expected_schema is not None,
                 reject_unseen=reject_unseen_categories and expected_schema is not None,
                 rows_per_shard=rows_per_shard)
    workers = workers or os.cpu_count() or 1

    with publish_dir(output_dir) as scratch:
        rejects = _RejectLog(scratch / REJECTED_FILE)
        try:
            parallel_files = max(1, min(workers, len(sources)))
            lanes = max(1, workers // parallel_files)
            with ThreadPoolExecutor(max_workers=parallel_files) as pool:
                partials = [p for per_file in pool.map(
                    lambda item: _process_source(item[0], item[1], plan, shard_root or scratch,
                                                 rejects, lanes),
                    enumerate(sources),
                ) for p in per_file]
        finally:
            rejects.close()
        rows_read = sum(p.rows_read for p in partials)
        split_rows = {s: sum(p.split_rows[s] for p in partials) for s in SPLITS}
        if rows_read != sum(split_rows.values()) + rejects.count:
            raise RuntimeError(
                f"row accounting is off: read {rows_read}, wrote {split_rows} and "
                f"{rejects.count} rejected"
            )
        if rows_read == 0:
            raise DataError(f"data has a header but no data rows: {source}")
        if sum(split_rows.values()) == 0:
            raise DataError(
                f"no usable rows in {source}: every row was rejected "
                f"({_reason_summary(rejects)})\n{_samples(rejects)}"
            )
        stats = _new_stats(schema)
        unseen: Counter = Counter()
        for partial in partials:
            unseen.update(partial.unseen)
            for split in SPLITS:
                for name, column_stats in partial.stats[split].items():
                    stats[split][name].merge(column_stats)
        _finalise_schema(schema, stats, expected_schema is None, max_vocabulary)
        _check_label_vocabulary(schema)

        rejected_fraction = rejects.count / rows_read
        if rejected_fraction > max_rejected_fraction:
            columns = ", ".join(f"{c} ({n})" for c, n in rejects.columns.most_common()) or "-"
            raise DataError(
                f"{rejects.count} of {rows_read} rows rejected ({rejected_fraction:.1%}), above "
                f"the limit of {max_rejected_fraction:.1%}; reasons: "
                f"{dict(rejects.reasons.most_common())}; columns: {columns}\n"
                f"sample rows:\n{_samples(rejects)}"
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
        for name, n in unseen.most_common():
            problems.append(
                f"column {name!r}: {n} values not in the expected vocabulary"
                + (" (rejected)" if plan.reject_unseen else " (kept; the model maps them "
                   "to its out-of-vocabulary bucket)")
            )
        for column in schema.columns:
            if column.role == "ignored" and column.note:
                problems.append(f"column {column.name!r} ignored: {column.note}")

        shards = {s: sum(len(p.shards.get(s, ())) for p in partials) for s in SPLITS}
        stats_doc = {
            "rows_read": rows_read,
            "rejected_rows": rejects.count,
            "rejected_reasons": dict(rejects.reasons.most_common()),
            "split_rows": split_rows,
            "splits": {
                split: {
                    "count": split_rows[split],
                    "columns": {name: s.to_dict() for name, s in stats[split].items()},
                }
                for split in SPLITS
            },
        }
        if shard_root:
            from gkeflow.components.prepare.shard_store import write_manifest

            write_manifest(scratch, shard_root, {
                s: [f for p in partials for f in p.shards.get(s, ())] for s in SPLITS})
        (scratch / "schema.json").write_text(schema.to_json(), encoding="utf-8")
        (scratch / STATS_FILE).write_text(json.dumps(stats_doc, indent=2), encoding="utf-8")
        result = PrepareResult(
            rows_read=rows_read,
            split_rows=split_rows,
            rejected_rows=rejects.count,
            rejected_reasons=dict(rejects.reasons),
            schema=schema,
            problems=problems,
            stats=stats_doc,
            shards=shards,
        )
        from gkeflow.components.prepare.report import render_report

        (scratch / REPORT_FILE).write_text(
            render_report(source, result, rejects.samples), encoding="utf-8"
        )
    return result


def fetch_schema(uri: str) -> Schema:
    """An expected schema from a local path or ``gs://`` URI (schema.json, its directory,
    or a .yaml/.yml file)."""
    if not uri.startswith("gs://"):
        return Schema.load(Path(uri.removeprefix("file://")))
    from gkeflow.components.prepare.sources import _GS, gcs_client

    match = _GS.match(uri)
    bucket = gcs_client().bucket(match["bucket"])
    path = match["path"]
    blob = bucket.get_blob(path) or bucket.get_blob(path.rstrip("/") + "/" + SCHEMA_FILE)
    if blob is None:
        raise DataError(f"expected schema not found: {uri}")
    text = blob.download_as_text()
    try:
        if blob.name.endswith((".yaml", ".yml")):
            return Schema.from_yaml(text)
        return Schema.from_json(text)
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"invalid schema file {uri}: {exc}") from exc


def _reason_summary(rejects: _RejectLog) -> str:
    return "; ".join(f"{reason}: {n}" for reason, n in rejects.reasons.most_common(5))


def _samples(rejects: _RejectLog) -> str:
    return "\n".join(f"  {reason}: {text[:120]}" for reason, text in rejects.samples)


# --- reading a prepared split back -----------------------------------------------------------

def load_split(dataset_dir: Path, split: str, schema: Schema) -> pd.DataFrame:
    """Read one split into a DataFrame: numeric columns float64 (NaN for missing),
    categorical columns text (None for missing), in the schema's column order."""
    columns: dict[str, list[np.ndarray]] = {c.name: [] for c in schema.columns}
    dataset = make_tf_dataset(dataset_dir, split, schema, batch_size=65536)
    for batch in dataset.as_numpy_iterator():
        for name, values in batch.items():
            columns[name].append(values)
    data = {}
    for column in schema.columns:
        parts = columns[column.name]
        if column.type == "numeric":
            values = np.concatenate(parts) if parts else np.zeros(0, np.float32)
            # float32 -> its shortest decimal -> float64: 39.1 reads back as 39.1
            data[column.name] = values.astype(str).astype(np.float64)
        else:
            values = np.concatenate(parts) if parts else np.zeros(0, object)
            data[column.name] = pd.Series(
                [v.decode("utf-8") if v else None for v in values], dtype=object
            )
    return pd.DataFrame(data)


__all__ = [
    "EMBEDDED_PENGUINS",
    "ColumnSchema",
    "DataError",
    "PrepareResult",
    "Schema",
    "SplitRatios",
    "assign_splits",
    "infer_schema",
    "load_split",
    "make_tf_dataset",
    "prepare",
    "resolve_source",
]


def resolve_source(source: str) -> Path:
    """The local path of a single-file source (``embedded://penguins`` included)."""
    sources = resolve_sources(source)
    if len(sources) != 1 or sources[0].name.startswith("gs://"):
        raise DataError(f"{source!r} is not a single local file")
    return Path(sources[0].name)
