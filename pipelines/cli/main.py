"""The ``gkeflow`` command: run pipelines locally, compile them per target, inspect models.

Longer than most modules on purpose: the command group and the local commands (run,
compile, docs, plan, models) share their option declarations; remote command groups live
in their own modules.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from gkeflow.pipelines.cli.errors import ErrorReportingGroup
from gkeflow.pipelines.cli.params import NonEmptyPath, SuggestingChoice
from gkeflow.pipelines.cli.sweep import sweep_options
from gkeflow.pipelines.cli.tables import (
    MODEL_COLUMNS,
    MODEL_WIDE_COLUMNS,
    PLAN_COLUMNS,
    PLAN_WIDE_COLUMNS,
    format_options,
    plan_json,
    plan_records,
    print_json,
    print_table,
    version_record,
    version_row,
)
from gkeflow.pipelines.targets.compile import COMPILE_TARGETS, DEFAULT_OUTPUT

DEFAULT_RUN_OUTPUT = Path("gkeflow-output")
REGISTRY_FILE = "registry.db"


def _console() -> Console:
    """Rich output on stdout, tables as wide as COLUMNS, the terminal, or (piped) 160
    columns; lines of text are never broken (a path or command stays one line to copy)."""
    from gkeflow.pipelines.cli.tables import table_width

    return Console(file=sys.stdout, highlight=False, width=table_width(), soft_wrap=True)


@click.group(cls=ErrorReportingGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gkeflow")
@click.option("--debug", is_flag=True,
              help="Show the traceback of a failure (also GKEFLOW_DEBUG=1).")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """gkeflow: Kubeflow Pipelines components and pipelines for TensorFlow on GKE and Vertex AI.

    \b
    Common tasks:
      gkeflow run                      train on the bundled penguins data, locally
      gkeflow run --data my.csv --label target
      gkeflow run --pipeline prediction --data new.csv   score rows with the champion
      gkeflow compile                  write compiled/training.{gke,vertex}.yaml
                                       and compiled/components/<component>.yaml
      gkeflow docs                     regenerate docs/components.md from the components
      gkeflow plan --target vertex     what each step requests on Vertex AI
      gkeflow models list              models in the local registry
      gkeflow deploy NAME@3 --target vertex   serve a version (canary, promote, rollback)
      gkeflow init                     write an example gkeflow.yaml
      gkeflow images build             build the images into images.registry (gkeflow.yaml)
      gkeflow submit --target vertex   run the pipeline on Vertex AI (or --target gke)
      gkeflow schedule apply           create/update the schedules of gkeflow.yaml
      gkeflow runs list                past runs on the targets: state, failed step, link
      gkeflow monitoring apply         alert policies on idle GPUs (Cloud Monitoring)
      gkeflow prices list              hourly prices with source, date and STALE marks

    A failure prints one line saying what to fix and exits non-zero; `gkeflow --debug
    COMMAND` shows the traceback.
    """
    ctx.obj = {"debug": debug}


# ---------------------------------------------------------------------------------------------
# run


#: `gkeflow run --pipeline NAME` -> "module:function" running it (training and prediction run
#: inline below).
RUN_PIPELINES = {
    "training": "", "prediction": "", "sweep": "gkeflow.pipelines.cli.sweep:run_sweep",
}


def _dispatch_run(pipeline: str, **options) -> None:
    import importlib

    module, _, function = RUN_PIPELINES[pipeline].partition(":")
    getattr(importlib.import_module(module), function)(_console(), **options)


@main.command()
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
              help="Column holding the class to predict (required with --data; "
                   "'species' for the bundled data).")
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
@click.option("--model-type", type=click.Choice(["mlp", "wide_deep"]), default="mlp",
              show_default=True, help="Built-in model family.")
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
@click.option("--deploy", is_flag=True,
              help="Deploy the registered model to the local stand-in (after a servability "
                   "check); `gkeflow deploy local NAME --request FILE` then answers requests.")
@click.option("--require-registered", is_flag=True,
              help="Exit 3 when the run succeeds but the gate blocks registration (for CI).")
@click.option("-v", "--verbose", is_flag=True, help="Stream every step's log to the terminal.")
@click.option("--debug", is_flag=True,
              help="On a failed step, show its Python traceback, not only the message.")
@sweep_options
def run(pipeline, model_ref, data, label, output, epochs, batch_size, learning_rate,
        train_ratio, eval_ratio, test_ratio, model_name, min_accuracy, model_type, user_module,
        params, compute_overrides, key_column, exclude_columns, feature_columns, no_cache,
        deploy, require_registered, verbose, debug, **pipeline_options) -> None:
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
        local_compute,
        run_arguments,
        step_printer,
    )

    check_options(click.get_current_context(), pipeline)
    config_path = pipeline_options.get("config_path")
    params = (*params, "deploy=true") if deploy else params  # cli_deploy.py serves it
    if RUN_PIPELINES[pipeline]:
        return _dispatch_run(
            pipeline, data=data, label=label, output=output, epochs=epochs,
            batch_size=batch_size, learning_rate=learning_rate, train_ratio=train_ratio,
            eval_ratio=eval_ratio, test_ratio=test_ratio, model_name=model_name,
            min_accuracy=min_accuracy, model_type=model_type, user_module=user_module,
            params=params, compute_overrides=compute_overrides, key_column=key_column,
            exclude_columns=exclude_columns, feature_columns=feature_columns,
            no_cache=no_cache, require_registered=require_registered, verbose=verbose,
            debug=debug, **pipeline_options)
    from gkeflow.pipelines.targets.local import run_local

    console = _console()
    if pipeline == "prediction":
        from gkeflow.pipelines.cli.run_prediction import run_prediction_command

        return run_prediction_command(console, data, model_ref, output, REGISTRY_FILE, params,
                                      no_cache, verbose, debug=debug,
                                      compute=local_compute("prediction", config_path,
                                                            compute_overrides))
    from gkeflow.pipelines.training import training_pipeline

    arguments = run_arguments(
        training_pipeline, pipeline, data=data, label=label, output=output, epochs=epochs,
        batch_size=batch_size, learning_rate=learning_rate, train_ratio=train_ratio,
        eval_ratio=eval_ratio, test_ratio=test_ratio, model_name=model_name,
        min_accuracy=min_accuracy, model_type=model_type, user_module=user_module,
        params=params, key_column=key_column, exclude_columns=exclude_columns,
        feature_columns=feature_columns)
    output = output.resolve()
    console.print(f"[bold]gkeflow run[/bold]: training pipeline on "
                  f"{data or 'the bundled Palmer Penguins data'} "
                  f"(label: {arguments['label_column']})")

    on_event = step_printer(console)

    from gkeflow.pipelines.targets.local import LocalRunError

    compute = local_compute("training", config_path, compute_overrides)
    try:
        result = run_local(arguments, output, echo_logs=verbose, on_event=on_event,
                           enable_caching=not no_cache, compute=compute,
                           preparation=_load_config(config_path).preparation)
    except LocalRunError as exc:
        raise click.ClickException(str(exc)) from exc
    _print_run_summary(console, result, arguments, debug)
    from gkeflow.pipelines.cli.deploy import print_local_deployment

    print_local_deployment(console, result, output)
    finish(console, result, require_registered)


def _print_run_summary(console: Console, result, arguments: dict, debug: bool = False) -> None:
    console.print()
    table = Table(title="Steps", title_justify="left")
    for column in ("step", "status", "seconds"):
        table.add_column(column)
    for step in result.steps:
        table.add_row(step.name, step.status, f"{step.duration_s:.1f}")
    console.print(table)

    metrics = result.artifact_metadata("evaluate-model", "metrics")
    if metrics:
        metrics_table = Table(title="Evaluation on the test split", title_justify="left")
        metrics_table.add_column("metric")
        metrics_table.add_column("value", justify="right")
        for name, value in metrics.items():
            if name == "passed" or name.startswith("slice_"):
                continue
            shown = (f"{value:.0f}" if float(value).is_integer() and name.endswith("examples")
                     else f"{value:.4f}")
            metrics_table.add_row(name, shown)
        console.print(metrics_table)
        passed = result.parameter_outputs("evaluate-model").get("Output")
        accuracy = metrics.get("accuracy", float("nan"))
        verdict = "[green]passed[/green]" if passed else "[yellow]did not pass[/yellow]"
        console.print(f"Gate: accuracy {accuracy:.4f} (min_accuracy="
                      f"{arguments['min_accuracy']:g}, champion comparison): {verdict}")
        reasons = result.artifact_metadata("evaluate-model", "evaluation").get("reasons", [])
        for reason in reasons:
            mark = "[green]✓[/green]" if reason.startswith("PASS") else "[red]✗[/red]"
            console.print(f"  {mark} ", end="")
            console.print(reason.split(" ", 1)[-1], markup=False, soft_wrap=True)
    registered = result.parameter_outputs("register-model")
    if registered:
        unchanged = result.artifact_metadata("register-model", "registered_model").get(
            "unchanged")
        console.print(f"Registered: {'unchanged: same as ' if unchanged else ''}"
                      f"[bold]{arguments['model_name']}[/bold] version "
                      f"{registered.get('model_version')} ({registered.get('resource_name')})")
    elif result.ok:
        console.print("Registered: nothing (the model did not pass the gate)")
    if result.run_dir:
        console.print(f"Artifacts: {result.run_dir}")
    if result.run_dir or result.cached_outputs:  # cached steps' outputs are in earlier runs
        model_dir = result.output_dir("train-model", "model")
        if model_dir:
            console.print(f"Model:     {model_dir}")
        strategy = result.artifact_metadata("train-model", "model").get("strategy")
        if strategy:
            console.print(f"Training:  {strategy}", markup=False)
        data_report = result.output_dir("prepare-data", "report")
        if data_report:
            console.print(f"Data:      {data_report}")
        model_card = result.output_dir("evaluate-model", "model_card")
        if model_card:
            console.print(f"Card:      {model_card}")
    console.print(f"Log:       {result.log_path}")
    console.print(f"Total:     {result.duration_s:.1f}s")
    if not result.ok:
        failed = result.failed_step
        console.print()
        if failed:
            console.print(f"[red bold]FAILED[/red bold]: step {failed.name}")
            from gkeflow.pipelines.cli.run_options import print_failure

            print_failure(console, failed.log, result.log_path, debug)
        else:
            console.print(f"[red bold]FAILED[/red bold]: {result.error}", markup=False)


# ---------------------------------------------------------------------------------------------
# compile


def _compute_options(func):
    """--config and --compute: per-step compute from gkeflow.yaml, then from the command line."""
    from gkeflow.pipelines.compute.profiles import FIELD_NAMES

    func = click.option(
        "--compute", "compute_overrides", metavar="STEP.FIELD=VALUE", multiple=True,
        help="Override one compute field of one step, e.g. train-model.accelerator=nvidia-l4 "
             "or train-model.accelerator_count=2; repeatable. Fields: "
             f"{', '.join(FIELD_NAMES)} (docs/compute-and-gpus.md explains each).",
    )(func)
    return click.option(
        "--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
        help="gkeflow.yaml whose `compute:` section overrides the defaults per step. "
             "Default: ./gkeflow.yaml when it exists.",
    )(func)


def _load_config(config_path: Path | None):
    """``--config`` (default: ./gkeflow.yaml when it exists), validated."""
    from gkeflow.pipelines.config import ConfigError, load_config

    try:
        return load_config(config_path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc


def _resolve_compute(config_path: Path | None, compute_overrides: tuple[str, ...]) -> dict:
    """Per-step profiles: defaults in code, then gkeflow.yaml, then --compute flags."""
    from gkeflow.pipelines.compute.profiles import ComputeError, apply_overrides
    from gkeflow.pipelines.config import ConfigError
    from gkeflow.pipelines.targets.compile import default_compute

    try:
        profiles = _load_config(config_path).compute_overrides(default_compute())
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        return apply_overrides(profiles, compute_overrides)
    except ComputeError as exc:
        raise click.BadParameter(str(exc), param_hint="--compute") from exc


def _with_notifications(config, environment: str):
    """``config`` carrying ``notifications.<environment>`` for compiling (none when the
    file has none for it); an environment gkeflow.yaml does not know is refused."""
    from gkeflow.pipelines.operations import select

    known = {"default", *config.parameters, *config.notifications}
    if environment not in known:
        raise click.BadParameter(f"{environment!r} is not an environment of gkeflow.yaml "
                                 f"(environments: {', '.join(sorted(known))})",
                                 param_hint="--env")
    return select(config, environment)


@main.command("compile")
@click.option("--target", type=click.Choice([*COMPILE_TARGETS, "all"]), default="all",
              show_default=True, help="Backend to compile for.")
@click.option("--output", type=NonEmptyPath(file_okay=False, path_type=Path),
              default=DEFAULT_OUTPUT, show_default=True,
              help="Directory for the YAML files (relative to the current directory).")
@click.option("--check", is_flag=True,
              help="Write nothing; exit 1 naming the files that differ from what the code "
                   "produces now.")
@click.option("--release", is_flag=True,
              help="Refuse to compile when any step's image is referenced by tag only "
                   "(not built: no digest in the images lock file).")
@click.option("--env", "environment", default="default", show_default=True,
              help="Whose notifications (notifications.<env> of gkeflow.yaml) the pipelines "
                   "carry, as `submit --env` compiles them; retention is always compiled in. "
                   "Parameters keep the pipelines' defaults.")
@_compute_options
def compile_command(target: str, output: Path, check: bool, release: bool, environment: str,
                    config_path: Path | None, compute_overrides: tuple[str, ...]) -> None:
    """Compile the pipelines to YAML for Kubeflow Pipelines on GKE and/or Vertex AI Pipelines.

    Writes <pipeline>.<target>.yaml: the GKE file carries kfp-kubernetes settings
    (node selectors, tolerations); the Vertex file is a single document with NVIDIA_*
    accelerator types. Each step's compute (defaults, gkeflow.yaml, --compute) is
    validated for the target first; every image is mapped to the registry of the
    `images:` section and pinned to the digest `gkeflow images build` recorded in the
    lock file (gkeflow.lock). `gkeflow plan` shows what each step will request.
    The pipelines carry notifications.<--env> and retention: (docs/operating.md), with
    only the names of the secrets holding a webhook URL.
    """
    from gkeflow.components.images import ImageLockError
    from gkeflow.pipelines.compute.profiles import ComputeError, target_notes
    from gkeflow.pipelines.config import ConfigError
    from gkeflow.pipelines.images_config import image_map
    from gkeflow.pipelines.targets.compile import ReleaseError, compile_all, stale_files
    from gkeflow.pipelines.targets.component_yaml import compile_components, stale_component_files

    targets = COMPILE_TARGETS if target == "all" else (target,)
    console = _console()
    compute = _resolve_compute(config_path, compute_overrides)
    config = _with_notifications(_load_config(config_path), environment)
    try:
        images = image_map(config.images)
        if check:
            stale = (stale_files(output, targets, compute=compute, lock=images, config=config)
                     + stale_component_files(output, images))
            if stale:
                for path in stale:
                    console.print(f"stale: {path}", markup=False)
                console.print("Run `gkeflow compile` and commit the result.")
                sys.exit(1)
            console.print(f"compiled pipelines in {output} are up to date", markup=False)
            return
        paths = compile_all(output, targets, compute=compute, lock=images, release=release,
                            config=config)
        paths += compile_components(output, images, release=release)
    except (ComputeError, ReleaseError, ImageLockError) as exc:
        raise click.ClickException(str(exc)) from exc
    except ConfigError as exc:  # notifications a target cannot send
        raise click.ClickException(f"--env {environment}: {exc}, or compile for the other "
                                   "target alone (--target)") from exc
    for path in paths:
        console.print(f"wrote {path}", markup=False)
    for path, reason in paths.skipped.items():
        removed = " (removed the one an earlier compile wrote)" if path in paths.removed else ""
        console.print(f"note: {path} not written{removed}: {reason}", markup=False)
    from gkeflow.components.images import is_pinned

    tag_only = sorted(image for image in images.values() if not is_pinned(image))
    if tag_only:
        from gkeflow.pipelines.compute.wording import plural

        console.print(f"note: {plural(len(tag_only), 'image')} referenced by tag only, not by "
                      f"digest: {', '.join(tag_only)} (`gkeflow images build` builds them and "
                      "records their digests; `gkeflow submit` refuses images never built)",
                      markup=False)
    from gkeflow.pipelines.sweep import TRIAL_STEP, default_sweep, trial_note

    engine = (config.sweep or default_sweep()).engine
    for compile_target in targets:
        notes = target_notes(compute, compile_target)
        if compute and TRIAL_STEP in compute:
            notes.append(trial_note(compile_target, engine, compute[TRIAL_STEP]))
        for note in filter(None, notes):
            console.print(f"note ({compile_target}): {note}", markup=False)


@main.command("docs")
@click.option("--output", type=NonEmptyPath(dir_okay=False, path_type=Path), default=None,
              help="Where to write the reference. Default: docs/components.md in the current "
                   "directory.")
@click.option("--check", is_flag=True,
              help="Write nothing; exit 1 when the reference differs from the component specs.")
def docs_command(output: Path | None, check: bool) -> None:
    """Generate docs/components.md (in the current directory, or --output), the component
    reference, from the component specs."""
    from gkeflow.pipelines.cli.reference import main as reference_main

    sys.exit(reference_main([*(["--check"] if check else []), *([str(output)] if output else [])]))


# ---------------------------------------------------------------------------------------------
# plan


@main.command("plan")
@click.argument("pipeline", default="training")
@click.option("--pipeline", "pipeline_option", metavar="NAME",
              help="The pipeline (same as the PIPELINE argument).")
@click.option("--target", type=click.Choice(COMPILE_TARGETS), default="gke", show_default=True,
              help="Backend whose requests to show.")
@_compute_options
@format_options("--output", "--format")
def plan_command(pipeline: str, pipeline_option: str | None, target: str,
                 config_path: Path | None, compute_overrides: tuple[str, ...],
                 wide: bool = False, output_format: str = "table") -> None:
    """Show what each step of PIPELINE (default: training) will request on a target.

    One row per step: CPU, memory, accelerator (as the target spells it), GPUs per node,
    capacity (on-demand, spot, flex-start or reservation), total GPUs, timeout and the
    machine shape that hosts it; --wide adds image, nodes, Kueue queue, ephemeral disk,
    retries, caching and /dev/shm. The table fits COLUMNS (or the terminal);
    --output json prints every field for scripts.
    The compute is validated exactly as `gkeflow compile` does; requests the target
    cannot honour are listed below the table.
    """
    from click.core import ParameterSource

    from gkeflow.components.images import ImageLockError, is_pinned, pin, pull_size_note
    from gkeflow.pipelines.compute.profiles import ComputeError, plan, target_notes
    from gkeflow.pipelines.images_config import image_map
    from gkeflow.pipelines.targets.compile import PIPELINES

    named = click.get_current_context().get_parameter_source("pipeline")
    if pipeline_option and named == ParameterSource.COMMANDLINE and pipeline_option != pipeline:
        raise click.UsageError(f"PIPELINE {pipeline} and --pipeline {pipeline_option} differ; "
                               "name the pipeline once")
    pipeline = pipeline_option or pipeline
    if pipeline not in PIPELINES:
        from gkeflow.components.did_you_mean import did_you_mean

        raise click.BadParameter(f"unknown pipeline {pipeline!r}"
                                 f"{did_you_mean(pipeline, PIPELINES)}; available: "
                                 f"{', '.join(PIPELINES)}", param_hint="PIPELINE")
    config = _load_config(config_path)
    if pipeline == "prediction":
        from gkeflow.pipelines.prediction import resolve_compute, step_images
    elif pipeline == "fanout-prepare":
        from gkeflow.pipelines.fanout import resolve_compute, step_images
    elif pipeline == "sweep":
        from gkeflow.pipelines.cli.sweep import resolve_sweep
        from gkeflow.pipelines.sweep import resolve_sweep_compute, step_images

        sweep = resolve_sweep(config_path)

        def resolve_compute(target, compute):
            return resolve_sweep_compute(target, compute, sweep.engine, config.preparation)
    else:
        from gkeflow.pipelines.training import resolve_compute as training_compute
        from gkeflow.pipelines.training import step_images

        def resolve_compute(target, compute):
            return training_compute(target, compute, config.preparation)

    from gkeflow.pipelines.targets.compile import pipeline_compute

    compute = pipeline_compute(pipeline, _resolve_compute(config_path, compute_overrides))
    try:
        profiles = resolve_compute(target, compute)
        lock = image_map(config.images)
        images = (step_images(target, profiles) if pipeline == "prediction"
                  else step_images())
    except (ComputeError, ImageLockError) as exc:
        raise click.ClickException(str(exc)) from exc
    images = {step: pin(image, lock) for step, image in images.items() if step in profiles}
    rows = plan(profiles, target, {step: image.rsplit("/", 1)[-1]
                                   for step, image in images.items()})
    if output_format == "json":
        print_json(plan_json(pipeline, target, rows, images, target_notes(
            profiles, target, () if pipeline == "sweep" else ("train-model",))))
        return
    caption = ("CPU and memory: request = limit" if target == "gke"
               else "CPU and memory: limits; Vertex AI picks the machine")
    if target == "gke" and not wide:
        caption += "; accelerator: node label, requested as nvidia.com/gpu"
    console = print_table(plan_records(rows, wide), PLAN_COLUMNS, PLAN_WIDE_COLUMNS, wide,
                          title=f"{pipeline} on {target}", caption=caption, no_wrap=("step",))
    for image in sorted(set(images.values())):
        pinned = ("pinned" if is_pinned(image)
                  else "tag only, not built: run `gkeflow images build`")
        steps = ", ".join(step for step, named in images.items() if named == image)
        console.print(f"image {image} ({pinned}; {pull_size_note(image)}): {steps}",
                      markup=False)
    notes = target_notes(profiles, target, () if pipeline == "sweep" else ("train-model",))
    if pipeline == "sweep":
        from gkeflow.pipelines.sweep import TRIAL_STEP, trial_note

        if compute and TRIAL_STEP in compute:
            notes.append(trial_note(target, sweep.engine, compute[TRIAL_STEP]))
    for note in filter(None, notes):
        console.print(f"note: {note}", markup=False)
    for line in _workspace_lines(pipeline, target, config, config_path, profiles):
        console.print(line, markup=False)
    if target == "gke":
        from gkeflow.pipelines.targets.backend_version import plan_line

        console.print(plan_line(pipeline, compute, config), markup=False)
    if pipeline == "sweep":
        from gkeflow.pipelines.cli.sweep import plan_lines

        for line in plan_lines(sweep, profiles, target):
            console.print(line, markup=False)


def _workspace_lines(pipeline: str, target: str, config, config_path: Path | None,
                     profiles: dict) -> list[str]:
    """What `gkeflow plan` says of the run's workspace (GKE, roots other than gs://)."""
    from gkeflow.pipelines.compute.workspace import parallel_note

    if pipeline not in ("training", "sweep") or target != "gke":
        return []
    from gkeflow.pipelines.compute.workspace import PipelineStorage

    settings = config.gke_workspace()
    jobset = pipeline == "training" and profiles["train-model"].replicas > 1
    try:
        PipelineStorage("gke", settings, jobset=jobset)  # what compile would refuse
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    if not settings.active("gke") or jobset:
        return ["workspace: none (shards and checkpoints under the gs:// pipeline root)"]
    preparation = config.preparation
    writers = "plan-prepare, prepare-group" if preparation.fanout else "prepare-data"
    lines = [f"workspace: {settings.size} {settings.storage_class} ({settings.access_mode}) "
             f"at /kfp-workspace in {writers}, train-model, evaluate-model: prepared shards "
             "and checkpoints; deleted when the run succeeds"]
    notes = []
    if preparation.fanout:
        notes.append(parallel_note(settings, "fan-out groups", preparation.parallelism))
    if pipeline == "sweep":
        from gkeflow.pipelines.cli.sweep import resolve_sweep

        notes.append(parallel_note(settings, "sweep trials",
                                   resolve_sweep(config_path).parallel_trials))
    return lines + [f"note: {note}" for note in notes if note]


