"""Kubeflow Model Registry backend, through the ``model-registry`` client (REST).

URI: ``kubeflow://host:port`` (plain HTTP inside the cluster, e.g.
``kubeflow://model-registry-service.kubeflow.svc.cluster.local:8080``) or an
``http(s)://host[:port]`` address.

Each registration makes a registered model (once), a model version named ``1``, ``2``, …
and a model artifact (format ``tensorflow``, the model's URI). The version's custom
properties hold the metrics and the lineage (pipeline run id, task, model URI, labels);
its ``externalId`` holds a retry key, so a retried registration finds the version it made
(and adds the artifact if the first attempt stopped before it). Aliases live on the
registered model as ``alias:<alias>`` custom properties, moved with one update.

A bearer token, when needed, comes from the environment: the file named by
``KF_PIPELINES_SA_TOKEN_PATH`` or the pod's service-account token (the client's own rules).
"""

from __future__ import annotations

import json
import re
from typing import Any

from gkeflow.components.register.local_registry import (
    ModelVersion,
    RegistryError,
    validate_alias,
    validate_model_name,
)
from gkeflow.components.register.names import retry_key, validate_labels
from gkeflow.components.register.retrying import TransientRegistryError, with_retries

ALIAS_PREFIX = "alias:"
LABEL_PREFIX = "label:"
METRIC_PREFIX = "metric:"
LINEAGE_PREFIX = "lineage:"
RUN_ID_PROPERTY = "pipeline_run_id"
TASK_PROPERTY = "pipeline_task"
MODEL_URI_PROPERTY = "model_uri"
MODEL_FORMAT = "tensorflow"
MODEL_FORMAT_VERSION = "2"
_ADDRESS = re.compile(r"^(kubeflow|https?)://([A-Za-z0-9.-]+)(?::(\d+))?/?$")


def parse_kubeflow_uri(uri: str) -> tuple[str, int, bool]:
    """``kubeflow://host:port`` / ``http(s)://host[:port]`` -> (``scheme://host``, port, secure)."""
    match = _ADDRESS.match(uri)
    if not match:
        raise RegistryError(
            f"invalid Kubeflow Model Registry URI {uri!r}: expected kubeflow://host:port "
            "or http(s)://host[:port]"
        )
    scheme, host, port = match.groups()
    secure = scheme == "https"
    default_port = 443 if secure else 8080
    return f"{'https' if secure else 'http'}://{host}", int(port or default_port), secure


def _server_message(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    if body:
        try:
            data = json.loads(body)
            if isinstance(data, dict) and data.get("message"):
                return str(data["message"])
        except ValueError:
            return str(body)[:500]
    return str(getattr(exc, "reason", "") or exc)


def _classify(exc: Exception) -> Exception | None:
    import aiohttp
    from model_registry.exceptions import StoreError
    from mr_openapi.exceptions import ApiException

    if isinstance(exc, ApiException):
        status = exc.status or 0
        message = _server_message(exc)
        if status >= 500 or status == 429:
            return TransientRegistryError(f"HTTP {status}: {message}")
        return RegistryError(f"Kubeflow Model Registry rejected the request (HTTP {status}): "
                             f"{message}")
    if isinstance(exc, (aiohttp.ClientConnectionError, ConnectionError, TimeoutError)):
        return TransientRegistryError(f"connection failed: {exc}")
    if isinstance(exc, StoreError):
        return RegistryError(f"Kubeflow Model Registry: {exc}")
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):  # an answer that is not the API's (HTML, say)
        return RegistryError("the Kubeflow Model Registry address answered with something "
                             "that is not its REST API (a sign-in page, or another "
                             "service?); check registry_uri and the token")
    return None


