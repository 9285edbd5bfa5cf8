"""One small interface over model registries, chosen by the registry URI's scheme.

- ``sqlite:///<path>`` (or a plain path): the embedded registry, :class:`LocalRegistry`.

Callers use :func:`open_registry` and the methods of :class:`RegistryBackend` only.
"""

from __future__ import annotations

from typing import Protocol

from components.register.local_registry import LocalRegistry, ModelVersion


class RegistryBackend(Protocol):
    def register(self, name: str, uri: str, metrics: dict[str, float], run_id: str,
                 task_key: str = ..., labels: dict[str, str] | None = ...,
                 aliases: tuple[str, ...] = ...) -> tuple[ModelVersion, bool]: ...

    def set_alias(self, name: str, version: int, alias: str) -> ModelVersion: ...

    def get(self, name: str, version: int) -> ModelVersion: ...

    def get_by_alias(self, name: str, alias: str) -> ModelVersion | None: ...

    def list(self, name: str | None = None) -> list[ModelVersion]: ...


def open_registry(uri: str) -> RegistryBackend:
    """The registry behind ``uri``."""
    return LocalRegistry(uri)


def champion_or_latest(registry: RegistryBackend, name: str,
                       alias: str = "champion") -> ModelVersion | None:
    """The version under ``alias``, else the newest version, else None."""
    version = registry.get_by_alias(name, alias)
    if version is not None:
        return version
    versions = registry.list(name=name)
    return max(versions, key=lambda v: v.version) if versions else None
