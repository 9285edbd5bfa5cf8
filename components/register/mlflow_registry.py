"""MLflow Model Registry backend, through MLflow's own client (REST).

URI: ``mlflow://host:port`` (plain HTTP), ``mlflow+http://host[:port][/path]`` or
``mlflow+https://host[:port][/path]`` (a server behind a proxy path). Credentials never go
in the URI: MLflow's client reads them from the environment (``MLFLOW_TRACKING_TOKEN``, or
``MLFLOW_TRACKING_USERNAME`` and ``MLFLOW_TRACKING_PASSWORD``).

Each registration makes the registered model (once) and a model version whose source is the
model's URI. The version's tags hold the metrics, labels and lineage (pipeline run id, task,
training key, suite version) and a retry key, so a retried registration finds the version
it made before creating another. Aliases are MLflow's own registered-model aliases.

Every call is bounded: MLflow's client makes one HTTP attempt per call with a timeout (a
create that it retried by itself after a lost answer would make a second version), and
:func:`with_retries` repeats the whole idempotent operation on server errors.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Any

from gkeflow.components.register.local_registry import (
    ModelVersion,
    RegistryError,
    validate_alias,
    validate_model_name,
)
from gkeflow.components.register.names import retry_key, validate_labels
from gkeflow.components.register.retrying import TransientRegistryError, with_retries
from gkeflow.components.tracking.client import MODEL_LOGGED_TAG, Limits, http_limits
from gkeflow.components.tracking.pipeline_run import EXPERIMENT_TAGS

SCHEMES = {"mlflow": "http", "mlflow+http": "http", "mlflow+https": "https"}
TAG_PREFIX = "gkeflow."
RETRY_KEY_TAG = "gkeflow.retry_key"
RUN_ID_TAG = "gkeflow.pipeline_run_id"
TASK_TAG = "gkeflow.task"
MODEL_URI_TAG = "gkeflow.model_uri"
SUITE_VERSION_TAG = "gkeflow.version"
UPLOADED_TAG = "gkeflow.uploaded"
#: The experiment holding the runs that carry uploaded local models.
UPLOAD_EXPERIMENT = "gkeflow-registered-models"
METRIC_PREFIX = "gkeflow.metric."
LABEL_PREFIX = "gkeflow.label."
LINEAGE_PREFIX = "gkeflow.lineage."
#: Lineage key naming the MLflow run that logged the model (the version's source and run).
LOGGED_BY_LINEAGE = "mlflow_run"
#: One HTTP attempt per client call; the operation as a whole is retried here.
CALL_LIMITS = Limits(max_retries=0, timeout_s=30, backoff_factor=0)
CREDENTIALS_FIX = ("set MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and "
                   "MLFLOW_TRACKING_PASSWORD, to credentials the server accepts")


def parse_mlflow_uri(uri: str) -> str:
    """``mlflow://host:port`` / ``mlflow+http(s)://host[:port][/path]`` -> the server's URL."""
    parts = urllib.parse.urlsplit(uri)
    scheme = SCHEMES.get(parts.scheme.lower())
    if scheme is None or not parts.netloc:
        raise RegistryError(f"invalid MLflow registry URI {uri!r}: expected mlflow://host:port "
                            "or mlflow+https://host[:port][/path]")
    if "@" in parts.netloc:
        raise RegistryError("credentials do not belong in the MLflow registry URI: remove "
                            f"them and {CREDENTIALS_FIX}")
    try:
        port = parts.port
    except ValueError:
        port = -1
    if not parts.hostname or port == -1 or parts.query or parts.fragment:
        raise RegistryError(f"invalid MLflow registry URI {uri!r}: expected mlflow://host:port "
                            "or mlflow+https://host[:port][/path]")
    return f"{scheme}://{parts.netloc}{parts.path.rstrip('/')}"


def _status(exc: Exception) -> int:
    try:
        return int(exc.get_http_status_code())  # type: ignore[attr-defined]
    except (AttributeError, TypeError, ValueError):
        return 500


def _unreachable(message: str) -> bool:
    return any(text in message for text in ("failed with exception", "timeout exception",
                                            "Max retries exceeded", "Connection refused"))


def _classify(url: str):
    not_the_api = (f"{url} answered with something that is not MLflow's REST API (a sign-in "
                   "page, or another service?): check registry_uri and the credentials")

    def classify(exc: Exception) -> Exception | None:
        from mlflow.exceptions import MlflowException

        if isinstance(exc, (ConnectionError, TimeoutError)):
            return TransientRegistryError(f"cannot reach {url}: is the server running? "
                                          "check registry_uri")
        if isinstance(exc, ValueError) and type(exc).__name__ == "JSONDecodeError":
            return RegistryError(not_the_api)
        if not isinstance(exc, MlflowException):
            return None
        message = " ".join(str(exc.message).split())
        if "not in a valid JSON format" in message:
            return RegistryError(not_the_api)
        if _unreachable(message):
            return TransientRegistryError(f"cannot reach {url}: is the server running? "
                                          "check registry_uri")
        status = _status(exc)
        if status in (401, 403):
            return RegistryError(f"the MLflow server at {url} refused the credentials "
                                 f"(HTTP {status}): {CREDENTIALS_FIX}")
        if status >= 500 or status == 429:
            return TransientRegistryError(f"HTTP {status}: {message[:300]}")
        return RegistryError(f"the MLflow server at {url} rejected the request "
                             f"(HTTP {status}): {message[:300]}")

    return classify