# ---------------------------------------------------------------------------------------------
# models


@main.group()
def models() -> None:
    """Inspect and promote models in the registry."""


def _registry_option(func):
    """The connection options shared by the ``models`` commands."""
    options = [
        click.option("--backend", type=click.Choice(["local", "vertex", "kubeflow"]),
                     help="Registry to use. Default: registry.backend in gkeflow.yaml, else "
                          "local."),
        click.option("--registry", metavar="URI",
                     help="Registry URI, overriding everything else: sqlite:///<path>, "
                          "vertex://projects/<p>/locations/<l>, kubeflow://host:port. "
                          f"Default for local: sqlite:///{DEFAULT_RUN_OUTPUT / REGISTRY_FILE} "
                          "(what `gkeflow run` writes)."),
        click.option("--project", metavar="PROJECT", help="Vertex AI: Google Cloud project."),
        click.option("--location", metavar="REGION", help="Vertex AI: region, e.g. us-central1."),
        click.option("--api-endpoint", metavar="HOST",
                     help="Vertex AI: API endpoint other than the regional default."),
        click.option("--host", metavar="HOST",
                     help="Kubeflow Model Registry: REST host (e.g. "
                          "model-registry-service.kubeflow.svc.cluster.local)."),
        click.option("--port", type=click.IntRange(1, 65535),
                     help="Kubeflow Model Registry: REST port (default 8080)."),
        click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
                     help="Config file with a registry: section. Default: ./gkeflow.yaml if "
                          "present."),
        click.option("--output", "run_output", type=NonEmptyPath(file_okay=False, path_type=Path),
                     help="The --output directory of `gkeflow run`: use its local registry "
                          f"(OUTPUT/{REGISTRY_FILE})."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _open_cli_registry(backend, registry, project, location, api_endpoint, host, port,
                       config_path, run_output=None):
    """Flags over gkeflow.yaml's ``registry:`` over defaults -> (registry, URI, backend)."""
    if run_output is not None:
        if registry or (backend and backend != "local"):
            raise click.UsageError("--output names a local registry; drop --registry/--backend")
        registry = f"sqlite:///{Path(run_output).resolve() / REGISTRY_FILE}"
    from gkeflow.components.register.backends import RegistrySettings, backend_of, open_registry
    from gkeflow.components.register.local_registry import RegistryError, registry_path
    from gkeflow.pipelines.config import ConfigError, load_config

    try:
        configured = load_config(config_path).registry
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    changes = {k: v for k, v in {"backend": backend, "project": project, "location": location,
                                 "api_endpoint": api_endpoint, "host": host,
                                 "port": port}.items() if v is not None}
    if backend and backend != configured.backend:
        changes["uri"] = ""  # the file's URI is for another backend
    settings = configured.model_copy(update=changes)
    try:
        uri = registry or settings.registry_uri()
        kind = backend_of(uri)
        if kind == "local" and not registry_path(uri).exists():
            raise click.ClickException(f"no registry at {registry_path(uri)}; "
                                       "run `gkeflow run` first or pass --registry")
        opened = open_registry(uri, RegistrySettings(
            serving_image=settings.serving_image, api_endpoint=settings.api_endpoint,
            author=settings.author))
    except (ConfigError, RegistryError) as exc:
        raise click.ClickException(str(exc)) from exc
    return opened, uri, kind


@models.command("list")
@click.option("--name", metavar="NAME", help="Only this model's versions.")
@format_options("--format")
@_registry_option
def models_list(name: str | None, wide: bool = False, output_format: str = "table",
                **connection) -> None:
    """List models, their versions, key metrics and aliases.

    Works with every registry: the embedded one `gkeflow run` writes (default), Vertex AI
    Model Registry (--backend vertex --project P --location L) and Kubeflow Model Registry
    (--backend kubeflow --host H --port N); settings may also come from gkeflow.yaml's
    registry: section. The table fits COLUMNS (or the terminal), wrapping long URIs;
    --wide adds the run id and labels; --format json prints every field.
    """
    from gkeflow.components.register.local_registry import RegistryError

    registry, uri, kind = _open_cli_registry(**connection)
    console = _console()
    try:
        with console.status(f"reading the {kind} registry…"):
            versions = registry.list(name=name)
            from gkeflow.pipelines.cli.deploy import serving_by_version

            serving = serving_by_version(kind, uri, connection.get("api_endpoint") or "",
                                         _serving_namespaces(connection.get("config_path")))
    except RegistryError as exc:
        raise click.ClickException(str(exc)) from exc
    if output_format == "json":
        print_json([{**version_record(v), "serving": serving.get((v.name, v.version), "")}
                    for v in versions])
        return
    if not versions:
        console.print("no models registered" + (f" under {name!r}" if name else ""))
        return
    rows = [{**version_row(v), "serving": serving.get((v.name, v.version), "")}
            for v in versions]
    print_table(rows, MODEL_COLUMNS, MODEL_WIDE_COLUMNS, wide, no_wrap=("version",))


def _serving_namespaces(config_path) -> list[str]:
    """Where `gkeflow deploy --target gke` puts InferenceServices: each deploy: entry's
    namespace (default: default)."""
    from gkeflow.pipelines.config import ConfigError, load_config

    try:
        deploy = load_config(config_path).deploy
    except ConfigError:
        return ["default"]
    return list(dict.fromkeys(entry.namespace or "default" for entry in deploy.values())) or [
        "default"]


@models.command("promote")
@click.argument("name")
@click.argument("version", type=int)
@click.option("--alias", default="champion", show_default=True,
              help="Alias to point at VERSION (moved from any other version).")
@_registry_option
def models_promote(name: str, version: int, alias: str, **connection) -> None:
    """Point an alias (default: champion) at VERSION of model NAME.

    The alias moves from whichever version held it. Same connection options as
    `gkeflow models list`.
    """
    from gkeflow.components.register.local_registry import RegistryError

    registry, _, kind = _open_cli_registry(**connection)
    try:
        with _console().status(f"promoting {name} version {version} in the {kind} registry…"):
            promoted = registry.set_alias(name, version, alias)
    except RegistryError as exc:
        raise click.ClickException(str(exc)) from exc
    _console().print(f"{promoted.name} version {promoted.version} is now {alias!r} "
                     f"({promoted.resource_name})", markup=False)


# ---------------------------------------------------------------------------------------------
# init, submit, schedule: pipelines/cli/ship.py

from gkeflow.pipelines.cli.images import images_group  # noqa: E402
from gkeflow.pipelines.cli.ship import init_command, schedule_group, submit_command  # noqa: E402

for _command in (init_command, submit_command, schedule_group, images_group):
    main.add_command(_command)

from gkeflow.pipelines.cli.runs import runs_group  # noqa: E402

main.add_command(runs_group)
from gkeflow.pipelines.cli.deploy import deploy_group  # noqa: E402

main.add_command(deploy_group, "deploy")
from gkeflow.pipelines.cli.monitoring import monitoring_group  # noqa: E402

main.add_command(monitoring_group)
from gkeflow.pipelines.cli.prices import prices_group  # noqa: E402

main.add_command(prices_group)


if __name__ == "__main__":
    main()
