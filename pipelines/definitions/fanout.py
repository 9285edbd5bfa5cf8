"""Fan-out data preparation: one plan step, up to ``groups`` preparation pods in parallel
(``dsl.ParallelFor`` with bounded ``parallelism``), one merge step.

The merged dataset is the one a single ``prepare_data`` step writes from the same files
(same split of every row, same schema, same statistics up to floating-point summation
order); its shards stay in the shard root (only manifests pass through the artifact
store). ``fanout_prepare_pipeline`` runs on its own, or as a sub-pipeline whose
``dataset`` and ``schema`` outputs feed ``train_model`` and ``evaluate_model``. Submitted
on its own with notifications, its steps run inside the exit handler that notifies (with
the run's list-price cost) and it returns nothing: KFP refuses pipeline outputs from inside
an exit handler, and the merged dataset stays merge-prepared's output artifact.
"""

import functools
import inspect
from collections.abc import Mapping
from typing import Optional

from kfp import dsl

from gkeflow.components.prepare.fanout_component import (
    merge_prepared,
    plan_prepare,
    prepare_group,
)
from gkeflow.pipelines.compute import lustre as lustre_mounts
from gkeflow.pipelines.compute.gcsfuse import apply_gcsfuse
from gkeflow.pipelines.compute.profiles import (
    ComputeError,
    ComputeProfile,
    apply_compute,
    validate_profiles,
)
from gkeflow.pipelines.compute.workspace import PipelineStorage
from gkeflow.pipelines.definitions.operations import Operations
from gkeflow.pipelines.settings.gcsfuse_config import GcsFuseSettings
from gkeflow.pipelines.settings.lustre_config import LustreSettings
from gkeflow.pipelines.settings.preparation_settings import MAX_PARALLEL
from gkeflow.pipelines.settings.workspace_config import WorkspaceSettings

PIPELINE_NAME = "gkeflow-fanout-prepare"

#: Per-step compute. A group pod needs the CPU/memory of one prepare_data pod; it writes its
#: shards straight to the shard root, so its disk holds only rejected rows and part.json.
DEFAULT_COMPUTE: Mapping[str, ComputeProfile] = {
    "plan-prepare": ComputeProfile(cpu="1", memory="2G", caching=False, timeout_s=1800),
    "prepare-group": ComputeProfile(cpu="2", memory="8G", caching=False, timeout_s=3600,
                                    retries=2, retry_backoff_s=30, retry_backoff_factor=2.0,
                                    retry_max_duration_s=3600),
    "merge-prepared": ComputeProfile(cpu="1", memory="4G", caching=False, timeout_s=1800),
}


def resolve_compute(target: str, compute: Optional[Mapping[str, ComputeProfile]] = None
                    ) -> dict[str, ComputeProfile]:
    """Per-step profiles (defaults, then this pipeline's steps in ``compute``), validated."""
    profiles = {**DEFAULT_COMPUTE,
                **{k: v for k, v in (compute or {}).items() if k in DEFAULT_COMPUTE}}
    validate_profiles(profiles, target)
    return profiles


def step_images() -> dict[str, str]:
    """Step -> the image its component runs in."""
    steps = {"plan-prepare": plan_prepare, "prepare-group": prepare_group,
             "merge-prepared": merge_prepared}
    return {step: c.component_spec.implementation.container.image for step, c in steps.items()}


