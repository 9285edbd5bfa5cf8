"""A small in-memory Vertex AI Model Registry (REST, v1) for tests.

The real ``google-cloud-aiplatform`` client talks to it over HTTP. Every request body is
parsed strictly with the ``google.cloud.aiplatform_v1`` request types
(``from_json(..., ignore_unknown_fields=False)``), query parameters are checked against
the ones the API defines, and the service's rules the suite relies on are enforced
(label syntax, alias syntax and uniqueness within a model, Cloud Storage artifact URIs,
an existing parent model). A request that breaks them gets the 400 the real service
would send, with a message, and is recorded in :attr:`FakeVertex.violations`.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime

from google.cloud import aiplatform_v1 as v1
from google.protobuf import timestamp_pb2
from werkzeug.wrappers import Request, Response

from tests.integration.wsgi_fake import WsgiFake

LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
ALIAS = re.compile(r"^[a-z][a-zA-Z0-9-]{0,126}[a-z0-9-]$")
COMMON_QUERY = {"$alt"}

logging.getLogger("werkzeug").setLevel(logging.WARNING)


class Rejected(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class FakeVertex(WsgiFake):
    project: str = "test-project"
    location: str = "us-central1"
    #: model id -> list of versions (v1.Model), version ids "1", "2", ...
    models: dict[str, list[v1.Model]] = field(default_factory=dict)
    evaluations: dict[str, list[v1.ModelEvaluation]] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    failures: list[list] = field(default_factory=list)

    def __post_init__(self):
        self._ids = itertools.count(1000)
        self._lock = threading.Lock()
        self.parent = f"projects/{self.project}/locations/{self.location}"

    def fail(self, status: int, message: str, times: int = 1, method: str | None = None,
             path_contains: str | None = None) -> None:
        """Answer the next ``times`` matching requests with ``status`` and ``message``."""
        self.failures.append([status, message, method, path_contains, times])

    # -- HTTP ---------------------------------------------------------------------------------

    def _wsgi(self, environ, start_response):
        request = Request(environ)
        self.requests.append((request.method, request.full_path.rstrip("?")))
        injected = self._injected(request)
        if injected:
            return _error(*injected)(environ, start_response)
        try:
            with self._lock:
                body = self._route(request)
            response = Response(body, status=200, content_type="application/json")
        except Rejected as exc:
            if exc.status == 400:
                self.violations.append(f"{request.method} {request.path}: {exc.message}")
            response = _error(exc.status, exc.message)
        return response(environ, start_response)

    def _injected(self, request: Request):
        with self._lock:
            for failure in self.failures:
                status, message, method, path_contains, remaining = failure
                if remaining <= 0 or (method and method != request.method) or (
                        path_contains and path_contains not in request.path):
                    continue
                failure[4] -= 1
                return status, message
        return None

    def _route(self, request: Request) -> str:
        prefix = f"/v1/{self.parent}/"
        if not request.path.startswith(prefix):
            raise Rejected(404, f"unknown resource {request.path}")
        rest = request.path[len(prefix):]
        method = request.method
        if method == "GET" and rest == "models":
            self._query(request, {"filter", "pageSize", "pageToken", "orderBy", "readMask"})
            return self._list_models(request.args.get("filter", ""))
        if method == "POST" and rest == "models:upload":
            self._query(request, set())
            return self._upload(_strict(v1.UploadModelRequest, request))
        match = re.fullmatch(r"models/(\d+):listVersions", rest)
        if method == "GET" and match:
            self._query(request, {"filter", "pageSize", "pageToken", "orderBy", "readMask"})
            return self._list_versions(match.group(1), request.args.get("filter", ""))
        match = re.fullmatch(r"models/(\d+)(?:@([a-z0-9-]+))?", rest)
        if method == "GET" and match:
            self._query(request, set())
            return v1.Model.to_json(self._version(match.group(1), match.group(2) or "default"))
        match = re.fullmatch(r"models/(\d+)@(\d+):mergeVersionAliases", rest)
        if method == "POST" and match:
            self._query(request, set())
            return self._merge_aliases(match.group(1), match.group(2),
                                       _strict(v1.MergeVersionAliasesRequest, request))
        match = re.fullmatch(r"models/(\d+)@(\d+)/evaluations:import", rest)
        if method == "POST" and match:
            self._query(request, set())
            return self._import_evaluation(match.group(1), match.group(2),
                                           _strict(v1.ImportModelEvaluationRequest, request))
        raise Rejected(404, f"no such method: {method} {request.path}")

    @staticmethod
    def _query(request: Request, allowed: set[str]) -> None:
        unknown = set(request.args) - allowed - COMMON_QUERY
        if unknown:
            raise Rejected(400, f"unknown query parameters: {sorted(unknown)}")

    # -- models -------------------------------------------------------------------------------

    def _version(self, model_id: str, version: str) -> v1.Model:
        versions = self.models.get(model_id)
        if not versions:
            raise Rejected(404, f"Model {self.parent}/models/{model_id} not found.")
        for model in versions:
            if model.version_id == version or version in model.version_aliases:
                return model
        raise Rejected(404, f"Model {self.parent}/models/{model_id}@{version} not found.")

    def _list_models(self, filter_: str) -> str:
        wanted = None
        if filter_:
            match = re.fullmatch(r'display_name="([^"]*)"', filter_)
            if not match:
                raise Rejected(400, f"unsupported filter {filter_!r}")
            wanted = match.group(1)
        models = [self._version(mid, "default") for mid in self.models]
        if wanted is not None:
            models = [m for m in models if m.display_name == wanted]
        return v1.ListModelsResponse.to_json(v1.ListModelsResponse(models=models))

    def _list_versions(self, model_id: str, filter_: str) -> str:
        versions = list(self.models.get(model_id) or [])
        if model_id not in self.models:
            raise Rejected(404, f"Model {self.parent}/models/{model_id} not found.")
        if filter_:
            match = re.fullmatch(r'labels\.([a-z][a-z0-9_-]*)="([^"]*)"', filter_)
            if not match:
                raise Rejected(400, f"unsupported filter {filter_!r}")
            key, value = match.groups()
            versions = [m for m in versions if m.labels.get(key) == value]
        return v1.ListModelVersionsResponse.to_json(v1.ListModelVersionsResponse(models=versions))

    def _upload(self, request: v1.UploadModelRequest) -> str:
        model = request.model
        problems = []
        if not model.display_name:
            problems.append("model.display_name is required")
        if not model.artifact_uri.startswith("gs://"):
            problems.append(f"model.artifact_uri must be a Cloud Storage URI: "
                            f"{model.artifact_uri!r}")
        if not model.container_spec.image_uri:
            problems.append("model.container_spec.image_uri is required")
        for key, value in model.labels.items():
            if not LABEL_KEY.match(key) or not LABEL_VALUE.match(value):
                problems.append(f"invalid label {key}={value}")
        if len(model.labels) > 64:
            problems.append("at most 64 labels")
        for alias in model.version_aliases:
            if not ALIAS.match(alias):
                problems.append(f"invalid version alias {alias!r}")
        if problems:
            raise Rejected(400, "; ".join(problems))
        now = timestamp_pb2.Timestamp()
        now.FromDatetime(datetime.now(UTC))
        if request.parent_model:
            match = re.fullmatch(rf"{self.parent}/models/(\d+)", request.parent_model)
            if not match or match.group(1) not in self.models:
                raise Rejected(400, f"parent model {request.parent_model!r} does not exist")
            model_id = match.group(1)
            versions = self.models[model_id]
            for alias in model.version_aliases:
                if alias != "default" and any(alias in v.version_aliases for v in versions):
                    raise Rejected(400, f"alias {alias!r} is already used by another version")
            if model.display_name != versions[0].display_name:
                raise Rejected(400, "a new version must keep the model's display name")
            version_id = str(max(int(v.version_id) for v in versions) + 1)
        else:
            model_id = str(next(self._ids))
            versions = self.models.setdefault(model_id, [])
            version_id = "1"
        make_default = not versions or "default" in model.version_aliases
        aliases = [a for a in model.version_aliases if a != "default"]
        stored = v1.Model(model)
        stored.name = f"{self.parent}/models/{model_id}"
        stored.version_id = version_id
        stored.create_time = versions[0].create_time if versions else now
        stored.version_create_time = now
        stored.version_update_time = now
        if make_default:
            for other in versions:
                other.version_aliases = [a for a in other.version_aliases if a != "default"]
            aliases = ["default", *aliases]
        stored.version_aliases = aliases
        versions.append(stored)
        self.last_upload_request = request
        response = {
            "@type": "type.googleapis.com/google.cloud.aiplatform.v1.UploadModelResponse",
            "model": stored.name,
            "modelVersionId": version_id,
        }
        return json.dumps({"name": f"{stored.name}/operations/{next(self._ids)}", "done": True,
                           "response": response})

    def _merge_aliases(self, model_id: str, version: str,
                       request: v1.MergeVersionAliasesRequest) -> str:
        target = self._version(model_id, version)
        versions = self.models[model_id]
        for alias in request.version_aliases:
            name = alias.removeprefix("-")
            if not ALIAS.match(name):
                raise Rejected(400, f"invalid version alias {alias!r}")
            if alias.startswith("-"):
                if name == "default":
                    raise Rejected(400, "the default alias cannot be removed")
                target.version_aliases = [a for a in target.version_aliases if a != name]
            elif name == "default":
                for other in versions:
                    other.version_aliases = [a for a in other.version_aliases if a != "default"]
                target.version_aliases = [*target.version_aliases, "default"]
            else:
                holder = next((v for v in versions if name in v.version_aliases), None)
                if holder is not None and holder is not target:
                    raise Rejected(400, f"alias {name!r} is already used by version "
                                        f"{holder.version_id}")
                if name not in target.version_aliases:
                    target.version_aliases = [*target.version_aliases, name]
        return v1.Model.to_json(target)

    def _import_evaluation(self, model_id: str, version: str,
                           request: v1.ImportModelEvaluationRequest) -> str:
        self._version(model_id, version)
        evaluation = request.model_evaluation
        if not evaluation.metrics_schema_uri.startswith("gs://google-cloud-aiplatform/schema/"):
            raise Rejected(400, f"unknown metrics schema {evaluation.metrics_schema_uri!r}")
        stored = v1.ModelEvaluation(evaluation)
        stored.name = f"{self.parent}/models/{model_id}@{version}/evaluations/{next(self._ids)}"
        self.evaluations.setdefault(f"{model_id}@{version}", []).append(stored)
        return v1.ModelEvaluation.to_json(stored)


def _strict(message_type, request: Request):
    """The body parsed as ``message_type`` with unknown fields rejected."""
    try:
        return message_type.from_json(request.get_data(as_text=True) or "{}",
                                      ignore_unknown_fields=False)
    except Exception as exc:
        raise Rejected(400, f"invalid {message_type.__name__} body: {exc}") from exc


def _error(status: int, message: str) -> Response:
    statuses = {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                409: "ALREADY_EXISTS", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL",
                503: "UNAVAILABLE"}
    body = {"error": {"code": status, "message": message,
                      "status": statuses.get(status, "UNKNOWN")}}
    return Response(json.dumps(body), status=status, content_type="application/json")
