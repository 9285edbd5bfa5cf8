"""Registration: record a blessed model as a new version in a model registry."""

from __future__ import annotations

from pathlib import Path

from components.register.local_registry import (
    LocalRegistry,
    ModelVersion,
    RegistryError,
    validate_model_name,
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


def parse_labels(text: str) -> dict[str, str]:
    """``"team=ml,env=dev"`` -> ``{"team": "ml", "env": "dev"}``."""
    labels: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise RegistryError(f"invalid label {item!r}: expected key=value")
        labels[key.strip()] = value.strip()
    return labels


def register(
    model_dir: Path,
    model_uri: str,
    model_name: str,
    metrics: dict[str, float],
    run_id: str,
    registry_uri: str,
    labels: dict[str, str] | None = None,
    task_key: str = "register-model",
) -> tuple[ModelVersion, bool]:
    """Register ``model_uri`` as a new version of ``model_name``; idempotent per run and task."""
    validate_model_name(model_name)
    check_model_dir(model_dir)
    registry = LocalRegistry(registry_uri)
    return registry.register(
        name=model_name,
        uri=model_uri,
        metrics=metrics,
        run_id=run_id,
        task_key=task_key,
        labels=labels,
    )