def build_fanout_pipeline(target: str = "local",
                          compute: Optional[Mapping[str, ComputeProfile]] = None,
                          parallelism: int = MAX_PARALLEL,
                          workspace: Optional[WorkspaceSettings] = None,
                          operations: Optional[Operations] = None,
                          gcsfuse: Optional[GcsFuseSettings] = None,
                          lustre: Optional[LustreSettings] = None):
    """Define ``fanout_prepare_pipeline`` with each step's compute applied for ``target``
    (``compute`` may hold other pipelines' steps too: only this pipeline's are used) and
    the retention and notifications of ``operations``: with notifications it returns nothing
    (see the module's docstring)."""
    profiles = resolve_compute(target, compute)
    if problem := lustre_mounts.check_target(lustre, target):
        raise ComputeError(problem)
    storage = PipelineStorage(target, workspace)
    operations = (operations or Operations(target)).priced(profiles)

    def configure(task: dsl.PipelineTask, step: str) -> dsl.PipelineTask:
        apply_gcsfuse(task, step, gcsfuse, target)  # the buckets the step uses
        lustre_mounts.apply_lustre(task, step, lustre, target)  # and Lustre instances
        return apply_compute(task, profiles[step], target, step)

    def fanout_prepare_pipeline(
        data_uri: str,
        label_column: str,
        max_groups: int = 8,
        train_ratio: float = 0.7,
        eval_ratio: float = 0.15,
        test_ratio: float = 0.15,
        key_column: str = "",
        max_rejected_fraction: float = 0.1,
        rows_per_shard: int = 250000,
        shard_root: str = "",
        exclude_columns: str = "",
        feature_columns: str = "",
        merge_label_case: bool = False,
        expected_schema_uri: str = "",
        reject_unseen_categories: bool = False,
        max_missing_fraction: float = 1.0,
        max_quoted_lines: int = 100,
        max_row_bytes: int = 1048576,
        data_fingerprint: str = "",
        bq_query: str = "",
        bq_filter: str = "",
        bq_min_range_rows: int = 100000,
        task: str = "auto",
    ) -> dsl.Dataset:
        """Prepares many input files (or a BigQuery table's row ranges) in parallel pods and
        merges them into one dataset.

        Args:
            data_uri: Glob or prefix of CSV/Parquet files, local or gs://; or
                bq://project.dataset.table, read in row ranges by the parallel pods.
            label_column: Column holding the class (or the number) to predict.
            max_groups: Most groups of input files (at most 100).
            train_ratio: Fraction of rows for training.
            eval_ratio: Fraction of rows for validation during training.
            test_ratio: Fraction of rows held out for evaluation.
            key_column: Split by a stable hash of this column; empty: of the whole row.
            max_rejected_fraction: Fail when more than this fraction of rows is rejected.
            rows_per_shard: Rows per TFRecord shard file.
            shard_root: gs:// prefix for the shards; empty: next to the artifacts.
            exclude_columns: Columns never used as features, comma-separated.
            feature_columns: The only feature columns, comma-separated; empty: inferred.
            merge_label_case: Lower-case the label values, so "yes" and "YES" are one class.
            expected_schema_uri: A previous schema.json or a YAML schema to validate
                against; empty: infer the schema from the first rows.
            reject_unseen_categories: Reject rows with categories outside the expected
                schema.
            max_missing_fraction: Fail when a feature column misses more than this fraction.
            max_quoted_lines: Lines a quoted CSV value may span; beyond, only the line
                where the quote opened is rejected and reading resumes at the next line.
            max_row_bytes: Bytes a CSV row may take; longer rows are rejected.
            data_fingerprint: Fingerprint of the input's content (from fingerprint_data);
                not read, it makes the plan's cache key follow the data.
            bq_query: For bq:// sources: a SQL query to read instead of the whole table
                (read by one pod).
            bq_filter: For bq:// sources: a SQL row filter (WHERE clause) on the table (read
                by one pod).
            bq_min_range_rows: For bq:// tables: the fewest rows one pod's range holds.
            task: auto (from the label's values), classification or regression.
        """
        plan = configure(plan_prepare(
            data_uri=data_uri, label_column=label_column, max_groups=max_groups,
            train_ratio=train_ratio, eval_ratio=eval_ratio, test_ratio=test_ratio,
            key_column=key_column, rows_per_shard=rows_per_shard, shard_root=shard_root,
            exclude_columns=exclude_columns, feature_columns=feature_columns,
            merge_label_case=merge_label_case, expected_schema_uri=expected_schema_uri,
            reject_unseen_categories=reject_unseen_categories,
            max_quoted_lines=max_quoted_lines, max_row_bytes=max_row_bytes,
            data_fingerprint=data_fingerprint, bq_query=bq_query, bq_filter=bq_filter,
            bq_min_range_rows=bq_min_range_rows, workspace_path=storage.path, task=task,
        ), "plan-prepare")
        with dsl.ParallelFor(plan.outputs["Output"], parallelism=parallelism) as group:
            part = configure(prepare_group(plan=plan.outputs["plan"], group=group,
                                           workspace_path=storage.path), "prepare-group")
        merge = configure(merge_prepared(
            plan=plan.outputs["plan"], parts=dsl.Collected(part.outputs["part"]),
            max_rejected_fraction=max_rejected_fraction,
            max_missing_fraction=max_missing_fraction,
        ), "merge-prepared")
        return merge.outputs["dataset"]

    if operations.notifications is not None:
        fanout_prepare_pipeline = operations.wrap(PIPELINE_NAME)(
            _without_output(fanout_prepare_pipeline))
    return dsl.pipeline(name=PIPELINE_NAME,
                        pipeline_config=operations.pipeline_config(storage.config())
                        )(fanout_prepare_pipeline)


def _without_output(func):
    """``func`` returning nothing, with its signature less the return annotation."""
    @functools.wraps(func)
    def steps(*args, **kwargs) -> None:
        func(*args, **kwargs)

    steps.__signature__ = inspect.signature(func).replace(
        return_annotation=inspect.Signature.empty)
    return steps


#: The pipeline as ``kfp.local`` runs it.
fanout_prepare_pipeline = build_fanout_pipeline("local")
