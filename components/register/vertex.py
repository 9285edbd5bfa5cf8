"""Vertex AI Model Registry backend, through google-cloud-aiplatform.

URI: ``vertex://projects/<project>/locations/<location>``.

- The first version of a model creates it (``Model.upload``); later versions are uploaded
  with ``parent_model`` so they become versions of the same model.
- ``is_default_version`` and ``version_aliases`` are always passed explicitly.
- Labels (lower-case, sanitised) carry the pipeline run id, the task, a retry key and the
  numeric metrics (``metric-accuracy: 0_9123``, read back exactly).
- The evaluation metrics are imported as a model evaluation of the new version.
- A retried registration (same model, run and task) finds the version by its retry-key
  label and returns it instead of uploading again.

Credentials come from the environment (Application Default Credentials) unless passed in.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from gkeflow.components.register.local_registry import (
    ModelVersion,
    RegistryError,
    validate_alias,
    validate_model_name,
)
from gkeflow.components.register.names import (
    MAX_LABELS,
    METRIC_LABEL_PREFIX,
    RETRY_KEY_LABEL,
    RUN_ID_LABEL,
    TASK_LABEL,
    metric_from_label,
    metric_labels,
    retry_key,
    sanitise_label_value,
    validate_labels,
)
from gkeflow.components.register.retrying import TransientRegistryError, with_retries
from gkeflow.components.serving.runtimes import tf_serving_base, tf_serving_container

#: TensorFlow 2 CPU prebuilt prediction container; override per registration or in gkeflow.yaml.
DEFAULT_SERVING_IMAGE = "us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest"
CLASSIFICATION_METRICS_SCHEMA = (
    "gs://google-cloud-aiplatform/schema/modelevaluation/classification_metrics_1.0.0.yaml"
)
DESCRIPTION_PREFIX = "Registered by gkeflow. Lineage: "
VERTEX_URI = re.compile(r"^vertex://projects/([a-z0-9-]+|\d+)/locations/([a-z0-9-]+)/?$")


@dataclass(frozen=True)
class VertexLocation:
    project: str
    location: str

    @property
    def parent(self) -> str:
        return f"projects/{self.project}/locations/{self.location}"


def parse_vertex_uri(uri: str) -> VertexLocation:
    """``vertex://projects/P/locations/L`` -> project and location."""
    match = VERTEX_URI.match(uri)
    if not match:
        raise RegistryError(
            f"invalid Vertex AI registry URI {uri!r}: expected "
            "vertex://projects/<project>/locations/<location>"
        )
    return VertexLocation(match.group(1), match.group(2))


def _classify(exc: Exception) -> Exception | None:
    from google.api_core import exceptions as gexc

    if isinstance(exc, (gexc.ServerError, gexc.TooManyRequests, gexc.RetryError,
                        ConnectionError)):
        return TransientRegistryError(f"{type(exc).__name__}: {getattr(exc, 'message', exc)}")
    if isinstance(exc, gexc.GoogleAPICallError):
        return RegistryError(f"Vertex AI rejected the request ({exc.code}): {exc.message}")
    try:
        import requests

        if isinstance(exc, requests.ConnectionError):
            return TransientRegistryError(f"connection failed: {exc}")
    except ImportError:  # pragma: no cover - requests comes with google-auth
        pass
    return None


