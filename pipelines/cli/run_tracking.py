"""Where a local `gkeflow run` (training, sweep or prediction) is tracked and which registry
it uses: ``tracking.<--env>`` of gkeflow.yaml, checked before any step starts. MLflow gets a
parent run around the steps; Vertex AI Experiments gets the run's parameters and metrics as
an experiment run when it ends."""

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
    from gkeflow.pipelines.settings.tracking_config import tracking_for
    from gkeflow.pipelines.targets.local_tracking import (
        credentials_problem,
        default_registry,
        registry_problem,
    )

    if environment != "default" and environment not in config.parameters:
        raise click.ClickException(
            f"--env {environment}: not an environment of gkeflow.yaml (environments: "
            f"{', '.join(['default', *config.parameters])})")
    tracking = tracking_for(config.tracking, environment)
    problem = credentials_problem(tracking)
    if problem:
        raise click.ClickException(problem)
    if tracking.vertex_experiments is not None and config.targets.vertex is None:
        raise click.ClickException(
            f"tracking.{environment}.vertex_experiments needs targets.vertex in gkeflow.yaml "
            "(the project and region of the experiment)")
    if tracking.mlflow is not None or tracking.vertex_experiments is not None:
        for line in tracking.describe("local"):
            console.print(line, markup=False)
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
def tracked_run(console, tracking, pipeline: str, output: Path,
                vertex_target=None) -> Iterator[Any]:
    """The parent MLflow run of a local run of ``pipeline`` around the block (see
    :func:`gkeflow.pipelines.targets.local_tracking.direct_tracking`); set ``succeeded``.
    With a TensorBoard behind ``tracking.vertex_experiments`` and ``vertex_target``
    (``targets.vertex``), train-model writes its curves to the run's time series."""
    from gkeflow.pipelines.targets.local_tracking import (
        curves_environment,
        direct_tracking,
        local_run_id,
    )

    with direct_tracking(tracking, pipeline, Path(output).resolve().as_uri(),
                         log=lambda line: console.print(line, markup=False)) as tracked:
        tracked.pipeline_run_id = tracked.pipeline_run_id or local_run_id(pipeline)
        with curves_environment(tracking.vertex_experiments, vertex_target,
                                tracked.pipeline_run_id):
            yield tracked


def record_cached(console, tracking, tracked, result) -> None:
    """Each step served from cache gets its nested MLflow run, tagged as cached and pointing
    at the run that made its outputs; one line names them."""
    cached = [step.name for step in result.steps if step.status == "CACHED"]
    mlflow = tracking.mlflow
    if not cached or mlflow is None or not mlflow.tracking_uri or not tracked.parent_run_id:
        return
    from gkeflow.components.tracking.cached import record_cached_steps

    uris = {task: result.cached_outputs.get(task, {}).get("artifacts", {}).get(
        "model", {}).get("uri", "") for task in cached}
    recorded = record_cached_steps(mlflow.tracking_uri, tracked.parent_run_id, cached, uris,
                                   log=lambda line: console.print(line, markup=False))
    if recorded:
        console.print(f"tracking: served from cache, recorded as cached runs pointing at the "
                      f"runs that made them: {', '.join(recorded)}", markup=False)


def log_to_vertex(console, config, tracking, tracked, arguments: dict[str, Any], result,
                  metrics_step: str) -> None:
    """The run's parameters and ``metrics_step``'s metrics as a run of
    ``tracking.vertex_experiments``' experiment (one line either way); nothing without it."""
    experiments = tracking.vertex_experiments
    if experiments is None or config.targets.vertex is None:
        return
    from gkeflow.pipelines.targets.vertex import VertexBackend
    from gkeflow.pipelines.targets.vertex_experiment_runs import log_experiment_run

    metrics = result.artifact_metadata(metrics_step, "metrics") if result.ok else {}
    line = log_experiment_run(VertexBackend(config.targets.vertex), experiments.experiment,
                              tracked.pipeline_run_id, arguments, metrics, result.ok,
                              tensorboard=experiments.tensorboard)
    console.print(line, markup=False, soft_wrap=True)
