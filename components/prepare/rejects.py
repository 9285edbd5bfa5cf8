"""The rejected rows, kept verbatim: ``rejected.csv`` and ``rejected.jsonl``.

Every rejected row is written to both files, as it is rejected (rows from parallel lanes
interleave; sort by ``source`` and ``line`` for file order):

``rejected.csv`` (Python's csv module and pandas read it at default settings):
    ``source``: the input file; ``line``: the row's first line in it (1 = the header; for
    Parquet and BigQuery inputs, the row number from 1); ``reason``; ``row``: the row's
    text as it was in the file, without its line end (bytes that are not valid UTF-8
    shown as ``\\xNN``); ``row_base64``: the exact original bytes, base64, set only when
    they are not valid UTF-8; ``truncated``: ``true`` when ``row`` was cut at
    :data:`MAX_CSV_CHARS` characters (the full row is in ``rejected.jsonl``).

``rejected.jsonl`` (one strict JSON object per line):
    ``source``, ``line``, ``reason``, ``row`` as above but never truncated, and
    ``row_base64`` only when the bytes are not valid UTF-8.

The original bytes of a row are ``base64decode(row_base64)`` when it is set, else
``row.encode("utf-8")``: see :func:`original_bytes`.
"""

from __future__ import annotations

import base64
import csv
import json
import threading
from collections import Counter
from pathlib import Path

REJECTED_FILE = "rejected.csv"
REJECTED_JSONL = "rejected.jsonl"
#: Characters of a row kept in rejected.csv (the csv module's default field limit is 131072).
MAX_CSV_CHARS = 100_000
SAMPLE_REJECTS = 5
FIELDS = ["source", "line", "reason", "row", "row_base64", "truncated"]


def encode_row(raw: bytes) -> tuple[str, str]:
    """The row's text (invalid UTF-8 as ``\\xNN``) and its base64 ("" when valid UTF-8)."""
    try:
        return raw.decode("utf-8"), ""
    except UnicodeDecodeError:
        return raw.decode("utf-8", "backslashreplace"), base64.b64encode(raw).decode("ascii")


def original_bytes(record: dict) -> bytes:
    """A rejected row's original bytes, from a rejected.jsonl (or untruncated CSV) record."""
    encoded = record.get("row_base64") or ""
    if encoded:
        return base64.b64decode(encoded)
    return str(record["row"]).encode("utf-8")


class RejectLog:
    """rejected.csv and rejected.jsonl, written as rows are rejected (thread-safe), with
    counts by reason and column, and a few samples for the report."""

    def __init__(self, directory: Path):
        self._csv = (directory / REJECTED_FILE).open("w", encoding="utf-8", newline="")
        self._jsonl = (directory / REJECTED_JSONL).open("w", encoding="utf-8", newline="\n")
        self._writer = csv.writer(self._csv)
        self._writer.writerow(FIELDS)
        self._lock = threading.Lock()
        self.reasons: Counter = Counter()
        self.columns: Counter = Counter()
        self.samples: list[tuple[str, str]] = []

    @property
    def count(self) -> int:
        return sum(self.reasons.values())

    def add(self, source: str, line: int, raw: bytes, reason: str,
            column: str | None = None) -> None:
        self.add_many(source, [line], [raw], [reason], [column])

    def add_many(self, source: str, lines, raws, reasons, columns) -> None:
        with self._lock:
            for line, raw, reason, column in zip(lines, raws, reasons, columns, strict=True):
                text, encoded = encode_row(raw)
                truncated = len(text) > MAX_CSV_CHARS
                self._writer.writerow([
                    source, int(line), reason, text[:MAX_CSV_CHARS] if truncated else text,
                    "" if truncated else encoded, "true" if truncated else "",
                ])
                record = {"source": source, "line": int(line), "reason": reason, "row": text}
                if encoded:
                    record["row_base64"] = encoded
                self._jsonl.write(json.dumps(record, allow_nan=False) + "\n")
                self.reasons[reason] += 1
                if column:
                    self.columns[column] += 1
                if len(self.samples) < SAMPLE_REJECTS:
                    self.samples.append((reason, text[:1000]))

    def close(self) -> None:
        self._csv.close()
        self._jsonl.close()
