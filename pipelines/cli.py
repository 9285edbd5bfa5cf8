"""The ``gkeflow`` command: run pipelines locally, compile them per target, inspect models."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from gkeflow.pipelines.compile import COMPILE_TARGETS, DEFAULT_OUTPUT
from gkeflow.pipelines.sweep_cli import sweep_options

DEFAULT_RUN_OUTPUT = Path("gkeflow-output")
REGISTRY_FILE = "registry.db"


def _console() -> Console:
    """Rich output on stdout; wide enough for tables when stdout is not a terminal."""
    width = None if sys.stdout.isatty() else 160
    return Console(file=sys.stdout, highlight=False, width=width)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gkeflow")
def main() -> None:
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
      gkeflow init                     write an example gkeflow.yaml
      gkeflow submit --target vertex   run the pipeline on Vertex AI (or --target gke)
      gkeflow schedule apply           create/update the schedules of gkeflow.yaml
    """


# ---------------------------------------------------------------------------------------------
# run


def _default_model_name(data: str | None) -> str:
    if not data:
        return "penguins-classifier"
    stem = re.sub(r"[^a-z0-9-]+", "-", Path(data).stem.lower()).strip("-") or "model"
    if not stem[0].isalpha():
        stem = f"m-{stem}"
    return f"{stem[:50]}-classifier"


#: `gkeflow run --pipeline NAME` -> "module:function" running it (training and prediction run
#: inline below).
RUN_PIPELINES = {
    "training": "", "prediction": "", "sweep": "gkeflow.pipelines.sweep_cli:run_sweep",
}


def _dispatch_run(pipeline: str, **options) -> None:
    import importlib

    module, _, function = RUN_PIPELINES[pipeline].partition(":")
    getattr(importlib.import_module(module), function)(_console(), **options)


@main.command()
@click.option("--pipeline", type=click.Choice(list(RUN_PIPELINES)), default="training",
              show_default=True,
              help="training: prepare, train, evaluate, register. sweep: one model per trial "
                   "of the search space, the best registered. prediction: score --data with a "
                   "model registered by an earlier run in the same --output.")
@click.option("--model", "model_ref", metavar="NAME[@VERSION|@ALIAS]",
              help="--pipeline prediction: the registered model (default: the only one, at "
                   "its champion alias or newest version).")
@click.option("--data", "data", metavar="PATH",
              help="CSV file to train on (or, with --pipeline prediction, rows to score). "
                   "Default: the bundled Palmer Penguins data.")
@click.option("--label", "label", metavar="COLUMN",
              help="Column holding the class to predict (required with --data; "
                   "'species' for the bundled data).")
@click.option("--output", "output", type=click.Path(file_okay=False, path_type=Path),
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
                   "README for parameters).")
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
@click.option("-v", "--verbose", is_flag=True, help="Stream every step's log to the terminal.")
@click.option("--debug", is_flag=True,
              help="On a failed step, show its Python traceback, not only the message.")
