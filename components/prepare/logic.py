"""Data preparation: read a CSV, infer a schema, split deterministically, quarantine bad rows.

Plain functions over paths and primitives; the KFP component in ``component.py``
is a thin shell around :func:`prepare`.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv

from components._atomic import publish_dir

EMBEDDED_PENGUINS = "embedded://penguins"
SPLITS = ("train", "eval", "test")
NULL_VALUES = ["", "NA", "N/A", "NaN", "nan", "null", "NULL", "None", "?"]
SCHEMA_FILE = "schema.json"
REJECTED_FILE = "rejected.csv"


class DataError(ValueError):
    """The input data cannot be prepared; the message names the problem."""


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
    def load(cls, path: Path) -> Schema:
        path = Path(path)
        if path.is_dir():
            path = path / SCHEMA_FILE
        return cls.from_json(path.read_text(encoding="utf-8"))


@dataclass
class PrepareResult:
    rows_read: int
    split_rows: dict[str, int]
    rejected_rows: int
    rejected_reasons: dict[str, int]
    schema: Schema


def resolve_source(source: str) -> Path:
    """Turn a data URI into a local CSV path (``embedded://penguins`` is the bundled dataset)."""
    if source == EMBEDDED_PENGUINS:
        import palmerpenguins

        return Path(palmerpenguins.__file__).parent / "data" / "penguins.csv"
    if "://" in source and not source.startswith("file://"):
        scheme = source.split("://", 1)[0]
        raise DataError(
            f"unsupported data URI scheme {scheme!r} in {source!r}; "
            f"use a local CSV path or {EMBEDDED_PENGUINS}"
        )
    path = Path(source.removeprefix("file://"))
    if not path.exists():
        raise DataError(f"data file not found: {path}")
    if path.is_dir():
        raise DataError(f"data path is a directory, expected a CSV file: {path}")
    return path


def _read_header(path: Path) -> list[str]:
    with path.open("r", encoding="utf-8", errors="replace", newline="") as handle:
        header = next(csv.reader(handle), None)
    if not header or not any(h.strip() for h in header):
        raise DataError(f"data file is empty (no header row): {path}")
    duplicates = sorted({h for h in header if header.count(h) > 1})
    if duplicates:
        raise DataError(f"duplicate column names in {path}: {', '.join(duplicates)}")
    return header


def read_csv(path: Path) -> tuple[pd.DataFrame, list[dict[str, str]]]:
    """Read every column as text; rows that cannot be parsed are returned aside.

    Returns the parsed rows (missing values as ``NaN``) and the rejected rows,
    each ``{"row": <raw text>, "reason": <why>}``.
    """
    header = _read_header(path)
    rejected: list[dict[str, str]] = []

    def keep_aside(row: pacsv.InvalidRow) -> str:
        rejected.append(
            {
                "line": str(row.number if row.number is not None else ""),
                "reason": f"expected {row.expected_columns} columns, got {row.actual_columns}",
                "row": row.text,
            }
        )
        return "skip"

    try:
        table = pacsv.read_csv(
            path,
            read_options=pacsv.ReadOptions(encoding="utf8"),
            parse_options=pacsv.ParseOptions(invalid_row_handler=keep_aside),
            convert_options=pacsv.ConvertOptions(
                column_types={name: pa.string() for name in header},
                null_values=NULL_VALUES,
                strings_can_be_null=True,
            ),
        )
    except pa.ArrowInvalid as exc:
        raise DataError(f"cannot parse CSV {path}: {exc}") from exc
    frame = table.to_pandas()
    frame = frame.astype(object).where(frame.notna(), None)
    return frame, rejected


def _is_numeric(values: pd.Series) -> bool:
    present = values.dropna()
    if present.empty:
        return False
    converted = pd.to_numeric(present, errors="coerce")
    return bool(converted.notna().all())


def infer_schema(frame: pd.DataFrame, label_column: str, max_vocabulary: int = 1000) -> Schema:
    """Classify columns as numeric or categorical; the label is categorical."""
    if label_column not in frame.columns:
        raise DataError(
            f"label column {label_column!r} not found; available columns: "
            f"{', '.join(map(str, frame.columns))}"
        )
    labels = frame[label_column].dropna().astype(str)
    label_vocabulary = sorted(labels.unique().tolist())
    if len(label_vocabulary) < 2:
        raise DataError(
            f"label column {label_column!r} needs at least 2 distinct values to train a "
            f"classifier; found {label_vocabulary}"
        )
    columns: list[ColumnSchema] = []
    for name in frame.columns:
        values = frame[name]
        nullable = bool(values.isna().any())
        if name == label_column:
            columns.append(
                ColumnSchema(name, "categorical", "label", nullable, label_vocabulary)
            )
        elif values.isna().all():
            columns.append(
                ColumnSchema(name, "categorical", "ignored", True, note="all values missing")
            )
        elif _is_numeric(values):
            columns.append(ColumnSchema(name, "numeric", "feature", nullable))
        else:
            counts = values.dropna().astype(str).value_counts()
            if len(counts) == len(values.dropna()) and len(counts) > 50:
                columns.append(
                    ColumnSchema(
                        name, "categorical", "ignored", nullable,
                        note="every value is unique (an identifier?)",
                    )
                )
                continue
            vocabulary = sorted(counts.index[:max_vocabulary].tolist())
            columns.append(ColumnSchema(name, "categorical", "feature", nullable, vocabulary))
    if not any(c.role == "feature" for c in columns):
        raise DataError("no usable feature columns besides the label")
    return Schema(label=label_column, label_vocabulary=label_vocabulary, columns=columns)


def assign_splits(frame: pd.DataFrame, ratios: SplitRatios) -> pd.Series:
    """Split by a stable 64-bit hash of each row's text, independent of row order.

    The same row lands in the same split on every run and machine.
    """
    as_text = frame.astype(object).where(frame.notna(), "\x00").astype(str)
    hashes = pd.util.hash_pandas_object(as_text, index=False).to_numpy()
    position = hashes / float(2**64)
    split = pd.Series("test", index=frame.index)
    split[position < ratios.train + ratios.eval] = "eval"
    split[position < ratios.train] = "train"
    return split


def prepare(
    source: str,
    output_dir: Path,
    label_column: str,
    ratios: SplitRatios = SplitRatios(),
    max_rejected_fraction: float = 0.1,
) -> PrepareResult:
    """Read ``source``, write ``train/eval/test.csv``, ``rejected.csv`` and ``schema.json``.

    Rows that cannot be parsed or have no label are written to ``rejected.csv``
    with a reason; rows read always equal train + eval + test + rejected.
    Everything is published atomically into ``output_dir``.
    """
    path = resolve_source(source)
    frame, rejected = read_csv(path)
    rows_read = len(frame) + len(rejected)
    if rows_read == 0:
        raise DataError(f"data file has a header but no data rows: {path}")
    schema = infer_schema(frame, label_column)

    no_label = frame[label_column].isna()
    for idx in frame.index[no_label]:
        rejected.append(
            {
                "line": "",
                "reason": f"missing label {label_column!r}",
                "row": ",".join("" if v is None else str(v) for v in frame.loc[idx]),
            }
        )
    frame = frame[~no_label].reset_index(drop=True)
    if frame.empty:
        raise DataError(f"no usable rows in {path}: every row was rejected")

    rejected_fraction = len(rejected) / rows_read
    if rejected_fraction > max_rejected_fraction:
        reasons = pd.Series([r["reason"] for r in rejected]).value_counts().to_dict()
        samples = "\n".join(f"  {r['reason']}: {r['row'][:120]}" for r in rejected[:5])
        raise DataError(
            f"{len(rejected)} of {rows_read} rows rejected ({rejected_fraction:.1%}), above "
            f"the limit of {max_rejected_fraction:.1%}; reasons: {reasons}\n"
            f"sample rows:\n{samples}"
        )

    split = assign_splits(frame, ratios)
    split_rows = {}
    with publish_dir(output_dir) as scratch:
        for name in SPLITS:
            part = frame[split == name]
            part.to_csv(scratch / f"{name}.csv", index=False)
            split_rows[name] = len(part)
        pd.DataFrame(rejected, columns=["line", "reason", "row"]).to_csv(
            scratch / REJECTED_FILE, index=False
        )
        (scratch / SCHEMA_FILE).write_text(schema.to_json(), encoding="utf-8")

    reasons = pd.Series([r["reason"] for r in rejected], dtype=object).value_counts().to_dict()
    result = PrepareResult(
        rows_read=rows_read,
        split_rows=split_rows,
        rejected_rows=len(rejected),
        rejected_reasons={str(k): int(v) for k, v in reasons.items()},
        schema=schema,
    )
    assert rows_read == sum(split_rows.values()) + len(rejected)
    return result


def load_split(dataset_dir: Path, split: str, schema: Schema) -> pd.DataFrame:
    """Read one split back with the schema's types (numeric as float, categorical as text)."""
    dtypes = {c.name: ("float64" if c.type == "numeric" else "string") for c in schema.columns}
    frame = pd.read_csv(
        Path(dataset_dir) / f"{split}.csv",
        dtype={k: ("float64" if v == "float64" else object) for k, v in dtypes.items()},
        keep_default_na=False,
        na_values={c.name: [""] for c in schema.columns},
    )
    return frame
