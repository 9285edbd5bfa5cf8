"""What the ``gkeflow`` commands share: the console, config loading, the ``--config`` and
``--compute`` options, per-step compute and the one-line report of failed remote work.

Command modules import this one; it imports no command module.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import click
from rich.console import Console

#: Where `gkeflow run` writes runs, logs, the step cache and the local registry.
DEFAULT_RUN_OUTPUT = Path("gkeflow-output")
#: The local registry's file name inside a run's --output directory.
REGISTRY_FILE = "registry.db"


def stdout_console() -> Console:
    """Rich output on stdout, tables as wide as COLUMNS, the terminal, or (piped) 160
    columns; lines of text are never broken (a path or command stays one line to copy)."""
    from gkeflow.pipelines.cli.tables import table_width

    return Console(file=sys.stdout, highlight=False, width=table_width(), soft_wrap=True)


def read_config(config_path: Path | None):
    """``--config`` (default: ./gkeflow.yaml when it exists), validated."""
    from gkeflow.pipelines.settings.config import ConfigError, load_config

    try:
        return load_config(config_path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc


def require_config(config_path: Path):
    """``--config`` of the remote commands: the file must exist; validated."""
    from gkeflow.pipelines.settings.config import ConfigError, load_config

    if not config_path.exists():
        raise click.ClickException(f"{config_path} not found; `gkeflow init` writes a "
                                   "commented example")
    try:
        return load_config(config_path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc


def config_option(func):
    """``--config`` of the remote commands (default: gkeflow.yaml)."""
    return click.option(
        "--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
        default=Path("gkeflow.yaml"), show_default=True,
        help="The configuration file (`gkeflow init` writes an example).")(func)


def compute_options(func):
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


def compute_from_options(config_path: Path | None, compute_overrides: tuple[str, ...]) -> dict:
    """Per-step profiles: defaults in code, then gkeflow.yaml, then --compute flags."""
    from gkeflow.pipelines.compute.profiles import ComputeError, apply_overrides
    from gkeflow.pipelines.settings.config import ConfigError
    from gkeflow.pipelines.targets.compile import default_compute

    try:
        profiles = read_config(config_path).compute_overrides(default_compute())
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        return apply_overrides(profiles, compute_overrides)
    except ComputeError as exc:
        raise click.BadParameter(str(exc), param_hint="--compute") from exc


def remote_errors(func):
    """Turn the expected failures of remote work into one clear line and exit 1."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        from gkeflow.pipelines.cli.errors import debug_enabled, expected_types
        from gkeflow.pipelines.targets.transport import redact

        try:
            return func(*args, **kwargs)
        except expected_types() as exc:
            if debug_enabled(click.get_current_context(silent=True)):
                raise
            raise click.ClickException(redact(str(exc))) from None

    return wrapper
