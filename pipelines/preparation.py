"""The preparation stage of the training and sweep pipelines: one pod, or fanned out.

``preparation:`` in gkeflow.yaml (:class:`PreparationSettings`) chooses at compile time.
One pod (the default) runs ``prepare_data``, cached on the data's fingerprint. Fan-out plans
the input files (or a ``bq://`` table's row ranges) into at most ``prepare_groups`` groups
(a run-time pipeline parameter), prepares them in parallel pods (``dsl.ParallelFor``, at
most ``parallelism`` at once) and merges them into the dataset one pod would have written;
training and evaluation read it the same way.

The choice is made when compiling rather than with ``dsl.If`` / ``dsl.OneOf`` at run time:
kfp.local cannot resolve an artifact ``OneOf`` and KFP backends before the fix of
kubeflow/pipelines#13436 always took its last branch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from kfp import dsl

from gkeflow.components import prepare_data
from gkeflow.components.prepare.fanout_component import (
    merge_prepared,
    plan_prepare,
    prepare_group,
)
from gkeflow.pipelines.fanout import DEFAULT_COMPUTE as FANOUT_COMPUTE
from gkeflow.pipelines.preparation_settings import PreparationSettings

#: Steps of the fan-out stage and their names in the Kubeflow UI.
FANOUT_DISPLAY_NAMES = {
    "plan-prepare": "Plan fan-out preparation",
    "prepare-group": "Prepare a group of files",
    "merge-prepared": "Merge prepared groups",
}
FANOUT_STEPS: Mapping = FANOUT_COMPUTE
FANOUT_COMPONENTS = {"plan-prepare": plan_prepare, "prepare-group": prepare_group,
                     "merge-prepared": merge_prepared}


ONE_POD = PreparationSettings()
__all__ = ["ONE_POD", "PreparationSettings", "prepare_stage", "preparation_steps"]


def prepare_stage(configure: Callable[[dsl.PipelineTask, str], dsl.PipelineTask], *,
                  settings: PreparationSettings, prepare_groups, arguments: dict,
                  fingerprint, workspace_path: str):
    """Add preparation to the pipeline being defined; returns (dataset, schema) channels.

    Args:
        configure: Applies a step's display name and compute.
        settings: One pod or fan-out.
        prepare_groups: The pipeline parameter bounding the groups (fan-out only).
        arguments: The prepare parameters both forms take: data_uri, label_column,
            train_ratio, eval_ratio, test_ratio, key_column, exclude_columns,
            feature_columns, shard_root.
        fingerprint: The fingerprint-data task: the input's content is the cache key.
        workspace_path: The run's workspace placeholder, or "".
    """
    fingerprinted = dict(arguments, data_fingerprint=fingerprint.outputs["data"],
                         workspace_path=workspace_path)
    if not settings.fanout:
        single = configure(prepare_data(**fingerprinted), "prepare-data")
        return single.outputs["dataset"], single.outputs["schema"]
    plan = configure(plan_prepare(**fingerprinted, max_groups=prepare_groups),
                     "plan-prepare")
    with dsl.ParallelFor(plan.outputs["Output"], parallelism=settings.parallelism,
                         name="file-groups") as group:
        part = configure(prepare_group(plan=plan.outputs["plan"], group=group,
                                       workspace_path=workspace_path), "prepare-group")
    merge = configure(merge_prepared(plan=plan.outputs["plan"],
                                     parts=dsl.Collected(part.outputs["part"])),
                      "merge-prepared")
    return merge.outputs["dataset"], merge.outputs["schema"]


def preparation_steps(settings: PreparationSettings) -> set[str]:
    """The steps the stage adds to a pipeline."""
    return set(FANOUT_STEPS) if settings.fanout else {"prepare-data"}
