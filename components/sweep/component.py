"""KFP shell of the sweep's selection step."""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Input, Markdown, Model, Output

from gkeflow.components.images import SLIM_IMAGE


@dsl.component(base_image=SLIM_IMAGE, install_kfp_package=False)
def select_best_trial(
    trials: list,
    reports: list[str],
    models: Input[list[Model]],
    best_model: Output[Model],
    trial_table: Output[Markdown],
    metric: str = "eval_accuracy",
    direction: str = "maximize",
    tuned: str = "",
) -> NamedTuple("Selection", best_trial=str, best_value=float, hyperparameters=str,
                table=str, labels=str):
    """Picks the sweep's best trial by its eval-split metric and hands its model on.

    A failed trial is listed, not fatal; the step fails only when every trial failed.
    Ties go to the lower trial id, so the choice is the same on every run.

    Args:
        trials: The sweep's trials: trial_id and hyperparameters of each.
        reports: What each trial's training step returned (JSON), collected.
        models: Each trial's model, collected.
        best_model: The winner's SavedModel, with sweep.json (its hyperparameters and the
            trial table) beside it.
        trial_table: Trials sorted by the metric, best first.
        metric: eval_accuracy or eval_loss.
        direction: maximize or minimize.
        tuned: The hyperparameters the sweep varies, comma-separated (the table's columns).

    Returns:
        best_trial: The winning trial's id.
        best_value: Its metric on the eval split.
        hyperparameters: Its hyperparameters (JSON).
        table: The trial table (JSON rows, best first).
        labels: The winner's trial id and hyperparameters as registry labels.
    """
    from collections import namedtuple
    from pathlib import Path

    from gkeflow.components.sweep.logic import publish_selection, select

    selection = select(trials, reports, metric, direction,
                       [t for t in tuned.split(",") if t.strip()])
    outputs = namedtuple("Selection", ["best_trial", "best_value", "hyperparameters", "table",
                                       "labels"])
    published = publish_selection(selection, {m.uri: Path(m.path) for m in models},
                                  best_model, Path(trial_table.path))
    from gkeflow.components.tracking.sweep import track_selection

    track_selection(selection, "select-best-trial")
    return outputs(*published)
