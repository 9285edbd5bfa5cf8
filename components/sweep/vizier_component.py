"""KFP shell of ``engine: vizier``: a Vertex AI hyperparameter tuning job, then selection."""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Markdown, Model, Output

from gkeflow.components.images import GPU_IMAGE, SLIM_IMAGE


@dsl.component(base_image=SLIM_IMAGE, install_kfp_package=False)
def tune_with_vizier(
    dataset: Input[Dataset],
    schema: Input[Artifact],
    best_model: Output[Model],
    trial_table: Output[Markdown],
    gcp_resources: dsl.OutputPath(str),
    trials: list,
    spec: str,
    pipeline_run_id: str,
    pipeline_root: str,
    metric: str = "eval_accuracy",
    direction: str = "maximize",
    tuned: str = "",
    epochs: int = 20,
    batch_size: int = 32,
    learning_rate: float = 0.01,
    model_type: str = "mlp",
    hidden_units: str = "256,128",
    dropout: float = 0.1,
    early_stopping_patience: int = 5,
    user_module: str = "",
    require_gpu: bool = False,
    trial_image: str = GPU_IMAGE,
    service_account: str = "",
    poll_s: float = 60.0,
    call_timeout_s: float = 0.0,
    retry_budget_s: float = 0.0,
) -> NamedTuple("Selection", best_trial=str, best_value=float, hyperparameters=str,
                table=str, labels=str):
    """Runs the sweep's trials as one Vertex AI hyperparameter tuning job and picks the best.

    The job is created once per pipeline run (a retry follows it); each trial runs the
    suite's training code on its own machine and GPU and reports its eval-split metric.
    Transient errors of Vertex AI are retried; cancelling the run cancels the job.
    Failed trials are listed; the step fails only when every trial failed.

    Args:
        dataset: Splits written by prepare_data (read through the /gcs mount).
        schema: Schema written by prepare_data.
        best_model: The winner's SavedModel with sweep.json beside it.
        trial_table: Trials sorted by the metric, best first.
        gcp_resources: The tuning job's resource (cancelled with the pipeline run).
        trials: Unused by Vizier (it chooses the points); kept so both engines share one
            pipeline signature.
        spec: Study, machine and scheduling, compiled from gkeflow.yaml's sweep section.
        pipeline_run_id: Run id; names the job and keys its idempotent creation.
        pipeline_root: gs:// pipeline root; trial outputs go under <root>/sweeps/<run>.
        metric: eval_accuracy or eval_loss.
        direction: maximize or minimize.
        tuned: The hyperparameters the sweep varies, comma-separated.
        epochs: Trials' epochs unless searched (likewise the next five).
        batch_size: Examples per gradient step.
        learning_rate: Adam learning rate.
        model_type: mlp or wide_deep.
        hidden_units: Hidden layer sizes, comma-separated.
        dropout: Dropout rate.
        early_stopping_patience: Epochs without improvement before a trial stops.
        user_module: Your own model module; empty = built-in.
        require_gpu: Trials fail instead of training on CPU when no GPU is visible.
        trial_image: Image every trial runs in.
        service_account: Service account of the trials; empty = the project's default.
        poll_s: Seconds between status checks.
        call_timeout_s: Seconds before a call to Vertex AI is abandoned and retried; 0 =
            $GKEFLOW_CALL_TIMEOUT_S or 60.
        retry_budget_s: Seconds one failing operation is retried before the step gives up
            and cancels the job; 0 = $GKEFLOW_RETRY_BUDGET_S or 900.

    Returns:
        best_trial: The winning trial's id.
        best_value: Its metric on the eval split.
        hyperparameters: Its hyperparameters (JSON).
        table: The trial table (JSON rows, best first).
        labels: The winner's trial id and hyperparameters as registry labels.
    """
    import json
    from collections import namedtuple
    from pathlib import Path

    from gkeflow.components.cloud.follow import run_step
    from gkeflow.components.cloud.options import policy_from
    from gkeflow.components.prepare.logic import Schema
    from gkeflow.components.sweep import vizier
    from gkeflow.components.sweep.logic import metric_for_task, publish_selection, select

    del trials
    project, location = run_step(vizier.step_location)
    # the task is decided from the data at run time: a regression sweep compiled with a
    # classifier's metric searches on the regressor's (Vizier's goal follows it)
    metric, direction = metric_for_task(metric, direction, Schema.load(Path(schema.path))
                                        .regression)
    spec = vizier.searched_on(json.loads(spec), metric, direction)
    output_uri = f"{pipeline_root.rstrip('/')}/sweeps/{vizier.label_value(pipeline_run_id)}"
    from gkeflow.components.tracking.trials import trial_env, trial_tracking

    # each trial logs its curves into a nested run of the pipeline run, as it trains
    tracking = trial_tracking("tune-with-vizier")
    body = vizier.build_job(
        spec, display_name=f"gkeflow-sweep-{pipeline_run_id}", image=trial_image,
        dataset_uri=dataset.uri, schema_uri=schema.uri, output_uri=output_uri,
        run_id=pipeline_run_id, user_module=user_module, require_gpu=require_gpu,
        service_account=service_account,
        fixed={"epochs": epochs, "batch_size": batch_size, "learning_rate": learning_rate,
               "model_type": model_type, "hidden_units": hidden_units, "dropout": dropout,
               "early_stopping_patience": early_stopping_patience},
        env=trial_env(tracking))
    job = run_step(lambda: vizier.submit_and_wait(
        body, project, location, poll_s=poll_s, echo=lambda line: print(line, flush=True),
        policy=policy_from(call_timeout_s, retry_budget_s), gcp_resources_path=gcp_resources))
    found, reports = vizier.outcomes(job, metric)
    selection = select(found, reports, metric, direction,
                       [t for t in tuned.split(",") if t.strip()])
    models = {r["model_uri"]: Path(vizier.fuse_path(r["model_uri"]))
              for r in map(json.loads, reports)}
    outputs = namedtuple("Selection", ["best_trial", "best_value", "hyperparameters", "table",
                                       "labels"])
    published = publish_selection(selection, models, best_model, Path(trial_table.path),
                                  tuning_job=job.get("name", ""))
    from gkeflow.components.tracking.sweep import track_selection

    track_selection(selection, "tune-with-vizier", tuning_job=job.get("name", ""))
    return outputs(*published)
