"""KFP shell of ``engine: ray`` on GKE: the trials as a KubeRay RayJob, then selection."""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Markdown, Model, Output

from gkeflow.components.images import SLIM_IMAGE


@dsl.component(base_image=SLIM_IMAGE, install_kfp_package=False)
def tune_on_kuberay(
    dataset: Input[Dataset],
    schema: Input[Artifact],
    best_model: Output[Model],
    trial_table: Output[Markdown],
    trials: list,
    rayjob_template: str,
    trial_resources: str,
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
    pipeline_root: str = "",
    pipeline_run_id: str = "",
    task_name: str = "tune-on-kuberay",
    call_timeout_s: float = 0.0,
    retry_budget_s: float = 0.0,
) -> NamedTuple("Selection", best_trial=str, best_value=float, hyperparameters=str,
                table=str, labels=str):
    """Runs the sweep's trials under Ray Tune on a KubeRay cluster, then picks the best.

    Creates a RayJob (a Ray head and one GPU worker per trial in flight, sized from the
    trial step's compute) named after the run and task, so a retried step re-attaches to
    it; follows it and prints the driver's log. Every trial reports its eval metric each
    epoch and the scheduler stops those that fall behind; a trial whose node was lost
    resumes from its checkpoint. The RayJob is deleted when it ended, when the run is
    cancelled, or when the launcher gives up (and says so); KubeRay removes the Ray cluster
    when the job ends even if this step is gone.

    Args:
        dataset: Splits written by prepare_data (read by the trials from Cloud Storage).
        schema: Schema written by prepare_data.
        best_model: The winner's SavedModel with sweep.json beside it.
        trial_table: Trials sorted by the metric, best first (stopped ones listed).
        trials: One dict per trial: trial_id and the searched hyperparameters.
        rayjob_template: The RayJob to create (JSON), compiled from the trial compute.
        trial_resources: CPUs, GPUs and restarts of each trial (JSON), as compiled.
        metric: eval_accuracy, eval_loss or eval_rmse.
        direction: maximize or minimize.
        tuned: The hyperparameters the sweep varies, comma-separated.
        scheduler: asha, median or none.
        parallel_trials: Trials in flight at once (the Ray workers).
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
        pipeline_root: The run's gs:// root: inputs, checkpoints and models pass through it.
        pipeline_run_id: Run id; names the RayJob together with task_name.
        task_name: Task name.
        call_timeout_s: Seconds before a Kubernetes API call is retried; 0 = 60.
        retry_budget_s: Seconds a failing call is retried before the step gives up; 0 = 900.

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

    from gkeflow.components.scaleout import storage
    from gkeflow.components.sweep import rayjob_launcher
    from gkeflow.components.sweep.logic import publish_selection, select
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
    settings.update(json.loads(trial_resources))
    _, ran, reports = rayjob_launcher.launch_step(
        call_timeout_s=call_timeout_s, retry_budget_s=retry_budget_s,
        template=json.loads(rayjob_template), dataset_uri=dataset.uri, schema_uri=schema.uri,
        trials=trials, fixed=fixed, settings=settings, pipeline_root=pipeline_root,
        run_id=pipeline_run_id, task_name=task_name,
        tracking=trial_tracking("tune-on-kuberay"),
        space=json.loads(search_space) if search_space else None)
    selection = select(ran, reports, metric, direction,
                       [t for t in tuned.split(",") if t.strip()])
    with tempfile.TemporaryDirectory(prefix="gkeflow-best-") as scratch:
        uri = selection.best.model_uri
        local = storage.download(uri, Path(scratch) / "model")
        published = publish_selection(selection, {uri: local}, best_model,
                                      Path(trial_table.path), sweep_engine="ray",
                                      ray_scheduler=scheduler, ray_cluster="KubeRay RayJob")
    track_selection(selection, "tune-on-kuberay")
    outputs = namedtuple("Selection", ["best_trial", "best_value", "hyperparameters", "table",
                                       "labels"])
    return outputs(*published)
