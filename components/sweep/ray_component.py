"""KFP shell of ``engine: ray``: the trials as one Ray Tune run, then selection."""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Markdown, Model, Output

from gkeflow.components.images import GPU_IMAGE


@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
def tune_with_ray(
    dataset: Input[Dataset],
    schema: Input[Artifact],
    best_model: Output[Model],
    trial_table: Output[Markdown],
    trials: list,
    metric: str = "eval_accuracy",
    direction: str = "maximize",
    tuned: str = "",
    scheduler: str = "asha",
    parallel_trials: int = 2,
    grace_epochs: int = 1,
    epochs: int = 20,
    batch_size: int = 32,
    learning_rate: float = 0.01,
    model_type: str = "mlp",
    hidden_units: str = "256,128",
    dropout: float = 0.1,
    early_stopping_patience: int = 5,
    user_module: str = "",
    backend: str = "auto",
    search: str = "fixed",
    search_space: str = "",
    seed: int = 0,
) -> NamedTuple("Selection", best_trial=str, best_value=float, hyperparameters=str,
                table=str, labels=str):
    """Runs the sweep's trials under Ray Tune, stopping poor ones early, and picks the best.

    Every trial trains with the suite's training code and reports its eval metric after
    each epoch; the scheduler ends the trials that fall behind. Finished trials export
    their SavedModel; stopped and failed trials are listed. The step fails only when no
    trial finished.

    Args:
        dataset: Splits written by prepare_data.
        schema: Schema written by prepare_data.
        best_model: The winner's SavedModel with sweep.json beside it.
        trial_table: Trials sorted by the metric, best first (stopped ones listed).
        trials: One dict per trial: trial_id and the searched hyperparameters.
        metric: eval_accuracy, eval_loss or eval_rmse.
        direction: maximize or minimize.
        tuned: The hyperparameters the sweep varies, comma-separated.
        scheduler: asha (asynchronous successive halving), median (median stopping rule)
            or none (every trial to its last epoch).
        parallel_trials: Trials in flight at once.
        grace_epochs: Epochs every trial trains before it can be stopped.
        epochs: Trials' epochs unless searched (likewise the next five).
        batch_size: Examples per gradient step.
        learning_rate: Adam learning rate.
        model_type: mlp or wide_deep.
        hidden_units: Hidden layer sizes, comma-separated.
        dropout: Dropout rate.
        early_stopping_patience: Epochs without improvement before a trial stops itself.
        user_module: Your own model module; empty = built-in.
        backend: Keras backend of the trials: auto, tensorflow or jax.
        search: fixed (the given trials: a grid or seeded random draws) or bayesian
            (Optuna's TPE sampler over search_space, as many trials as given).
        search_space: The sweep's parameters (JSON), for bayesian search.
        seed: The Bayesian sampler's seed.

    Returns:
        best_trial: The winning trial's id.
        best_value: Its metric on the eval split.
        hyperparameters: Its hyperparameters (JSON).
        table: The trial table (JSON rows, best first).
        labels: The winner's trial id and hyperparameters as registry labels.
    """
    import json
    import tempfile
    from collections import namedtuple
    from pathlib import Path

    from gkeflow.components.sweep.logic import publish_selection, select
    from gkeflow.components.sweep.ray_driver import run_sweep
    from gkeflow.components.sweep.ray_inputs import ray_sweep_inputs
    from gkeflow.components.tracking.sweep import track_selection
    from gkeflow.components.tracking.trials import trial_tracking

    metric, direction, settings, fixed = ray_sweep_inputs(
        schema.path, metric, direction, scheduler=scheduler, parallel_trials=parallel_trials,
        grace_epochs=grace_epochs, search=search, seed=seed, epochs=epochs,
        batch_size=batch_size, learning_rate=learning_rate, model_type=model_type,
        hidden_units=hidden_units, dropout=dropout,
        early_stopping_patience=early_stopping_patience, user_module=user_module,
        backend=backend)
    with tempfile.TemporaryDirectory(prefix="gkeflow-ray-") as scratch:
        # a local Ray instance, the same driver a KubeRay cluster runs
        ran, reports = run_sweep(dataset.path, schema.path, scratch, trials, fixed, settings,
                                 address="", echo=lambda line: print(line, flush=True),
                                 tracking=trial_tracking("tune-with-ray"),
                                 space=json.loads(search_space) if search_space else None)
        selection = select(ran, reports, metric, direction,
                           [t for t in tuned.split(",") if t.strip()])
        models = {r["model_uri"]: Path(r["model_uri"]) for r in map(json.loads, reports)
                  if r.get("model_uri")}
        published = publish_selection(selection, models, best_model, Path(trial_table.path),
                                      sweep_engine="ray", ray_scheduler=scheduler)
    track_selection(selection, "tune-with-ray")
    outputs = namedtuple("Selection", ["best_trial", "best_value", "hyperparameters", "table",
                                       "labels"])
    return outputs(*published)
