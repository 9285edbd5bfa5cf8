"""A small in-memory Kubeflow Model Registry (REST v1alpha3) for tests.

Every request and every response is validated against the published OpenAPI contract
(``tests/contracts/kubeflow-model-registry.openapi.yaml``) with openapi-core; a
request that breaks the contract is answered 400 with the validator's message and
recorded in :attr:`FakeModelRegistry.contract_violations`. Names and external ids are
unique as on the real server (409 on a duplicate). Failures can be injected.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from werkzeug.wrappers import Request, Response

from gkeflow.components import yamlio
from tests.integration.wsgi_fake import WsgiFake

PREFIX = "/api/model_registry/v1alpha3"

logging.getLogger("werkzeug").setLevel(logging.WARNING)


@dataclass
class InjectedFailure:
    status: int
    message: str
    method: str | None = None
    path_contains: str | None = None
    remaining: int = 1


@dataclass
class FakeModelRegistry(WsgiFake):
    contract: Path
    registered_models: dict[str, dict] = field(default_factory=dict)
    model_versions: dict[str, dict] = field(default_factory=dict)
    artifacts: dict[str, dict] = field(default_factory=dict)
    version_artifacts: dict[str, list[str]] = field(default_factory=dict)
    serving_environments: dict[str, dict] = field(default_factory=dict)
    inference_services: dict[str, dict] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)
    contract_violations: list[str] = field(default_factory=list)
    failures: list[InjectedFailure] = field(default_factory=list)

    def __post_init__(self):
        from openapi_core import OpenAPI

        spec = yamlio.load(self.contract.read_text(encoding="utf-8"))
        spec["servers"] = [{"url": "/"}]  # served from 127.0.0.1:<port>
        self.openapi = OpenAPI.from_dict(spec)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._server = None

    # -- control ------------------------------------------------------------------------------

    def fail(self, status: int, message: str, times: int = 1, method: str | None = None,
             path_contains: str | None = None) -> None:
        """Answer the next ``times`` matching requests with ``status`` and ``message``."""
        self.failures.append(InjectedFailure(status, message, method, path_contains, times))

    # -- HTTP ---------------------------------------------------------------------------------

    def _wsgi(self, environ, start_response):
        from openapi_core.contrib.werkzeug import WerkzeugOpenAPIRequest, WerkzeugOpenAPIResponse

        request = Request(environ)
        self.requests.append((request.method, request.full_path.rstrip("?")))
        openapi_request = WerkzeugOpenAPIRequest(request)
        try:
            self.openapi.validate_request(openapi_request)
        except Exception as exc:  # noqa: BLE001 - any contract failure is a 400
            detail = f"{request.method} {request.path}: {exc}"
            cause = exc.__cause__ or getattr(exc, "schema_errors", None)
            if cause:
                detail += f" ({cause})"
            self.contract_violations.append(detail)
            response = _error(400, f"request breaks the API contract: {detail}")
            return response(environ, start_response)
        response = self._injected(request) or self._route(request)
        if response.status_code < 300:
            try:
                self.openapi.validate_response(openapi_request, WerkzeugOpenAPIResponse(response))
            except Exception as exc:  # noqa: BLE001
                self.contract_violations.append(f"response to {request.path}: {exc}")
        return response(environ, start_response)

    def _injected(self, request: Request) -> Response | None:
        with self._lock:
            for failure in self.failures:
                if failure.remaining <= 0:
                    continue
                if failure.method and failure.method != request.method:
                    continue
                if failure.path_contains and failure.path_contains not in request.path:
                    continue
                failure.remaining -= 1
                return _error(failure.status, failure.message)
        return None

    def _route(self, request: Request) -> Response:
        path = request.path[len(PREFIX):]
        body = request.get_json(silent=True) if request.data else None
        args = request.args
        with self._lock:
            routes = [
                ("GET", r"/registered_models", lambda: self._list(self.registered_models, args)),
                ("POST", r"/registered_models", lambda: self._create_rm(body)),
                ("GET", r"/registered_model", lambda: self._find(self.registered_models, args)),
                ("GET", r"/registered_models/(\d+)",
                 lambda i: self._get(self.registered_models, i)),
                ("PATCH", r"/registered_models/(\d+)", lambda i: self._update_rm(i, body)),
                ("GET", r"/registered_models/(\d+)/versions", lambda i: self._list(
                    {k: v for k, v in self.model_versions.items()
                     if v["registeredModelId"] == i}, args)),
                ("POST", r"/model_versions", lambda: self._create_mv(body)),
                ("GET", r"/model_version", lambda: self._find(self.model_versions, args)),
                ("GET", r"/model_versions/(\d+)", lambda i: self._get(self.model_versions, i)),
                ("GET", r"/model_versions/(\d+)/artifacts", lambda i: self._list(
                    {a: self.artifacts[a] for a in self.version_artifacts.get(i, [])}, args)),
                ("POST", r"/model_versions/(\d+)/artifacts",
                 lambda i: self._add_artifact(i, body)),
                ("GET", r"/model_artifact", lambda: self._find(self.artifacts, args)),
                ("GET", r"/serving_environment",
                 lambda: self._find(self.serving_environments, args)),
                ("POST", r"/serving_environments", lambda: self._create_in(
                    self.serving_environments, body, {})),
                ("GET", r"/inference_service", lambda: self._find(
                    self.inference_services, args, parent="servingEnvironmentId")),
                ("POST", r"/inference_services", lambda: self._create_isvc(body)),
                ("PATCH", r"/inference_services/(\d+)",
                 lambda i: self._update(self.inference_services, i, body)),
            ]
            for method, pattern, handler in routes:
                match = re.fullmatch(pattern, path)
                if match and method == request.method:
                    return handler(*match.groups())
        return _error(404, f"no route for {request.method} {request.path}")

    # -- resources ----------------------------------------------------------------------------

    def _new(self, body: dict, **extra) -> dict:
        now = str(int(time.time() * 1000))
        return {**body, **extra, "id": str(next(self._ids)), "createTimeSinceEpoch": now,
                "lastUpdateTimeSinceEpoch": now}

    def _unique(self, table: dict, body: dict, scope: dict | None = None) -> Response | None:
        for existing in table.values():
            if body.get("externalId") and existing.get("externalId") == body["externalId"]:
                return _error(409, f"externalId {body['externalId']!r} already exists")
            if scope is not None and all(existing.get(k) == v for k, v in scope.items()) \
                    and existing.get("name") == body.get("name"):
                return _error(409, f"name {body.get('name')!r} already exists")
        return None

    def _create_rm(self, body: dict) -> Response:
        conflict = self._unique(self.registered_models, body, scope={})
        if conflict:
            return conflict
        rm = self._new(body, state=body.get("state", "LIVE"))
        self.registered_models[rm["id"]] = rm
        return _json(201, rm)

    def _update_rm(self, rm_id: str, body: dict) -> Response:
        if rm_id not in self.registered_models:
            return _error(404, f"registered model {rm_id} not found")
        rm = self.registered_models[rm_id]
        rm.update(body)
        rm["lastUpdateTimeSinceEpoch"] = str(int(time.time() * 1000))
        return _json(200, rm)

    def _create_mv(self, body: dict) -> Response:
        parent = body.get("registeredModelId")
        if parent not in self.registered_models:
            return _error(400, f"registered model {parent} not found")
        conflict = self._unique(self.model_versions, body, scope={"registeredModelId": parent})
        if conflict:
            return conflict
        mv = self._new(body, state=body.get("state", "LIVE"))
        self.model_versions[mv["id"]] = mv
        return _json(201, mv)

    def _add_artifact(self, mv_id: str, body: dict) -> Response:
        if mv_id not in self.model_versions:
            return _error(404, f"model version {mv_id} not found")
        conflict = self._unique(self.artifacts, body)
        if conflict:
            return conflict
        artifact = self._new(body, state=body.get("state", "UNKNOWN"))
        self.artifacts[artifact["id"]] = artifact
        self.version_artifacts.setdefault(mv_id, []).append(artifact["id"])
        return _json(201, artifact)

    def _create_in(self, table: dict, body: dict, scope: dict, status: int = 201) -> Response:
        conflict = self._unique(table, body, scope=scope)
        if conflict:
            return conflict
        item = self._new(body)
        table[item["id"]] = item
        return _json(status, item)

    def _create_isvc(self, body: dict) -> Response:
        if body.get("servingEnvironmentId") not in self.serving_environments:
            return _error(400, f"serving environment {body.get('servingEnvironmentId')} not "
                               "found")
        if body.get("registeredModelId") not in self.registered_models:
            return _error(400, f"registered model {body.get('registeredModelId')} not found")
        version = self.model_versions.get(body.get("modelVersionId", ""))
        if version is None or version["registeredModelId"] != body["registeredModelId"]:
            return _error(400, f"model version {body.get('modelVersionId')} is not a version "
                               f"of registered model {body['registeredModelId']}")
        # the contract answers this create with 200, not 201
        return self._create_in(self.inference_services, body,
                               {"servingEnvironmentId": body["servingEnvironmentId"]}, 200)

    def _update(self, table: dict, item_id: str, body: dict) -> Response:
        if item_id not in table:
            return _error(404, f"{item_id} not found")
        table[item_id].update(body)
        table[item_id]["lastUpdateTimeSinceEpoch"] = str(int(time.time() * 1000))
        return _json(200, table[item_id])

    @staticmethod
    def _get(table: dict, item_id: str) -> Response:
        if item_id not in table:
            return _error(404, f"{item_id} not found")
        return _json(200, table[item_id])

    @staticmethod
    def _find(table: dict, args, parent: str = "registeredModelId") -> Response:
        items = list(table.values())
        if "externalId" in args:
            items = [i for i in items if i.get("externalId") == args["externalId"]]
        if "name" in args:
            items = [i for i in items if i.get("name") == args["name"]]
        if "parentResourceId" in args:
            items = [i for i in items if i.get(parent) == args["parentResourceId"]]
        if not items:
            return _error(404, "no entity matches the search parameters")
        return _json(200, items[0])

    @staticmethod
    def _list(table: dict, args) -> Response:
        items = sorted(table.values(), key=lambda i: int(i["id"]))
        size = int(args.get("pageSize", "100") or 100)
        start = int(args.get("nextPageToken") or 0)
        page = items[start:start + size]
        token = str(start + size) if start + size < len(items) else ""
        return _json(200, {"items": page, "nextPageToken": token, "pageSize": size,
                           "size": len(page)})


def _json(status: int, body: dict) -> Response:
    return Response(json.dumps(body), status=status, content_type="application/json")


def _error(status: int, message: str) -> Response:
    return _json(status, {"code": str(status), "message": message})
