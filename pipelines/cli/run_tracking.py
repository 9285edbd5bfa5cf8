"""Where a local `gkeflow run` (training, sweep or prediction) is tracked and which registry
it uses: ``tracking.<--env>`` of gkeflow.yaml, checked before any step starts."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click


def registry_named(params: tuple[str, ...]) -> bool:
    """Whether ``--param registry_uri=...`` chooses the registry."""
    return any(p.partition("=")[0].strip() == "registry_uri" for p in params)


def local_tracking(console, config, environment: str, params: tuple[str, ...],
                   arguments: dict[str, Any]):
    """``tracking.<environment>`` for a local run, after its checks (one line each): the
    environment exists, the credentials' variables are set, and, when the registry is the
    tracking server's (``arguments["registry_uri"]`` is set to it unless ``--param`` names
    one), the server answers."""
    from gkeflow.pipelines.targets.local_tracking import (
        credentials_problem,
        default_registry,
        registry_problem,
    )
    from gkeflow.pipelines.tracking_config import tracking_for

    if environment != "default" and environment not in config.parameters:
        raise click.ClickException(
            f"--env {environment}: not an environment of gkeflow.yaml (environments: "
            f"{', '.join(['default', *config.parameters])})")
    tracking = tracking_for(config.tracking, environment)
    problem = credentials_problem(tracking)
    if problem:
        raise click.ClickException(problem)
    if tracking.mlflow is not None:
        console.print(tracking.describe("local")[0], markup=False)
    registry = default_registry(tracking)
    if registry and not registry_named(params):
        problem = registry_problem(registry, environment)
        if problem:
            raise click.ClickException(problem)
        arguments["registry_uri"] = registry
        console.print(f"registry: MLflow Model Registry at {tracking.mlflow.tracking_uri} "
                      f"(tracking.{environment}.mlflow; --param registry_uri=URI chooses "
                      "another)", markup=False)
    return tracking


@contextlib.contextmanager
def tracked_run(console, tracking, pipeline: str, output: Path) -> Iterator[Any]:
    """The parent MLflow run of a local run of ``pipeline`` around the block (see
    :func:`gkeflow.pipelines.targets.local_tracking.direct_tracking`); set ``succeeded``."""
    from gkeflow.pipelines.targets.local_tracking import direct_tracking

    with direct_tracking(tracking, pipeline, Path(output).resolve().as_uri(),
                         log=lambda line: console.print(line, markup=False)) as tracked:
        yield tracked
