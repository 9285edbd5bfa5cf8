"""Which Kubeflow Pipelines backend a compiled pipeline needs, and whether a cluster has it.

A pipeline compiled with kfp 2.17 may use features an older KFP backend (the API server and
driver in the cluster) does not know: it then fails at run time, after pods were scheduled,
or silently ignores the setting. :data:`FEATURES` is the one table of what gkeflow compiles
and the oldest backend release that runs it; :func:`requirements` reads a compiled pipeline
(its pipeline spec and the Kubernetes platform spec) and says which of them it uses.

`gkeflow plan --target gke` prints the result; `gkeflow submit --target gke` and
`gkeflow schedule apply` read the backend's version (``GET /apis/v2beta1/healthz`` ->
``tag_name``) and refuse, in one line naming the feature, the version found and the setting
that avoids it, a pipeline the backend cannot run. A version that is not a release number
(``unknown``, a dev build) cannot be compared: it is a warning, not a refusal.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: The oldest backend the compiled pipelines are supported on (docs/operating.md): the
#: release that brought workspaces and PipelineTaskFinalStatus.
OLDEST_SUPPORTED = (2, 14)


@dataclass(frozen=True)
class Feature:
    """A compiled feature and the oldest KFP backend release that runs it."""

    name: str
    since: tuple[int, int]
    avoid: str  # the gkeflow.yaml setting that leaves it out
    uses: Callable[[dict, dict], bool]  # (pipeline spec, kubernetes platform spec) -> bool


def _pipeline_config(platform: dict) -> dict:
    return platform.get("pipelineConfig") or {}


def _components(spec: dict):
    return (spec.get("components") or {}).values()


def _uses_workspace(spec: dict, platform: dict) -> bool:
    return bool(_pipeline_config(platform).get("workspace"))


def _uses_passthrough(spec: dict, platform: dict) -> bool:
    return any(c.get("taskConfigPassthroughs") for c in _components(spec))


def _uses_final_status(spec: dict, platform: dict) -> bool:
    return any(p.get("parameterType") == "TASK_FINAL_STATUS"
               for c in _components(spec)
               for p in ((c.get("inputDefinitions") or {}).get("parameters") or {}).values())


def _uses_ttl(spec: dict, platform: dict) -> bool:
    config = _pipeline_config(platform)
    return any(key in config for key in ("resourceTtlOnCompletion", "resourceTtlOnSuccess",
                                         "resourceTtlOnFailure"))


#: Feature -> the oldest Kubeflow Pipelines backend that runs it (kubeflow/pipelines
#: release notes: workspaces and PipelineTaskFinalStatus in exit handlers 2.14,
#: dsl.TaskConfig pass-through 2.15, PipelineConfig time-to-live 2.17).
FEATURES: tuple[Feature, ...] = (
    Feature("run workspace (PipelineConfig.workspace)", (2, 14),
            "workspace.enabled: false in gkeflow.yaml, or a gs:// targets.gke.pipeline_root",
            _uses_workspace),
    Feature("exit handler with PipelineTaskFinalStatus (notifications)", (2, 14),
            "no notifications: for this environment or schedule", _uses_final_status),
    Feature("TaskConfig pass-through (JobSet training)", (2, 15),
            "compute.train-model.replicas: 1 in gkeflow.yaml", _uses_passthrough),
    Feature("PipelineConfig time-to-live (retention)", (2, 17),
            "retention.days unset, with the cluster's own TTL instead (docs/operating.md)",
            _uses_ttl),
)

#: Not in the compiled spec but in the run body: ``plugins_input.mlflow`` (tracking.mlflow).
MLFLOW_PLUGIN = Feature("MLflow plugin (tracking.mlflow, plugins_input.mlflow)", (2, 17),
                        "tracking.mlflow.tracking_uri (the steps then track in MLflow "
                        "themselves) or no tracking.mlflow for this environment in "
                        "gkeflow.yaml",
                        lambda spec, platform: False)


@dataclass(frozen=True)
class Requirement:
    feature: Feature

    @property
    def version(self) -> str:
        return format_version(self.feature.since)


def split_documents(documents: list[dict]) -> tuple[dict, dict]:
    """(pipeline spec, Kubernetes platform spec) of a compiled YAML's documents."""
    spec = documents[0] if documents else {}
    platform: dict = {}
    for document in documents[1:]:
        platform = ((document or {}).get("platforms") or {}).get("kubernetes") or platform
    return spec, platform


def requirements(spec: dict, platform: dict | None = None) -> list[Requirement]:
    """The features of :data:`FEATURES` the compiled pipeline uses, newest first."""
    used = [Requirement(f) for f in FEATURES if f.uses(spec, platform or {})]
    return sorted(used, key=lambda r: r.feature.since, reverse=True)


