"""Which ``gkeflow run`` options apply to which ``--pipeline``, and what they become.

``gkeflow run`` has one set of options for three pipelines. An option given for a pipeline
it does not apply to is refused with one line (exit 2) instead of being dropped; the
options training and sweeps share (data, label, split, hyperparameters, columns, --param,
--compute, --config) are turned into pipeline arguments and per-step compute here, once,
for both.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

#: Options every pipeline takes (click parameter names).
COMMON = frozenset({
    "pipeline", "data", "output", "params", "compute_overrides", "config_path", "no_cache",
    "verbose", "debug", "environment",  # tracking.<env> (cli/run_tracking.py)
    "steps_at_once",  # GKEFLOW_LOCAL_STEPS (targets/local_parallel.py)
    "fork_steps",  # GKEFLOW_LOCAL_FORKS (targets/local_forks.py)
})
#: Options of a run that trains (training and sweep).
TRAINING = frozenset({
    "label", "epochs", "batch_size", "learning_rate", "train_ratio", "eval_ratio",
    "test_ratio", "model_name", "min_accuracy", "model_type", "user_module", "key_column",
    "exclude_columns", "feature_columns", "require_registered", "deploy", "task",
})
#: Options that shape a sweep (``sweep_cli.sweep_options``).
SWEEP = frozenset({
    "sweep_params", "algorithm", "max_trials", "parallel_trials", "metric", "direction", "seed",
})
#: ``--pipeline`` -> the options it takes.
APPLICABLE: Mapping[str, frozenset[str]] = {
    "training": COMMON | TRAINING,
    "sweep": COMMON | TRAINING | SWEEP,
    "prediction": COMMON | {"model_ref"},
}

_HINTS = {
    "model_ref": " (--model-name names the model a run trains)",
    "label": " (the registered model knows its label and columns)",
    "task": " (the registered model knows its task)",
}


class OptionError(click.UsageError):
    """An option that does not apply to the chosen pipeline: one line, exit 2."""

    def show(self, file=None) -> None:
        click.echo(f"Error: {self.format_message()}", file=file, err=True)


def flag(param: click.Parameter) -> str:
    """The long spelling of an option, e.g. ``--require-registered``."""
    return max(param.opts, key=len)


def check_options(ctx: click.Context, pipeline: str) -> None:
    """Refuse the first option given on the command line that ``pipeline`` does not take."""
    from click.core import ParameterSource

    allowed = APPLICABLE[pipeline]
    for param in ctx.command.params:
        if param.name in allowed or param.name is None:
            continue
        source = ctx.get_parameter_source(param.name)
        if source in (None, ParameterSource.DEFAULT):
            continue
        where = [name for name, names in APPLICABLE.items() if param.name in names]
        raise OptionError(f"{flag(param)} applies to --pipeline {' and '.join(where)}, not "
                          f"{pipeline}{_HINTS.get(param.name, '')}; drop it")


def local_compute(pipeline: str, config_path: Path | None,
                  compute_overrides: tuple[str, ...]) -> dict | None:
    """Per-step compute of a local run of ``pipeline``: its defaults, then the ``compute:``
    section of ``--config`` (or ./gkeflow.yaml), then ``--compute``; None when neither
    option is given (the pipeline's defaults). A ``--compute`` for a step of another
    pipeline is refused rather than dropped."""
    from gkeflow.components.did_you_mean import did_you_mean
    from gkeflow.pipelines.cli.common import compute_from_options
    from gkeflow.pipelines.compute.profiles import parse_override
    from gkeflow.pipelines.targets.compile import pipeline_compute, steps_of

    if not compute_overrides and config_path is None:
        return None
    profiles = compute_from_options(config_path, compute_overrides)  # reports malformed flags
    own = steps_of(pipeline)
    for text in compute_overrides:
        step = parse_override(text)[0]
        if step not in own:
            raise OptionError(f"--compute {text}: {step} is not a step of --pipeline "
                              f"{pipeline}{did_you_mean(step, own)}; its steps are "
                              f"{', '.join(own)}")
    return dict(pipeline_compute(pipeline, profiles))


def local_accelerator_notes(compute: dict | None, config_compute: dict,
                            compute_overrides: tuple[str, ...],
                            gpus: int | None = None, tpu_chips: int | None = None) -> list[str]:
    """One line per step whose accelerator was asked for (in gkeflow.yaml ``compute:`` or by
    ``--compute``) that this machine cannot give: the step trains on the CPU here.
    ``gpus`` / ``tpu_chips``: what this machine has (default: its device files)."""
    import glob

    from gkeflow.components.train.tpu import tpu_device_files
    from gkeflow.pipelines.compute.accelerators import ACCELERATORS

    if not compute:
        return []
    if gpus is None:
        gpus = len(glob.glob("/dev/nvidia[0-9]*"))
    if tpu_chips is None:
        tpu_chips = len(tpu_device_files())
    notes = []
    for step, profile in compute.items():
        asked = any(text.split("=", 1)[0].strip().startswith(f"{step}.accelerator")
                    for text in compute_overrides)
        asked = asked or any(key.startswith("accelerator")
                             for key in (config_compute or {}).get(step, {}))
        if not asked or not profile.accelerator_count:
            continue
        if not profile.uses_tpu and profile.accelerator not in ACCELERATORS:
            continue  # an unknown accelerator: the compute check refuses it, with the fix
        kind, has = ("TPU", tpu_chips) if profile.uses_tpu else ("GPU", gpus)
        if has:
            continue
        notes.append(f"note: {step} asks for {profile.accelerator_count} x "
                     f"{profile.accelerator}, but this machine has no {kind}: it runs on the "
                     f"CPU here (the accelerator applies when compiled for GKE or Vertex AI)")
    return notes


def resolve_data(data: str) -> str:
    """``--data`` as the pipeline's ``data_uri`` (what the prepare step reads)."""
    from gkeflow.pipelines.cli.run_inputs import RunInputError, resolve_data_uri

    try:
        return resolve_data_uri(data)
    except RunInputError as exc:
        raise click.BadParameter(str(exc), param_hint="--data") from None


def run_arguments(pipeline, name: str, *, data: str | None, label: str | None, output: Path,
                  epochs: int, batch_size: int, learning_rate: float, train_ratio: float,
                  eval_ratio: float, test_ratio: float, model_name: str | None,
                  min_accuracy: float, model_type: str, user_module: str | None,
                  params: tuple[str, ...], key_column: str = "",
                  exclude_columns: tuple[str, ...] = (),
                  feature_columns: tuple[str, ...] = (), task: str = "auto",
                  notes: list[str] | None = None,
                  decided: dict[str, str] | None = None) -> dict[str, Any]:
    """The arguments of a local run of ``pipeline`` (training or sweep), checked before
    any step starts: data, label and columns against the file's header, split ratios,
    the evaluation policy and ``--param`` against the pipeline's parameters; the task
    (``--task``) decided from the label, as the prepare step will, said in ``notes`` and
    put in ``decided["task"]``."""
    from gkeflow.components.prepare.logic import EMBEDDED_PENGUINS, SplitRatios
    from gkeflow.pipelines.cli.common import REGISTRY_FILE
    from gkeflow.pipelines.cli.params import pipeline_params
    from gkeflow.pipelines.cli.run_inputs import default_model_name
    from gkeflow.pipelines.settings.parameters import ParameterError, validate_run_arguments

    if data and not label:
        raise click.UsageError("--label is required with --data: name the column to predict.")
    data_uri = resolve_data(data) if data else None
    try:
        SplitRatios(train_ratio, eval_ratio, test_ratio)
    except ValueError as exc:
        raise click.BadParameter(
            str(exc), param_hint="--train-ratio/--eval-ratio/--test-ratio"
        ) from exc
    output = Path(output).resolve()
    arguments: dict[str, Any] = {
        "data_uri": data_uri or EMBEDDED_PENGUINS,
        "label_column": label or "species",
        "train_ratio": train_ratio,
        "eval_ratio": eval_ratio,
        "test_ratio": test_ratio,
        "epochs": epochs,
        "batch_size": batch_size,
        "learning_rate": learning_rate,
        "model_name": model_name or default_model_name(data),
        "min_accuracy": min_accuracy,
        "registry_uri": f"sqlite:///{output / REGISTRY_FILE}",
        "model_type": model_type,
    }
    if user_module:
        if user_module.endswith(".py") and not Path(user_module).is_file():
            raise click.BadParameter(f"no such file: {user_module}", param_hint="--user-module")
        arguments["user_module"] = (str(Path(user_module).resolve())
                                    if user_module.endswith(".py") else user_module)
    arguments.update(pipeline_params(pipeline, params))
    inputs = pipeline.component_spec.inputs
    for option, parameter, value in (("--key", "key_column", key_column),
                                     ("--exclude", "exclude_columns", ",".join(exclude_columns)),
                                     ("--features", "feature_columns", ",".join(feature_columns))):
        if not value:
            continue
        if parameter not in inputs:
            raise OptionError(f"{option} does not apply to --pipeline {name}: its pipeline has "
                              f"no {parameter} parameter")
        arguments[parameter] = value
    if "task" in inputs:
        arguments.setdefault("task", task)
    try:
        choice = validate_run_arguments(arguments)
    except ParameterError as exc:
        raise click.ClickException(str(exc)) from None
    if choice is not None and "task" in inputs:
        arguments["task"] = choice.task  # the step decides the same from the same rows
        if decided is not None:
            decided["task"] = choice.task
        if notes is not None:
            notes.append(f"task: {choice.task} of {arguments['label_column']!r} "
                         f"({choice.reason}; --task overrides)")
        if choice.task == "regression" and not model_name:
            arguments["model_name"] = default_model_name(data, "regression")
    return arguments


def print_failure(console, log_lines: list[str], log_path, debug: bool) -> None:
    """A failed step's message under its ``FAILED`` line: the error alone (the traceback
    stays in the run log) unless ``debug``."""
    import textwrap

    from gkeflow.pipelines.cli.run_checks import failure_message

    message, shortened = failure_message(log_lines, debug)
    console.print(textwrap.indent(textwrap.dedent(message), "  "), markup=False,
                  soft_wrap=True)
    if shortened:
        console.print(f"(traceback in {log_path}; --debug shows it)", markup=False)


def step_printer(console):
    """The ``on_event`` callback of a local run: one line per step started and ended."""
    def on_event(step) -> None:
        if step.status == "PROGRESS":  # a long step's own progress line
            console.print(f"    {step.name}: {step.log[-1]}", markup=False, soft_wrap=True)
            return
        if step.status == "RUNNING":
            console.print(f"  [cyan]…[/cyan] {step.name} started")
        elif step.status == "CACHED":
            console.print(f"  [green]✓[/green] {step.name} cached (inputs unchanged)")
        else:
            mark = "[green]✓[/green]" if step.status == "SUCCESS" else "[red]✗[/red]"
            console.print(f"  {mark} {step.name} {step.status.lower()} in {step.duration_s:.1f}s")

    return on_event


def finish(console, result, require_registered: bool) -> None:
    """Exit 1 when a step failed; 3 when ``--require-registered`` and the gate blocked
    registration."""
    import sys

    if not result.ok:
        sys.exit(1)
    if require_registered and not result.parameter_outputs("register-model"):
        console.print("[red bold]NOT REGISTERED[/red bold]: the gate blocked registration "
                      "(--require-registered)")
        sys.exit(3)
