"""`gkeflow run --pipeline prediction`: score rows locally with a model that an earlier
`gkeflow run` registered in the local registry under the same ``--output`` directory (or, with
``tracking.<--env>.mlflow``, in that server's MLflow Model Registry; ``--param registry_uri``
names any other).

Everything that can be checked without TensorFlow is checked before the pipeline starts:
the data exists, the registry exists and holds the model and version asked for, and a
local file's columns hold every input of that model.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

STEPS = ("predict-batch", "report-predictions")


def _data_uri(data: str | None) -> str:
    if not data:
        raise click.UsageError("--data is required with --pipeline prediction: the rows to "
                               "score (CSV or Parquet file, directory or glob; gs:// or bq://)")
    if "://" in data:
        return data
    if any(ch in data for ch in "*?["):
        return str(Path(data).expanduser().absolute())
    path = Path(data).expanduser()
    if not path.exists():
        raise click.BadParameter(f"no such file or directory: {data}", param_hint="--data")
    return str(path.resolve())


def _choose_model(registry_uri: str, model: str | None,
                  header: list[str] | None = None) -> tuple[Any, str, Any]:
    """The registry version to score with, how it was chosen and the parsed reference;
    usage errors otherwise (naming the models whose inputs ``header`` holds)."""
    from gkeflow.components.predict.resolve import PredictError, parse_model_ref, resolve_version
    from gkeflow.components.register.local_registry import registry_path

    if registry_uri.startswith("sqlite:///") and not registry_path(registry_uri).exists():
        raise click.ClickException(
            f"no model registry at {registry_path(registry_uri)}: run `gkeflow run` first "
            "(with the same --output) to train and register a model")
    picked = ""
    if not model:
        names = sorted({v.name for v in _registry(registry_uri).list()})
        if not names:
            raise click.ClickException(
                "the model registry holds no model yet: a run registers its model only when "
                "it passes the gate; train one that passes (gkeflow run --data FILE --label "
                "COLUMN, with the same --output; --min-accuracy or --param thresholds=... "
                "set the gate), then score with it")
        if len(names) != 1:
            fits = _fitting_models(registry_uri, names, header) if header else []
            if len(fits) == 1:  # the only model that can score these columns
                model = fits[0].split("@")[0]
                picked = (f"; the only one of {len(names)} registered models whose inputs "
                          "the data holds")
            elif header and names and not fits:
                raise click.ClickException(
                    f"no registered model takes this data: none of the {len(names)} models "
                    f"({', '.join(names)}) finds its inputs among the data's columns; train "
                    "one on this data first (gkeflow run --data FILE --label COLUMN), or "
                    "pass --model NAME to see what a model misses")
            else:
                raise click.UsageError(
                    "--model is required: the registry holds "
                    + (f"{len(names)} models ({', '.join(names)})" if names else "no model")
                    + (f"; the data's columns fit {len(fits)} of them: pass --model with "
                       f"one of {', '.join(fits)}" if fits else
                       "; e.g. --model NAME@champion or --model NAME@2"))
        else:
            model = names[0]
    try:
        ref = parse_model_ref(model)
        version, how = resolve_version(registry_uri, ref)
    except PredictError as exc:
        raise click.BadParameter(str(exc), param_hint="--model") from exc
    return version, how + picked, ref


def _registry(registry_uri: str):
    """The registry at ``registry_uri``; its errors as one line."""
    from gkeflow.components.register.backends import open_registry
    from gkeflow.components.register.local_registry import RegistryError

    try:
        return open_registry(registry_uri)
    except RegistryError as exc:
        raise click.ClickException(str(exc)) from None


def _local_header(data_uri: str) -> tuple[list[str], str] | None:
    """The columns of local ``data_uri`` and the file named for them; None for remote data
    (the step reads it) and for data the step itself refuses with its own message."""
    from gkeflow.components.prepare.sources import DataError, common_header, resolve_sources

    if "://" in data_uri and not data_uri.startswith("file://"):
        return None
    try:
        header, usable = common_header(resolve_sources(data_uri))
    except DataError:
        return None
    return header, usable[0].name


def _fitting_models(registry_uri: str, names: list[str], header: list[str]) -> list[str]:
    """``NAME@VERSION`` of each of ``names`` (its champion, else newest version) whose
    inputs ``header`` holds."""
    from gkeflow.components.predict.resolve import missing_inputs, model_metadata
    from gkeflow.components.register.backends import champion_or_latest
    registry, fits = _registry(registry_uri), []
    for name in names:
        version = champion_or_latest(registry, name)
        metadata = model_metadata(version.uri) if version else None
        if metadata and not missing_inputs(metadata, header):
            fits.append(f"{name}@{version.version}")
    return fits


def check_model_inputs(registry_uri: str, version, found: tuple[list[str], str] | None,
                       chosen: bool, max_drift: float) -> None:
    """Refuse, before any step, to score local data that lacks columns the model takes
    (the step would fail on 100% drift in each), naming the model and the ``--model`` to
    pass: another registered model whose inputs the data holds, else how to train one.
    ``found``: the data's columns and the file named for them (None: not checked here);
    ``chosen``: the user named the model (else it is the registry's only one)."""
    from gkeflow.components.predict.resolve import missing_inputs, model_metadata

    if max_drift >= 1.0:
        return  # missing columns are allowed through; the step scores them as missing
    metadata = model_metadata(version.uri)
    if found is None or metadata is None:
        return
    header, named_by = found
    missing = missing_inputs(metadata, header)
    if not missing:
        return
    fits = _fitting_models(registry_uri, sorted({v.name for v in _registry(
        registry_uri).list()} - {version.name}), header)
    shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5
                                      else "")
    which = "" if chosen else "the registry's only model "
    if fits:
        fix = f"pass --model {fits[0]}" + (f" (also fits: {', '.join(fits[1:])})"
                                           if len(fits) > 1 else "")
    else:
        fix = (f"no registered model takes these columns; train one first: gkeflow run "
               f"--data {named_by} --label COLUMN, then --model NAME")
    raise click.ClickException(
        f"{which}{version.name}@{version.version} takes columns that {named_by} lacks: "
        f"{shown}; {fix}")


