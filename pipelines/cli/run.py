"""`gkeflow run`: run the training, sweep or prediction pipeline on this machine with
kfp.local (no cloud, no Docker)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from gkeflow.pipelines.cli.common import (
    DEFAULT_RUN_OUTPUT,
    REGISTRY_FILE,
    read_config,
    stdout_console,
)
from gkeflow.pipelines.cli.params import NonEmptyPath, SuggestingChoice
from gkeflow.pipelines.cli.summary import print_run_summary
from gkeflow.pipelines.cli.sweep import sweep_options

#: `gkeflow run --pipeline NAME` -> "module:function" running it (training and prediction run
#: inline below).
RUN_PIPELINES = {
    "training": "", "prediction": "", "sweep": "gkeflow.pipelines.cli.sweep:run_sweep",
}


def _dispatch_run(pipeline: str, **options) -> None:
    import importlib

    module, _, function = RUN_PIPELINES[pipeline].partition(":")
    getattr(importlib.import_module(module), function)(stdout_console(), **options)


@click.command()
@click.option("--pipeline", type=SuggestingChoice(list(RUN_PIPELINES)), default="training",
              show_default=True,
              help="training: prepare, train, evaluate, register. sweep: one model per trial "
                   "of the search space, the best registered. prediction: score --data with a "
                   "model registered by an earlier run in the same --output.")
@click.option("--model", "model_ref", metavar="NAME[@VERSION|@ALIAS]",
              help="--pipeline prediction: the registered model (default: the only one, at "
                   "its champion alias or newest version).")
@click.option("--data", "data", metavar="PATH|URI",
              help="Data to train on (or, with --pipeline prediction, rows to score), as the "
                   "prepare step reads it: a CSV/Parquet file, a directory, a glob "
                   "('data/*.csv.gz'), gs://bucket/path or bq://project.dataset.table. "
                   "Default: the bundled Palmer Penguins data.")
@click.option("--label", "label", metavar="COLUMN",
              help="Column holding the class or the number to predict (required with "
                   "--data; 'species' for the bundled data, 'body_mass_g' for a regression).")
@click.option("--task", type=click.Choice(["auto", "classification", "regression"]),
              default="auto", show_default=True,
              help="auto: numbers with many distinct values are a regression; text, "
                   "true/false and few whole numbers a classification (said at the start).")
@click.option("--output", "output", type=NonEmptyPath(file_okay=False, path_type=Path),
              default=DEFAULT_RUN_OUTPUT, show_default=True,
              help="Where runs, logs, the step cache and the local registry are written.")
@click.option("--epochs", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=32, show_default=True)
@click.option("--learning-rate", type=click.FloatRange(min=0, min_open=True), default=0.01,
              show_default=True)
@click.option("--train-ratio", type=float, default=0.7, show_default=True)
@click.option("--eval-ratio", type=float, default=0.15, show_default=True)
@click.option("--test-ratio", type=float, default=0.15, show_default=True)
@click.option("--model-name", metavar="NAME",
              help="Registered model name. Default: penguins-classifier, or "
                   "<data file>-classifier.")
@click.option("--min-accuracy", type=click.FloatRange(0, 1), default=0.8, show_default=True,
              help="Test accuracy required before the model is registered.")
@click.option("--model-type", type=click.Choice(["auto", "mlp", "wide_deep", "gbdt", "linear"]),
              default=None,
              help="[default: auto; a sweep: mlp] auto trains gradient-boosted trees, an "
                   "MLP and a linear model, each in a step of its own (train-gbdt, "
                   "train-mlp, train-linear), and keeps the best on the eval split "
                   "(--param candidates=gbdt,mlp, or candidates: in gkeflow.yaml, to choose "
                   "the set); or one family in one train-model step: mlp, wide_deep "
                   "(Keras), gbdt (XGBoost trees; --param gbdt_max_depth=8 ...) or linear.")
@click.option("--user-module", metavar="PATH",
              help="Your own model: a .py file (or module) with build_model(schema, hparams).")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE",
              help="Any other pipeline parameter, e.g. thresholds=f1_macro>=0.9 or "
                   "slice_columns=island (repeatable; see `gkeflow plan` for steps and "
                   "docs/running.md for parameters).")
@click.option("--compute", "compute_overrides", metavar="STEP.FIELD=VALUE", multiple=True,
              help="Override one compute field of one step; locally, train-model.replicas=N "
                   "trains with N worker processes (MultiWorkerMirroredStrategy).")
@click.option("--key", "key_column", metavar="COLUMN", default="",
              help="Split rows by a stable hash of this column (rows sharing a key share a "
                   "split); its role is key, not a feature unless also in --features.")
@click.option("--exclude", "exclude_columns", metavar="COL[,COL]", multiple=True,
              help="Columns never used as features; repeatable or comma-separated.")
@click.option("--features", "feature_columns", metavar="COL[,COL]", multiple=True,
              help="The only feature columns; repeatable or comma-separated. Default: "
                   "inferred (constant and identifier-like columns are left out).")
@click.option("--no-cache", is_flag=True, help="Re-run every step instead of reusing cached ones.")
@click.option("--steps-at-once", type=click.IntRange(min=1), envvar="GKEFLOW_LOCAL_STEPS",
              help="How many independent steps run at once (model_type auto's candidates side "
                   "by side, as on a cluster); 1 runs one at a time, as kfp.local does. "
                   "[default: the machine's cores, at most 4; env GKEFLOW_LOCAL_STEPS]")
@click.option("--fork-steps/--fresh-steps", default=None,
              help="Start each step as a fork of one process that imported TensorFlow once "
                   "(3-4 s less per step here), or as a fresh Python, as in the images. "
                   "[default: fork; env GKEFLOW_LOCAL_FORKS=0 for fresh]")
@click.option("--deploy", is_flag=True,
              help="Deploy the registered model to the local stand-in (after a servability "
                   "check); `gkeflow deploy local NAME --request FILE` then answers requests.")
@click.option("--require-registered", is_flag=True,
              help="Exit 3 when the run succeeds but the gate blocks registration (for CI).")
@click.option("-v", "--verbose", is_flag=True, help="Stream every step's log to the terminal.")
@click.option("--debug", is_flag=True,
              help="On a failed step, show its Python traceback, not only the message.")
@click.option("--env", "environment", default="default", show_default=True,
              help="Whose tracking (tracking.<env> of gkeflow.yaml) the run logs to: with "
                   "tracking.<env>.mlflow.tracking_uri, a parent MLflow run and a nested run "
                   "per step, and the model registered in (or, for prediction, read from) "
                   "that server's registry unless --param registry_uri=URI "
                   "(docs/tracking.md).")
@sweep_options
def run(pipeline, model_ref, data, label, task, output, epochs, batch_size, learning_rate,
        train_ratio, eval_ratio, test_ratio, model_name, min_accuracy, model_type, user_module,
        params, compute_overrides, key_column, exclude_columns, feature_columns, no_cache,
        deploy, require_registered, verbose, debug, steps_at_once, fork_steps,
        **pipeline_options) -> None:
    """Run the training pipeline on this machine with kfp.local (no cloud, no Docker).

    Executes the same pipeline definition that `gkeflow compile` writes for GKE and
    Vertex: prepare -> train -> evaluate -> register (only if accuracy >= --min-accuracy).
    Every step runs as a subprocess; the full log is saved under OUTPUT/logs/.
    With --pipeline prediction: score --data with a registered model (see docs/prediction.md).

    --pipeline sweep trains one model per trial (the sweep: section of gkeflow.yaml and
    the (sweep) flags), prints the trial table and evaluates and registers the best.
    """
    from gkeflow.pipelines.cli.run_options import (
        check_options,
        finish,
        local_accelerator_notes,
        local_compute,
        run_arguments,
        step_printer,
    )

    check_options(click.get_current_context(), pipeline)
    if steps_at_once:  # read by every local run of this process (targets/local_parallel.py)
        os.environ["GKEFLOW_LOCAL_STEPS"] = str(steps_at_once)
    if fork_steps is not None:  # read by every local run of this process (local_forks.py)
        os.environ["GKEFLOW_LOCAL_FORKS"] = "1" if fork_steps else "0"
    if pipeline == "sweep" and model_type in ("auto", "linear"):
        raise click.BadParameter(f"a sweep tunes one family's hyperparameters, not "
                                 f"{model_type}: use --model-type mlp, wide_deep or gbdt",
                                 param_hint="--model-type")
    model_type = model_type or ("mlp" if pipeline == "sweep" else "auto")
    config_path = pipeline_options.get("config_path")
    environment = pipeline_options.pop("environment", "default")
    params = (*params, "deploy=true") if deploy else params  # cli_deploy.py serves it
    if RUN_PIPELINES[pipeline]:
        return _dispatch_run(
            pipeline, data=data, label=label, output=output, epochs=epochs,
            batch_size=batch_size, learning_rate=learning_rate, train_ratio=train_ratio,
            eval_ratio=eval_ratio, test_ratio=test_ratio, model_name=model_name,
            min_accuracy=min_accuracy, model_type=model_type, user_module=user_module,
            params=params, compute_overrides=compute_overrides, key_column=key_column,
            exclude_columns=exclude_columns, feature_columns=feature_columns, task=task,
            no_cache=no_cache, require_registered=require_registered, verbose=verbose,
            debug=debug, environment=environment, **pipeline_options)
    from gkeflow.pipelines.targets.local import run_local

    console = stdout_console()
    if pipeline == "prediction":
        from gkeflow.pipelines.cli.run_prediction import run_prediction_command

        return run_prediction_command(console, data, model_ref, output, REGISTRY_FILE, params,
                                      no_cache, verbose, debug=debug,
                                      compute=local_compute("prediction", config_path,
                                                            compute_overrides),
                                      config=read_config(config_path),
                                      environment=environment)
    from gkeflow.pipelines.definitions.training import training_pipeline

    arguments = run_arguments(
        training_pipeline, pipeline, data=data, label=label, output=output, epochs=epochs,
        batch_size=batch_size, learning_rate=learning_rate, train_ratio=train_ratio,
        eval_ratio=eval_ratio, test_ratio=test_ratio, model_name=model_name,
        min_accuracy=min_accuracy, model_type=model_type, user_module=user_module,
        params=params, key_column=key_column, exclude_columns=exclude_columns,
        feature_columns=feature_columns, task=task, notes=(notes := []))
    output = output.resolve()
    console.print(f"[bold]gkeflow run[/bold]: training pipeline on "
                  f"{data or 'the bundled Palmer Penguins data'} "
                  f"(label: {arguments['label_column']})")
    for note in notes:
        console.print(note, markup=False, highlight=False)

    on_event = step_printer(console)

    from gkeflow.pipelines.targets.local import LocalRunError

    compute = local_compute("training", config_path, compute_overrides)
    config = read_config(config_path)
    for note in local_accelerator_notes(compute, config.compute, compute_overrides):
        console.print(f"[yellow]{note}[/yellow]", markup=True, highlight=False)
    from gkeflow.pipelines.cli.run_tracking import (
        local_tracking,
        log_to_vertex,
        record_cached,
        tracked_run,
    )

    tracking = local_tracking(console, config, environment, params, arguments)
    try:
        with tracked_run(console, tracking, "training", output,
                         config.targets.vertex) as tracked:
            result = run_local(arguments, output, echo_logs=verbose, on_event=on_event,
                               enable_caching=not no_cache, compute=compute,
                               preparation=config.preparation,
                               candidates=config.candidates)
            tracked.succeeded = result.ok
            record_cached(console, tracking, tracked, result)
    except LocalRunError as exc:
        raise click.ClickException(str(exc)) from exc
    log_to_vertex(console, config, tracking, tracked, arguments, result, "evaluate-model")
    print_run_summary(console, result, arguments, debug)
    from gkeflow.pipelines.cli.deploy_local import print_local_deployment

    print_local_deployment(console, result, output)
    finish(console, result, require_registered)
