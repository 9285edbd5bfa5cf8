"""Data preparation: stream a source, validate it, split it deterministically, quarantine bad rows.

Plain functions over paths and primitives; the KFP component in ``component.py``
is a thin shell around :func:`prepare`. The stages, one module each:

- ``sources``: input files by URI (local, gs://, Parquet, embedded); ``bigquery``;
- ``csv_rows`` and ``csv_reader``: CSV rows cut from the raw bytes (broken quoting
  recovered line by line), then parsed by Arrow; each row keeps its line number and
  original bytes;
- ``schema``: the dataset :class:`Schema` every stage reads; ``infer``: types and column
  roles from a sample, or validation against an expected schema;
- ``values`` and ``batch``: a record batch typed per the schema, a rejection reason per row;
- ``splits``: the deterministic split by a stable row hash;
- ``stream``: the parallel pass that types, splits, counts and writes each block;
- ``records``, ``stats``, ``rejects``, ``report``: the outputs.

Every row read lands in train, eval or test, or in ``rejected.csv``/``rejected.jsonl``
with its reason: ``rows read = train + eval + test + rejected``. Everything is written
aside and published with one rename, so a failed or killed step never leaves a split that
looks complete.

Output layout (the ``dataset`` artifact)::

    train/part-*.tfrecord.gz   eval/...   test/...   (see gkeflow.components.prepare.records)
    schema.json  stats.json  rejected.csv  rejected.jsonl  report.md

The names other modules import from here (``Schema``, ``SplitRatios``,
``prepare``...) stay importable from this module. Closing a dataset once every row is
counted (vocabularies, whole-file checks, problems, stats.json) is ``finish``, shared with
the fan-out merge.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from gkeflow.components._atomic import publish_dir
from gkeflow.components.prepare.batch import Plan
from gkeflow.components.prepare.csv_reader import RowLimits
from gkeflow.components.prepare.finish import (
    check_splits,
    finish_dataset,
    reason_summary,
    reject_samples,
    strict_json,
)
from gkeflow.components.prepare.infer import (
    SAMPLE_ROWS,
    apply_column_roles,
    check_column_names,
    infer_from_table,
    infer_schema,
    sample_table,
    validate_against,
)
from gkeflow.components.prepare.rejects import REJECTED_FILE, REJECTED_JSONL, RejectLog
from gkeflow.components.prepare.schema import SCHEMA_FILE, ColumnSchema, Schema
from gkeflow.components.prepare.sources import (
    EMBEDDED_PENGUINS,
    NULL_VALUES,
    DataError,
    Source,
    common_header,
    resolve_sources,
)
from gkeflow.components.prepare.splits import (
    SPLITS,
    SplitRatios,
    assign_splits,
    combine_hashes,
    hash_categorical,
    hash_numeric,
    hash_text,
    splits_from_hashes,
)
from gkeflow.components.prepare.stream import new_stats, process_source
from gkeflow.components.prepare.task import decide_task, task_summary

STATS_FILE = "stats.json"
REPORT_FILE = "report.md"
ROWS_PER_SHARD = 250_000
DEFAULT_RATIOS = SplitRatios()


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


# --- the step ------------------------------------------------------------------------------

def sample_rows(sources: list[Source], problems: list[str]) -> tuple[list[str], pa.Table, list]:
    """The header, the first rows (for type inference) and the non-empty sources."""
    header, usable = common_header(
        sources, lambda source: problems.append(f"{source.name}: empty file, no rows"))
    batches, rows = [], 0
    unparsed: list[tuple[str, str]] = []  # (reason, text) of rows the reader set aside
    for source in usable:
        try:
            for batch in source.batches(lambda _, text, reason: unparsed.append((reason, text)),
                                        prefetch=False):
                batches.append((source.name, batch))
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
        table = sample_table(batches).slice(0, SAMPLE_ROWS)
    elif not unparsed:
        raise DataError(f"data has a header but no data rows: {', '.join(s.name for s in sources)}")
    else:
        samples = "\n".join(f"  {reason}: {text[:120]}" for reason, text in unparsed[:5])
        raise DataError(
            f"no usable rows: all {len(unparsed)} rows were rejected\nsample rows:\n{samples}"
        )
    return header, table, usable


def fix_schema(header, sample, label_column: str, expected_schema: Schema | None,
               key_column: str, exclude_columns: str, feature_columns: str,
               max_vocabulary: int, problems: list[str], task: str = "auto") -> Schema:
    """The schema every row is prepared against, fixed from the sampled rows: ``expected_schema``
    validated against them, or inferred; column roles applied; the task (``auto``,
    ``classification`` or ``regression``, see :mod:`~gkeflow.components.prepare.task`)
    decided from the sampled labels. One definition for the single-pod run, the fan-out plan
    and the run's pre-flight check, so all fix the same schema from the same sample.

    Raises:
        DataError: a named column is missing, no usable feature is left, or the label is
            one neither task can learn.
    """
    check_column_names(header, label_column, key_column, exclude_columns, feature_columns)
    if expected_schema is not None:
        schema, found = validate_against(expected_schema, header, sample, label_column)
        problems.extend(found)
        if task == "auto":
            task = expected_schema.task
    else:
        schema = infer_from_table(sample, label_column, max_vocabulary)
    choice = decide_task(sample.column(label_column), task, label_column)
    schema.task, schema.task_reason = choice.task, choice.reason
    if schema.regression:
        label = schema.column(label_column)
        label.type, label.vocabulary = "numeric", []
        schema.label_vocabulary = []
    apply_column_roles(schema, key_column, exclude_columns, feature_columns)
    if not schema.features:
        raise DataError(
            "no usable feature columns besides the label; "
            + "; ".join(f"{c.name}: {c.note}" for c in schema.columns if c.role == "ignored")
            + " (name the features with feature_columns to override)")
    return schema



def prepare(
    source: str,
    output_dir: Path,
    label_column: str,
    ratios: SplitRatios = DEFAULT_RATIOS,
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
    exclude_columns: str | list[str] = "",
    feature_columns: str | list[str] = "",
    merge_label_case: bool = False,
    max_quoted_lines: int = RowLimits.max_quoted_lines,
    max_row_bytes: int = RowLimits.max_row_bytes,
    shard_root: str = "",
    task: str = "auto",
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
        exclude_columns: Columns never used as features (comma-separated or a list).
        feature_columns: The only columns used as features (comma-separated or a list);
            empty: inferred (constant and identifier-like columns are left out).
        merge_label_case: Lower-case label values, so ``yes`` and ``YES`` are one class
            (otherwise such values are reported as a problem).
        max_quoted_lines: Lines a quoted CSV value may span before the line where its
            quote opened is rejected as an unclosed quote (reading resumes after it).
        max_row_bytes: Bytes a CSV row may take; longer rows are rejected.
        shard_root: Write the shards there (a gs:// URI or a local directory, see
            ``shard_store``) and only their manifest into ``output_dir``; empty: the
            shards go inside ``output_dir``.
        task: auto (from the label's values), classification or regression; a regression
            label is a number, and rows whose label is missing or no number are rejected.

    Raises:
        DataError: for whole-file problems only: unknown column names, no usable rows,
            more rejected rows than ``max_rejected_fraction``, an unreadable file.
    """
    if not 0.0 <= max_rejected_fraction <= 1.0:
        raise ValueError(f"max_rejected_fraction must be in [0, 1]; got {max_rejected_fraction}")
    if not 0.0 <= max_missing_fraction <= 1.0:
        raise ValueError(f"max_missing_fraction must be in [0, 1]; got {max_missing_fraction}")
    if rows_per_shard < 1:
        raise ValueError(f"rows_per_shard must be >= 1; got {rows_per_shard}")
    limits = RowLimits(max_quoted_lines, max_row_bytes)
    if source.startswith("bq://"):
        from gkeflow.components.prepare.bigquery import bigquery_sources

        sources = bigquery_sources(source, query=bq_query, row_filter=bq_filter)
    else:
        if bq_query or bq_filter:
            raise DataError("bq_query and bq_filter apply only to bq:// sources")
        sources = resolve_sources(source)
    for item in sources:
        if hasattr(item, "limits"):
            item.limits = limits

    problems: list[str] = []
    header, sample, sources = sample_rows(sources, problems)
    if expected_schema is not None and not isinstance(expected_schema, Schema):
        expected_schema = Schema.load(Path(expected_schema))
    schema = fix_schema(header, sample, label_column, expected_schema, key_column,
                        exclude_columns, feature_columns, max_vocabulary, problems, task)
    plan = Plan(schema, header, ratios, key_column, fixed_labels=expected_schema is not None,
                 reject_unseen=reject_unseen_categories and expected_schema is not None,
                 rows_per_shard=rows_per_shard, lower_labels=merge_label_case)
    workers = workers or os.cpu_count() or 1

    with publish_dir(output_dir) as scratch:
        rejects = RejectLog(scratch)
        try:
            parallel_files = max(1, min(workers, len(sources)))
            lanes = max(1, workers // parallel_files)
            with ThreadPoolExecutor(max_workers=parallel_files) as pool:
                partials = [p for per_file in pool.map(
                    lambda item: process_source(item[0], item[1], plan, shard_root or scratch,
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
                f"({reason_summary(rejects)})\n{reject_samples(rejects)}"
            )
        stats = new_stats(schema)
        unseen: Counter = Counter()
        nonfinite: Counter = Counter()
        for partial in partials:
            unseen.update(partial.unseen)
            nonfinite.update(partial.nonfinite)
            for split in SPLITS:
                for name, column_stats in partial.stats[split].items():
                    stats[split][name].merge(column_stats)
        stats_doc = finish_dataset(schema, stats, rows_read, split_rows, rejects, unseen,
                                   nonfinite, problems, inferred=expected_schema is None,
                                   max_vocabulary=max_vocabulary,
                                   reject_unseen=plan.reject_unseen,
                                   max_rejected_fraction=max_rejected_fraction,
                                   max_missing_fraction=max_missing_fraction)
        check_splits(split_rows, bool(key_column))
        stats_doc["task"] = task_summary(schema, sample)
        shards = {s: sum(len(p.shards.get(s, ())) for p in partials) for s in SPLITS}
        if shard_root:
            from gkeflow.components.prepare.shard_store import write_manifest

            write_manifest(scratch, shard_root, {
                s: [f for p in partials for f in p.shards.get(s, ())] for s in SPLITS})
        (scratch / "schema.json").write_text(schema.to_json(), encoding="utf-8")
        stats_doc = strict_json(stats_doc)
        (scratch / STATS_FILE).write_text(json.dumps(stats_doc, indent=2, allow_nan=False),
                                          encoding="utf-8")
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
    from gkeflow.components.prepare.sources import GS, gcs_client

    match = GS.match(uri)
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


__all__ = [
    "EMBEDDED_PENGUINS",
    "NULL_VALUES",
    "REJECTED_FILE",
    "REJECTED_JSONL",
    "REPORT_FILE",
    "SCHEMA_FILE",
    "SPLITS",
    "STATS_FILE",
    "Source",
    "hash_text",
    "combine_hashes",
    "fetch_schema",
    "hash_categorical",
    "hash_numeric",
    "splits_from_hashes",
    "validate_against",
    "ColumnSchema",
    "DataError",
    "PrepareResult",
    "Schema",
    "SplitRatios",
    "assign_splits",
    "infer_schema",
    "prepare",
    "resolve_source",
]


def resolve_source(source: str) -> Path:
    """The local path of a single-file source (``embedded://penguins`` included)."""
    sources = resolve_sources(source)
    if len(sources) != 1 or sources[0].name.startswith("gs://"):
        raise DataError(f"{source!r} is not a single local file")
    return Path(sources[0].name)