def prediction_params(options: tuple[str, ...]) -> dict[str, Any]:
    """``KEY=VALUE`` options as typed arguments of the prediction pipeline."""
    from gkeflow.pipelines.cli.params import pipeline_params
    from gkeflow.pipelines.definitions.prediction import prediction_pipeline

    return pipeline_params(prediction_pipeline, options)


def run_prediction_command(console: Console, data: str | None, model: str | None,
                           output: Path, registry_file: str, params: tuple[str, ...],
                           no_cache: bool, verbose: bool, debug: bool = False,
                           compute: dict | None = None, config=None,
                           environment: str = "default") -> None:
    """Score ``data`` with the registered model; exits 1 when a step fails.

    ``compute``: per-step profiles (``--compute``/``--config``; locally only caching
    applies); ``debug``: show a failed step's whole traceback; ``config`` and
    ``environment``: the run's tracking and registry (``tracking.<environment>``)."""
    from gkeflow.pipelines.cli.run_options import step_printer
    from gkeflow.pipelines.compute.profiles import ComputeError
    from gkeflow.pipelines.definitions.prediction import (
        build_prediction_pipeline,
        prediction_pipeline,
    )
    from gkeflow.pipelines.targets.local import LocalRunError, run_local

    pipeline = prediction_pipeline
    if compute:
        try:
            pipeline = build_prediction_pipeline("local", compute)
        except ComputeError as exc:
            raise click.ClickException(str(exc)) from None

    output = Path(output).resolve()
    tracking = None
    chosen_registry = {"registry_uri": f"sqlite:///{output / registry_file}"}
    if config is not None:
        from gkeflow.pipelines.cli.run_tracking import local_tracking

        tracking = local_tracking(console, config, environment, params, chosen_registry)
    registry_uri = prediction_params(params).get("registry_uri") or \
        chosen_registry["registry_uri"]
    data_uri = _data_uri(data)
    found = _local_header(data_uri)
    version, how, ref = _choose_model(registry_uri, model, found[0] if found else None)
    reference = f"{version.name}@{version.version}"
    # the step resolves the same reference (an alias stays an alias in its metadata)
    arguments: dict[str, Any] = {
        "data_uri": data_uri, "model_name": ref.name, "model_version": ref.version,
        "model_alias": "" if ref.version or ref.alias == "champion" else ref.alias,
        "registry_uri": registry_uri}
    arguments.update(prediction_params(params))
    target = arguments.get("output_uri", "")
    if target and "://" not in target:  # steps run elsewhere: a local path must be absolute
        arguments["output_uri"] = str(Path(target).expanduser().absolute())
    check_model_inputs(registry_uri, version, found, chosen=bool(model),
                       max_drift=float(arguments.get(
                           "max_drift", pipeline.component_spec.inputs["max_drift"].default)))
    console.print(f"[bold]gkeflow run[/bold]: prediction pipeline on {data_uri} with "
                  f"{reference} ({how})", soft_wrap=True)

    on_event = step_printer(console)

    from gkeflow.pipelines.cli.run_tracking import tracked_run
    from gkeflow.pipelines.settings.tracking_config import TrackingSettings

    try:
        # the scoring steps themselves are never cached (see prediction.DEFAULT_COMPUTE)
        with tracked_run(console, tracking or TrackingSettings(), "prediction",
                         output) as tracked:
            result = run_local(arguments, output, echo_logs=verbose, on_event=on_event,
                               enable_caching=not no_cache, pipeline=pipeline)
            tracked.succeeded = result.ok
    except LocalRunError as exc:
        raise click.ClickException(str(exc)) from exc
    if tracking is not None:
        from gkeflow.pipelines.cli.run_tracking import log_to_vertex

        log_to_vertex(console, config, tracking, tracked, arguments, result, "predict-batch")
    _print_summary(console, result, debug)
    if not result.ok:
        sys.exit(1)


