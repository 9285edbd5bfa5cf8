"""A small in-memory Cloud Monitoring v3 AlertPolicy API (REST) for tests.

``projects/{p}/alertPolicies``: list (paged), get, create, patch (``updateMask``). Every
body is parsed strictly into ``google.monitoring.v3.AlertPolicy``
(``json_format.ParseDict(..., ignore_unknown_fields=False)``) and checked against the rules
the service enforces (a display name, one to six conditions each with one condition type,
a metric filter, an explicit comparison, alignment periods of at least 60 s, a combiner
when there are several conditions, label syntax, notification channels that exist, output
only fields left unset, update-mask paths that name AlertPolicy fields). A request that
breaks them gets the service's 400 and is recorded in :attr:`FakeMonitoring.violations`.

Faults: :meth:`fail` answers the next matching requests with a status (429, 503, ...);
:meth:`lose_next_create` carries out a create and then answers 503, as when the answer is
lost on the way back.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime

from google.cloud import monitoring_v3
from google.protobuf import json_format
from werkzeug.wrappers import Request, Response

from tests.integration.wsgi_fake import WsgiFake

LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
DURATION = re.compile(r"^(\d+)(\.\d+)?s$")
STATUS = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 409: "ALREADY_EXISTS",
          429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}
OUTPUT_ONLY = ("creationRecord", "mutationRecord")
FIELDS = {f.name for f in monitoring_v3.AlertPolicy.pb().DESCRIPTOR.fields}

logging.getLogger("werkzeug").setLevel(logging.WARNING)


class Rejected(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def _snake(path: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), path)


@dataclass
class FakeMonitoring(WsgiFake):
    project: str = "test-project"
    #: notification channels that exist (names)
    channels: set[str] = field(default_factory=set)
    page_size: int = 2  # the most policies per page, whatever pageSize asks
    policies: dict[str, dict] = field(default_factory=dict)  # name -> JSON (camelCase)
    requests: list[tuple[str, str]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    failures: list[list] = field(default_factory=list)
    lost_creates: int = 0

    def __post_init__(self):
        self._ids = itertools.count(1_000_001)
        self._lock = threading.Lock()
        self.parent = f"projects/{self.project}"

    def fail(self, status: int, times: int = 1, method: str | None = None) -> None:
        """Answer the next ``times`` requests (of ``method``) with ``status``."""
        self.failures.append([status, method, times])

    def lose_next_create(self) -> None:
        self.lost_creates += 1

    def add(self, policy: dict) -> str:
        """Store ``policy`` as if someone had created it; its name."""
        return json.loads(self._create(policy))["name"]

    def named(self, display_name: str) -> list[dict]:
        return [p for p in self.policies.values() if p.get("displayName") == display_name]

    def writes(self) -> list[tuple[str, str]]:
        return [r for r in self.requests if r[0] in ("POST", "PATCH")]

    # -- HTTP ---------------------------------------------------------------------------------

    def _wsgi(self, environ, start_response):
        request = Request(environ)
        self.requests.append((request.method, request.full_path.rstrip("?")))
        injected = self._injected(request)
        if injected:
            return _error(injected, "injected failure")(environ, start_response)
        try:
            with self._lock:
                body, lost = self._route(request)
            response = (_error(503, "The service is currently unavailable.") if lost
                        else Response(body, status=200, content_type="application/json"))
        except Rejected as exc:
            if exc.status == 400:
                self.violations.append(f"{request.method} {request.path}: {exc.message}")
            response = _error(exc.status, exc.message)
        return response(environ, start_response)

    def _injected(self, request: Request) -> int | None:
        with self._lock:
            for failure in self.failures:
                status, method, remaining = failure
                if remaining > 0 and method in (None, request.method):
                    failure[2] -= 1
                    return status
        return None

    def _route(self, request: Request) -> tuple[str, bool]:
        collection = f"/v3/{self.parent}/alertPolicies"
        path, method = request.path, request.method
        if path == collection and method == "GET":
            self._query(request, {"pageSize", "pageToken", "filter", "orderBy"})
            return self._list(request), False
        if path == collection and method == "POST":
            self._query(request, set())
            lost = self.lost_creates > 0
            self.lost_creates -= int(lost)
            return self._create(self._body(request)), lost
        match = re.fullmatch(rf"{collection}/(\d+)", path)
        if match and method in ("GET", "PATCH"):
            name = f"{self.parent}/alertPolicies/{match.group(1)}"
            if name not in self.policies:
                raise Rejected(404, f"Could not find alert policy {name}.")
            if method == "GET":
                self._query(request, set())
                return json.dumps(self.policies[name]), False
            self._query(request, {"updateMask"})
            return self._patch(name, self._body(request), request.args.get("updateMask")), False
        raise Rejected(404, f"no such method: {method} {path}")

    @staticmethod
    def _query(request: Request, allowed: set[str]) -> None:
        unknown = set(request.args) - allowed - {"$alt"}
        if unknown:
            raise Rejected(400, f"unknown query parameters: {sorted(unknown)}")

    @staticmethod
    def _body(request: Request) -> dict:
        if request.mimetype != "application/json":
            raise Rejected(400, f"expected application/json, got {request.mimetype!r}")
        try:
            body = json.loads(request.get_data(as_text=True))
            json_format.ParseDict(body, monitoring_v3.AlertPolicy.pb()(),
                                  ignore_unknown_fields=False)
        except (ValueError, json_format.ParseError) as exc:
            raise Rejected(400, f"Invalid JSON payload: {exc}") from None
        return body

    # -- methods ------------------------------------------------------------------------------

    def _list(self, request: Request) -> str:
        if request.args.get("filter") or request.args.get("orderBy"):
            raise Rejected(400, "this fake implements no filter or orderBy")
        try:
            asked = int(request.args.get("pageSize", "0"))
        except ValueError:
            raise Rejected(400, "pageSize must be an integer") from None
        if asked < 0 or asked > 1000:
            raise Rejected(400, "pageSize must be between 0 and 1000")
        size = min(asked or self.page_size, self.page_size)
        names = sorted(self.policies)
        token = request.args.get("pageToken", "")
        start = int(token) if token.isdigit() else 0
        if token and not token.isdigit():
            raise Rejected(400, f"invalid page token {token!r}")
        page = names[start:start + size]
        answer: dict = {"alertPolicies": [self.policies[n] for n in page]}
        if start + size < len(names):
            answer["nextPageToken"] = str(start + size)
        answer["totalSize"] = len(names)
        return json.dumps(answer)

    def _create(self, body: dict) -> str:
        if body.get("name"):
            raise Rejected(400, "name must be empty on create; the service assigns it")
        policy = self._checked(body)
        policy["name"] = f"{self.parent}/alertPolicies/{next(self._ids)}"
        self._name_conditions(policy)
        policy["creationRecord"] = policy["mutationRecord"] = _record()
        self.policies[policy["name"]] = policy
        return json.dumps(policy)

    def _patch(self, name: str, body: dict, mask: str | None) -> str:
        if body.get("name", name) != name:
            raise Rejected(400, f"body name {body.get('name')!r} is not {name!r}")
        current = dict(self.policies[name])
        if mask:
            paths = mask.split(",")
            for path in paths:
                if _snake(path) not in FIELDS or path in ("name", *OUTPUT_ONLY) or \
                        _snake(path) in ("creation_record", "mutation_record"):
                    raise Rejected(400, f"updateMask: {path!r} is not an updatable field "
                                        "of AlertPolicy")
            for path in paths:
                camel = re.sub(r"_([a-z])", lambda m: m.group(1).upper(), path)
                if camel in body:
                    current[camel] = body[camel]
                else:
                    current.pop(camel, None)
        else:
            current = {**body, "name": name, "creationRecord": current["creationRecord"]}
        policy = self._checked({k: v for k, v in current.items() if k not in OUTPUT_ONLY},
                               allow_name=True)
        self._name_conditions(policy)
        policy["creationRecord"] = current["creationRecord"]
        policy["mutationRecord"] = _record()
        self.policies[name] = policy
        return json.dumps(policy)

    def _name_conditions(self, policy: dict) -> None:
        for condition in policy["conditions"]:
            if not condition.get("name", "").startswith(f"{policy['name']}/conditions/"):
                condition["name"] = f"{policy['name']}/conditions/{next(self._ids)}"

    def _checked(self, body: dict, allow_name: bool = False) -> dict:
        problems = []
        for key in OUTPUT_ONLY:
            if key in body:
                problems.append(f"{key} is output only")
        name = body.get("displayName", "")
        if not name or len(name) > 512:
            problems.append("displayName is required (at most 512 characters)")
        conditions = body.get("conditions") or []
        if not 1 <= len(conditions) <= 6:
            problems.append("an alert policy has 1 to 6 conditions")
        if len(conditions) > 1 and body.get("combiner", "COMBINE_UNSPECIFIED") \
                == "COMBINE_UNSPECIFIED":
            problems.append("combiner is required with more than one condition")
        for i, condition in enumerate(conditions):
            problems += [f"conditions[{i}]: {p}" for p in _condition_problems(condition)]
        labels = body.get("userLabels", {})
        for key, value in labels.items():
            if not LABEL_KEY.match(key) or not LABEL_VALUE.match(value):
                problems.append(f"invalid user label {key}={value}")
        if len(labels) > 64:
            problems.append("at most 64 user labels")
        for channel in body.get("notificationChannels", []):
            if channel not in self.channels:
                problems.append(f"notification channel {channel!r} does not exist")
        if problems:
            raise Rejected(400, "; ".join(problems))
        return json.loads(json.dumps(body))


def _condition_problems(condition: dict) -> list[str]:
    problems = []
    if not condition.get("displayName"):
        problems.append("displayName is required")
    kinds = [k for k in condition if k.startswith("condition")]
    if len(kinds) != 1:
        return problems + [f"exactly one condition type, got {kinds}"]
    threshold = condition.get("conditionThreshold")
    if threshold is None:
        return problems
    filter_ = threshold.get("filter", "")
    if not re.search(r'metric\.type\s*=\s*"[^"]+"', filter_):
        problems.append(f"filter must name a metric.type: {filter_!r}")
    if filter_.count('"') % 2:
        problems.append(f"unbalanced quotes in filter {filter_!r}")
    if threshold.get("comparison", "COMPARISON_UNSPECIFIED") == "COMPARISON_UNSPECIFIED":
        problems.append("comparison is required")
    duration = DURATION.match(threshold.get("duration", "0s"))
    if not duration or int(duration.group(1)) > 86400:
        problems.append("duration must be at most 86400s")
    for aggregation in threshold.get("aggregations", []):
        period = DURATION.match(aggregation.get("alignmentPeriod", "0s"))
        if not period or int(period.group(1)) < 60:
            problems.append("alignmentPeriod must be at least 60s")
        if aggregation.get("crossSeriesReducer", "REDUCE_NONE") != "REDUCE_NONE" and \
                aggregation.get("perSeriesAligner", "ALIGN_NONE") == "ALIGN_NONE":
            problems.append("a cross-series reducer needs a per-series aligner")
        for group in aggregation.get("groupByFields", []):
            if not re.fullmatch(r"(resource|metric)\.labels?\.[a-z_]+|metadata\.[a-z_]+(\.\S+)?",
                                group):
                problems.append(f"groupByFields: {group!r} is not a label")
    return problems


def _record() -> dict:
    return {"mutateTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "mutatedBy": "tester@example.com"}


def _error(status: int, message: str) -> Response:
    body = {"error": {"code": status, "message": message,
                      "status": STATUS.get(status, "UNKNOWN")}}
    return Response(json.dumps(body), status=status, content_type="application/json")