@sweep_options
def run(pipeline, model_ref, data, label, output, epochs, batch_size, learning_rate,
        train_ratio, eval_ratio, test_ratio, model_name, min_accuracy, model_type, user_module,
        params, compute_overrides, key_column, exclude_columns, feature_columns, no_cache,
        verbose, debug, **pipeline_options) -> None:
    """Run the training pipeline on this machine with kfp.local (no cloud, no Docker).

    Executes the same pipeline definition that `gkeflow compile` writes for GKE and
    Vertex: prepare -> train -> evaluate -> register (only if accuracy >= --min-accuracy).
    Every step runs as a subprocess; the full log is saved under OUTPUT/logs/.
    With --pipeline prediction: score --data with a registered model (see README).

    --pipeline sweep trains one model per trial (the sweep: section of gkeflow.yaml and
    the (sweep) flags), prints the trial table and evaluates and registers the best.
    """
    if RUN_PIPELINES[pipeline]:
        return _dispatch_run(
            pipeline, data=data, label=label, output=output, epochs=epochs,
            batch_size=batch_size, learning_rate=learning_rate, train_ratio=train_ratio,
            eval_ratio=eval_ratio, test_ratio=test_ratio, model_name=model_name,
            min_accuracy=min_accuracy, model_type=model_type, user_module=user_module,
            params=params, no_cache=no_cache, verbose=verbose, **pipeline_options)
    from gkeflow.components.prepare.logic import EMBEDDED_PENGUINS, SplitRatios
    from gkeflow.pipelines.local import run_local

    console = _console()
    if pipeline == "prediction":
        from gkeflow.pipelines.run_prediction import run_prediction_command

        return run_prediction_command(console, data, model_ref, output, REGISTRY_FILE, params,
                                      no_cache, verbose)
    if model_ref:
        raise click.UsageError("--model applies to --pipeline prediction; name the model to "
                               "train with --model-name")
    if data and not label:
        raise click.UsageError("--label is required with --data: name the column to predict.")
    if data and not Path(data).is_file():
        raise click.BadParameter(f"no such file: {data}", param_hint="--data")
    try:
        SplitRatios(train_ratio, eval_ratio, test_ratio)
    except ValueError as exc:
        raise click.BadParameter(
            str(exc), param_hint="--train-ratio/--eval-ratio/--test-ratio"
        ) from exc
    model_name = model_name or _default_model_name(data)
    output = output.resolve()
    arguments = {
        "data_uri": str(Path(data).resolve()) if data else EMBEDDED_PENGUINS,
        "label_column": label or "species",
        "train_ratio": train_ratio,
        "eval_ratio": eval_ratio,
        "test_ratio": test_ratio,
        "epochs": epochs,
        "batch_size": batch_size,
        "learning_rate": learning_rate,
        "model_name": model_name,
        "min_accuracy": min_accuracy,
        "registry_uri": f"sqlite:///{output / REGISTRY_FILE}",
        "model_type": model_type,
    }
    if user_module:
        if user_module.endswith(".py") and not Path(user_module).is_file():
            raise click.BadParameter(f"no such file: {user_module}", param_hint="--user-module")
        arguments["user_module"] = (str(Path(user_module).resolve())
                                    if user_module.endswith(".py") else user_module)
    arguments.update(_pipeline_params(params))
    for name, value in (("key_column", key_column),
                        ("exclude_columns", ",".join(exclude_columns)),
                        ("feature_columns", ",".join(feature_columns))):
        if value:
            arguments[name] = value
    from gkeflow.pipelines.run_checks import ParameterError, validate_run_arguments

    try:
        validate_run_arguments(arguments)
    except ParameterError as exc:
        raise click.ClickException(str(exc)) from None
    console.print(f"[bold]gkeflow run[/bold]: training pipeline on "
                  f"{data or 'the bundled Palmer Penguins data'} "
                  f"(label: {arguments['label_column']})")

    def on_event(step) -> None:
        if step.status == "RUNNING":
            console.print(f"  [cyan]…[/cyan] {step.name} started")
        else:
            mark = "[green]✓[/green]" if step.status == "SUCCESS" else "[red]✗[/red]"
            console.print(f"  {mark} {step.name} {step.status.lower()} in {step.duration_s:.1f}s")

    from gkeflow.pipelines.compile import pipeline_compute
    from gkeflow.pipelines.local import LocalRunError

    compute = (pipeline_compute("training", _resolve_compute(None, compute_overrides))
               if compute_overrides else None)
    try:
        result = run_local(arguments, output, echo_logs=verbose, on_event=on_event,
                           enable_caching=not no_cache, compute=compute)
    except LocalRunError as exc:
        raise click.ClickException(str(exc)) from exc
    _print_run_summary(console, result, arguments, debug)
    if not result.ok:
        sys.exit(1)


def _pipeline_params(options: tuple[str, ...]) -> dict:
    """``KEY=VALUE`` options as typed arguments of the training pipeline."""
    from gkeflow.pipelines.training import training_pipeline

    inputs = training_pipeline.component_spec.inputs
    casts = {"Integer": int, "Float": float, "String": str,
             "Boolean": lambda v: {"true": True, "false": False}[v.lower()]}
    values = {}
    for option in options:
        key, sep, raw = option.partition("=")
        key = key.strip()
        if not sep or key not in inputs:
            raise click.BadParameter(
                f"{option!r}: expected KEY=VALUE with KEY one of {', '.join(inputs)}",
                param_hint="--param")
        try:
            values[key] = casts.get(inputs[key].type, str)(raw.strip())
        except (ValueError, KeyError) as exc:
            raise click.BadParameter(f"{key} must be of type {inputs[key].type}; got {raw!r}",
                                     param_hint="--param") from exc
    return values


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
        console.print(f"Registered: [bold]{arguments['model_name']}[/bold] version "
                      f"{registered.get('model_version')} ({registered.get('resource_name')})")
    elif result.ok:
        console.print("Registered: nothing (the model did not pass the gate)")
    if result.run_dir:
        console.print(f"Artifacts: {result.run_dir}")
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
            import textwrap

            from gkeflow.pipelines.run_checks import user_error

            message = None if debug else user_error(failed.log)
            if message is not None:  # the data's or a parameter's problem: no traceback
                console.print(textwrap.indent(message, "  "), markup=False, soft_wrap=True)
                console.print(f"(traceback in {result.log_path}; --debug shows it)")
            else:
                lines = failed.error_lines(limit=1000 if debug else 8)
                console.print(textwrap.dedent("\n".join(lines)).rstrip(),
                              markup=False, soft_wrap=True)
        else:
            console.print(f"[red bold]FAILED[/red bold]: {result.error}", markup=False)