class VertexRegistry:
    """Vertex AI Model Registry behind the :class:`RegistryBackend` interface."""

    def __init__(
        self,
        uri: str,
        serving_image: str = DEFAULT_SERVING_IMAGE,
        api_endpoint: str = "",
        credentials: Any = None,
        attempts: int = 5,
        retry_delay_s: float = 0.5,
    ):
        self.where = parse_vertex_uri(uri)
        self.serving_image = serving_image or DEFAULT_SERVING_IMAGE
        from gkeflow.components.serving.runtimes import is_tf_serving_image

        # gkeflow-serving: TensorFlow Serving's layout, port and routes (see _upload).
        self.tf_serving = is_tf_serving_image(self.serving_image)
        self.attempts = attempts
        self.retry_delay_s = retry_delay_s
        from google.cloud import aiplatform

        if credentials is None and api_endpoint.startswith("http://"):
            # A plain-HTTP endpoint is a local emulator: never send real credentials over it.
            from google.auth.credentials import AnonymousCredentials

            credentials = AnonymousCredentials()
        init: dict[str, Any] = {"project": self.where.project, "location": self.where.location}
        if credentials is not None:
            init["credentials"] = credentials
        if api_endpoint:
            # An http:// endpoint (a local test server) needs the REST transport.
            init["api_endpoint"] = api_endpoint
            init["api_transport"] = "rest"
        aiplatform.init(**init)
        self.credentials = credentials

    # -- plumbing -----------------------------------------------------------------------------

    def _retrying(self, operation, what: str):
        return with_retries(operation, _classify, what, attempts=self.attempts,
                            initial_delay_s=self.retry_delay_s)

    def _client(self):
        from google.cloud import aiplatform
        from google.cloud.aiplatform import utils

        return aiplatform.initializer.global_config.create_client(
            client_class=utils.ModelClientWithOverride,
            credentials=self.credentials,
            location_override=self.where.location,
        )

    def _models_named(self, name: str) -> list:
        """Model resources (default versions) whose display name is ``name``, oldest first."""
        client = self._client()
        request = {"parent": self.where.parent, "filter": f'display_name="{name}"'}
        models = [m for m in client.list_models(request=request) if m.display_name == name]
        return sorted(models, key=lambda m: (m.create_time, m.name))

    def _versions(self, model_resource: str, filter_: str = "") -> list:
        request: dict[str, Any] = {"name": model_resource}
        if filter_:
            request["filter"] = filter_
        return list(self._client().list_model_versions(request=request))

    @staticmethod
    def _to_version(model) -> ModelVersion:
        labels = dict(model.labels)
        metrics = {}
        for key, value in labels.items():
            if key.startswith(METRIC_LABEL_PREFIX):
                try:
                    metrics[key[len(METRIC_LABEL_PREFIX):]] = metric_from_label(value)
                except ValueError:
                    pass
        created = model.version_create_time or model.create_time
        lineage = {}
        if model.version_description.startswith(DESCRIPTION_PREFIX):
            try:
                lineage = json.loads(model.version_description[len(DESCRIPTION_PREFIX):])
            except ValueError:
                lineage = {}
        return ModelVersion(
            name=model.display_name,
            version=int(model.version_id),
            uri=str(lineage.get("model_uri") or model.artifact_uri),
            metrics=metrics,
            labels={k: v for k, v in labels.items() if not k.startswith(METRIC_LABEL_PREFIX)},
            run_id=labels.get(RUN_ID_LABEL, ""),
            created_at=created.timestamp() if created else 0.0,
            aliases=tuple(sorted(a for a in model.version_aliases if a != "default")),
            resource=f"{model.name.split('@')[0]}@{model.version_id}",
            lineage={str(k): str(v) for k, v in lineage.items()},
        )

    def _model_resource(self, name: str) -> str:
        models = self._models_named(name)
        if not models:
            raise RegistryError(f"no model named {name!r} in Vertex AI ({self.where.parent})")
        return models[0].name.split("@")[0]

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
        make_default: bool = True,
    ) -> tuple[ModelVersion, bool]:
        """Upload ``uri`` as a new version of ``name``, or return the one this run and task made.

        Args:
            make_default: Whether the new version becomes the model's default version
                (the first version always is).
        """
        validate_model_name(name)
        for alias in aliases:
            validate_alias(alias)
            if alias == "default":
                raise RegistryError("alias 'default' is Vertex AI's own; use make_default")
        labels = dict(labels or {})
        validate_labels(labels)
        if not uri.startswith("gs://"):
            raise RegistryError(
                f"Vertex AI serves models from Cloud Storage; the model URI must start with "
                f"gs:// (got {uri!r})"
            )
        if not run_id:
            raise RegistryError("pipeline run id is empty")
        key = retry_key(name, run_id, task_key)
        own = {
            RETRY_KEY_LABEL: key,
            RUN_ID_LABEL: sanitise_label_value(run_id),
            TASK_LABEL: sanitise_label_value(task_key),
        }
        all_labels = {**labels, **own}
        all_labels.update(metric_labels(metrics, room=MAX_LABELS - len(all_labels)))
        description = DESCRIPTION_PREFIX + json.dumps(
            {"pipeline_run_id": run_id, "pipeline_task": task_key, "model_uri": uri,
             **(lineage or {})}, sort_keys=True)

        def attempt() -> tuple[ModelVersion, bool]:
            models = self._models_named(name)
            for model in models:
                found = self._versions(model.name.split("@")[0],
                                       f'labels.{RETRY_KEY_LABEL}="{key}"')
                if found:
                    return self._to_version(found[0]), False
            return self._upload(name, uri, all_labels, aliases, make_default, models,
                                description), True

        version, created = self._retrying(attempt, f"registering {name!r} in Vertex AI")
        if created:
            self._import_evaluation(version, metrics, run_id)
        return version, created

    def _upload(self, name, uri, labels, aliases, make_default, models,
                description) -> ModelVersion:
        from google.cloud import aiplatform

        parent = models[0].name.split("@")[0] if models else None
        if parent and aliases:
            # Aliases are unique within a model: take them off the versions holding them.
            client = self._client()
            for holder in self._versions(parent):
                taken = [a for a in aliases if a in holder.version_aliases]
                if taken:
                    client.merge_version_aliases(request={
                        "name": f"{parent}@{holder.version_id}",
                        "version_aliases": [f"-{a}" for a in taken],
                    })
        artifact_uri, container = uri, {}
        if self.tf_serving:
            artifact_uri, container = self._tf_serving_layout(uri), tf_serving_container(name)
        uploaded = aiplatform.Model.upload(
            display_name=name,
            artifact_uri=artifact_uri,
            serving_container_image_uri=self.serving_image,
            **container,
            parent_model=parent,
            is_default_version=True if parent is None else make_default,
            version_aliases=list(aliases),
            version_description=description,
            labels=labels,
            project=self.where.project,
            location=self.where.location,
            credentials=self.credentials,
            sync=True,
        )
        model = self._client().get_model(name=uploaded.versioned_resource_name)
        return self._to_version(model)

    @staticmethod
    def _tf_serving_layout(uri: str) -> str:
        """Copy the SavedModel at ``uri`` to ``<uri>-tfserving/1/``, the layout TensorFlow
        Serving reads (a numbered version folder), and return ``<uri>-tfserving``: Vertex AI
        copies it and passes the copy as ``AIP_STORAGE_URI``. The version keeps ``uri``."""
        import tempfile
        from pathlib import Path

        from gkeflow.components.scaleout.storage import download, publish

        base = tf_serving_base(uri)
        with tempfile.TemporaryDirectory(prefix="gkeflow-tfserving-") as tmp:
            local = download(uri, Path(tmp) / "model")
            publish(local, f"{base}/1", {"model_uri": uri})
        return base

    def _import_evaluation(self, version: ModelVersion, metrics: dict[str, float],
                           run_id: str) -> None:
        """Attach the evaluation metrics to the version; a failure is reported, not fatal."""
        known = {"accuracy", "auPrc", "auRoc", "logLoss"}
        values = {k: float(v) for k, v in metrics.items()}
        body = {
            "display_name": f"gkeflow evaluation ({sanitise_label_value(run_id)})"[:128],
            "metrics_schema_uri": CLASSIFICATION_METRICS_SCHEMA,
            "metrics": {k: v for k, v in values.items() if k in known},
            "metadata": {"pipeline_run_id": run_id, "metrics": values},
        }

        def call():
            return self._client().import_model_evaluation(
                request={"parent": version.resource_name, "model_evaluation": body}
            )

        try:
            self._retrying(call, f"importing the evaluation of {version.resource_name}")
        except RegistryError as exc:
            print(f"warning: the model is registered but its evaluation was not imported: {exc}",
                  flush=True)

    def set_alias(self, name: str, version: int, alias: str) -> ModelVersion:
        """Point ``alias`` at ``version``: removed from the version holding it, then added."""
        validate_alias(alias)

        def attempt() -> ModelVersion:
            resource = self._model_resource(name)
            versions = self._versions(resource)
            target = next((v for v in versions if int(v.version_id) == version), None)
            if target is None:
                raise RegistryError(f"model {name!r} has no version {version}")
            client = self._client()
            if alias == "default":
                client.merge_version_aliases(
                    request={"name": f"{resource}@{version}", "version_aliases": ["default"]})
            else:
                for holder in versions:
                    if alias in holder.version_aliases and holder.version_id != target.version_id:
                        client.merge_version_aliases(request={
                            "name": f"{resource}@{holder.version_id}",
                            "version_aliases": [f"-{alias}"],
                        })
                if alias not in target.version_aliases:
                    client.merge_version_aliases(
                        request={"name": f"{resource}@{version}", "version_aliases": [alias]})
            return self._to_version(client.get_model(name=f"{resource}@{version}"))

        return self._retrying(attempt, f"setting alias {alias!r} on {name!r} version {version}")

    def get(self, name: str, version: int) -> ModelVersion:
        def attempt() -> ModelVersion:
            resource = self._model_resource(name)
            return self._to_version(self._client().get_model(name=f"{resource}@{version}"))

        try:
            return self._retrying(attempt, f"reading {name!r} version {version}")
        except RegistryError as exc:
            if "(404)" in str(exc):
                raise RegistryError(f"model {name!r} has no version {version}") from exc
            raise

    def get_by_alias(self, name: str, alias: str) -> ModelVersion | None:
        def attempt() -> ModelVersion | None:
            models = self._models_named(name)
            if not models:
                return None
            for model in self._versions(models[0].name.split("@")[0]):
                if alias in model.version_aliases:
                    return self._to_version(model)
            return None

        return self._retrying(attempt, f"looking up alias {alias!r} of {name!r}")

    def list(self, name: str | None = None) -> list[ModelVersion]:
        def attempt() -> list[ModelVersion]:
            if name is not None:
                models = self._models_named(name)
            else:
                models = list(self._client().list_models(request={"parent": self.where.parent}))
            out = []
            for model in models:
                out.extend(self._to_version(v) for v in self._versions(model.name.split("@")[0]))
            return sorted(out, key=lambda v: (v.name, v.version))

        return self._retrying(attempt, "listing models in Vertex AI")