def local_path(uri: str) -> Path | None:
    """The directory a local model URI names (a path or ``file://``), else None."""
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme == "file":
        return Path(urllib.parse.unquote(parts.path))
    if parts.scheme == "":
        return Path(uri)
    return None


def _quote(value: str) -> str:
    """A value inside single quotes of an MLflow filter string."""
    return value.replace("\\", "\\\\").replace("'", "\\'")


class MlflowRegistry:
    """MLflow Model Registry behind the :class:`RegistryBackend` interface."""

    def __init__(self, uri: str, attempts: int = 5, retry_delay_s: float = 0.5,
                 limits: Limits = CALL_LIMITS):
        self.url = parse_mlflow_uri(uri)
        self.attempts = attempts
        self.retry_delay_s = retry_delay_s
        self.limits = limits
        self._client_instance = None

    # -- plumbing -----------------------------------------------------------------------------

    @property
    def _client(self):
        if self._client_instance is None:
            from mlflow import MlflowClient

            self._client_instance = MlflowClient(tracking_uri=self.url, registry_uri=self.url)
        return self._client_instance

    def _retrying(self, operation, what: str):
        def bounded():
            with http_limits(self.limits):
                return operation()

        return with_retries(bounded, _classify(self.url), f"{what} at {self.url}",
                            attempts=self.attempts, initial_delay_s=self.retry_delay_s)

    @staticmethod
    def _missing(exc: Exception) -> bool:
        return getattr(exc, "error_code", "") == "RESOURCE_DOES_NOT_EXIST"

    def _search(self, filter_string: str) -> list:
        out, token = [], None
        while True:
            page = self._client.search_model_versions(filter_string, max_results=1000,
                                                      page_token=token)
            out.extend(page)
            token = page.token
            if not token or not page:
                return out

    def _to_version(self, version, aliases: dict[str, str] | None = None) -> ModelVersion:
        """``aliases`` ({alias: version}) where the answer lacks them (search results do)."""
        tags = dict(version.tags or {})
        metrics = {}
        for key, value in tags.items():
            if key.startswith(METRIC_PREFIX):
                try:
                    metrics[key[len(METRIC_PREFIX):]] = float(value)
                except ValueError:
                    continue
        labels = {k[len(LABEL_PREFIX):]: v for k, v in tags.items() if k.startswith(LABEL_PREFIX)}
        lineage = {k[len(LINEAGE_PREFIX):]: v for k, v in tags.items()
                   if k.startswith(LINEAGE_PREFIX)}
        if TASK_TAG in tags:
            lineage["pipeline_task"] = tags[TASK_TAG]
        if SUITE_VERSION_TAG in tags:
            lineage["gkeflow_version"] = tags[SUITE_VERSION_TAG]
        created = version.creation_timestamp
        return ModelVersion(
            name=version.name,
            version=int(version.version),
            uri=tags.get(MODEL_URI_TAG) or version.source or "",
            metrics=metrics,
            labels=labels,
            run_id=tags.get(RUN_ID_TAG, ""),
            created_at=int(created) / 1000 if created else 0.0,
            aliases=tuple(sorted(getattr(version, "aliases", None) or (
                a for a, v in (aliases or {}).items() if str(v) == str(version.version)))),
            resource=f"{self.url}/#/models/{version.name}/versions/{version.version}",
            lineage=lineage,
        )

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
        from gkeflow.components.images import VERSION

        key = retry_key(name, run_id, task_key)
        tags: dict[str, Any] = {
            RETRY_KEY_TAG: key,
            RUN_ID_TAG: run_id,
            TASK_TAG: task_key,
            MODEL_URI_TAG: uri,
            SUITE_VERSION_TAG: VERSION,
            **{f"{METRIC_PREFIX}{k}": repr(float(v)) for k, v in metrics.items()},
            **{f"{LABEL_PREFIX}{k}": v for k, v in labels.items()},
            **{f"{LINEAGE_PREFIX}{k}": str(v) for k, v in (lineage or {}).items()},
        }

        def attempt() -> tuple[Any, bool]:
            found = self._search(f"name = '{_quote(name)}' and "
                                 f"tags.`{RETRY_KEY_TAG}` = '{key}'")
            if found:
                return min(found, key=lambda v: int(v.version)), False
            self._ensure_model(name)
            source, source_run = self._source(name, uri, key,
                                              (lineage or {}).get(LOGGED_BY_LINEAGE, ""))
            version = self._client.create_model_version(
                name, source, run_id=source_run, tags=tags,
                description=f"registered by gkeflow from {uri}", await_creation_for=0)
            return version, True

        version, created = self._retrying(attempt, f"registering {name!r} in the MLflow "
                                                   "Model Registry")
        for alias in aliases:
            self._retrying(lambda a=alias: self._client.set_registered_model_alias(
                name, a, str(version.version)), f"setting alias {alias!r} on {name!r}")
        if aliases:
            return self.get(name, int(version.version)), created
        return self._to_version(version), created

    def _source(self, name: str, uri: str, key: str, logged_by: str = ""
                ) -> tuple[str, str | None]:
        """The version's source: the MLflow model the training run ``logged_by`` logged (on
        this server: the model is uploaded once and the version linked to its run), else
        ``uri``, else for a local model (which an MLflow server does not accept as a source)
        its copy uploaded into a run of :data:`UPLOAD_EXPERIMENT` (found again by the retry
        key)."""
        if logged_by:
            from mlflow.exceptions import MlflowException

            try:
                run = self._client.get_run(logged_by)
            except MlflowException:  # a run of another server: upload as before
                run = None
            if run is not None and run.data.tags.get(MODEL_LOGGED_TAG) == "true":
                return f"runs:/{logged_by}/model", logged_by
        path = local_path(uri)
        if path is None:
            return uri, None
        if not path.is_dir():
            raise RegistryError(f"model directory does not exist: {path}")
        from mlflow.exceptions import MlflowException

        client = self._client
        experiment = client.get_experiment_by_name(UPLOAD_EXPERIMENT)
        if experiment is None:
            try:
                experiment_id = client.create_experiment(UPLOAD_EXPERIMENT, tags=EXPERIMENT_TAGS)
            except MlflowException as exc:
                if getattr(exc, "error_code", "") != "RESOURCE_ALREADY_EXISTS":
                    raise
                experiment_id = client.get_experiment_by_name(UPLOAD_EXPERIMENT).experiment_id
        else:
            experiment_id = experiment.experiment_id
        found = client.search_runs([experiment_id], max_results=1,
                                   filter_string=f"tags.`{RETRY_KEY_TAG}` = '{key}'")
        if found:
            run = found[0]
        else:
            run = client.create_run(experiment_id, run_name=name, tags={RETRY_KEY_TAG: key})
        run_id = run.info.run_id
        if run.data.tags.get(UPLOADED_TAG) != "true":
            client.log_artifacts(run_id, str(path), "model")
            client.set_tag(run_id, UPLOADED_TAG, "true")
            client.set_terminated(run_id)
        return f"runs:/{run_id}/model", run_id

    def _ensure_model(self, name: str) -> None:
        from mlflow.exceptions import MlflowException

        try:
            self._client.get_registered_model(name)
            return
        except MlflowException as exc:
            if not self._missing(exc):
                raise
        try:
            self._client.create_registered_model(name, description="registered by gkeflow")
        except MlflowException as exc:
            if getattr(exc, "error_code", "") != "RESOURCE_ALREADY_EXISTS":
                raise  # else: made by a concurrent run

    def set_alias(self, name: str, version: int, alias: str) -> ModelVersion:
        """Point ``alias`` at ``version`` (MLflow moves it from any other version)."""
        validate_alias(alias)
        self.get(name, version)
        self._retrying(lambda: self._client.set_registered_model_alias(name, alias, str(version)),
                       f"setting alias {alias!r} on {name!r}")
        return self.get(name, version)

    def get(self, name: str, version: int) -> ModelVersion:
        from mlflow.exceptions import MlflowException

        def attempt() -> ModelVersion:
            try:
                return self._to_version(self._client.get_model_version(name, str(version)))
            except MlflowException as exc:
                if self._missing(exc):
                    raise RegistryError(f"model {name!r} has no version {version} in the "
                                        f"MLflow Model Registry at {self.url}") from None
                raise

        return self._retrying(attempt, f"reading {name!r} version {version}")

    def get_by_alias(self, name: str, alias: str) -> ModelVersion | None:
        from mlflow.exceptions import MlflowException

        def attempt() -> ModelVersion | None:
            # Read from the registered model: MLflow answers a missing alias with the same
            # error as a malformed request.
            try:
                target = dict(self._client.get_registered_model(name).aliases or {}).get(alias)
                if target is None:
                    return None
                return self._to_version(self._client.get_model_version(name, str(target)))
            except MlflowException as exc:
                if self._missing(exc):
                    return None
                raise

        return self._retrying(attempt, f"looking up alias {alias!r} of {name!r}")

    def list(self, name: str | None = None) -> list[ModelVersion]:
        def attempt() -> list[ModelVersion]:
            found = self._search(f"name = '{_quote(name)}'" if name is not None else "")
            aliases = {n: dict(self._client.get_registered_model(n).aliases or {})
                       for n in {v.name for v in found}}
            return sorted((self._to_version(v, aliases[v.name]) for v in found),
                          key=lambda v: (v.name, v.version))

        return self._retrying(attempt, "listing models in the MLflow Model Registry")
