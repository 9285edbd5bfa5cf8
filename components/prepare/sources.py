"""Data sources by URI, read as streams of Arrow record batches (memory bounded by a batch).

- local files, ``file://`` paths and globs (``data/*.csv``, ``data/**/*.csv.gz``);
- ``gs://bucket/path`` and ``gs://bucket/prefix/*.csv`` through google-cloud-storage,
  streamed in chunks (``Blob.open``), never downloaded whole;
- CSV (optionally gzip-compressed, ``.gz``) and Parquet (``.parquet``/``.pq``);
- ``bq://project.dataset.table`` through google-cloud-bigquery, with an optional SQL query
  or row filter (see :mod:`gkeflow.components.prepare.bigquery`);
- ``embedded://penguins``, the bundled Palmer Penguins CSV.

Every source yields batches through :meth:`Source.batches`; CSV rows that cannot be parsed
(ragged rows, broken quoting) are handed to a callback with their text and reason, never
dropped.
"""

from __future__ import annotations

import fnmatch
import glob as globlib
import os
import queue
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gkeflow.components.prepare.csv_reader import (
    CSV_BLOCK_BYTES,
    NULL_VALUES,
    UTF8_BOM,
    RowLimits,
    RowOrigin,
    TypedBatch,
    cut_blocks,
    parse_cut,
)

EMBEDDED_PENGUINS = "embedded://penguins"
PARQUET_BATCH_ROWS = 65536


class DataError(ValueError):
    """The input data cannot be prepared; the message names the problem."""


class EmptySplit(DataError):
    """Rows that leave the train or the test split empty (``split_rows``: rows per split)."""

    def __init__(self, message: str, split_rows: dict[str, int]):
        super().__init__(message)
        self.split_rows = split_rows


class EmptyFile(DataError):
    """A file with no header row: no rows either."""


#: (source name, line number, original bytes, reason) for a row that could not be parsed.
RejectRow = Callable[[str, int, bytes, str], None]
#: (source name, row text, reason): the same, for :meth:`Source.batches`.
RejectText = Callable[[str, str, str], None]
__all__ = ["CSV_BLOCK_BYTES", "NULL_VALUES", "DataError", "Source", "TypedBatch"]