# ---------------------------------------------------------------------------------------------
# compile


def _compute_options(func):
    """--config and --compute: per-step compute from gkeflow.yaml, then from the command line."""
    func = click.option(
        "--compute", "compute_overrides", metavar="STEP.FIELD=VALUE", multiple=True,
        help="Override one compute field of one step, e.g. train-model.accelerator=nvidia-l4 "
             "or train-model.accelerator_count=2; repeatable. Fields: "
             "cpu, memory, accelerator, accelerator_count, spot, shm_size, timeout_s, retries, "
             "retry_backoff_s, retry_backoff_factor, retry_max_duration_s, caching.",
    )(func)
    return click.option(
        "--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
        help="gkeflow.yaml whose `compute:` section overrides the defaults per step. "
             "Default: ./gkeflow.yaml when it exists.",
    )(func)


def _resolve_compute(config_path: Path | None, compute_overrides: tuple[str, ...]) -> dict:
    """Per-step profiles: defaults in code, then gkeflow.yaml, then --compute flags."""
    from gkeflow.pipelines.compile import default_compute
    from gkeflow.pipelines.compute import ComputeError, apply_overrides
    from gkeflow.pipelines.config import ConfigError, load_config

    try:
        profiles = load_config(config_path).compute_overrides(default_compute())
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        return apply_overrides(profiles, compute_overrides)
    except ComputeError as exc:
        raise click.BadParameter(str(exc), param_hint="--compute") from exc


@main.command("compile")
@click.option("--target", type=click.Choice([*COMPILE_TARGETS, "all"]), default="all",
              show_default=True, help="Backend to compile for.")
@click.option("--output", type=click.Path(file_okay=False, path_type=Path),
              default=DEFAULT_OUTPUT, show_default=True, help="Directory for the YAML files.")
@click.option("--check", is_flag=True,
              help="Write nothing; exit 1 naming the files that differ from what the code "
                   "produces now.")
@click.option("--release", is_flag=True,
              help="Refuse to compile when any step's image is referenced by tag only "
                   "(no digest in images/images.lock.json).")
@_compute_options
def compile_command(target: str, output: Path, check: bool, release: bool,
                    config_path: Path | None, compute_overrides: tuple[str, ...]) -> None:
    """Compile the pipelines to YAML for Kubeflow Pipelines on GKE and/or Vertex AI Pipelines.

    Writes <pipeline>.<target>.yaml: the GKE file carries kfp-kubernetes settings
    (node selectors, tolerations); the Vertex file is a single document with NVIDIA_*
    accelerator types. Each step's compute (defaults, gkeflow.yaml, --compute) is
    validated for the target first; images are pinned to the digests in
    images/images.lock.json. `gkeflow plan` shows what each step will request.
    """
    from gkeflow.components.images import ImageLockError
    from gkeflow.pipelines.compile import ReleaseError, compile_all, stale_files
    from gkeflow.pipelines.component_yaml import compile_components, stale_component_files
    from gkeflow.pipelines.compute import ComputeError, target_notes

    targets = COMPILE_TARGETS if target == "all" else (target,)
    console = _console()
    compute = _resolve_compute(config_path, compute_overrides)
    try:
        if check:
            stale = stale_files(output, targets, compute=compute) + stale_component_files(output)
            if stale:
                for path in stale:
                    console.print(f"stale: {path}", markup=False)
                console.print("Run `gkeflow compile` and commit the result.")
                sys.exit(1)
            console.print(f"compiled pipelines in {output} are up to date", markup=False)
            return
        paths = compile_all(output, targets, compute=compute, release=release)
        paths += compile_components(output, release=release)
    except (ComputeError, ReleaseError, ImageLockError) as exc:
        raise click.ClickException(str(exc)) from exc
    for path in paths:
        console.print(f"wrote {path}", markup=False)
    from gkeflow.components.images import IMAGES, is_pinned, load_lock, pin

    tag_only = [image for image in IMAGES if not is_pinned(pin(image, load_lock()))]
    if tag_only:
        console.print(f"note: image(s) referenced by tag only, not by digest: "
                      f"{', '.join(tag_only)} (images/build.sh records digests; "
                      "`gkeflow compile --release` refuses tags)", markup=False)
    for compile_target in targets:
        for note in target_notes(compute, compile_target):
            console.print(f"note ({compile_target}): {note}", markup=False)