def requirements_of_file(path) -> list[Requirement]:
    from gkeflow.components import yamlio

    with open(path, encoding="utf-8") as handle:
        return requirements(*split_documents(list(yamlio.load_all(handle.read()))))


def minimum(required: list[Requirement]) -> tuple[int, int]:
    """The oldest backend that runs everything in ``required``."""
    return max([r.feature.since for r in required] + [OLDEST_SUPPORTED])


def format_version(version: tuple[int, ...]) -> str:
    return ".".join(str(part) for part in version)


_RELEASE = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?(?:[-+].*)?$")


def parse_version(tag: Any) -> tuple[int, int, int] | None:
    """``2.16.0`` / ``v2.14.3`` / ``2.15.0-rc.1`` -> (2, 16, 0); ``unknown``, ``dev``, a
    commit or nothing -> None (cannot be compared)."""
    match = _RELEASE.match(str(tag or "").strip())
    if not match:
        return None
    return int(match[1]), int(match[2]), int(match[3] or 0)


def describe(required: list[Requirement]) -> str:
    """``Kubeflow Pipelines >= 2.15 (TaskConfig pass-through 2.15, run workspace 2.14)``."""
    need = format_version(minimum(required))
    if not required:
        return f"Kubeflow Pipelines >= {need} (no newer feature used)"
    parts = ", ".join(f"{r.feature.name} {r.version}" for r in required)
    return f"Kubeflow Pipelines >= {need} ({parts})"


class BackendTooOld(RuntimeError):
    """The cluster's Kubeflow Pipelines cannot run the pipeline; the message says the fix."""


def check(tag: Any, required: list[Requirement], *, pipeline: str, host: str) -> str:
    """Compare the backend's ``tag_name`` with what ``pipeline`` needs.

    Returns:
        A warning line when the version cannot be compared (``unknown``, a dev build, an
        older server that does not say), else ``""``.

    Raises:
        BackendTooOld: naming the newest feature the backend lacks, the version found and
            the setting that avoids the feature.
    """
    found = parse_version(tag)
    if found is None:
        shown = str(tag or "").strip() or "no version"
        return (f"Kubeflow Pipelines at {host} reports {shown!r}, not a release number: "
                f"cannot check that it runs {pipeline} ({describe(required)})")
    missing = [r for r in required if found[:2] < r.feature.since]
    if not missing:
        return ""
    newest = missing[0]
    others = "".join(f"; also {r.feature.name} ({r.version}): {r.feature.avoid}"
                     for r in missing[1:])
    raise BackendTooOld(
        f"Kubeflow Pipelines {format_version(found)} at {host} cannot run {pipeline}: "
        f"{newest.feature.name} needs {newest.version} or later; set "
        f"{newest.feature.avoid}, or upgrade the cluster's Kubeflow Pipelines{others}")


def backend_tag(backend) -> Any:
    """The backend's version tag, read once per backend."""
    tag = getattr(backend, "_gkeflow_backend_tag", None)
    if tag is None:
        tag = backend.backend_tag()
        backend._gkeflow_backend_tag = tag
    return tag


def supports(backend, feature: Feature) -> bool:
    """Whether the backend is known to have ``feature`` (a release at or after its version);
    a dry run reads nothing and assumes so."""
    if backend.dry_run:
        return True
    found = parse_version(backend_tag(backend))
    return found is not None and found[:2] >= feature.since


def check_backend(backend, prepared, extra: tuple[Feature, ...] = ()) -> str:
    """Read the backend's version once per backend and :func:`check` ``prepared`` (a
    :class:`~gkeflow.pipelines.targets.backends.PreparedPipeline` compiled for GKE) against it.

    ``extra``: features the request uses besides the compiled ones (:data:`MLFLOW_PLUGIN`).
    Returns a warning line or ``""``; raises :class:`BackendTooOld`. A dry run reads
    nothing and checks nothing.
    """
    if backend.dry_run:
        return ""
    tag = backend_tag(backend)
    required = requirements_of_file(prepared.path) + [Requirement(f) for f in extra]
    required.sort(key=lambda r: r.feature.since, reverse=True)
    return check(tag, required, pipeline=prepared.name, host=backend.target.host)


def plan_line(pipeline: str, compute, config) -> str:
    """What `gkeflow plan --target gke` says of the backend ``pipeline`` needs, read from
    the pipeline compiled as `gkeflow compile` would."""
    import tempfile
    from pathlib import Path

    from gkeflow.pipelines.targets.compile import compile_pipeline

    with tempfile.TemporaryDirectory(prefix="gkeflow-plan-") as workdir:
        path = compile_pipeline(pipeline, "gke", Path(workdir), compute=compute, config=config)
        return f"backend: {describe(requirements_of_file(path))}"
