"""Registration: record a blessed model as a new version in a model registry.

Everything a registry could reject is checked here first, so bad input fails with a
clear message before any remote call: the model directory, the model name, labels,
aliases and the registry URI.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gkeflow.components.register.backends import RegistrySettings, backend_of, open_registry
from gkeflow.components.register.local_registry import (
    ModelVersion,
    RegistryError,
    validate_alias,
    validate_model_name,
)
from gkeflow.components.register.names import validate_labels
from gkeflow.components.register.unchanged import (
    RUN_ID,
    TRAINING_KEY,
    find_same_training,
    made_by_run,
    training_key,
)


def check_model_dir(model_dir: Path) -> None:
    """Fail before touching any registry when there is no exported model to register."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise RegistryError(f"model directory does not exist: {model_dir}")
    if not any(model_dir.iterdir()):
        raise RegistryError(f"model directory is empty: {model_dir}")
    if not (model_dir / "saved_model.pb").exists():
        raise RegistryError(f"model directory holds no SavedModel (saved_model.pb): {model_dir}")


#: The label every version carries naming the model family that won (``gbdt``, ``mlp``,
#: ``wide_deep``, ``linear``, ``ensemble``, ``user``), so a registry filters by it.
FAMILY_LABEL = "model_family"


def with_family(labels: dict[str, str], model_dir: Path) -> dict[str, str]:
    """``labels`` plus :data:`FAMILY_LABEL` read from the model's ``gkeflow_model.json``
    (unless given already, or the model does not say)."""
    import json
    import re

    if FAMILY_LABEL in labels:
        return labels
    try:
        meta = json.loads((Path(model_dir) / "gkeflow_model.json").read_text())
    except (OSError, ValueError):
        return labels
    family = meta.get("model_family") or (meta.get("params") or {}).get("model_type") or ""
    family = re.sub(r"[^a-z0-9_-]", "-", str(family).lower())[:63]
    return {**labels, FAMILY_LABEL: family} if family else labels


def parse_labels(text: str) -> dict[str, str]:
    """``"team=ml,env=dev"`` -> ``{"team": "ml", "env": "dev"}``."""
    labels: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise RegistryError(f"invalid label {item!r}: expected key=value")
        labels[key.strip()] = value.strip()
    return labels


def parse_aliases(text: str) -> tuple[str, ...]:
    """``"candidate, challenger"`` -> ``("candidate", "challenger")``, each validated."""
    aliases = tuple(dict.fromkeys(a.strip() for a in text.split(",") if a.strip()))
    for alias in aliases:
        validate_alias(alias)
    return aliases


def check_registry_uri(registry_uri: str, model_uri: str) -> str:
    """Validate the registry URI (and what its backend needs of the model URI); the backend."""
    backend = backend_of(registry_uri)
    if backend == "vertex":
        from gkeflow.components.register.vertex import parse_vertex_uri

        parse_vertex_uri(registry_uri)
        if not model_uri.startswith("gs://"):
            raise RegistryError(
                "Vertex AI serves models from Cloud Storage; the model URI must start with "
                f"gs:// (got {model_uri!r})"
            )
    elif backend == "kubeflow":
        from gkeflow.components.register.kubeflow import parse_kubeflow_uri

        parse_kubeflow_uri(registry_uri)
    elif backend == "mlflow":
        from gkeflow.components.register.mlflow_registry import parse_mlflow_uri

        parse_mlflow_uri(registry_uri)
    return backend


