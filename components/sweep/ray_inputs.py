"""A Ray sweep step's parameters as the Tune run takes them, for both steps that run one
(``tune_with_ray`` locally, ``tune_on_kuberay`` on GKE)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: Step parameters that say how Tune runs the trials (``TuneSettings`` fields).
SETTINGS = ("scheduler", "parallel_trials", "grace_epochs", "search", "seed")
#: Step parameters every trial trains with, unless its searched values replace them.
FIXED = ("epochs", "batch_size", "learning_rate", "model_type", "hidden_units", "dropout",
         "early_stopping_patience", "user_module", "backend")


def ray_sweep_inputs(schema_path: str, metric: str, direction: str,
                     **values: Any) -> tuple[str, str, dict[str, Any], dict[str, Any]]:
    """(metric, direction, settings, fixed hyperparameters). The task is decided from the
    data at run time: a sweep compiled for a classifier's metric stops and compares the
    trials of a regression by the regressor's."""
    from gkeflow.components.prepare.logic import Schema
    from gkeflow.components.sweep.logic import metric_for_task

    unknown = set(values) - set(SETTINGS) - set(FIXED)
    if unknown:
        raise TypeError(f"not a Ray sweep parameter: {', '.join(sorted(unknown))}")
    metric, direction = metric_for_task(metric, direction,
                                        Schema.load(Path(schema_path)).regression)
    settings = {"metric": metric, "direction": direction,
                **{k: values[k] for k in SETTINGS if k in values}}
    return metric, direction, settings, {k: values[k] for k in FIXED if k in values}