def _print_summary(console: Console, result, debug: bool = False) -> None:
    console.print()
    table = Table(title="Steps", title_justify="left")
    for column in ("step", "status", "seconds"):
        table.add_column(column)
    for step in result.steps:
        table.add_row(step.name, step.status, f"{step.duration_s:.1f}")
    console.print(table)
    meta = result.artifact_metadata("predict-batch", "predictions")
    if meta:
        console.print(f"Model:       {meta['model_name']} version {meta['model_version']} "
                      f"({meta['selected_by']})", markup=False)
        console.print(f"Rows:        {meta['rows_read']} read, {meta['rows_scored']} scored, "
                      f"{meta['rows_rejected']} rejected", markup=False)
        console.print(f"Drift:       worst column {meta.get('drift_max_fraction', 0):.1%}; "
                      f"{meta.get('drift_unseen_values', 0)} new categories, "
                      f"{meta.get('drift_out_of_range_values', 0)} numbers out of range, "
                      f"{meta.get('drift_missing_columns', 0)} missing columns", markup=False)
    folder = result.output_dir("predict-batch", "predictions")
    if folder:
        files = sorted(p for p in folder.iterdir() if p.name.startswith("predictions."))
        console.print(f"Predictions: {files[0] if files else folder}", markup=False)
    if meta.get("published_to"):
        console.print(f"Published:   {meta['published_to']}", markup=False)
    for label, task, name, file in (("Rejected:", "predict-batch", "rejected", "rejected.csv"),
                                    ("Report:", "report-predictions", "summary", "")):
        path = result.output_dir(task, name)
        if path:
            console.print(f"{label:<12} {path / file if file else path}", markup=False)
    console.print(f"Log:         {result.log_path}", markup=False)
    console.print(f"Total:       {result.duration_s:.1f}s")
    if not result.ok:
        failed = result.failed_step
        console.print()
        if failed:
            console.print(f"[red bold]FAILED[/red bold]: step {failed.name}")
            from gkeflow.pipelines.cli.run_options import print_failure

            print_failure(console, failed.log, result.log_path, debug)
        else:
            console.print(f"[red bold]FAILED[/red bold]: {result.error}", markup=False)