@main.command("docs")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Where to write the reference. Default: docs/components.md.")
@click.option("--check", is_flag=True,
              help="Write nothing; exit 1 when the reference differs from the component specs.")
def docs_command(output: Path | None, check: bool) -> None:
    """Generate docs/components.md, the component reference, from the component specs."""
    from gkeflow.pipelines.reference import main as reference_main

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
def plan_command(pipeline: str, pipeline_option: str | None, target: str,
                 config_path: Path | None, compute_overrides: tuple[str, ...]) -> None:
    """Show what each step of PIPELINE (default: training) will request on a target.

    One row per step: image, CPU, memory, accelerator (as the target spells it), GPUs per
    node, capacity (on-demand, spot, flex-start or reservation), nodes x GPUs per node,
    total GPUs, Kueue queue, ephemeral disk, retries, caching, timeout, /dev/shm and the
    machine shape that hosts it.
    The compute is validated exactly as `gkeflow compile` does; requests the target
    cannot honour are listed below the table.
    """
    from gkeflow.components.images import ImageLockError, is_pinned, load_lock, pin
    from gkeflow.pipelines.compile import PIPELINES
    from gkeflow.pipelines.compute import ComputeError, plan, target_notes

    pipeline = pipeline_option or pipeline
    if pipeline not in PIPELINES:
        raise click.BadParameter(f"unknown pipeline {pipeline!r}; available: "
                                 f"{', '.join(PIPELINES)}", param_hint="PIPELINE")
    if pipeline == "prediction":
        from gkeflow.pipelines.prediction import resolve_compute, step_images
    elif pipeline == "sweep":
        from gkeflow.pipelines.sweep import resolve_sweep_compute, step_images
        from gkeflow.pipelines.sweep_cli import resolve_sweep

        sweep = resolve_sweep(config_path)

        def resolve_compute(target, compute):
            return resolve_sweep_compute(target, compute, sweep.engine)
    else:
        from gkeflow.pipelines.training import resolve_compute, step_images

    from gkeflow.pipelines.compile import pipeline_compute

    compute = pipeline_compute(pipeline, _resolve_compute(config_path, compute_overrides))
    try:
        profiles = resolve_compute(target, compute)
        lock = load_lock()
        images = (step_images(target, profiles) if pipeline == "prediction"
                  else step_images())
    except (ComputeError, ImageLockError) as exc:
        raise click.ClickException(str(exc)) from exc
    images = {step: pin(image, lock) for step, image in images.items() if step in profiles}
    rows = plan(profiles, target, {step: image.rsplit("/", 1)[-1]
                                   for step, image in images.items()})
    caption = ("CPU and memory: request = limit" if target == "gke"
               else "CPU and memory: limits; Vertex AI picks the machine")
    table = Table(title=f"{pipeline} on {target}", title_justify="left", caption=caption,
                  caption_justify="left")
    columns = ("step", "image", "cpu", "memory", "accelerator", "count", "capacity", "nodes",
               "gpus", "queue", "disk", "retries", "caching", "timeout", "shm", "machine")
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(getattr(row, column) for column in columns))
    console = _console()
    if not sys.stdout.isatty():
        console.width = 220  # one line per step when the plan is piped or captured
    console.print(table)
    for image in sorted(set(images.values())):
        pinned = ("pinned" if is_pinned(image)
                  else "tag only: `gkeflow compile --release` refuses it")
        console.print(f"image {image} ({pinned})", markup=False)
    for note in target_notes(profiles, target):
        console.print(f"note: {note}", markup=False)
    if pipeline == "sweep":
        from gkeflow.pipelines.sweep_cli import plan_lines

        for line in plan_lines(sweep, profiles, target):
            console.print(line, markup=False)


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
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _open_cli_registry(backend, registry, project, location, api_endpoint, host, port,
                       config_path):
    """Flags over gkeflow.yaml's ``registry:`` over defaults -> (registry, URI, backend)."""
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
@_registry_option
def models_list(name: str | None, **connection) -> None:
    """List models, their versions, key metrics and aliases.

    Works with every registry: the embedded one `gkeflow run` writes (default), Vertex AI
    Model Registry (--backend vertex --project P --location L) and Kubeflow Model Registry
    (--backend kubeflow --host H --port N); settings may also come from gkeflow.yaml's
    registry: section.
    """
    from gkeflow.components.register.local_registry import RegistryError

    registry, _, kind = _open_cli_registry(**connection)
    console = _console()
    try:
        with console.status(f"reading the {kind} registry…"):
            versions = registry.list(name=name)
    except RegistryError as exc:
        raise click.ClickException(str(exc)) from exc
    if not versions:
        console.print("no models registered" + (f" under {name!r}" if name else ""))
        return
    table = Table()
    for column in ("model", "version", "aliases", "accuracy", "run id", "created", "uri"):
        table.add_column(column)
    import datetime

    for v in versions:
        accuracy = v.metrics.get("accuracy")
        table.add_row(
            v.name, str(v.version), ",".join(v.aliases),
            f"{accuracy:.4f}" if accuracy is not None else "",
            v.run_id,
            datetime.datetime.fromtimestamp(v.created_at).strftime("%Y-%m-%d %H:%M:%S"),
            v.uri,
        )
    console.print(table)


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
# init, submit, schedule


