"""KFP shells of fan-out preparation: plan the groups, prepare each group, merge."""

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Markdown, Output

from gkeflow.components.images import SLIM_IMAGE


@dsl.component(base_image=SLIM_IMAGE, install_kfp_package=False)
def plan_prepare(
    data_uri: str,
    label_column: str,
    plan: Output[Artifact],
    max_groups: int = 8,
    train_ratio: float = 0.7,
    eval_ratio: float = 0.15,
    test_ratio: float = 0.15,
    key_column: str = "",
    expected_schema_uri: str = "",
    reject_unseen_categories: bool = False,
    rows_per_shard: int = 250000,
    shard_root: str = "",
    exclude_columns: str = "",
    feature_columns: str = "",
    merge_label_case: bool = False,
    max_quoted_lines: int = 100,
    max_row_bytes: int = 1048576,
    data_fingerprint: str = "",
    bq_query: str = "",
    bq_filter: str = "",
    bq_min_range_rows: int = 100000,
    workspace_path: str = "",
    task: str = "auto",
) -> list[int]:
    """Fixes the schema from a sample of the input and deals the input into groups.

    Args:
        data_uri: Local path or glob, or gs://bucket/path (globs allowed): CSV (optionally
            .gz) or Parquet files; or bq://project.dataset.table, split into row ranges.
        label_column: Column holding the class to predict.
        plan: plan.json: the fixed schema, the files and their groups, the shard root.
        max_groups: Most groups (parallel preparation pods), at most 100.
        train_ratio: Fraction of rows for training.
        eval_ratio: Fraction of rows for validation during training.
        test_ratio: Fraction of rows held out for evaluation.
        key_column: Split by a stable hash of this column; empty: hash of the whole row.
        expected_schema_uri: A previous schema.json or a YAML schema to validate against;
            empty: infer the schema from the first rows.
        reject_unseen_categories: Reject rows with categories outside the expected schema.
        rows_per_shard: Rows per TFRecord shard file.
        shard_root: gs:// prefix (or local directory) for the shards; empty: next to the
            plan artifact when the pipeline root is gs:// or local, else inside each part.
        exclude_columns: Columns never used as features, comma-separated.
        feature_columns: The only feature columns, comma-separated; empty: inferred
            (constant and identifier-like columns are left out, with the reason in the report).
        merge_label_case: Lower-case the label values, so "yes" and "YES" are one class.
        max_quoted_lines: Lines a quoted CSV value may span; beyond, only the line where
            the quote opened is rejected and reading resumes at the next line.
        max_row_bytes: Bytes a CSV row may take; longer rows are rejected.
        data_fingerprint: Fingerprint of the input's content (from fingerprint_data); not
            read, it makes the step's cache key follow the data rather than its URI.
        bq_query: For bq:// sources: a SQL query to read instead of the whole table (read
            by one group).
        bq_filter: For bq:// sources: a SQL row filter (WHERE clause) on the table (read
            by one group).
        bq_min_range_rows: For bq:// tables: the fewest rows a group's range holds.
        workspace_path: The run's workspace (dsl.WORKSPACE_PATH_PLACEHOLDER on GKE with a
            root other than gs://): the shards go there when shard_root is empty.
        task: auto (from the label's values), classification or regression.

    Returns:
        The group indices, for dsl.ParallelFor.
    """
    from pathlib import Path

    from gkeflow.components.prepare.fanout import plan_groups
    from gkeflow.components.prepare.logic import SplitRatios, fetch_schema
    from gkeflow.components.prepare.shard_store import resolve_shard_root

    groups = plan_groups(
        data_uri, Path(plan.path), label_column, max_groups,
        ratios=SplitRatios(train_ratio, eval_ratio, test_ratio), key_column=key_column,
        expected_schema=fetch_schema(expected_schema_uri) if expected_schema_uri else None,
        reject_unseen_categories=reject_unseen_categories, rows_per_shard=rows_per_shard,
        shard_root=resolve_shard_root(plan.uri, shard_root, workspace=workspace_path),
        exclude_columns=exclude_columns, feature_columns=feature_columns,
        merge_label_case=merge_label_case, max_quoted_lines=max_quoted_lines,
        max_row_bytes=max_row_bytes, bq_query=bq_query, bq_filter=bq_filter,
        min_range_rows=bq_min_range_rows, task=task,
    )
    plan.metadata["groups"] = len(groups)
    print(f"{len(groups)} groups")
    return groups