def register(
    model_dir: Path,
    model_uri: str,
    model_name: str,
    metrics: dict[str, float],
    run_id: str,
    registry_uri: str,
    labels: dict[str, str] | None = None,
    task_key: str = "register-model",
    aliases: tuple[str, ...] = (),
    lineage: dict[str, str] | None = None,
    settings: RegistrySettings | None = None,
    credentials: Any = None,
    training_inputs: str = "",
) -> tuple[ModelVersion, bool]:
    """Register ``model_uri`` as a new version of ``model_name``; idempotent per run and task.

    Args:
        model_dir: Local copy of the SavedModel (checked before anything is registered).
        model_uri: Where the registry records the model (gs://... for Vertex AI).
        model_name: Registered model name.
        metrics: Evaluation metrics stored with the version.
        run_id: Pipeline run id; with ``task_key`` it makes a retry find its version.
        registry_uri: Registry to write to; its scheme picks the backend.
        labels: Extra labels (lower-case keys and values).
        task_key: The pipeline task registering the model.
        aliases: Aliases to point at the new version (e.g. ``candidate``).
        lineage: Extra provenance (e.g. ``data_uri``) recorded with the version.
        settings: Connection settings for remote registries.
        credentials: Vertex AI credentials; default: from the environment.
        training_inputs: What the model was trained on and with (data fingerprint,
            parameters, code); a version trained on the same is passed on instead of a copy.

    Returns:
        The version and whether it was created now (False: a retry found it, or an
        existing version has the same training inputs).
    """
    registration = register_version(
        model_dir, model_uri, model_name, metrics, run_id, registry_uri, labels=labels,
        task_key=task_key, aliases=aliases, lineage=lineage, settings=settings,
        credentials=credentials, training_inputs=training_inputs)
    return registration.version, registration.created


@dataclass(frozen=True)
class Registration:
    """A registered version; ``created``: made now; ``unchanged``: an earlier run's version
    trained on the same inputs, passed on instead of a copy."""

    version: ModelVersion
    created: bool
    unchanged: bool = False


def register_version(
    model_dir: Path,
    model_uri: str,
    model_name: str,
    metrics: dict[str, float],
    run_id: str,
    registry_uri: str,
    labels: dict[str, str] | None = None,
    task_key: str = "register-model",
    aliases: tuple[str, ...] = (),
    lineage: dict[str, str] | None = None,
    settings: RegistrySettings | None = None,
    credentials: Any = None,
    training_inputs: str = "",
) -> Registration:
    """:func:`register`, saying whether the version was passed on as unchanged."""
    validate_model_name(model_name)
    check_model_dir(model_dir)
    labels = dict(labels or {})
    validate_labels(labels)
    for alias in aliases:
        validate_alias(alias)
    if not run_id:
        raise RegistryError("pipeline run id is empty")
    if not task_key:
        raise RegistryError("task key is empty")
    check_registry_uri(registry_uri, model_uri)
    lineage = {k: str(v) for k, v in (lineage or {}).items() if str(v)}
    registry = open_registry(registry_uri, settings, credentials=credentials)
    key = training_key(training_inputs)
    if key:
        lineage.update({TRAINING_KEY: key, RUN_ID: run_id})
        same = find_same_training(registry.list(name=model_name), key)
        if same is not None:
            for alias in aliases:
                if alias not in same.aliases:
                    same = registry.set_alias(model_name, same.version, alias)
            return Registration(same, created=False, unchanged=not made_by_run(same, run_id))
    version, created = registry.register(
        name=model_name,
        uri=model_uri,
        metrics=metrics,
        run_id=run_id,
        task_key=task_key,
        labels=labels,
        aliases=tuple(aliases),
        lineage=lineage,
    )
    return Registration(version, created)


@dataclass(frozen=True)
class RegistrationOutcome:
    """What the pipeline step reports: the version, the output artifact's URI and metadata."""

    version: ModelVersion
    created: bool
    backend: str
    artifact_uri: str
    metadata: dict[str, Any]
    unchanged: bool = False

    @property
    def message(self) -> str:
        if self.unchanged:
            return (f"unchanged: same as version {self.version.version} of {self.version.name} "
                    f"(trained on the same data, parameters and code; "
                    f"{self.version.resource_name})")
        verb = "registered" if self.created else "already registered by this run and task:"
        return (f"{verb} {self.version.name} version {self.version.version} "
                f"in the {self.backend} registry ({self.version.resource_name})")


def _vertex_resource_uri(resource_name: str) -> str:
    """``projects/p/locations/l/models/m@1`` -> its REST address (what Vertex AI links)."""
    location = resource_name.split("/locations/", 1)[1].split("/", 1)[0]
    return f"https://{location}-aiplatform.googleapis.com/v1/{resource_name}"


