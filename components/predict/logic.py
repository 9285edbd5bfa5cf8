"""Batch prediction: score new rows with a registered model, streaming, in large batches.

Plain functions over paths and primitives; ``component.py`` is a thin shell around
:func:`predict`. The model comes from the registry (an alias such as ``champion`` or an
explicit version; local, Vertex AI or Kubeflow Model Registry). The input is read with
data preparation's sources (CSV/Parquet, local/globs/``gs://``, ``bq://``) and typed with
the training run's schema; rows the schema rejects go to ``rejected.csv`` with a reason,
and always ``rows read = rows scored + rows rejected``. Predictions (key, predicted class,
one probability per class, model name and version) are published only when complete.
Drift against the training data is summarised in a Markdown report; drift above
``max_drift`` in any column fails the step (after the report is written, before any
prediction is published).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from gkeflow.components.predict.drift import DriftTracker, render_drift_report
from gkeflow.components.predict.resolve import (
    PredictError,
    TrainingProfile,
    fetch_model,
    parse_model_ref,
    resolve_version,
    training_profile,
)
from gkeflow.components.predict.rows import model_inputs, row_texts, type_rows
from gkeflow.components.predict.sinks import (
    PredictionSink,
    RejectsFile,
    check_output_uri,
    output_format,
    probability_columns,
)
from gkeflow.components.prepare.logic import DataError
from gkeflow.components.prepare.sources import common_header

DEFAULT_BATCH_ROWS = 65_536
ROW_NUMBER = "row_number"
PREDICTED_CLASS = "predicted_class"
#: A regressor's prediction, in the label's units.
PREDICTED_VALUE = "predicted_value"


@dataclass
class PredictResult:
    rows_read: int
    rows_scored: int
    rows_rejected: int
    reject_reasons: dict[str, int]
    model_name: str
    model_version: int
    model_uri: str
    selected_by: str
    output_uri: str
    drift: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def rows_per_s(self) -> float:
        return self.rows_scored / self.seconds if self.seconds > 0 else 0.0

    def metadata(self) -> dict:
        """Counts and provenance for the predictions artifact."""
        return {
            "rows_read": self.rows_read, "rows_scored": self.rows_scored,
            "rows_rejected": self.rows_rejected, "model_name": self.model_name,
            "model_version": self.model_version, "model_uri": self.model_uri,
            "selected_by": self.selected_by, "output_uri": self.output_uri,
            "rows_per_s": round(self.rows_per_s, 1), **self.drift,
        }


class DriftError(PredictError):
    """Drift above the threshold; the report names the columns."""


def _sources(data_uri: str, bq_query: str, bq_filter: str):
    if data_uri.startswith("bq://"):
        from gkeflow.components.prepare.bigquery import bigquery_sources

        return bigquery_sources(data_uri, query=bq_query, row_filter=bq_filter)
    if bq_query or bq_filter:
        raise DataError("bq_query and bq_filter apply only to bq:// sources")
    from gkeflow.components.prepare.sources import resolve_sources

    return resolve_sources(data_uri)


class Scorer:
    """The exported model's raw-feature signature, called on large batches."""

    def __init__(self, model_dir: Path, batch_rows: int = DEFAULT_BATCH_ROWS):
        from gkeflow.components.train.exported import ExportedModel
        from gkeflow.components.train.inputs import input_names

        self.model = ExportedModel(model_dir)
        self.batch_rows = batch_rows
        self.classes = self.model.label_vocabulary
        self.regression = self.model.regression
        self._input_names = input_names

    def names(self, schema) -> dict[str, str]:
        return self._input_names(schema)

    def __call__(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        return self.model.predict_proba(inputs, batch_size=self.batch_rows)


def _check_key_name(key_column: str, classes: list[str]) -> None:
    """The key column is copied to the predictions: it must not take an output's name."""
    taken = {ROW_NUMBER, PREDICTED_CLASS, PREDICTED_VALUE, "model_name", "model_version",
             *probability_columns(classes)}
    if key_column in taken:
        raise PredictError(f"key_column {key_column!r} has the name of a predictions column "
                           f"({', '.join(sorted(taken))}); rename it in the input")


def implied_key(schema, header: list[str]) -> str:
    """The column that identifies rows when none is named: the training schema's key, else
    the one column preparation left out as identifier-like (an id, an email); "" when none
    or several are in ``header`` (rows are then numbered)."""
    for role, note in (("key", ""), ("ignored", "identifier-like")):
        found = [c.name for c in schema.columns
                 if c.role == role and c.note.startswith(note) and c.name in header]
        if found:
            return found[0] if len(found) == 1 else ""
    return ""


def output_schema(key_column: str, classes: list[str], regression: bool = False) -> pa.Schema:
    """The predictions' columns: the key, then ``predicted_class`` and a probability per
    class, or a regressor's ``predicted_value``; then the model's name and version."""
    key = pa.field(key_column or ROW_NUMBER, pa.string() if key_column else pa.int64())
    if regression:
        return pa.schema([key, pa.field(PREDICTED_VALUE, pa.float64()),
                          pa.field("model_name", pa.string()),
                          pa.field("model_version", pa.int64())])
    return pa.schema([key, pa.field(PREDICTED_CLASS, pa.string())]
                     + [pa.field(n, pa.float32()) for n in probability_columns(classes)]
                     + [pa.field("model_name", pa.string()), pa.field("model_version", pa.int64())])


def score_stream(sources, header: list[str], profile: TrainingProfile, scorer: Scorer,
                 sink: PredictionSink, rejects: RejectsFile, tracker: DriftTracker,
                 key_column: str, model_name: str, model_version: int,
                 reject_unseen: bool = False) -> tuple[int, Counter]:
    """Score every row of ``sources`` into ``sink``; returns rows read and reject reasons."""
    schema = profile.schema
    names = scorer.names(schema)
    out_schema = output_schema(key_column, scorer.classes, scorer.regression)
    reasons: Counter = Counter()
    lock = threading.Lock()
    read = 0  # rows before the current file: parsed or not
    unparsed_lines: list[int] = []  # the current file's rows that could not be parsed

    def reject_unparsed(source_name: str, line: int, raw: bytes, reason: str) -> None:
        with lock:
            rejects.add(source_name, raw.decode("utf-8", "backslashreplace"), reason)
            reasons[reason] += 1
            unparsed_lines.append(line)

    tracker.header(header)
    for source in sources:
        unparsed_lines.clear()
        parsed = 0  # the current file's rows parsed so far
        for batch, origin in source.text_blocks(reject_unparsed):
            if batch.num_rows == 0:
                continue
            rows = type_rows(batch, schema, key_column)
            if reject_unseen:
                _reject_unseen(rows, schema)
            tracker.update(rows.numeric, rows.text, rows.kept)
            bad = np.flatnonzero(~rows.kept)
            if bad.size:
                texts = origin.raw(bad)
                texts = (row_texts(batch, bad) if texts is None else
                         [t.decode("utf-8", "backslashreplace") for t in texts])
                with lock:
                    for index, text in zip(bad, texts, strict=True):
                        reason = rows.reasons[rows.reason[index]]
                        rejects.add(source.name, text, reason)
                        reasons[reason] += 1
            keep = rows.kept
            kept_rows = int(keep.sum())
            if kept_rows:
                probs = scorer(model_inputs(rows, schema, names, keep))
                if key_column:
                    keys = rows.key.filter(pa.array(keep))
                else:
                    keys = pa.array(_row_numbers(read + parsed, origin, batch.num_rows,
                                                 unparsed_lines, lock)[keep], pa.int64())
                if scorer.regression:
                    columns = [keys, pa.array(probs.reshape(-1).astype(np.float64))]
                else:
                    columns = [keys, pa.array(np.asarray(scorer.classes, dtype=object)[
                        probs.argmax(axis=1)], pa.string())]
                    columns += [pa.array(probs[:, i], pa.float32())
                                for i in range(probs.shape[1])]
                columns += [pa.array([model_name] * kept_rows, pa.string()),
                            pa.array(np.full(kept_rows, model_version, np.int64))]
                sink.write(pa.Table.from_arrays(columns, schema=out_schema))
            parsed += batch.num_rows
        with lock:
            read += parsed + len(unparsed_lines)
    return read, reasons


def _row_numbers(first: int, origin, rows: int, unparsed_lines: list[int],
                 lock: threading.Lock) -> np.ndarray:
    """Each row's position in reading order (0-based), counting the file's rows that could
    not be parsed before it: ``first`` is the position of the block's first parsed row had
    none been set aside."""
    numbers = first + np.arange(rows, dtype=np.int64)
    with lock:
        unparsed = np.sort(np.asarray(unparsed_lines, dtype=np.int64))
    if unparsed.size:  # the origin's line numbers are only worked out when needed
        numbers += np.searchsorted(unparsed, origin.lines, side="left")
    return numbers


def _reject_unseen(rows, schema) -> None:
    import pyarrow.compute as pc

    for column in schema.features:
        if column.type == "categorical" and column.vocabulary:
            values = rows.text[column.name]
            outside = pc.and_(pc.invert(pc.is_in(values, pa.array(column.vocabulary))),
                              pc.is_valid(values))
            rows.reject(np.asarray(outside.to_numpy(zero_copy_only=False), dtype=bool),
                        f"column {column.name!r}: unseen category")


def _check_registry(registry_uri: str) -> None:
    from gkeflow.components.register.backends import backend_of
    from gkeflow.components.register.local_registry import registry_path

    if backend_of(registry_uri) == "local" and not registry_path(registry_uri).exists():
        raise PredictError(f"no local model registry at {registry_path(registry_uri)}; train "
                           "and register a model first (`gkeflow run` with the same --output)")


def predict(
    data_uri: str,
    output_uri: str,
    model: str,
    registry_uri: str,
    rejects_path: Path,
    report_path: Path,
    workdir: Path,
    model_version: int = 0,
    model_alias: str = "",
    key_column: str = "",
    default_format: str = "parquet",
    batch_rows: int = DEFAULT_BATCH_ROWS,
    max_rejected_fraction: float = 0.1,
    max_drift: float = 0.3,
    reject_unseen_categories: bool = False,
    bq_query: str = "",
    bq_filter: str = "",
    bq_write_mode: str = "truncate",
    run_id: str = "",
    model_files: tuple[Path, str] | None = None,
) -> PredictResult:
    """Score ``data_uri`` with a registered model and publish the predictions.

    Args:
        data_uri: Rows to score: local path/glob/directory, gs:// URI or glob,
            bq://project.dataset.table; CSV (optionally .gz) or Parquet.
        output_uri: Predictions: a .parquet/.csv path (local or gs://) or
            bq://project.dataset.table.
        model: ``NAME``, ``NAME@VERSION`` or ``NAME@ALIAS`` (default alias: champion).
        registry_uri: sqlite:///<path>, vertex://projects/<p>/locations/<l> or
            kubeflow://host:port.
        rejects_path: Where ``rejected.csv`` (source, reason, row) is written.
        report_path: Where the Markdown drift report is written.
        workdir: Scratch space (a gs:// model is copied here).
        model_version: A version number (0: use the alias).
        model_alias: An alias (empty: champion).
        key_column: Column identifying each row, copied to the predictions (empty: the
            row number in reading order).
        default_format: parquet or csv, when ``output_uri`` has neither extension.
        batch_rows: Rows per call of the model.
        max_rejected_fraction: Fail when more than this fraction of rows is rejected.
        max_drift: Fail when any feature column's drift (the fraction of rows with a new
            category or a number outside the training range; 1 for a missing column)
            exceeds this; 1 disables the check.
        reject_unseen_categories: Reject rows with categories the model never saw
            (otherwise they are scored through its out-of-vocabulary bucket).
        bq_query: For bq:// inputs, a SQL query to run instead of reading the table.
        bq_filter: For bq:// inputs, a row filter (the WHERE clause).
        bq_write_mode: For bq:// outputs: truncate (replace the table) or append.
        run_id: Pipeline run id: makes a retried BigQuery load find the first one.
        model_files: The registered model already on local disk, as (directory, the URI it
            was copied from): the GKE pipeline imports it as an input artifact, which the
            KFP launcher downloads from any artifact store (MinIO included). None: read the
            registered URI here (local paths and gs://).
    """
    for name, value in (("max_rejected_fraction", max_rejected_fraction),
                        ("max_drift", max_drift)):
        if not 0.0 <= value <= 1.0:
            raise PredictError(f"{name} must be in [0, 1]; got {value}")
    if batch_rows < 1:
        raise PredictError(f"batch_rows must be >= 1; got {batch_rows}")
    check_output_uri(output_uri)
    fmt = output_format(output_uri, default_format)
    ref = parse_model_ref(model, model_version, model_alias)
    sources = _sources(data_uri, bq_query, bq_filter)
    header, sources = common_header(sources)
    if key_column and key_column not in header:
        raise DataError(f"key column {key_column!r} not found; available columns: "
                        f"{', '.join(header)}")
    _check_registry(registry_uri)
    version, selected_by = resolve_version(registry_uri, ref)
    if model_files is None:
        model_dir = fetch_model(version.uri, Path(workdir))
    else:
        directory, imported_uri = model_files
        if imported_uri.rstrip("/") != version.uri.rstrip("/"):
            raise PredictError(
                f"{ref.name} ({selected_by}) is now version {version.version} at {version.uri}, "
                f"not the model imported for this run ({imported_uri}): the registry changed "
                "while the run started; run it again")
        model_dir = fetch_model(str(directory), Path(workdir))
    profile = training_profile(model_dir)
    if not key_column:
        key_column = implied_key(profile.schema, header)
    scorer = Scorer(model_dir, batch_rows)
    _check_key_name(key_column, scorer.classes)
    started = time.perf_counter()  # scoring only: the model load is not per row
    sink = PredictionSink(output_uri, fmt,
                          output_schema(key_column, scorer.classes, scorer.regression),
                          run_id=run_id, bq_write_mode=bq_write_mode)
    rejects = RejectsFile(Path(rejects_path))
    tracker = DriftTracker(profile.schema, profile.ranges, profile.missing_rates)
    try:
        try:
            rows_read, reasons = score_stream(
                sources, header, profile, scorer, sink, rejects, tracker, key_column,
                version.name, version.version, reject_unseen_categories)
        finally:
            rejects.close()
        seconds = time.perf_counter() - started
        rejected = sum(reasons.values())
        if rows_read != sink.rows + rejected:
            raise RuntimeError(f"row accounting is off: read {rows_read}, scored {sink.rows}, "
                               f"rejected {rejected}")
        result = PredictResult(
            rows_read=rows_read, rows_scored=sink.rows, rows_rejected=rejected,
            reject_reasons=dict(reasons), model_name=version.name,
            model_version=version.version, model_uri=version.uri, selected_by=selected_by,
            output_uri=output_uri, drift=tracker.metrics(), seconds=seconds,
            notes=[f"model {version.name} version {version.version}: {selected_by}",
                   f"training schema: {profile.source}", *profile.notes])
        Path(report_path).parent.mkdir(parents=True, exist_ok=True)
        Path(report_path).write_text(render_drift_report(
            tracker, max_drift, model=f"{version.name}@{version.version}", data=data_uri,
            counts={"rows_read": rows_read, "rows_scored": sink.rows,
                    "rows_rejected": rejected},
            notes=result.notes, reject_reasons=dict(reasons)), encoding="utf-8")
        if rows_read == 0:
            raise DataError(f"no rows to score in {data_uri}")
        if rejected / rows_read > max_rejected_fraction:
            raise DataError(
                f"{rejected} of {rows_read} rows rejected ({rejected / rows_read:.1%}), above "
                f"max_rejected_fraction={max_rejected_fraction:.1%}; reasons: "
                f"{dict(reasons.most_common(5))}; see {rejects_path}")
        over = tracker.over(max_drift)
        if over:
            raise DriftError(
                "schema drift above max_drift=" + f"{max_drift:.0%}" + " in "
                + ", ".join(f"{c.name!r} ({c.fraction:.1%}"
                            + (", column missing" if c.missing_column else "") + ")"
                            for c in over)
                + f"; see the report {report_path}. Fix the input, retrain on newer data, "
                  "or raise max_drift")
        sink.commit()
    except BaseException:
        sink.abort()
        raise
    return result


def publish_copy(local_file: str, output_uri: str, run_id: str = "",
                 bq_write_mode: str = "truncate") -> str:
    """Publish a predictions file (Parquet or CSV) to ``output_uri`` (any sink), streamed."""
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    source_format = output_format(local_file)
    if source_format == "parquet":
        parquet = pq.ParquetFile(local_file)
        schema, batches = parquet.schema_arrow, parquet.iter_batches(batch_size=DEFAULT_BATCH_ROWS)
    else:  # the columns' own types: a key such as "007" stays text
        import csv

        with open(local_file, encoding="utf-8", newline="") as handle:
            names = next(csv.reader(handle))
        types = {n: (pa.float32() if n.startswith("probability_") else
                     pa.int64() if n in (ROW_NUMBER, "model_version") else pa.string())
                 for n in names}
        reader = pacsv.open_csv(local_file, convert_options=pacsv.ConvertOptions(
            column_types=types, strings_can_be_null=False))
        schema, batches = reader.schema, reader
    sink = PredictionSink(output_uri, output_format(output_uri, source_format), schema,
                          run_id=run_id, bq_write_mode=bq_write_mode)
    try:
        for batch in batches:
            sink.write(pa.Table.from_batches([batch], schema=schema))
        return sink.commit()
    except BaseException:
        sink.abort()
        raise