@dataclass
class Source:
    """One input file, local or in Cloud Storage, CSV or Parquet."""

    name: str  # as shown in messages: the path or gs:// URI
    opener: Callable[[], object]  # -> binary file object or pyarrow NativeFile
    format: str  # "csv" | "parquet"
    compression: str | None = None  # "gzip" for .gz
    header_opener: Callable[[], object] | None = None  # cheaper opener for the first line
    limits: RowLimits = RowLimits()

    def _stream(self, for_header: bool = False):
        handle = (self.header_opener if for_header and self.header_opener else self.opener)()
        if not isinstance(handle, pa.NativeFile):
            handle = pa.PythonFile(handle, mode="r")
        if self.compression:
            handle = pa.CompressedInputStream(handle, self.compression)
        return handle

    def header(self) -> list[str]:  # noqa: C901 - one check per way a header goes wrong
        """The column names (a CSV's first row, a Parquet file's schema); DataError if the
        file is empty or unreadable, or its names are not unique."""
        if self.format == "parquet":
            try:
                with self._stream() as stream:
                    names = list(pq.ParquetFile(stream).schema_arrow.names)
            except (pa.ArrowInvalid, OSError) as exc:
                raise DataError(f"cannot read Parquet file {self.name}: {exc}") from exc
            return _unique_names(names, self.name)
        try:
            with self._stream(for_header=True) as stream:
                first = _read_first_line(stream)
        except OSError as exc:
            raise DataError(f"cannot read {self.name}: {exc}") from exc
        if first is not None and first.startswith(UTF8_BOM):
            first = first[len(UTF8_BOM):]
        if first is None or not first.strip():
            raise EmptyFile(f"data file is empty (no header row): {self.name}")
        from gkeflow.components.prepare.file_kinds import legacy_encoding_hint, spreadsheet_kind

        kind = spreadsheet_kind(first)
        if kind:
            raise DataError(f"{self.name} is {kind}, not CSV text; export it as CSV (e.g. "
                            "Save As > CSV UTF-8) and point --data at that file")
        try:
            text = first.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DataError(f"the header row of {self.name} is not valid UTF-8 (byte "
                            f"{exc.start}){legacy_encoding_hint(first)}; re-save the file as "
                            "UTF-8") from exc
        if "\r" in text:
            raise DataError(f"{self.name} ends its lines with a carriage return alone (old "
                            f"Mac style); convert the line ends to LF or CRLF")
        import csv

        try:
            names = next(csv.reader([text]))
        except csv.Error as exc:
            raise DataError(f"cannot read the header row of {self.name}: {exc}") from exc
        if not any(n.strip() for n in names):
            raise EmptyFile(f"data file has an empty header row: {self.name}")
        return _unique_names(names, self.name)

    def batches(self, reject: RejectText, prefetch: bool = True) -> Iterator[pa.RecordBatch]:
        """The file's rows as record batches; CSV cells as strings (nulls for missing).

        ``reject(source name, row text, reason)`` gets each CSV row set aside while reading
        (the text decoded from its original bytes, invalid UTF-8 as ``\\xNN``);
        :meth:`typed_blocks` gives line numbers and the bytes themselves.
        """
        def on_reject(name: str, _line: int, raw: bytes, reason: str) -> None:
            reject(name, raw.decode("utf-8", "backslashreplace"), reason)

        return (batch for batch, _ in self.text_blocks(on_reject, prefetch))

    def text_blocks(self, reject: RejectRow, prefetch: bool = True) -> Iterator[TypedBatch]:
        """The file's rows as ``(batch, origin)``: the batches :meth:`batches` gives, with
        each row's line number and original bytes (Parquet: row numbers from 1, no bytes).
        ``reject(source name, line number, bytes, reason)`` gets each CSV row set aside."""
        if self.format != "csv":
            iterator = (block() for block in numbered(self._parquet_batches()))
        else:
            iterator = (item for parse in self._csv_blocks(reject, None)
                        if (item := parse()) is not None)
        return prefetched(iterator) if prefetch else iterator

    def typed_blocks(self, reject: RejectRow, float_columns: Sequence[str],
                     prefetch: bool = True) -> Iterator[Callable[[], TypedBatch | None]]:
        """The file's rows as a stream of blocks to parse, each a function that parses
        one block into ``(batch, origin)`` (None for a block without rows): the reading
        happens here, the parsing where the function is called, so several threads can
        parse one file's blocks in parallel.

        CSV blocks whose ``float_columns`` all hold numbers come with those columns
        parsed as float64 and the other columns dictionary-encoded; a block with any
        other value in them is read as text (its bad values are found row by row later).
        ``origin`` (:class:`~gkeflow.components.prepare.csv_reader.RowOrigin`) gives each
        row's line number and original bytes.
        """
        if self.format != "csv":
            iterator = numbered(self._parquet_batches())
        else:
            iterator = self._csv_blocks(reject, list(float_columns))
        return prefetched(iterator) if prefetch else iterator

    def _csv_blocks(self, reject: RejectRow, float_columns: list[str] | None,
                    ) -> Iterator[Callable[[], TypedBatch | None]]:
        names = self.header()
        limits = self.limits

        def on_reject(line: int, raw: bytes, reason: str) -> None:
            reject(self.name, line, raw, reason)

        with self._stream() as stream:
            try:
                for cut in cut_blocks(stream, len(names), limits):
                    yield lambda cut=cut: parse_cut(cut(), names, float_columns, on_reject)
            except OSError as exc:  # e.g. corrupt gzip
                raise DataError(f"cannot read CSV {self.name}: {exc}") from exc

    def _parquet_batches(self) -> Iterator[pa.RecordBatch]:
        with self._stream() as stream:
            try:
                parquet = pq.ParquetFile(stream)
            except (pa.ArrowInvalid, OSError) as exc:
                raise DataError(f"cannot read Parquet file {self.name}: {exc}") from exc
            try:
                yield from parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS)
            except (pa.ArrowInvalid, OSError) as exc:
                raise DataError(f"cannot read Parquet file {self.name}: {exc}") from exc


