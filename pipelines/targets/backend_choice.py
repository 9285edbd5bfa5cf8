"""Which implementation serves a target: the backend and the run reader of ``gke`` (Kubeflow
Pipelines) or ``vertex`` (Vertex AI).

The per-target modules (:mod:`~gkeflow.pipelines.targets.kfp`,
:mod:`~gkeflow.pipelines.targets.vertex`, :mod:`~gkeflow.pipelines.targets.runs_kfp`,
:mod:`~gkeflow.pipelines.targets.runs_vertex`) import only what they share from
:mod:`~gkeflow.pipelines.targets.backends` and :mod:`~gkeflow.pipelines.targets.runs`;
the choice between them lives here, above them.
"""

from __future__ import annotations

from gkeflow.pipelines.settings.config import ConfigError, GkeflowConfig
from gkeflow.pipelines.settings.platforms import platform
from gkeflow.pipelines.targets.kfp import KfpBackend
from gkeflow.pipelines.targets.runs import RunInfo
from gkeflow.pipelines.targets.vertex import VertexBackend


def make_backend(config: GkeflowConfig, target: str, *, dry_run: bool = False):
    """The backend of ``target`` (``gke`` or ``vertex``, or a platform submitted through
    one, as GKE Autopilot through ``gke``) as configured in ``config``."""
    target = platform(target).submits_to
    target_config = getattr(config.targets, target, None)
    if target_config is None:
        raise ConfigError(f"targets.{target} is not configured in gkeflow.yaml; run "
                          "`gkeflow init` for an example")
    if target == "gke":
        return KfpBackend(target_config, dry_run=dry_run)
    return VertexBackend(target_config, dry_run=dry_run)


def reader(config, target: str, backend=None):
    """The run reader of ``target`` (``gke`` or ``vertex``) over the configured backend."""
    backend = backend or make_backend(config, target)
    if platform(target).submits_to == "gke":
        from gkeflow.pipelines.targets.runs_kfp import KfpRuns

        return KfpRuns(backend)
    from gkeflow.pipelines.targets.runs_vertex import VertexRuns

    return VertexRuns(backend)


def last_runs(config, schedules, readers: dict | None = None) -> dict[tuple[str, str], RunInfo]:
    """(target, schedule name) -> the newest run each schedule started (`schedule list`)."""
    readers = dict(readers or {})
    found = {}
    for remote in schedules:
        if remote.target not in readers:  # one client and one schedule listing per target
            readers[remote.target] = reader(config, remote.target)
        runs = readers[remote.target].list(schedule=remote.name, limit=1)
        if runs:
            found[(remote.target, remote.name)] = runs[0]
    return found