def _config_option(func):
    return click.option(
        "--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
        default=Path("gkeflow.yaml"), show_default=True,
        help="The configuration file (`gkeflow init` writes an example).")(func)


def _load(config_path: Path):
    from gkeflow.pipelines.config import ConfigError, load_config

    if not config_path.exists():
        raise click.ClickException(f"{config_path} not found; `gkeflow init` writes a "
                                   "commented example")
    try:
        return load_config(config_path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc


def _remote_errors(func):
    """Turn the expected failures of remote work into one clear line and exit 1."""
    import functools

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        from gkeflow.pipelines.config import ConfigError
        from gkeflow.pipelines.cron import CronError
        from gkeflow.pipelines.remote import RemoteError, redact
        from gkeflow.pipelines.submit import SubmitError

        try:
            return func(*args, **kwargs)
        except (RemoteError, SubmitError, ConfigError, CronError, LookupError) as exc:
            raise click.ClickException(redact(str(exc))) from None

    return wrapper


def _print_planned(console: Console, planned) -> None:
    console.print(f"[bold]--dry-run[/bold]: {len(planned)} request(s) would be sent; "
                  "nothing was changed")
    for request in planned:
        console.print(request.render(), markup=False, soft_wrap=True)


@main.command("init")
@click.option("--path", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("gkeflow.yaml"), show_default=True, help="File to write.")
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
def init_command(path: Path, force: bool) -> None:
    """Write a commented example gkeflow.yaml: targets, parameters per environment, schedules.

    Edit the values, then `gkeflow submit --target gke|vertex` or `gkeflow schedule apply`.
    The example is valid as written (it is checked before it is written).
    """
    from gkeflow.pipelines.config import EXAMPLE_CONFIG, ConfigError, load_config

    if path.exists() and not force:
        raise click.ClickException(f"{path} already exists; pass --force to overwrite it")
    import os
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(EXAMPLE_CONFIG)
        try:
            load_config(tmp)
        except ConfigError as exc:  # pragma: no cover - guarded by a unit test
            raise click.ClickException(f"internal error: the example is invalid: {exc}") from exc
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    _console().print(f"wrote {path}; edit targets, parameters and schedules, then run "
                     "`gkeflow submit --target gke|vertex`", markup=False)


@main.command("submit")
@click.argument("pipeline", default="training")
@click.option("--target", type=click.Choice(["gke", "vertex"]), required=True,
              help="gke: Kubeflow Pipelines (targets.gke); vertex: Vertex AI (targets.vertex).")
@click.option("--env", "environment", default="default", show_default=True,
              help="Which `parameters:` section of gkeflow.yaml to use.")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE",
              help="A pipeline parameter (repeatable); wins over the environment's value.")
