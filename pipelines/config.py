"""``gkeflow.yaml``: configuration as code, validated at the edge with clear errors.

The file is optional; every key has a default in code. Sections:

``compute``
    per-step overrides of :class:`pipelines.compute.ComputeProfile` fields, e.g.::

        compute:
          train-model: {accelerator: nvidia-l4, accelerator_count: 1, spot: true}

``registry``
    the model registry ``gkeflow models`` uses (:class:`RegistryConfig`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

DEFAULT_CONFIG_FILE = Path("gkeflow.yaml")


class ConfigError(ValueError):
    """``gkeflow.yaml`` is invalid; the message names the file, the key and the problem."""


class RegistryConfig(BaseModel):
    """``registry:``: which model registry ``gkeflow models`` talks to, and how to reach it.

    Example::

        registry:
          backend: vertex            # local | vertex | kubeflow
          project: my-project
          location: europe-west4

    Secrets are not configuration: Vertex AI uses Application Default Credentials, the
    Kubeflow Model Registry client the token file named by KF_PIPELINES_SA_TOKEN_PATH.
    """

    model_config = ConfigDict(extra="forbid")

    backend: Literal["local", "vertex", "kubeflow"] = "local"
    #: A full registry URI; when set it wins over the fields below.
    uri: str = ""
    #: local: the SQLite file.
    path: str = "gkeflow-output/registry.db"
    #: vertex: project, region, optional API endpoint and serving container.
    project: str = ""
    location: str = "us-central1"
    api_endpoint: str = ""
    serving_image: str = ""
    #: kubeflow: the Model Registry's REST address.
    host: str = ""
    port: int = Field(default=8080, ge=1, le=65535)
    secure: bool = False
    author: str = "gkeflow"

    def registry_uri(self) -> str:
        """The URI for :func:`components.register.backends.open_registry`."""
        if self.uri:
            return self.uri
        if self.backend == "vertex":
            if not self.project:
                raise ConfigError("registry.project is required for the vertex backend")
            return f"vertex://projects/{self.project}/locations/{self.location}"
        if self.backend == "kubeflow":
            if not self.host:
                raise ConfigError("registry.host is required for the kubeflow backend")
            scheme = "https" if self.secure else "http"
            return f"{scheme}://{self.host}:{self.port}"
        return f"sqlite:///{self.path}"


class GkeflowConfig(BaseModel):
    """The whole of ``gkeflow.yaml``."""

    model_config = ConfigDict(extra="forbid")

    compute: dict[str, dict[str, Any]] = {}
    registry: RegistryConfig = RegistryConfig()

    def compute_overrides(self, defaults) -> dict:
        """Per-step :class:`ComputeProfile` objects: ``defaults`` with this file's overrides."""
        from pipelines.compute import ComputeError

        profiles = dict(defaults)
        for step, changes in self.compute.items():
            if step not in profiles:
                raise ConfigError(
                    f"compute.{step}: unknown step; steps are {', '.join(profiles)}"
                )
            try:
                profiles[step] = profiles[step].with_overrides(**changes)
            except (TypeError, ComputeError) as exc:
                raise ConfigError(f"compute.{step}: {exc}") from exc
        return profiles


def _format_validation_error(path: Path, exc: ValidationError) -> str:
    problems = []
    for error in exc.errors():
        key = ".".join(str(p) for p in error["loc"]) or "(top level)"
        problems.append(f"{path}: {key}: {error['msg']}")
    return "\n".join(problems)


def load_config(path: Path | str | None = None) -> GkeflowConfig:
    """Read and validate ``path`` (default ``./gkeflow.yaml``); a missing default file is empty."""
    explicit = path is not None
    path = Path(path) if path is not None else DEFAULT_CONFIG_FILE
    if not path.exists():
        if explicit:
            raise ConfigError(f"config file not found: {path}")
        return GkeflowConfig()
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(raw).__name__}")
    try:
        return GkeflowConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_format_validation_error(path, exc)) from exc