def common_header(sources: Sequence[Source],
                  on_empty: Callable[[Source], None] | None = None
                  ) -> tuple[list[str], list[Source]]:
    """The columns every input file has, and the files that have them. An empty file among
    several holds no rows and is skipped (``on_empty`` is told); one alone is an error.

    Raises:
        DataError: a file is unreadable or empty alone, files differ in their columns
            (naming both), or every file is empty.
    """
    header: list[str] | None = None
    usable: list[Source] = []
    for source in sources:
        try:
            names = source.header()
        except EmptyFile:
            if len(sources) == 1:
                raise
            if on_empty is not None:
                on_empty(source)
            continue
        if header is None:
            header = names
        elif names != header:
            raise DataError(
                f"{source.name} has columns {names}, unlike {usable[0].name}'s {header}")
        usable.append(source)
    if header is None:
        raise DataError("every input file is empty")
    return header, usable


def _unique_names(names: list[str], source: str) -> list[str]:
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise DataError(f"duplicate column names in {source}: "
                        f"{', '.join(map(repr, duplicates))}; give every column its own name")
    return names


def numbered(batches: Iterator[pa.RecordBatch],
             first_row: int = 1) -> Iterator[Callable[[], TypedBatch]]:
    """Batches of a source without text rows (Parquet, BigQuery), as blocks whose rows
    are numbered from ``first_row`` (no original bytes)."""
    row = first_row
    for batch in batches:
        origin = RowOrigin(np.arange(row, row + batch.num_rows, dtype=np.int64))
        row += batch.num_rows
        yield lambda batch=batch, origin=origin: (batch, origin)


def _read_first_line(stream) -> bytes | None:
    chunks = []
    while True:
        chunk = stream.read(65536)
        if not chunk:
            break
        chunks.append(chunk)
        if b"\n" in chunk or b"\r" in chunk:  # a line end (a lone CR too: old Mac files)
            break
    data = b"".join(chunks)
    if not data:
        return None
    return data.split(b"\n", 1)[0].rstrip(b"\r")


def prefetched(iterator: Iterator, depth: int = 1) -> Iterator:
    """Read ahead in a thread: Arrow parses the next block while this one is processed."""
    items: queue.Queue = queue.Queue(maxsize=depth)
    done = object()
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in iterator:
                if stop.is_set():
                    return
                items.put(item)
            items.put(done)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            items.put(exc)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    try:
        while True:
            item = items.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while thread.is_alive():
            try:
                items.get_nowait()
            except queue.Empty:
                thread.join(0.05)


def _format_of(name: str) -> tuple[str, str | None]:
    lower = name.lower()
    compression = "gzip" if lower.endswith(".gz") else None
    if compression:
        lower = lower[: -len(".gz")]
    if lower.endswith((".parquet", ".pq")):
        if compression:
            raise DataError(f"gzip-compressed Parquet is not supported: {name}")
        return "parquet", None
    return "csv", compression


#: Extensions of files kept beside data that are never rows: notes, metadata, checksums.
NOT_DATA = (".md", ".rst", ".json", ".yaml", ".yml", ".log", ".crc", ".html", ".pdf", ".png",
            ".jpg", ".jpeg")


def _hidden(name: str) -> bool:
    """Files a directory of data keeps beside its rows, not read when a directory is named:
    by the Hadoop and Spark convention (``_SUCCESS``, ``.part-0.crc``), and notes and
    metadata (``README.md``, ``schema.json``)."""
    return name.startswith((".", "_")) or name.lower().endswith(NOT_DATA)


def _has_wildcard(text: str) -> bool:
    return any(ch in text for ch in "*?[")