@dsl.component(base_image=SLIM_IMAGE, install_kfp_package=False)
def prepare_group(plan: Input[Artifact], group: int, part: Output[Artifact],
                  workspace_path: str = ""):
    """Prepares one group of input files against the plan's fixed schema.

    Args:
        plan: The plan from plan_prepare.
        group: Index of the group to prepare.
        part: part.json (row counts, mergeable statistics, shard list), rejected.csv and
            rejected.jsonl.
        workspace_path: The run's workspace when the plan's shard root is in it (the
            placeholder mounts it in this step); not read otherwise.
    """
    from pathlib import Path

    from gkeflow.components.prepare.fanout import prepare_group as run

    summary = run(Path(plan.path), group, Path(part.path))
    part.metadata.update(summary)
    print(summary)


@dsl.component(base_image=SLIM_IMAGE, install_kfp_package=False)
def merge_prepared(
    plan: Input[Artifact],
    parts: Input[list[Artifact]],
    dataset: Output[Dataset],
    schema: Output[Artifact],
    report: Output[Markdown],
    rejected: Output[Dataset],
    max_rejected_fraction: float = 0.1,
    max_missing_fraction: float = 1.0,
    data_fingerprint: str = "",
):
    """Merges the groups into one dataset, as a single-pod prepare_data would write it.

    Args:
        plan: The plan from plan_prepare.
        parts: Every group's part.
        dataset: schema.json, stats.json, rejected.csv, rejected.jsonl, report.md and the
            shards (or their manifest, shards.json).
        schema: schema.json: each column's type, role, vocabulary and nullability.
        report: Data report: row counts, problems found, per-column statistics.
        rejected: CSV of the rejected rows: source file, line number, reason, the row's
            original text (and its bytes in base64 when they are not valid UTF-8).
        max_rejected_fraction: Fail when more than this fraction of rows is rejected.
        max_missing_fraction: Fail when a feature column misses more than this fraction.
        data_fingerprint: Fingerprint of the input's content (from fingerprint_data), logged
            with the preparation where the run is tracked.
    """
    import json
    import shutil
    from pathlib import Path

    from gkeflow.components.prepare.fanout import merge_groups
    from gkeflow.components.prepare.logic import REJECTED_FILE, REPORT_FILE, SCHEMA_FILE

    result = merge_groups(Path(plan.path), [Path(p.path) for p in parts], Path(dataset.path),
                          max_rejected_fraction, max_missing_fraction)
    for artifact, name in ((schema, SCHEMA_FILE), (report, REPORT_FILE),
                           (rejected, REJECTED_FILE)):
        Path(artifact.path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(dataset.path) / name, artifact.path)
    dataset.metadata.update({
        "rows_read": result.rows_read,
        "rejected_rows": result.rejected_rows,
        **{f"{name}_rows": count for name, count in result.split_rows.items()},
        **{f"{name}_shards": count for name, count in result.shards.items()},
        "format": "tfrecord-gzip-column-blocks",
    })
    rejected.metadata.update({"rows": result.rejected_rows,
                              "reasons": dict(result.rejected_reasons)})
    schema.metadata.update({"label": result.schema.label,
                            "classes": len(result.schema.label_vocabulary),
                            "features": len(result.schema.features)})
    print(f"rows read {result.rows_read}: {result.split_rows}, rejected {result.rejected_rows}"
          f" {result.rejected_reasons}")
    for problem in result.problems:
        print(f"problem: {problem}")
    from gkeflow.components.prepare.fanout import PLAN_FILE
    from gkeflow.components.tracking.steps import track_preparation

    source = json.loads((Path(plan.path) / PLAN_FILE).read_text(encoding="utf-8"))["source"]
    track_preparation(result, source, result.schema.label, data_fingerprint,
                      step="merge-prepared")