@click.option("--wait", is_flag=True,
              help="Follow the run: print each step's state changes, exit 1 unless it "
                   "succeeds.")
@click.option("--poll", "poll_s", type=click.FloatRange(min=0.01), default=10.0,
              show_default=True, help="Seconds between status checks with --wait.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=24 * 3600.0,
              show_default=True, help="Give up waiting after this many seconds (the run "
                                      "continues).")
@click.option("--dry-run", is_flag=True,
              help="Print the requests that would create the run; change nothing.")
@_config_option
@_remote_errors
def submit_command(pipeline, target, environment, params, wait, poll_s, timeout_s, dry_run,
                   config_path) -> None:
    """Compile PIPELINE (default: training) for a target and start a run there.

    \b
    gke:    uploads the pipeline once and a version named after the git commit (or the
            package version) plus a hash of the spec, creates the run in the configured
            experiment (created if needed) and prints the run's Kubeflow UI URL.
    vertex: creates a PipelineJob with the configured service account, network, CMEK key,
            labels and pipeline root, and prints the Cloud console URL.

    Parameters: the pipeline's defaults, then parameters.<--env> from gkeflow.yaml, then
    --param. Connection errors and 5xx answers are retried with backoff; every call has a
    timeout. Bearer tokens are read from the environment and never printed.
    """
    import tempfile

    from gkeflow.pipelines.submit import parse_param_options, submit, wait_for_run

    config = _load(config_path)
    console = _console()
    overrides = parse_param_options(params)
    console.print(f"[bold]gkeflow submit[/bold]: {pipeline} -> {target} (environment "
                  f"{environment})")
    with tempfile.TemporaryDirectory(prefix="gkeflow-submit-") as workdir:
        submission, backend = submit(config, pipeline, target, environment=environment,
                                     overrides=overrides, workdir=Path(workdir),
                                     dry_run=dry_run)
    if dry_run:
        _print_planned(console, backend.planned)
        return
    for note in submission.notes:
        console.print(f"  {note}", markup=False)
    console.print(f"  version:    {submission.version_name}", markup=False)
    console.print(f"  run:        {submission.run_id}", markup=False)
    console.print(f"  parameters: {submission.parameters}", markup=False)
    console.print(f"Run URL: {submission.url}", markup=False, soft_wrap=True)
    if not wait:
        return

    def on_change(task, old, new):
        if not task:
            console.print(f"run {new.lower()}", markup=False)
            return
        mark = {"SUCCEEDED": "[green]✓[/green]", "FAILED": "[red]✗[/red]",
                "RUNNING": "[cyan]…[/cyan]"}.get(new, "·")
        console.print(f"  {mark} {task} {new.lower()}")

    status = wait_for_run(backend, submission.run_id, poll_s=poll_s, timeout_s=timeout_s,
                          on_change=on_change)
    if status.state != "SUCCEEDED":
        detail = f": {status.error}" if status.error else ""
        raise click.ClickException(f"run {submission.run_id} ended {status.state}{detail} "
                                   f"(see {submission.url})")
    console.print(f"[green bold]SUCCEEDED[/green bold]: {submission.url}")


@main.group("schedule")
def schedule_group() -> None:
    """Recurring runs from the `schedules:` section of gkeflow.yaml, on GKE and Vertex.

    \b
    gkeflow schedule apply [--prune] [--dry-run]   make the targets match the file
    gkeflow schedule list                          what is scheduled, next run times
    gkeflow schedule pause|resume|delete NAME
    """


def _target_option(func):
    return click.option("--target", type=click.Choice(["gke", "vertex"]),
                        help="Only this target (default: every configured target).")(func)


@schedule_group.command("apply")
@click.option("--prune", is_flag=True,
              help="Also delete gkeflow schedules that are no longer in the file.")
@click.option("--dry-run", is_flag=True,
              help="Read what is there, print the requests that would change it; change "
                   "nothing.")
