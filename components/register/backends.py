"""One small interface over model registries, chosen by the registry URI's scheme.

- ``sqlite:///<path>`` (or a plain path): the embedded registry, :class:`LocalRegistry`.
- ``vertex://projects/<project>/locations/<location>``: Vertex AI Model Registry.
- ``kubeflow://host:port`` or ``http(s)://host[:port]``: Kubeflow Model Registry.
- ``mlflow://host:port`` or ``mlflow+http(s)://host[:port][/path]``: MLflow Model Registry.

Callers use :func:`open_registry` and the methods of :class:`RegistryBackend` only.
Every backend is idempotent per (model name, pipeline run id, task key).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from gkeflow.components.register.local_registry import LocalRegistry, ModelVersion, RegistryError

#: The registries: a local SQLite file, Vertex AI Model Registry, Kubeflow Model Registry,
#: an MLflow server's Model Registry (names of registries, not of platforms).
LOCAL_REGISTRY, VERTEX_REGISTRY, KUBEFLOW_REGISTRY, MLFLOW_REGISTRY = (
    "local", "vertex", "kubeflow", "mlflow")
BACKENDS = (LOCAL_REGISTRY, VERTEX_REGISTRY, KUBEFLOW_REGISTRY, MLFLOW_REGISTRY)


class RegistryBackend(Protocol):
    def register(self, name: str, uri: str, metrics: dict[str, float], run_id: str,
                 task_key: str = ..., labels: dict[str, str] | None = ...,
                 aliases: tuple[str, ...] = ...,
                 lineage: dict[str, str] | None = ...) -> tuple[ModelVersion, bool]: ...

    def set_alias(self, name: str, version: int, alias: str) -> ModelVersion: ...

    def get(self, name: str, version: int) -> ModelVersion: ...

    def get_by_alias(self, name: str, alias: str) -> ModelVersion | None: ...

    def list(self, name: str | None = None) -> list[ModelVersion]: ...


@dataclass(frozen=True)
class RegistrySettings:
    """Connection settings beyond the URI. Secrets are never settings: credentials and tokens
    come from the environment (Application Default Credentials, the pod's service account).

    Attributes:
        serving_image: Vertex AI: the prediction container registered with each version
            (empty: the TensorFlow 2 CPU prebuilt container).
        api_endpoint: Vertex AI: an API endpoint other than the regional default.
        author: Kubeflow Model Registry: the author/owner recorded on what is created.
        attempts: Calls per remote operation, the first included (server errors are retried).
        retry_delay_s: First wait between attempts; doubled each time.
    """

    serving_image: str = ""
    api_endpoint: str = ""
    author: str = "gkeflow"
    attempts: int = 5
    retry_delay_s: float = 0.5


def backend_of(uri: str) -> str:
    """``"local"``, ``"vertex"``, ``"kubeflow"`` or ``"mlflow"`` for a registry URI."""
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    if scheme in ("", "sqlite"):
        return "local"
    if scheme == "vertex":
        return "vertex"
    if scheme in ("kubeflow", "http", "https"):
        return "kubeflow"
    if scheme in ("mlflow", "mlflow+http", "mlflow+https"):
        return "mlflow"
    raise RegistryError(
        f"unknown registry URI scheme {scheme!r} in {uri!r}: use sqlite:///<path>, "
        "vertex://projects/<project>/locations/<location>, kubeflow://host:port "
        "or mlflow://host:port"
    )


def open_registry(uri: str, settings: RegistrySettings | None = None,
                  credentials: Any = None) -> RegistryBackend:
    """The registry behind ``uri``.

    Args:
        uri: Registry URI; its scheme picks the backend.
        settings: Connection settings (defaults when omitted).
        credentials: Vertex AI only: google-auth credentials; default: from the environment.
    """
    settings = settings or RegistrySettings()
    backend = backend_of(uri)
    if backend == "vertex":
        from gkeflow.components.register.vertex import VertexRegistry

        return VertexRegistry(uri, serving_image=settings.serving_image,
                              api_endpoint=settings.api_endpoint, credentials=credentials,
                              attempts=settings.attempts, retry_delay_s=settings.retry_delay_s)
    if backend == "kubeflow":
        from gkeflow.components.register.kubeflow import KubeflowRegistry

        return KubeflowRegistry(uri, author=settings.author, attempts=settings.attempts,
                                retry_delay_s=settings.retry_delay_s)
    if backend == "mlflow":
        from gkeflow.components.register.mlflow_registry import MlflowRegistry
        from gkeflow.components.tracking.pipeline_run import load_credentials

        load_credentials()  # a compiled Vertex AI step's token, from Secret Manager
        return MlflowRegistry(uri, attempts=settings.attempts,
                              retry_delay_s=settings.retry_delay_s)
    return LocalRegistry(uri)


#: The alias of the version the champion gate compares with; a blessed model takes it.
CHAMPION_ALIAS = "champion"


def champion_or_latest(registry: RegistryBackend, name: str,
                       alias: str = CHAMPION_ALIAS) -> ModelVersion | None:
    """The version under ``alias``, else the newest version, else None."""
    version = registry.get_by_alias(name, alias)
    if version is not None:
        return version
    versions = registry.list(name=name)
    return max(versions, key=lambda v: v.version) if versions else None
