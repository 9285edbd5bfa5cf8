"""`gkeflow submit`: compile a pipeline for a target and start one run there.

* **gke** (Kubeflow Pipelines): the pipeline is uploaded once (by name), then a pipeline
  version named ``<git commit or package version>-<spec hash>`` is uploaded once, so the
  Kubeflow UI lists every version that was shipped; the run is created in the configured
  experiment (created if missing) and pinned to that version.
* **vertex** (Vertex AI Pipelines): a ``PipelineJob`` with the configured service account,
  network, CMEK key, caching choice, sanitised labels and normalised ``gs://`` root.

Parameters are merged in this order (later wins): the pipeline's defaults,
``parameters.<environment>`` from ``gkeflow.yaml``, then ``--param`` / a schedule's own.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import random
import string
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gkeflow.components import yamlio
from gkeflow.components.did_you_mean import did_you_mean
from gkeflow.pipelines.settings.config import GkeflowConfig
from gkeflow.pipelines.settings.remote_config import DEFAULT_ENVIRONMENT
from gkeflow.pipelines.settings.tracking_config import tracking_for
from gkeflow.pipelines.targets.backend_choice import make_backend
from gkeflow.pipelines.targets.backends import PreparedPipeline, RunStatus
from gkeflow.pipelines.targets.vertex_experiments import (
    RUN_CONTEXT_WAIT_S,
    add_run,
    ensure_experiment,
)


class SubmitError(RuntimeError):
    """Submission cannot proceed; the message says why and what to change."""


# ---------------------------------------------------------------------------------------------
# Compiling and naming


def source_version(cwd: Path | None = None) -> str:
    """The git commit (``g<12 hex>``, ``-dirty`` if the tree has changes) or ``v<package>``."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=cwd, check=False,
                                capture_output=True, text=True, timeout=10)
        if commit.returncode == 0 and commit.stdout.strip():
            dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                   cwd=cwd, check=False, capture_output=True, text=True,
                                   timeout=10)
            suffix = "-dirty" if dirty.returncode == 0 and dirty.stdout.strip() else ""
            return f"g{commit.stdout.strip()}{suffix}"
    except (OSError, subprocess.SubprocessError):
        pass
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"v{version('gkeflow')}"
    except PackageNotFoundError:
        return "v0"


def refuse_unbuilt_images(config: GkeflowConfig | None, path: Path, where: str, *,
                          dry_run: bool = False) -> str:
    """:class:`SubmitError` when the compiled ``path`` names images never built and pushed
    for the registry of ``config``'s ``images:`` section (a run would fail to pull them).

    With ``dry_run`` nothing is refused (nothing is sent): the problem comes back as one
    line flagging those images ("" when every image is pushed)."""
    from gkeflow.pipelines.settings.config import load_config
    from gkeflow.pipelines.settings.images_config import describe_unbuilt

    images = (config if config is not None else load_config()).images
    problem = describe_unbuilt(images, path.read_text(encoding="utf-8"))
    if problem and not dry_run:
        raise SubmitError(f"refusing to {where}: {problem}")
    return f"images not pushed, a real {where} is refused: {problem}" if problem else ""


