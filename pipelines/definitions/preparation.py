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

from gkeflow.components import fingerprint_data, prepare_data
from gkeflow.components.prepare.fanout_component import (
    merge_prepared,
    plan_prepare,
    prepare_group,
)
from gkeflow.pipelines.definitions.fanout import DEFAULT_COMPUTE as FANOUT_COMPUTE
from gkeflow.pipelines.settings.preparation_settings import PreparationSettings

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


#: The pipeline parameters both forms of preparation take, by name.
PREPARE_PARAMETERS = ("data_uri", "label_column", "train_ratio", "eval_ratio", "test_ratio",
                      "key_column", "exclude_columns", "feature_columns", "shard_root", "task")


def prepare_stage(configure: Callable[[dsl.PipelineTask, str], dsl.PipelineTask], *,
                  settings: PreparationSettings, scope: Mapping, workspace_path: str):
    """Add fingerprinting and preparation to the pipeline being defined.

    Args:
        configure: Applies a step's display name and compute.
        settings: One pod or fan-out.
        scope: The pipeline function's parameters (its ``locals()``): those named in
            :data:`PREPARE_PARAMETERS`, ``user_module``, ``max_rejected_fraction`` and
            ``prepare_groups`` (the most groups, fan-out only).
        workspace_path: The run's workspace placeholder, or "".

    Returns:
        The fingerprint-data task (its outputs key caches and checkpoints on the data's
        content) and the dataset and schema channels training and evaluation read.
    """
    fingerprint = configure(fingerprint_data(data_uri=scope["data_uri"],
                                             user_module=scope["user_module"]),
                            "fingerprint-data")
    arguments = {name: scope[name] for name in PREPARE_PARAMETERS}
    fingerprinted = dict(arguments, data_fingerprint=fingerprint.outputs["data"],
                         workspace_path=workspace_path)
    if not settings.fanout:
        single = configure(prepare_data(**fingerprinted,
                                        max_rejected_fraction=scope["max_rejected_fraction"]),
                           "prepare-data")
        return fingerprint, single.outputs["dataset"], single.outputs["schema"]
    plan = configure(plan_prepare(**fingerprinted, max_groups=scope["prepare_groups"]),
                     "plan-prepare")
    with dsl.ParallelFor(plan.outputs["Output"], parallelism=settings.parallelism,
                         name="file-groups") as group:
        part = configure(prepare_group(plan=plan.outputs["plan"], group=group,
                                       workspace_path=workspace_path), "prepare-group")
    merge = configure(merge_prepared(plan=plan.outputs["plan"],
                                     parts=dsl.Collected(part.outputs["part"]),
                                     data_fingerprint=fingerprint.outputs["data"],
                                     max_rejected_fraction=scope["max_rejected_fraction"]),
                      "merge-prepared")
    return fingerprint, merge.outputs["dataset"], merge.outputs["schema"]


def preparation_steps(settings: PreparationSettings) -> set[str]:
    """The steps the stage adds to a pipeline."""
    return set(FANOUT_STEPS) if settings.fanout else {"prepare-data"}
