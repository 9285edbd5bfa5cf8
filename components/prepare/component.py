"""KFP shell of the data-preparation step."""

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Markdown, Output

from gkeflow.components.images import SLIM_IMAGE


@dsl.component(base_image=SLIM_IMAGE, install_kfp_package=False)
def prepare_data(
    data_uri: str,
    label_column: str,
    dataset: Output[Dataset],
    schema: Output[Artifact],
    report: Output[Markdown],
    rejected: Output[Dataset],
    train_ratio: float = 0.7,
    eval_ratio: float = 0.15,
    test_ratio: float = 0.15,
    max_rejected_fraction: float = 0.1,
    key_column: str = "",
    expected_schema_uri: str = "",
    max_missing_fraction: float = 1.0,
    reject_unseen_categories: bool = False,
    bq_query: str = "",
    bq_filter: str = "",
    rows_per_shard: int = 250000,
    exclude_columns: str = "",
    feature_columns: str = "",
    merge_label_case: bool = False,
    max_quoted_lines: int = 100,
    max_row_bytes: int = 1048576,
    data_fingerprint: str = "",
    shard_root: str = "",
    workspace_path: str = "",
    task: str = "auto",
):
    """Streams tabular data into validated, deterministic train/eval/test TFRecord splits.

    Rows that cannot be parsed or fail validation are kept aside in the rejected output
    with their reason, never dropped silently: rows read = train + eval + test + rejected.

    Args:
        data_uri: Local path or glob, gs://bucket/path (globs allowed), bq://project.dataset.table,
            or embedded://penguins (bundled data). CSV (optionally .gz) or Parquet.
        label_column: Column holding the class or the number to predict.
        dataset: train/, eval/, test/ (GZIP TFRecord shards of column blocks), schema.json,
            stats.json, rejected.csv, rejected.jsonl and report.md.
        schema: schema.json: each column's type, role, vocabulary and nullability.
        report: Data report: row counts, problems found, per-column statistics.
        rejected: CSV of the rejected rows: source file, line number, reason, the row's
            original text (and its bytes in base64 when they are not valid UTF-8).
        train_ratio: Fraction of rows for training.
        eval_ratio: Fraction of rows for validation during training.
        test_ratio: Fraction of rows held out for evaluation.
        max_rejected_fraction: Fail when more than this fraction of rows is rejected.
        key_column: Split by a stable hash of this column (rows sharing a key share a
            split); its role is key (not a feature unless in feature_columns). Empty: hash
            of the whole row.
        expected_schema_uri: A previous schema.json or a YAML schema to validate against
            (local path or gs://); empty: infer the schema.
        max_missing_fraction: Fail when a feature column misses more than this fraction.
        reject_unseen_categories: Reject rows with categories outside the expected schema.
        bq_query: For bq:// sources: a SQL query to read instead of the whole table.
        bq_filter: For bq:// sources: a SQL row filter (WHERE clause) on the table.
        rows_per_shard: Rows per TFRecord shard file.
        exclude_columns: Columns never used as features, comma-separated.
        feature_columns: The only feature columns, comma-separated; empty: inferred
            (constant and identifier-like columns are left out, with the reason in the report).
        merge_label_case: Lower-case the label values, so "yes" and "YES" are one class.
        max_quoted_lines: Lines a quoted CSV value may span; beyond, only the line where
            the quote opened is rejected and reading resumes at the next line.
        max_row_bytes: Bytes a CSV row may take; longer rows are rejected.
        data_fingerprint: Fingerprint of the input's content (from fingerprint_data); not
            read, it makes the step's cache key follow the data rather than its URI.
        shard_root: gs:// prefix (or local directory) for the shards; the dataset output
            then holds only their manifest (shards.json), so no step stages the shards on
            its disk. Empty: next to the dataset artifact when the pipeline root is gs://
            or local, inside it otherwise (e.g. a MinIO root).
        workspace_path: The run's workspace (dsl.WORKSPACE_PATH_PLACEHOLDER on GKE with a
            root other than gs://): the shards go there when shard_root is empty; "" = none.
        task: auto (numbers with many distinct values: regression; text, true/false or few
            whole numbers: classification), classification or regression.
    """
    import shutil
    from pathlib import Path

    from gkeflow.components.prepare.logic import (
        REJECTED_FILE,
        REPORT_FILE,
        SCHEMA_FILE,
        SplitRatios,
        fetch_schema,
        prepare,
    )
    from gkeflow.components.prepare.shard_store import resolve_shard_root

    result = prepare(
        source=data_uri,
        output_dir=Path(dataset.path),
        label_column=label_column,
        ratios=SplitRatios(train_ratio, eval_ratio, test_ratio),
        max_rejected_fraction=max_rejected_fraction,
        key_column=key_column,
        expected_schema=fetch_schema(expected_schema_uri) if expected_schema_uri else None,
        max_missing_fraction=max_missing_fraction,
        reject_unseen_categories=reject_unseen_categories,
        bq_query=bq_query,
        bq_filter=bq_filter,
        rows_per_shard=rows_per_shard,
        exclude_columns=exclude_columns,
        feature_columns=feature_columns,
        merge_label_case=merge_label_case,
        max_quoted_lines=max_quoted_lines,
        max_row_bytes=max_row_bytes,
        shard_root=resolve_shard_root(dataset.uri, shard_root, workspace=workspace_path),
        task=task,
    )
    for artifact, name in ((schema, SCHEMA_FILE), (report, REPORT_FILE),
                           (rejected, REJECTED_FILE)):
        Path(artifact.path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(dataset.path) / name, artifact.path)
    dataset.metadata.update(
        {
            "rows_read": result.rows_read,
            "rejected_rows": result.rejected_rows,
            **{f"{name}_rows": count for name, count in result.split_rows.items()},
            **{f"{name}_shards": count for name, count in result.shards.items()},
            "format": "tfrecord-gzip-column-blocks",
        }
    )
    rejected.metadata.update(
        {"rows": result.rejected_rows, "reasons": dict(result.rejected_reasons)}
    )
    schema.metadata.update(
        {
            "label": result.schema.label,
            "task": result.schema.task,
            "classes": len(result.schema.label_vocabulary),
            "features": len(result.schema.features),
        }
    )
    print(f"task: {result.schema.task} ({result.schema.task_reason})")
    print(f"rows read {result.rows_read}: {result.split_rows}, rejected {result.rejected_rows}"
          f" {result.rejected_reasons}")
    from gkeflow.components.progress import say

    shown = 5  # problems the log and `gkeflow run` show; the data report lists them all
    for problem in result.problems[:shown]:
        say(f"problem: {problem}")
    if len(result.problems) > shown:
        say(f"... and {len(result.problems) - shown} more problems in the data report")
    from gkeflow.components.tracking.steps import track_preparation

    track_preparation(result, data_uri, label_column, data_fingerprint)