def prepare_pipeline(pipeline: str, target: str, workdir: Path,
                     version: str | None = None,
                     config: GkeflowConfig | None = None) -> PreparedPipeline:
    """Compile ``pipeline`` for ``target`` into ``workdir`` and describe the result.

    ``config`` (the ``--config`` file) gives each step's compute, the sweep's search
    space, the GKE workspace and the preparation form, as in ``gkeflow compile --config``;
    None: the defaults in code and ./gkeflow.yaml's other sections. The version name ends
    with a hash of the compiled spec, so one name always means one spec: uploading the same
    name twice is skipped, a changed spec gets a new name.
    """
    from gkeflow.pipelines.compute.profiles import ComputeError
    from gkeflow.pipelines.targets.compile import PIPELINES, compile_pipeline, default_compute

    if pipeline not in PIPELINES:
        raise SubmitError(f"unknown pipeline {pipeline!r}{did_you_mean(pipeline, PIPELINES)}; "
                          f"pipelines are {', '.join(PIPELINES)}")
    compute = config.compute_overrides(default_compute()) if config is not None else None
    from gkeflow.pipelines.settings.parameters import ParameterError

    try:
        path = compile_pipeline(pipeline, target, workdir, compute=compute, config=config)
    except (ComputeError, ParameterError) as exc:  # one line: "invalid compute for ..."
        raise SubmitError(" ".join(str(exc).split())) from None
    text = path.read_bytes()
    sha = hashlib.sha256(text).hexdigest()
    docs = list(yamlio.load_all(text))
    spec = docs[0]
    parameters = spec.get("root", {}).get("inputDefinitions", {}).get("parameters", {})
    version_name = f"{version or source_version()}-{sha[:8]}"
    return PreparedPipeline(
        name=pipeline, display_name=spec["pipelineInfo"]["name"], target=target, path=str(path),
        spec_sha256=sha, version_name=version_name,
        parameter_types={k: v.get("parameterType", "STRING") for k, v in parameters.items()},
        task_count=step_count(spec))


def step_count(spec: dict) -> int:
    """The steps (container tasks) of a compiled pipeline, counted through its groups
    (exit handlers, conditions, loops): what runs, not the top level's groups."""
    components = spec.get("components", {})

    def count(dag: dict) -> int:
        total = 0
        for task in dag.get("tasks", {}).values():
            component = components.get(task.get("componentRef", {}).get("name", ""), {})
            total += count(component["dag"]) if "dag" in component else 1
        return total

    return count(spec.get("root", {}).get("dag", {}))


# ---------------------------------------------------------------------------------------------
# Parameters


def _coerce(name: str, value: Any, kind: str, source: str) -> Any:
    def bad(expected: str):
        return SubmitError(f"{source}: parameter {name!r} expects {expected}, got {value!r}")

    if kind == "NUMBER_INTEGER":
        if isinstance(value, bool):
            raise bad("an integer")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                raise bad("an integer") from None
        raise bad("an integer")
    if kind == "NUMBER_DOUBLE":
        if isinstance(value, bool):
            raise bad("a number")
        if isinstance(value, (int, float)):
            return float(value)
        try:
            return float(str(value).strip())
        except ValueError:
            raise bad("a number") from None
    if kind == "BOOLEAN":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("true", "1", "yes"):
            return True
        if text in ("false", "0", "no"):
            return False
        raise bad("true or false")
    if kind == "STRING":
        if isinstance(value, (dict, list)):
            raise bad("a string")
        return str(value)
    if kind in ("LIST", "STRUCT"):  # e.g. the sweep's trials, given as JSON on the command line
        expected = list if kind == "LIST" else dict
        if isinstance(value, str):
            import json

            try:
                value = json.loads(value)
            except ValueError:
                raise bad(f"a JSON {expected.__name__}") from None
        if not isinstance(value, expected):
            raise bad(f"a JSON {expected.__name__}")
        return value
    return value