def vertex_serving_image(model_dir: Path, serving_image: str = "",
                         configured: str = "") -> str:
    """The Vertex AI container that serves the TensorFlow the model was saved with (see
    :func:`gkeflow.components.serving.runtimes.vertex_runtime`).

    Args:
        model_dir: The SavedModel, with the training step's gkeflow_model.json.
        serving_image: gkeflow-serving as compiled (pinned by digest once built).
        configured: registry.serving_image, or a container passed to the step.

    Raises:
        RegistryError: no container serves the model's TensorFlow (one line: both versions
            and the fix).
    """
    import json

    from gkeflow.components.serving.runtimes import RuntimeMismatch, vertex_runtime

    try:
        metadata = json.loads((Path(model_dir) / "gkeflow_model.json").read_text())
        tf_version = str(metadata["framework_version"])
    except (OSError, ValueError, KeyError):
        return configured  # not exported by train_model: the TensorFlow is unknown
    try:
        runtime = vertex_runtime(tf_version, serving_image=serving_image, configured=configured)
    except (RuntimeMismatch, ValueError) as exc:
        raise RegistryError(f"cannot register for Vertex AI: {exc}") from None
    if runtime.note:
        print(f"note: {runtime.note}", flush=True)
    return runtime.image


def register_for_pipeline(
    model_path: str,
    model_uri: str,
    metrics_metadata: dict[str, Any],
    model_name: str,
    run_id: str,
    task_key: str,
    registry_uri: str,
    labels: str = "",
    aliases: str = "",
    data_uri: str = "",
    serving_image: str = "",
    credentials: Any = None,
    settings: RegistrySettings | None = None,
    training_inputs: str = "",
    logged_by: str = "",
) -> RegistrationOutcome:
    """The registration step over plain values: parses the text parameters, registers, and
    describes the result for the step's output artifact."""
    metrics = {k: float(v) for k, v in metrics_metadata.items()
               if isinstance(v, (int, float)) and not isinstance(v, bool)}
    if backend_of(registry_uri) == "vertex":
        from gkeflow.components.serving.runtimes import is_tf_serving_image

        suite_image = serving_image if is_tf_serving_image(serving_image) else ""
        configured = (settings.serving_image if settings else "") or (
            "" if suite_image else serving_image)
        serving_image = vertex_serving_image(Path(model_path), suite_image, configured)
    if settings is None:
        settings = RegistrySettings(serving_image=serving_image)
    elif serving_image:
        from dataclasses import replace

        settings = replace(settings, serving_image=serving_image)
    registration = register_version(
        model_dir=Path(model_path),
        model_uri=model_uri,
        model_name=model_name,
        metrics=metrics,
        run_id=run_id,
        registry_uri=registry_uri,
        labels=with_family(parse_labels(labels), Path(model_path)),
        task_key=task_key,
        aliases=parse_aliases(aliases),
        lineage={"data_uri": data_uri, "mlflow_run": logged_by},
        settings=settings,
        credentials=credentials,
        training_inputs=training_inputs,
    )
    version, created = registration.version, registration.created
    backend = backend_of(registry_uri)
    metadata: dict[str, Any] = {
        "resourceName": version.resource_name,
        "modelName": version.name,
        "version": version.version,
        "backend": backend,
        "aliases": list(version.aliases),
        "modelUri": version.uri,
        "pipelineRunId": run_id,
        "createdNow": created,
        "unchanged": registration.unchanged,
    }
    if backend == "vertex":
        from gkeflow.components.register.vertex import DEFAULT_SERVING_IMAGE

        metadata["servingImage"] = settings.serving_image or DEFAULT_SERVING_IMAGE
    artifact_uri = ""
    if backend == "vertex":
        artifact_uri = _vertex_resource_uri(version.resource_name)
    return RegistrationOutcome(version, created, backend, artifact_uri, metadata,
                               unchanged=registration.unchanged)
