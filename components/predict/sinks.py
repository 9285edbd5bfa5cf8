"""Where predictions go: a Parquet or CSV file (local or ``gs://``) or a BigQuery table.

Rows are streamed to a local scratch file (memory bounded by one batch) and published
only when every row is written: a local file by an atomic rename, a ``gs://`` object by
one upload (an object appears whole or not at all), a BigQuery table by one load job
(atomic; its job id is derived from the run, so a retried step does not load twice).
A failed or killed step leaves nothing that looks complete.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import os
import re
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from gkeflow.components.predict.resolve import PredictError

FORMATS = ("parquet", "csv")
_BQ = re.compile(r"^bq://(?P<project>[A-Za-z0-9_:.\-]+)\.(?P<dataset>\w+)\.(?P<table>[\w\-$]+)$")
BQ_WRITE_MODES = ("truncate", "append")


def output_format(uri: str, default: str = "parquet") -> str:
    """``parquet``, ``csv`` or ``bigquery``, from the URI (its extension) or ``default``."""
    if uri.startswith("bq://"):
        if not _BQ.match(uri):
            raise PredictError(f"malformed BigQuery table {uri!r}; expected "
                               "bq://project.dataset.table")
        return "bigquery"
    lower = uri.lower()
    if lower.endswith((".parquet", ".pq")):
        return "parquet"
    if lower.endswith(".csv"):
        return "csv"
    if default not in FORMATS:
        raise PredictError(f"output format must be parquet or csv; got {default!r}")
    return default


def check_output_uri(uri: str) -> None:
    """Fail before scoring when the destination cannot be written."""
    if not uri:
        raise PredictError("no output URI given")
    if uri.startswith("bq://"):
        output_format(uri)
        return
    if uri.startswith("gs://"):
        from gkeflow.components.cloud.mounts import writable_path

        bucket, _, name = uri[len("gs://"):].partition("/")
        if not bucket or not name or name.endswith("/"):
            raise PredictError(f"output {uri!r} must name an object: gs://bucket/path/file.parquet")
        _check_extension(uri)
        try:  # a bucket this step mounts read-only (gcsfuse) takes no predictions
            writable_path(uri, what="predictions")
        except ValueError as exc:
            raise PredictError(str(exc)) from None
        return
    if "://" in uri and not uri.startswith("file://"):
        raise PredictError(f"unsupported output {uri!r}; use a local path, gs://bucket/file "
                           "(.parquet or .csv) or bq://project.dataset.table")
    local = Path(uri.removeprefix("file://"))
    if local.is_dir():
        raise PredictError(f"output {uri!r} is a directory; name a file in it "
                           "(predictions.parquet or predictions.csv)")
    _check_extension(uri)


def _check_extension(uri: str) -> None:
    """A file name's extension, when it has one, must be a format the sink writes."""
    suffix = Path(uri.rsplit("/", 1)[-1]).suffix.lower()
    if suffix and suffix not in (".parquet", ".pq", ".csv"):
        raise PredictError(f"output {uri!r} ends in {suffix}; name a .parquet or .csv file "
                           "(or none: output_format decides)")


def _safe_field(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]+", "_", text).strip("_") or "class"


def probability_columns(classes: list[str]) -> list[str]:
    """``probability_<class>`` per class: letters, digits and '_' (valid in BigQuery),
    unique."""
    names: list[str] = []
    for cls in classes:
        base = f"probability_{_safe_field(cls)}"
        name, n = base, 2
        while name in names:
            name, n = f"{base}_{n}", n + 1
        names.append(name)
    return names