@_target_option
@_config_option
@_remote_errors
def schedule_apply(prune, dry_run, target, config_path) -> None:
    """Create, update or replace the schedules of gkeflow.yaml on their targets (idempotent).

    Running it twice leaves one schedule per name. A schedule whose pipeline version or
    parameters changed is replaced (KFP: also when its cron, max_concurrency or catch_up
    changed, since KFP cannot update a recurring run); on Vertex a changed cron or
    max_concurrency is updated in place; enabled: false pauses. Schedules on a target
    that are not in the file are only reported, unless --prune. KFP runs the cron in UTC:
    the time zone is converted with its current UTC offset (re-run apply after a
    daylight-saving change; `schedule list` warns when needed).
    """
    import tempfile

    from gkeflow.pipelines.schedule import apply

    config = _load(config_path)
    console = _console()
    styles = {"create": "green", "replace": "yellow", "update": "yellow", "delete": "red",
              "pause": "yellow", "resume": "green", "upload": "cyan", "unchanged": "dim",
              "kept": "magenta"}

    def on_action(action) -> None:
        style = styles.get(action.kind, "white")
        verb = f"would {action.kind}" if dry_run and action.kind not in ("unchanged", "kept") \
            else action.kind
        console.print(f"  [{style}]{verb:>16}[/{style}] {action.target}/{action.schedule}"
                      + (f"  ({action.detail})" if action.detail else ""))

    if not config.schedules and not prune:
        console.print("no schedules in the file; nothing to apply (add `schedules:` or use "
                      "--prune to remove gkeflow schedules from the targets)")
        return
    with tempfile.TemporaryDirectory(prefix="gkeflow-schedule-") as workdir:
        result = apply(config, workdir=Path(workdir), target=target, prune=prune,
                       dry_run=dry_run, on_action=on_action)
    if dry_run:
        _print_planned(console, result.planned)
    elif not result.changed:
        console.print("everything already matches gkeflow.yaml")


@schedule_group.command("list")
@click.option("--next", "count", type=click.IntRange(1, 20), default=1, show_default=True,
              help="How many upcoming run times to show per schedule.")
@_target_option
@_config_option
@_remote_errors
def schedule_list(count, target, config_path) -> None:
    """List gkeflow's schedules on the targets with their next run times.

    Times are shown in the schedule's own time zone. A KFP schedule converted with a UTC
    offset that no longer holds (daylight saving changed) is flagged.
    """
    from gkeflow.pipelines.schedule import list_schedules

    config = _load(config_path)
    if config.targets.gke is None and config.targets.vertex is None:
        raise click.ClickException(f"{config_path}: no targets configured; add targets.gke "
                                   "and/or targets.vertex (`gkeflow init` shows how)")
    rows = list_schedules(config, target=target, count=count)
    console = _console()
    if not rows:
        console.print("no gkeflow schedules on the configured targets")
        return
    table = Table()
    for column in ("target", "name", "state", "cron on target", "gkeflow.yaml", "max conc.",
                   "next run"):
        table.add_column(column)
    for row in rows:
        state = "active" if row.enabled else "paused"
        nxt = "\n".join(t.strftime("%Y-%m-%d %H:%M %Z") for t in row.next_runs) or "-"
        local = row.local if row.in_config else f"{row.local} (not in file)".strip()
        table.add_row(row.target, row.name, state, row.cron, local, str(row.max_concurrency),
                      nxt)
    console.print(table)
    for row in rows:
        if row.warning:
            console.print(f"[yellow]warning[/yellow] {row.target}/{row.name}: {row.warning}",
                          soft_wrap=True)


@schedule_group.command("pause")
@click.argument("name")
@_target_option
@_config_option
@_remote_errors
def schedule_pause(name, target, config_path) -> None:
    """Pause schedule NAME (no new runs until resumed). `apply` would resume it while the
    file says enabled: true."""
    from gkeflow.pipelines.schedule import set_enabled

    for line in set_enabled(_load(config_path), name, False, target=target):
        _console().print(line, markup=False)


@schedule_group.command("resume")
@click.argument("name")
@click.option("--catch-up", is_flag=True,
              help="Vertex: also start the runs missed while paused.")
@_target_option
@_config_option
@_remote_errors
def schedule_resume(name, catch_up, target, config_path) -> None:
    """Resume paused schedule NAME."""
    from gkeflow.pipelines.schedule import set_enabled

    for line in set_enabled(_load(config_path), name, True, target=target, catch_up=catch_up):
        _console().print(line, markup=False)


@schedule_group.command("delete")
@click.argument("name")
@_target_option
@_config_option
@_remote_errors
def schedule_delete(name, target, config_path) -> None:
    """Delete schedule NAME from the target(s). `apply` recreates it while it is in the
    file."""
    from gkeflow.pipelines.schedule import delete

    for line in delete(_load(config_path), name, target=target):
        _console().print(line, markup=False)


if __name__ == "__main__":
    main()