def local_sources(pattern: str) -> list[Source]:
    if _has_wildcard(pattern):
        paths = sorted(Path(p) for p in globlib.glob(pattern, recursive=True))
        paths = [p for p in paths if p.is_file()]
        if not paths:
            raise DataError(f"no files match {pattern!r}")
    else:
        path = Path(pattern)
        if not path.exists():
            raise DataError(f"data file not found: {path}")
        if path.is_dir():
            paths = sorted(p for p in path.iterdir() if p.is_file() and not _hidden(p.name))
            if not paths:
                raise DataError(f"data directory is empty: {path}")
        else:
            paths = [path]
    sources = []
    for path in paths:
        fmt, compression = _format_of(path.name)
        sources.append(
            Source(str(path), lambda p=path: pa.OSFile(str(p), "rb"), fmt, compression)
        )
    return sources


GS = re.compile(r"^gs://(?P<bucket>[^/]+)/?(?P<path>.*)$")


def gcs_client():
    """A Cloud Storage client: credentials from the environment; with
    ``STORAGE_EMULATOR_HOST`` set (an emulator), anonymous."""
    from google.cloud import storage

    if os.environ.get("STORAGE_EMULATOR_HOST"):
        from google.auth.credentials import AnonymousCredentials

        return storage.Client(
            project=os.environ.get("GOOGLE_CLOUD_PROJECT", "local"),
            credentials=AnonymousCredentials(),
        )
    return storage.Client()


def gcs_sources(uri: str, client=None) -> list[Source]:
    match = GS.match(uri)
    if not match or not match["bucket"]:
        raise DataError(f"malformed Cloud Storage URI {uri!r}; expected gs://bucket/path")
    client = client or gcs_client()
    bucket = client.bucket(match["bucket"])
    path = match["path"]
    if _has_wildcard(path):
        prefix = re.split(r"[*?\[]", path, maxsplit=1)[0]
        blobs = [
            b for b in client.list_blobs(bucket, prefix=prefix)
            if fnmatch.fnmatchcase(b.name, path) and not b.name.endswith("/")
        ]
    else:
        blob = bucket.get_blob(path) if path else None
        if blob is not None:
            blobs = [blob]
        else:  # a "directory": every object under it
            prefix = path.rstrip("/") + "/" if path else ""
            blobs = [b for b in client.list_blobs(bucket, prefix=prefix)
                     if not b.name.endswith("/")
                     and not any(map(_hidden, b.name[len(prefix):].split("/")))]
    if not blobs:
        raise DataError(f"no objects match {uri!r}")
    sources = []
    for blob in sorted(blobs, key=lambda b: b.name):
        fmt, compression = _format_of(blob.name)
        sources.append(
            Source(
                f"gs://{bucket.name}/{blob.name}",
                # Blob.open streams in chunks; raw bytes (no transcoding of .gz objects)
                lambda b=blob: b.open("rb", chunk_size=8 << 20, raw_download=True),
                fmt,
                compression,
                header_opener=lambda b=blob: b.open("rb", chunk_size=256 << 10,
                                                    raw_download=True),
            )
        )
    return sources


def resolve_sources(uri: str) -> list[Source]:
    """The input files a data URI names (not for ``bq://``, see the bigquery module); a
    ``gs://`` URI of a bucket mounted in this step is read through the mount."""
    from gkeflow.components.cloud.mounts import mounted_path

    uri = mounted_path(uri)
    if uri == EMBEDDED_PENGUINS:
        import palmerpenguins

        return local_sources(str(Path(palmerpenguins.__file__).parent / "data" / "penguins.csv"))
    if uri.startswith("gs://"):
        return gcs_sources(uri)
    if "://" in uri and not uri.startswith("file://"):
        scheme = uri.split("://", 1)[0]
        raise DataError(
            f"unsupported data URI scheme {scheme!r} in {uri!r}; use a local path or glob, "
            f"gs://bucket/path, bq://project.dataset.table or {EMBEDDED_PENGUINS}"
        )
    return local_sources(uri.removeprefix("file://"))