class PredictionSink:
    """Streams prediction tables to a scratch file; :meth:`commit` publishes them."""

    def __init__(self, uri: str, fmt: str, schema: pa.Schema, run_id: str = "",
                 bq_write_mode: str = "truncate"):
        check_output_uri(uri)
        self.uri = uri
        self.format = fmt
        self.schema = schema
        self.run_id = run_id
        if bq_write_mode not in BQ_WRITE_MODES:
            raise PredictError(f"bq_write_mode must be truncate or append; got {bq_write_mode!r}")
        self.bq_write_mode = bq_write_mode
        self.rows = 0
        local = not uri.startswith(("gs://", "bq://"))
        if local:
            target = Path(uri.removeprefix("file://"))
            target.parent.mkdir(parents=True, exist_ok=True)
            directory = target.parent
        else:
            directory = None
        file_format = "parquet" if fmt == "bigquery" else fmt
        fd, name = tempfile.mkstemp(prefix=".partial-predictions-", suffix=f".{file_format}",
                                    dir=directory)
        os.close(fd)
        self.scratch = Path(name)
        if file_format == "parquet":
            self._writer = pq.ParquetWriter(str(self.scratch), schema, compression="zstd")
        else:
            self._writer = pacsv.CSVWriter(str(self.scratch), schema)

    def write(self, table: pa.Table) -> None:
        if table.num_rows:
            self._writer.write_table(table.cast(self.schema))
            self.rows += table.num_rows

    def commit(self) -> str:
        """Publish every written row at once; returns where they are."""
        self._writer.close()
        try:
            if self.uri.startswith("gs://"):
                self._upload_gcs()
            elif self.uri.startswith("bq://"):
                self._load_bigquery()
            else:  # mkstemp made it private; published files get the usual mode
                from gkeflow.components._atomic import plain_mode

                plain_mode(self.scratch)
                os.replace(self.scratch, Path(self.uri.removeprefix("file://")))
        finally:
            with contextlib.suppress(FileNotFoundError):
                self.scratch.unlink()
        return self.uri

    def abort(self) -> None:
        with contextlib.suppress(Exception):
            self._writer.close()
        with contextlib.suppress(FileNotFoundError):
            self.scratch.unlink()

    def _upload_gcs(self) -> None:
        from gkeflow.components.prepare.sources import gcs_client

        bucket, _, name = self.uri[len("gs://"):].partition("/")
        content_type = "text/csv" if self.format == "csv" else "application/octet-stream"
        blob = gcs_client().bucket(bucket).blob(name)
        try:
            blob.upload_from_filename(str(self.scratch), content_type=content_type)
        except Exception as exc:  # noqa: BLE001 - one message naming the destination
            raise PredictError(f"could not write predictions to {self.uri}: {exc}") from exc

    def _load_bigquery(self) -> None:
        from google.api_core import exceptions
        from google.cloud import bigquery

        from gkeflow.components.prepare.bigquery import bigquery_client

        match = _BQ.match(self.uri)
        table_id = f"{match['project']}.{match['dataset']}.{match['table']}"
        client = bigquery_client(match["project"])
        config = bigquery.LoadJobConfig(
            source_format=bigquery.SourceFormat.PARQUET,
            write_disposition=(bigquery.WriteDisposition.WRITE_TRUNCATE
                               if self.bq_write_mode == "truncate"
                               else bigquery.WriteDisposition.WRITE_APPEND),
        )
        job_id = None
        if self.run_id:  # one load per run and table: a retried step finds the first one
            digest = hashlib.sha256(f"{self.run_id}|{table_id}".encode()).hexdigest()[:32]
            job_id = f"gkeflow_predict_{digest}"
        try:
            with self.scratch.open("rb") as handle:
                job = client.load_table_from_file(
                    handle, table_id, job_id=job_id, job_config=config,
                    size=self.scratch.stat().st_size)  # small: one multipart request
        except exceptions.Conflict:
            job = client.get_job(job_id)
        except exceptions.GoogleAPICallError as exc:
            raise PredictError(f"BigQuery refused the predictions load into {table_id}: "
                               f"{exc.message}") from exc
        try:
            job.result()
        except exceptions.GoogleAPICallError as exc:
            raise PredictError(f"loading predictions into {table_id} failed: {exc}") from exc


class RejectsFile:
    """``rejected.csv`` (source, reason, row), as data preparation writes it."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._handle = self.path.open("w", encoding="utf-8", newline="")
        self._writer = csv.writer(self._handle)
        self._writer.writerow(["source", "reason", "row"])
        self.count = 0

    def add(self, source: str, text: str, reason: str) -> None:
        self._writer.writerow([source, reason, text])
        self.count += 1

    def close(self) -> None:
        self._handle.close()
