"""A strict in-memory Vertex AI EndpointService (REST, v1) for tests.

The real ``aiplatform_v1.EndpointServiceClient`` (REST transport) talks to it over HTTP.
Every body is parsed with the ``aiplatform_v1`` message types
(``from_json(..., ignore_unknown_fields=False)``); query parameters are checked against
the ones the API defines; the rules the service enforces are enforced (a traffic split of
whole percents adding up to 100 over deployed models, ``"0"`` standing for the model being
deployed; dedicated resources with a machine type and 1 <= min <= max replicas; known
accelerator types; label syntax; the model version must exist; an undeployed model with
traffic needs a new split). A request that breaks them gets a 400 and is recorded in
:attr:`FakeEndpointService.violations`.

Creates, deploys and undeploys are long-running operations as Vertex returns them: the
answer is ``{"name": "<endpoint>/operations/<id>", "metadata": {...}}`` without ``done``;
the operation ends after ``operation_polls`` reads (``GET /v1/<name>``, or ``/ui/<name>``,
which the REST transport's first matching rule sends), with the response packed as an
``Any``. A created endpoint exists (its ID taken: a second create with the same
``endpointId`` gets 409) from the create on; a deploy or undeploy changes the endpoint when
its operation ends. Assumption: a deploy's operation has ended by the time the client
looks again after a lost answer (an in-flight deploy is not visible on the endpoint).

Failures a test can ask for (:meth:`fail`, :meth:`lose`, :meth:`hang`): an error status
before the request is carried out, the request carried out and its answer replaced by a
503 (a lost response), or carried out and answered only after the client's timeout (a hung
read).
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

from tests.integration.fake_vertex import LABEL_KEY, LABEL_VALUE, Rejected, _error, _strict
from tests.integration.wsgi_fake import WsgiFake

logging.getLogger("werkzeug").setLevel(logging.WARNING)
COMMON_QUERY = {"$alt"}
ACCELERATORS = {a.name for a in v1.AcceleratorType if a.value}
#: CreateEndpointRequest.endpoint_id: up to 63 of [a-z0-9-] starting with a letter and not
#: ending with '-', or up to 9 digits without a leading zero.
ENDPOINT_ID = re.compile(r"^(?:[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?|[1-9][0-9]{0,8})$")


@dataclass
class FakeEndpointService(WsgiFake):
    project: str = "test-project"
    location: str = "us-central1"
    #: "projects/.../models/ID" -> version ids that exist (the Model Registry's side).
    models: dict[str, set[str]] = field(default_factory=dict)
    operation_polls: int = 1
    endpoints: dict[str, v1.Endpoint] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    failures: list[list] = field(default_factory=list)
    deploy_calls: int = 0
    create_calls: int = 0

    def __post_init__(self):
        self._ids = itertools.count(7001)
        self._lock = threading.Lock()
        self.parent = f"projects/{self.project}/locations/{self.location}"
        self.operations: dict[str, dict] = {}

    def add_model(self, model_id: str, *versions: str) -> str:
        name = f"{self.parent}/models/{model_id}"
        self.models.setdefault(name, set()).update(versions or ("1",))
        return name

    def fail(self, status: int, times: int = 1, method: str | None = None,
             path_contains: str | None = None, message: str = "injected") -> None:
        """Answer the next ``times`` matching requests with ``status``, doing nothing."""
        self.failures.append(["fail", status, message, method, path_contains, times])

    def hang(self, seconds: float, times: int = 1, method: str | None = None,
             path_contains: str | None = None) -> None:
        """Carry out the next ``times`` matching requests, then hold the answer back for
        ``seconds`` (a hung read: the client's timeout fires first)."""
        self.failures.append(["hang", seconds, "hung", method, path_contains, times])

    def lose(self, times: int = 1, method: str | None = None,
             path_contains: str | None = None, finished: bool = True) -> None:
        """Carry out the next ``times`` matching requests, then answer 503 (lost answer);
        ``finished=False``: an operation it started is still running when the client looks
        again."""
        kind = "lose" if finished else "lose-running"
        self.failures.append([kind, 503, "connection reset", method, path_contains, times])

    # -- what tests read ---------------------------------------------------------------------

    def only_endpoint(self) -> v1.Endpoint:
        assert len(self.endpoints) == 1, f"expected one endpoint, found {len(self.endpoints)}"
        return next(iter(self.endpoints.values()))

    def split_by_version(self) -> dict[str, int]:
        """The one endpoint's split keyed by model version id."""
        endpoint = self.only_endpoint()
        by_id = {d.id: d.model_version_id for d in endpoint.deployed_models}
        return {by_id[k]: v for k, v in endpoint.traffic_split.items()}

    # -- HTTP ---------------------------------------------------------------------------------

    def _wsgi(self, environ, start_response):
        request = Request(environ)
        self.requests.append((request.method, request.full_path.rstrip("?")))
        injected = self._injected(request)
        if injected and injected[0] == "fail":
            return _error(injected[1], injected[2])(environ, start_response)
        try:
            with self._lock:
                body = self._route(request)
                if injected and injected[0] != "lose-running":  # done when the client looks
                    name = json.loads(body).get("name", "")
                    if name in self.operations:
                        self._finish(name)
            response = Response(body, status=200, content_type="application/json")
        except Rejected as exc:
            if exc.status == 400:
                self.violations.append(f"{request.method} {request.path}: {exc.message}")
            response = _error(exc.status, exc.message)
        if injected and injected[0] == "hang":
            import time

            time.sleep(injected[1])  # the answer arrives after the client gave up on it
        elif injected:  # "lose": done, but the answer never arrives
            response = _error(503, injected[2])
        return response(environ, start_response)

    def _injected(self, request: Request):
        with self._lock:
            for failure in self.failures:
                kind, status, message, method, path_contains, remaining = failure
                if remaining <= 0 or (method and method != request.method) or (
                        path_contains and path_contains not in request.path):
                    continue
                failure[5] -= 1
                return kind, status, message
        return None

    @staticmethod
    def _query(request: Request, allowed: set[str]) -> None:
        unknown = set(request.args) - allowed - COMMON_QUERY
        if unknown:
            raise Rejected(400, f"unknown query parameters: {sorted(unknown)}")

    def _route(self, request: Request) -> str:
        path, method = request.path, request.method
        match = re.fullmatch(r"/(?:v1|ui)/(.+/operations/\d+)", path)
        if method == "GET" and match:
            self._query(request, set())
            return self._poll(match.group(1))
        match = re.fullmatch(r"/(?:v1|ui)/(.+/endpoints/[a-z0-9-]+)/operations", path)
        if method == "GET" and match:
            self._query(request, {"filter", "pageSize", "pageToken"})
            return json.dumps({"operations": [
                {"name": name, **({"done": True} if op["done"] is not None else {})}
                for name, op in self.operations.items()
                if name.startswith(match.group(1) + "/operations/")]})
        prefix = f"/v1/{self.parent}/"
        if not path.startswith(prefix):
            raise Rejected(404, f"unknown resource {path}")
        rest = path[len(prefix):]
        if rest == "endpoints" and method == "GET":
            self._query(request, {"filter", "pageSize", "pageToken", "readMask", "orderBy"})
            return self._list(request.args.get("filter", ""))
        if rest == "endpoints" and method == "POST":
            self._query(request, {"endpointId"})
            return self._create(_strict(v1.Endpoint, request), request.args.get("endpointId", ""))
        match = re.fullmatch(r"endpoints/([a-z0-9-]+)(:deployModel|:undeployModel)?", rest)
        if not match:
            raise Rejected(404, f"no such method: {method} {path}")
        endpoint = self._endpoint(match.group(1))
        verb = match.group(2)
        if verb is None and method == "GET":
            self._query(request, set())
            return v1.Endpoint.to_json(endpoint)
        if verb is None and method == "PATCH":
            self._query(request, {"updateMask"})
            return self._update(endpoint, _strict(v1.Endpoint, request),
                                request.args.get("updateMask", ""))
        if verb == ":deployModel" and method == "POST":
            self._query(request, set())
            return self._deploy(endpoint, _strict(v1.DeployModelRequest, request))
        if verb == ":undeployModel" and method == "POST":
            self._query(request, set())
            return self._undeploy(endpoint, _strict(v1.UndeployModelRequest, request))
        raise Rejected(404, f"no such method: {method} {path}")

    # -- operations ---------------------------------------------------------------------------

    def _operation(self, owner: str, kind: str, apply) -> str:
        name = f"{owner}/operations/{next(self._ids)}"
        self.operations[name] = {"polls": self.operation_polls, "apply": apply, "done": None}
        metadata = {"@type": f"type.googleapis.com/google.cloud.aiplatform.v1.{kind}",
                    "genericMetadata": {"createTime": _now_text(), "updateTime": _now_text()}}
        return json.dumps({"name": name, "metadata": metadata})

    def _poll(self, name: str) -> str:
        operation = self.operations.get(name)
        if operation is None:
            raise Rejected(404, f"operation {name} not found")
        if operation["done"] is None:
            if operation["polls"] > 0:
                operation["polls"] -= 1
                return json.dumps({"name": name})
            self._finish(name)
        return json.dumps({"name": name, "done": True, "response": operation["done"]})

    def _finish(self, name: str) -> None:
        operation = self.operations[name]
        if operation["done"] is None:
            operation["done"] = operation["apply"]()

    # -- endpoints ----------------------------------------------------------------------------

    def _endpoint(self, endpoint_id: str) -> v1.Endpoint:
        endpoint = self.endpoints.get(endpoint_id)
        if endpoint is None:
            raise Rejected(404, f"Endpoint {self.parent}/endpoints/{endpoint_id} not found.")
        return endpoint

    def _list(self, filter_: str) -> str:
        endpoints = list(self.endpoints.values())
        if filter_:  # labels.KEY="VALUE" (equality) or labels.KEY:* (existence)
            match = re.fullmatch(r'labels\.([a-z][a-z0-9_-]*)(?:="([^"]*)"|(:\*))', filter_)
            if not match:
                raise Rejected(400, f"unsupported filter {filter_!r}")
            key, value, exists = match.groups()
            endpoints = [e for e in endpoints if (key in e.labels if exists
                                                  else e.labels.get(key) == value)]
        return v1.ListEndpointsResponse.to_json(v1.ListEndpointsResponse(endpoints=endpoints))

    def _check_labels(self, labels) -> None:
        bad = [f"{k}={v}" for k, v in labels.items()
               if not LABEL_KEY.match(k) or not LABEL_VALUE.match(v)]
        if bad or len(labels) > 64:
            raise Rejected(400, f"invalid labels: {bad or 'more than 64'}")

    def _create(self, body: v1.Endpoint, endpoint_id: str) -> str:
        self.create_calls += 1
        if not body.display_name:
            raise Rejected(400, "endpoint.display_name is required")
        if body.deployed_models or body.traffic_split or body.name:
            raise Rejected(400, "name, deployed_models and traffic_split are output only or "
                                "set by DeployModel")
        self._check_labels(body.labels)
        if endpoint_id and not ENDPOINT_ID.match(endpoint_id):
            raise Rejected(400, f"invalid endpoint_id {endpoint_id!r}")
        endpoint_id = endpoint_id or str(next(self._ids))
        if endpoint_id in self.endpoints:
            raise Rejected(409, f"Endpoint {self.parent}/endpoints/{endpoint_id} already "
                                "exists.")
        # The resource exists (and its ID is taken) from the create on; the operation
        # reports it done later.
        stored = v1.Endpoint(body)
        stored.name = f"{self.parent}/endpoints/{endpoint_id}"
        stored.create_time = _now()
        stored.update_time = _now()
        self.endpoints[endpoint_id] = stored

        def apply():
            return {"@type": "type.googleapis.com/google.cloud.aiplatform.v1.Endpoint",
                    **json.loads(v1.Endpoint.to_json(stored))}

        return self._operation(stored.name, "CreateEndpointOperationMetadata", apply)

    def _check_split(self, split, deployed_ids: set[str], what: str) -> None:
        split = dict(split)
        unknown = sorted(set(split) - deployed_ids)
        if unknown:
            raise Rejected(400, f"{what}: traffic_split names models that are not deployed: "
                                f"{unknown}")
        if split and sum(split.values()) != 100:
            raise Rejected(400, f"{what}: traffic_split must add up to 100; got {split}")
        if any(v < 0 or v > 100 for v in split.values()):
            raise Rejected(400, f"{what}: traffic shares must be 0..100")
        if deployed_ids and not split:
            raise Rejected(400, f"{what}: traffic_split must be set while models are deployed")

    def _update(self, endpoint: v1.Endpoint, body: v1.Endpoint, mask: str) -> str:
        paths = [p.strip() for p in mask.split(",") if p.strip()]
        allowed = {"display_name", "description", "labels", "traffic_split", "displayName",
                   "trafficSplit"}
        if not paths or set(paths) - allowed:
            raise Rejected(400, f"update_mask must name updatable fields; got {mask!r}")
        if body.name and body.name != endpoint.name:  # the name travels in the URL
            raise Rejected(400, f"endpoint.name {body.name!r} does not match the URL")
        if {"traffic_split", "trafficSplit"} & set(paths):
            self._check_split(body.traffic_split, {d.id for d in endpoint.deployed_models},
                              "UpdateEndpoint")
            endpoint.traffic_split = dict(body.traffic_split)
        if "labels" in paths:
            self._check_labels(body.labels)
            endpoint.labels = dict(body.labels)
        endpoint.update_time = _now()
        return v1.Endpoint.to_json(endpoint)

    def _deploy(self, endpoint: v1.Endpoint, request: v1.DeployModelRequest) -> str:
        self.deploy_calls += 1
        deployed = request.deployed_model
        model, _, version = deployed.model.partition("@")
        if model not in self.models or (version or "1") not in self.models[model]:
            raise Rejected(400, f"model {deployed.model!r} does not exist")
        resources = deployed.dedicated_resources
        if not resources.machine_spec.machine_type:
            raise Rejected(400, "dedicated_resources.machine_spec.machine_type is required")
        if resources.min_replica_count < 1 or (resources.max_replica_count and
                                                resources.max_replica_count
                                                < resources.min_replica_count):
            raise Rejected(400, "1 <= min_replica_count <= max_replica_count is required")
        spec = resources.machine_spec
        if spec.accelerator_count and spec.accelerator_type.name not in ACCELERATORS:
            raise Rejected(400, "an accelerator count needs an accelerator type")
        current = {d.id for d in endpoint.deployed_models}
        self._check_split(request.traffic_split, current | {"0"}, "DeployModel")
        endpoint_id = endpoint.name.rsplit("/", 1)[1]
        deployed_id = str(next(self._ids))

        def apply():
            stored = v1.DeployedModel(deployed)
            stored.id = deployed_id
            stored.model = model
            stored.model_version_id = version or "1"
            stored.create_time = _now()
            target = self.endpoints[endpoint_id]
            target.deployed_models = [*target.deployed_models, stored]
            target.traffic_split = {(deployed_id if k == "0" else k): v
                                    for k, v in request.traffic_split.items()}
            return {"@type": "type.googleapis.com/google.cloud.aiplatform.v1.DeployModelResponse",
                    "deployedModel": json.loads(v1.DeployedModel.to_json(stored))}

        return self._operation(endpoint.name, "DeployModelOperationMetadata", apply)

    def _undeploy(self, endpoint: v1.Endpoint, request: v1.UndeployModelRequest) -> str:
        ids = {d.id for d in endpoint.deployed_models}
        if request.deployed_model_id not in ids:
            raise Rejected(404, f"deployed model {request.deployed_model_id} not found")
        remaining = ids - {request.deployed_model_id}
        split = dict(request.traffic_split) or {
            k: v for k, v in endpoint.traffic_split.items() if k != request.deployed_model_id}
        if endpoint.traffic_split.get(request.deployed_model_id) and not request.traffic_split:
            raise Rejected(400, "the undeployed model has traffic: give the new traffic_split")
        self._check_split(split if remaining else {}, remaining, "UndeployModel")
        endpoint_id = endpoint.name.rsplit("/", 1)[1]

        def apply():
            target = self.endpoints[endpoint_id]
            target.deployed_models = [d for d in target.deployed_models
                                      if d.id != request.deployed_model_id]
            target.traffic_split = split if remaining else {}
            return {"@type":
                    "type.googleapis.com/google.cloud.aiplatform.v1.UndeployModelResponse"}

        return self._operation(endpoint.name, "UndeployModelOperationMetadata", apply)


def _now() -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(datetime.now(UTC))
    return stamp


def _now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