class KubeflowRegistry:
    """Kubeflow Model Registry behind the :class:`RegistryBackend` interface."""

    def __init__(self, uri: str, author: str = "gkeflow", user_token: str = "",
                 attempts: int = 5, retry_delay_s: float = 0.5):
        self.address, self.port, self.secure = parse_kubeflow_uri(uri)
        self.author = author
        self.user_token = user_token
        self.attempts = attempts
        self.retry_delay_s = retry_delay_s
        self._client_instance = None

    # -- plumbing -----------------------------------------------------------------------------

    def _retrying(self, operation, what: str):
        return with_retries(operation, _classify, what, attempts=self.attempts,
                            initial_delay_s=self.retry_delay_s)

    @property
    def _client(self):
        if self._client_instance is None:
            import warnings

            from model_registry import ModelRegistry

            def connect():
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", message="User access token is missing")
                    return ModelRegistry(self.address, self.port, author=self.author,
                                         is_secure=self.secure,
                                         user_token=self.user_token or None)

            self._client_instance = self._retrying(
                connect, f"connecting to the Kubeflow Model Registry at {self.address}:{self.port}")
        return self._client_instance

    def _run(self, coroutine):
        return self._client.async_runner(coroutine)

    def _registered_model(self, name: str):
        return self._run(self._client._api.get_registered_model_by_params(name=name))

    def _all_pages(self, fetch) -> list:
        """Every item of a paged list. (The client's Pager sends an empty nextPageToken after
        the last page, which the API contract forbids, so pages are followed here.)"""
        from model_registry.types import ListOptions

        out, options, seen = [], ListOptions(limit=100), set()
        while True:
            page = self._run(fetch(options))
            out.extend(page)
            token = options.next_page_token
            if not token or not page or token in seen:
                return out
            seen.add(token)

    def _versions(self, registered_model_id: str) -> list:
        return self._all_pages(
            lambda options: self._client._api.get_model_versions(registered_model_id, options))

    def _artifact_uri(self, version) -> str:
        uri = (version.custom_properties or {}).get(MODEL_URI_PROPERTY)
        if uri:
            return str(uri)
        artifacts = self._run(self._client._api.get_model_version_artifacts(version.id))
        return next((a.uri for a in artifacts if getattr(a, "uri", None)), "")

    def _to_version(self, model_name: str, version, aliases: dict[str, str]) -> ModelVersion:
        props = dict(version.custom_properties or {})
        metrics = {k[len(METRIC_PREFIX):]: float(v) for k, v in props.items()
                   if k.startswith(METRIC_PREFIX) and isinstance(v, (int, float))}
        labels = {k[len(LABEL_PREFIX):]: str(v) for k, v in props.items()
                  if k.startswith(LABEL_PREFIX)}
        lineage = {k[len(LINEAGE_PREFIX):]: str(v) for k, v in props.items()
                   if k.startswith(LINEAGE_PREFIX)}
        lineage.update({k: str(props[k]) for k in (TASK_PROPERTY, MODEL_URI_PROPERTY)
                        if k in props})
        created = version.create_time_since_epoch
        return ModelVersion(
            name=model_name,
            version=int(version.name),
            uri=self._artifact_uri(version),
            metrics=metrics,
            labels=labels,
            run_id=str(props.get(RUN_ID_PROPERTY, "")),
            created_at=int(created) / 1000 if created else 0.0,
            aliases=tuple(sorted(a for a, v in aliases.items() if v == version.name)),
            resource=f"{self.address}:{self.port}/registered_models/"
                     f"{version.registered_model_id}/versions/{version.id}",
            lineage=lineage,
        )

    @staticmethod
    def _aliases(registered_model) -> dict[str, str]:
        props = registered_model.custom_properties or {}
        return {k[len(ALIAS_PREFIX):]: str(v) for k, v in props.items()
                if k.startswith(ALIAS_PREFIX) and str(v)}

    # -- the interface ------------------------------------------------------------------------

    def register(
        self,
        name: str,
        uri: str,
        metrics: dict[str, float],
        run_id: str,
        task_key: str = "register-model",
        labels: dict[str, str] | None = None,
        aliases: tuple[str, ...] = (),
        lineage: dict[str, str] | None = None,
    ) -> tuple[ModelVersion, bool]:
        """Add a version of ``name`` at ``uri``, or return the one this run and task made."""
        validate_model_name(name)
        for alias in aliases:
            validate_alias(alias)
        labels = dict(labels or {})
        validate_labels(labels)
        if not uri:
            raise RegistryError("model URI is empty")
        if not run_id:
            raise RegistryError("pipeline run id is empty")
        external_id = f"gkeflow:{retry_key(name, run_id, task_key)}"
        properties: dict[str, Any] = {
            RUN_ID_PROPERTY: run_id,
            TASK_PROPERTY: task_key,
            MODEL_URI_PROPERTY: uri,
            **{f"{METRIC_PREFIX}{k}": float(v) for k, v in metrics.items()},
            **{f"{LABEL_PREFIX}{k}": v for k, v in labels.items()},
            **{f"{LINEAGE_PREFIX}{k}": str(v) for k, v in (lineage or {}).items()},
        }

        def attempt() -> tuple[Any, Any, bool]:
            from model_registry.types import ModelVersion as MrModelVersion
            from model_registry.types import RegisteredModel
            from mr_openapi.exceptions import ApiException

            api = self._client._api
            existing = self._run(api.get_model_version_by_params(external_id=external_id))
            if existing is not None:
                return self._run(api.get_registered_model_by_id(existing.registered_model_id)), \
                    existing, False
            registered = self._registered_model(name)
            if registered is None:
                try:
                    registered = self._run(api.upsert_registered_model(
                        RegisteredModel(name=name, owner=self.author,
                                        description="registered by gkeflow")))
                except ApiException as exc:
                    if exc.status != 409:
                        raise
                    registered = self._registered_model(name)  # made by a concurrent run
            numbers = [int(v.name) for v in self._versions(registered.id) if v.name.isdigit()]
            next_number = max(numbers, default=0) + 1
            try:
                version = self._run(api.upsert_model_version(
                    MrModelVersion(name=str(next_number), author=self.author,
                                   external_id=external_id, custom_properties=properties,
                                   description=f"registered by gkeflow from {uri}"),
                    registered.id))
            except ApiException as exc:
                if exc.status == 409:  # the number was taken by a concurrent run: try again
                    raise TransientVersionConflict(str(next_number)) from exc
                raise
            return registered, version, True

        def attempt_until_numbered():
            for _ in range(20):
                try:
                    return attempt()
                except TransientVersionConflict:
                    continue
            raise RegistryError(f"could not allocate a version number for {name!r}: "
                                "too many concurrent registrations")

        registered, version, created = self._retrying(
            attempt_until_numbered, f"registering {name!r} in the Kubeflow Model Registry")
        self._retrying(lambda: self._ensure_artifact(name, version, uri, external_id),
                       f"recording the model artifact of {name!r} version {version.name}")
        if aliases:
            self._move_aliases(name, version.name, aliases)
            registered = self._registered_model(name)
        return self._to_version(name, version, self._aliases(registered)), created

    def _ensure_artifact(self, name: str, version, uri: str, external_id: str) -> None:
        from model_registry.types import ModelArtifact

        api = self._client._api
        artifact_id = f"{external_id}:artifact"
        if self._run(api.get_model_artifact_by_params(external_id=artifact_id)) is not None:
            return
        self._run(api.upsert_model_version_artifact(
            ModelArtifact(name=f"{name}-{version.name}", uri=uri, external_id=artifact_id,
                          model_format_name=MODEL_FORMAT,
                          model_format_version=MODEL_FORMAT_VERSION),
            version.id))

    def _move_aliases(self, name: str, version_name: str, aliases: tuple[str, ...]) -> None:
        def attempt():
            registered = self._registered_model(name)
            if registered is None:
                raise RegistryError(f"no model named {name!r} in the Kubeflow Model Registry")
            props = dict(registered.custom_properties or {})
            props.update({f"{ALIAS_PREFIX}{a}": version_name for a in aliases})
            registered.custom_properties = props
            self._run(self._client._api.upsert_registered_model(registered))

        self._retrying(attempt, f"setting aliases {', '.join(aliases)} on {name!r}")

    def set_alias(self, name: str, version: int, alias: str) -> ModelVersion:
        """Point ``alias`` at ``version`` with one update of the registered model."""
        validate_alias(alias)
        self.get(name, version)
        self._move_aliases(name, str(version), (alias,))
        return self.get(name, version)

    def get(self, name: str, version: int) -> ModelVersion:
        def attempt() -> ModelVersion:
            registered = self._registered_model(name)
            if registered is None:
                raise RegistryError(f"no model named {name!r} in the Kubeflow Model Registry")
            found = self._run(self._client._api.get_model_version_by_params(
                registered_model_id=registered.id, name=str(version)))
            if found is None:
                raise RegistryError(f"model {name!r} has no version {version}")
            return self._to_version(name, found, self._aliases(registered))

        return self._retrying(attempt, f"reading {name!r} version {version}")

    def get_by_alias(self, name: str, alias: str) -> ModelVersion | None:
        def attempt() -> ModelVersion | None:
            registered = self._registered_model(name)
            if registered is None:
                return None
            target = self._aliases(registered).get(alias)
            if not target:
                return None
            found = self._run(self._client._api.get_model_version_by_params(
                registered_model_id=registered.id, name=target))
            return self._to_version(name, found, self._aliases(registered)) if found else None

        return self._retrying(attempt, f"looking up alias {alias!r} of {name!r}")

    def list(self, name: str | None = None) -> list[ModelVersion]:
        def attempt() -> list[ModelVersion]:
            if name is not None:
                registered = self._registered_model(name)
                models = [registered] if registered is not None else []
            else:
                models = self._all_pages(self._client._api.get_registered_models)
            out = []
            for registered in models:
                aliases = self._aliases(registered)
                out.extend(self._to_version(registered.name, v, aliases)
                           for v in self._versions(registered.id) if v.name.isdigit())
            return sorted(out, key=lambda v: (v.name, v.version))

        return self._retrying(attempt, "listing models in the Kubeflow Model Registry")


class TransientVersionConflict(Exception):
    """Another registration took the version number; pick the next one."""