def parse_param_options(options: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``("epochs=5", "model_name=x")`` -> dict; each item must be ``KEY=VALUE``."""
    params: dict[str, str] = {}
    for item in options:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SubmitError(f"--param {item!r}: expected KEY=VALUE")
        params[key.strip()] = value
    return params


def target_defaults(config: GkeflowConfig, prepared: PreparedPipeline,
                    environment: str = DEFAULT_ENVIRONMENT) -> dict[str, Any]:
    """Parameters that follow from the target's config unless set explicitly.

    On Vertex AI the model registry is the project's Vertex AI Model Registry: the embedded
    SQLite default would live and die inside one pod. An environment tracked in MLflow (with
    a tracking URI) keeps the compiled default instead: that server's MLflow Model Registry.
    """
    from gkeflow.pipelines.definitions.tracking_tasks import direct_mlflow

    defaults: dict[str, Any] = {}
    vertex = config.targets.vertex
    if direct_mlflow(tracking_for(config.tracking, environment)) is not None:
        return defaults
    if prepared.target == "vertex" and vertex is not None \
            and "registry_uri" in prepared.parameter_types:
        defaults["registry_uri"] = f"vertex://projects/{vertex.project}/locations/{vertex.region}"
    return defaults


def resolve_parameters(config: GkeflowConfig, prepared: PreparedPipeline, environment: str,
                       overrides: dict[str, Any], override_source: str = "--param"
                       ) -> dict[str, Any]:
    """Environment parameters, then ``overrides``, checked against the pipeline's inputs."""
    from gkeflow.pipelines.settings.deploy_config import deploy_parameters

    if environment != DEFAULT_ENVIRONMENT and environment not in config.parameters:
        known = ", ".join(config.parameters) or "none"
        hint = did_you_mean(environment, [DEFAULT_ENVIRONMENT, *config.parameters])
        raise SubmitError(f"environment {environment!r} is not under parameters in gkeflow.yaml"
                          f"{hint} (environments: {known})")
    layers = [(f"defaults for target {prepared.target}", target_defaults(config, prepared,
                                                                          environment)),
              (f"gkeflow.yaml parameters.{environment}", config.parameters.get(environment, {})),
              (f"gkeflow.yaml deploy.{environment}",
               deploy_parameters(config.deploy, environment, prepared.parameter_types)),
              (override_source, overrides)]
    merged: dict[str, Any] = {}
    shared = set()
    if config.parameters.get(environment):  # an environment serves every pipeline
        from gkeflow.pipelines.targets.compile import parameters_of_other_pipelines

        shared = parameters_of_other_pipelines(prepared.name)
    for source, values in layers:
        for name, value in values.items():
            if source.startswith("gkeflow.yaml") and name in shared:
                continue  # another pipeline's parameter (e.g. epochs when scoring)
            if name not in prepared.parameter_types:
                raise SubmitError(
                    f"{source}: {prepared.name} has no parameter {name!r}"
                    f"{did_you_mean(name, prepared.parameter_types)}; parameters are "
                    f"{', '.join(sorted(prepared.parameter_types))}")
            merged[name] = _coerce(name, value, prepared.parameter_types[name], source)
    from gkeflow.pipelines.settings.parameters import ParameterError, check_parameters

    try:
        check_parameters(merged)
    except ParameterError as exc:
        raise SubmitError(f"parameters of {prepared.name}: {exc}") from None
    return merged


def run_name(pipeline: str, environment: str, now: dt.datetime | None = None) -> str:
    """``training-prod-20260101-120000-ab12``: sortable, unique, valid as a Vertex job id."""
    now = now or dt.datetime.now(dt.UTC)
    suffix = "".join(random.choices(string.ascii_lowercase + string.digits, k=4))
    return f"{pipeline}-{environment}-{now:%Y%m%d-%H%M%S}-{suffix}".lower()


# ---------------------------------------------------------------------------------------------
# Submitting and waiting


@dataclass
class Submission:
    target: str
    run_id: str  # KFP run id or Vertex job resource name
    url: str
    version_name: str
    parameters: dict[str, Any]
    notes: list[str]


def submit(config: GkeflowConfig, pipeline: str, target: str, *, environment: str,
           overrides: dict[str, Any], workdir: Path, backend=None, dry_run: bool = False,
           version: str | None = None,
           experiment_wait_s: float = RUN_CONTEXT_WAIT_S) -> tuple[Submission, Any]:
    """Compile, upload (KFP) and start one run; returns the submission and the backend.

    On Vertex AI with ``tracking.<environment>.vertex_experiments``, the run goes into that
    experiment (waiting up to ``experiment_wait_s`` for the run's metadata context)."""
    backend = backend or make_backend(config, target, dry_run=dry_run)
    from gkeflow.pipelines.definitions.operations import notification_notes, select

    chosen = select(config, environment).for_run(
        {**config.parameters.get(DEFAULT_ENVIRONMENT, {}),
         **config.parameters.get(environment, {}), **overrides})
    prepared = prepare_pipeline(pipeline, target, workdir, version=version, config=chosen)
    flagged = refuse_unbuilt_images(config, Path(prepared.path),
                                    f"send {pipeline} to {target}", dry_run=dry_run)
    parameters = resolve_parameters(config, prepared, environment, overrides)
    from gkeflow.pipelines.compute.tpu_profile import backend_problem
    from gkeflow.pipelines.targets.compile import default_compute

    problem = backend_problem(chosen.compute_overrides(default_compute()), parameters)
    if problem:
        raise SubmitError(f"parameters of {prepared.name}: {problem}")
    name = run_name(pipeline, environment)
    notes: list[str] = [f"warning: {flagged}"] if flagged else []
    notes += notification_notes(chosen, target)
    tracking = tracking_for(config.tracking, environment)
    notes += tracking.describe(target)
    if not dry_run and tracking.mlflow is not None and tracking.mlflow.tracking_uri:
        from gkeflow.pipelines.targets.tracking_probe import probe, said_as

        notes += [said_as(tracking.mlflow.tracking_uri, found)
                  for found in [probe(tracking.mlflow.tracking_uri)] if found]
    if target == "gke" and tracking.vertex_experiments is not None \
            and config.targets.vertex is None:
        notes.append("warning: tracking.vertex_experiments is not compiled in: GKE steps "
                     "need targets.vertex in gkeflow.yaml for the experiment's project")
    if target == "gke":
        from gkeflow.pipelines.definitions.tracking_tasks import direct_mlflow
        from gkeflow.pipelines.targets.backend_version import (
            MLFLOW_PLUGIN,
            check_backend,
            supports,
        )

        plugins = tracking.plugins_input()
        direct = direct_mlflow(tracking)
        if plugins and direct is not None and not supports(backend, MLFLOW_PLUGIN):
            plugins = {}  # the steps carry direct mode: no plugin needed
            notes.append(f"tracking: this Kubeflow Pipelines has no MLflow plugin (2.17+): "
                         f"the steps track in MLflow experiment {direct.experiment!r} at "
                         f"{direct.tracking_uri} themselves (direct mode)")
        extra = (MLFLOW_PLUGIN,) if plugins else ()
        notes += [f"warning: {w}" for w in [check_backend(backend, prepared, extra)] if w]
        pipeline_id, version_id, uploaded = backend.ensure_pipeline_version(prepared)
        notes += uploaded
        run_id = backend.create_run(prepared, pipeline_id, version_id, name, parameters,
                                    plugins_input=plugins)
        url = backend.run_url(run_id)
    else:
        labels = {"gkeflow-pipeline": pipeline, "gkeflow-environment": environment,
                  "gkeflow-version": prepared.version_name}
        experiment = tracking.vertex_experiments
        if experiment is not None:  # before the run: a refused experiment costs no run
            ensure_experiment(backend, experiment.experiment)
        run_id = backend.submit(prepared, name, parameters, labels)
        url = backend.console_url(run_id)
        if experiment is not None:
            notes += filter(None, [add_run(backend, experiment.experiment, run_id,
                                           wait_s=experiment_wait_s)])
    return Submission(target, run_id, url, prepared.version_name, parameters, notes), backend


def wait_for_run(backend, run_id: str, *, poll_s: float = 10.0, timeout_s: float = 24 * 3600,
                 on_change: Callable[[str, str | None, str], None] | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> RunStatus:
    """Poll until the run ends; ``on_change(task, old_state, new_state)`` for every change
    (task ``""`` is the run itself). Raises :class:`SubmitError` after ``timeout_s``."""
    seen: dict[str, str] = {}
    started = time.monotonic()
    while True:
        status = backend.run_status(run_id)
        for task, state in [*sorted(status.tasks.items()), ("", status.state)]:
            if seen.get(task) != state:
                if on_change:
                    on_change(task, seen.get(task), state)
                seen[task] = state
        if status.done:
            return status
        if time.monotonic() - started > timeout_s:
            raise SubmitError(f"run {run_id} still {status.state} after {timeout_s:.0f}s; "
                              "it keeps running on the target")
        sleep(poll_s)
