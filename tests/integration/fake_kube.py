"""A fake Kubernetes API server on loopback: JobSets (validated against the vendored CRD) and
the pods and logs a JobSet controller would create.

It speaks the REST paths the ``kubernetes`` client calls. A test decides what the "controller"
does: how many looks a JobSet stays running, whether it then completes or fails, and what
happens on completion (``on_complete``, e.g. the chief publishing its model).

Watches (``GET .../jobsets?watch=true&resourceVersion=N``) are served as the API server
does: a chunked stream of one JSON event per line (``ADDED`` / ``MODIFIED`` / ``DELETED``,
each object carrying its ``resourceVersion``), ending after ``timeoutSeconds``. The
controller advances a watched JobSet every ``tick_s``. Query parameters are checked
strictly (a watch must be bounded by ``timeoutSeconds`` and start from a
``resourceVersion``); a test can end each stream early (``end_stream_after`` events) or
answer the first watches with 410 Gone (``gone_watches``, as an ``ERROR`` event or as an
HTTP status: ``gone_as``).
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import jsonschema
import yaml
from werkzeug.wrappers import Request, Response

from tests.integration.wsgi_fake import WsgiFake

CRD = Path(__file__).resolve().parents[1] / "contracts" / "jobset.x-k8s.io_jobsets.yaml"
_JOBSETS = re.compile(r"^/apis/jobset\.x-k8s\.io/v1alpha2/namespaces/([^/]+)/jobsets(?:/([^/]+))?$")
_PODS = re.compile(r"^/api/v1/namespaces/([^/]+)/pods(?:/([^/]+))?(/log)?$")


def _closed(schema):
    """The CRD schema with unknown fields rejected (the API server would prune them)."""
    if isinstance(schema, dict):
        schema = {k: _closed(v) for k, v in schema.items()}
        if ("properties" in schema and "additionalProperties" not in schema
                and not schema.get("x-kubernetes-preserve-unknown-fields")):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_closed(v) for v in schema]
    return schema


def jobset_schema() -> dict:
    crd = yaml.safe_load(CRD.read_text())
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha2"]
    return _closed(version["schema"]["openAPIV3Schema"])


_VALIDATOR = None


def validate_jobset(manifest: dict) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``manifest`` is a valid v1alpha2 JobSet."""
    global _VALIDATOR
    if _VALIDATOR is None:
        _VALIDATOR = jsonschema.Draft7Validator(jobset_schema())
    _VALIDATOR.validate(manifest)
    assert manifest["apiVersion"] == "jobset.x-k8s.io/v1alpha2" and manifest["kind"] == "JobSet"
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", manifest["metadata"]["name"])


def _status(code: int, reason: str, message: str) -> Response:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}
    return Response(json.dumps(body), status=code, content_type="application/json")


class FakeKube(WsgiFake):
    """``with FakeKube() as kube:`` serves at ``kube.url``."""

    def __init__(self, running_looks: int = 2, outcome: str = "Completed",
                 message: str = "", on_complete: Callable[[dict], None] | None = None,
                 tick_s: float = 0.01, end_stream_after: int = 0, gone_watches: int = 0,
                 gone_as: str = "event"):
        self.tick_s = tick_s
        self.end_stream_after = end_stream_after
        self.gone_watches = gone_watches
        self.gone_as = gone_as
        self.watches: list[dict[str, str]] = []
        self.history: dict[tuple[str, str], list[tuple[int, str, dict]]] = {}
        self._version = 0
        self.running_looks = running_looks
        self.outcome = outcome
        self.message = message
        self.on_complete = on_complete
        self.jobsets: dict[tuple[str, str], dict] = {}
        self.looks: dict[tuple[str, str], int] = {}
        self.pods: dict[tuple[str, str], dict] = {}
        self.logs: dict[tuple[str, str], str] = {}
        self.requests: list[tuple[str, str]] = []
        self.created: list[dict] = []
        self.deleted: list[str] = []
        self._lock = threading.Lock()

    # -- what a test sets up ------------------------------------------------------------
    def add_pod(self, namespace: str, name: str, service_account: str = "default",
                labels: dict | None = None) -> None:
        self.pods[(namespace, name)] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {},
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"serviceAccountName": service_account,
                     "containers": [{"name": "main", "image": "launcher"}]},
            "status": {"phase": "Running"},
        }

    def add_jobset(self, manifest: dict) -> None:
        """A JobSet created by someone else (an earlier launcher attempt)."""
        self._store(copy.deepcopy(manifest))

    # -- the "controller" -------------------------------------------------------------------
    def _record(self, key: tuple[str, str], kind: str, manifest: dict) -> None:
        """A new resourceVersion for ``manifest`` and the watch event that says so."""
        self._version += 1
        manifest["metadata"]["resourceVersion"] = str(self._version)
        self.history.setdefault(key, []).append((self._version, kind,
                                                 copy.deepcopy(manifest)))

    def _store(self, manifest: dict) -> None:
        ns, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
        manifest.setdefault("status", {})
        self.jobsets[(ns, name)] = manifest
        self.looks[(ns, name)] = 0
        self._record((ns, name), "ADDED", manifest)
        job = manifest["spec"]["replicatedJobs"][0]
        for index in range(job["template"]["spec"]["parallelism"]):
            pod = f"{name}-{job['name']}-0-{index}-abcde"
            self.add_pod(ns, pod, labels={"jobset.sigs.k8s.io/jobset-name": name,
                                          "batch.kubernetes.io/job-completion-index": str(index)})
            self.logs[(ns, pod)] = f"worker {index} started\n"

    def _advance(self, key: tuple[str, str]) -> None:
        manifest = self.jobsets[key]
        before = json.dumps(manifest["status"], sort_keys=True)
        self._progress(key)
        if json.dumps(manifest["status"], sort_keys=True) != before:
            self._record(key, "MODIFIED", manifest)

    def _progress(self, key: tuple[str, str]) -> None:
        manifest = self.jobsets[key]
        if manifest["status"].get("terminalState"):
            return
        self.looks[key] += 1
        for (ns, pod), text in list(self.logs.items()):
            if ns == key[0] and pod.startswith(key[1] + "-"):
                self.logs[(ns, pod)] = text + f"epoch {self.looks[key]}\n"
        if self.looks[key] <= self.running_looks or self.outcome == "Running":
            # the Job turns ready on the last running look (its pods took that long)
            ready = int(self.looks[key] >= self.running_looks)
            manifest["status"]["replicatedJobsStatus"] = [
                {"name": "worker", "ready": ready, "succeeded": 0, "failed": 0, "active": 1,
                 "suspended": 0}]
            return
        if self.outcome == "Completed" and self.on_complete:
            self.on_complete(manifest)
        manifest["status"]["terminalState"] = self.outcome
        manifest["status"]["conditions"] = [{
            "type": self.outcome, "status": "True", "reason": f"AllJobs{self.outcome}",
            "message": self.message or f"jobset {self.outcome.lower()}",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}]

    # -- HTTP ----------------------------------------------------------------------------------
    def _wsgi(self, environ, start_response):
        request = Request(environ)
        with self._lock:
            self.requests.append((request.method, request.path))
            response = self._route(request)
        return response(environ, start_response)

    def _route(self, request: Request) -> Response:
        if match := _JOBSETS.match(request.path):
            return self._jobsets(request, match.group(1), match.group(2))
        if match := _PODS.match(request.path):
            return self._pods(request, *match.groups())
        return _status(404, "NotFound", f"no route {request.path}")

    def _jobsets(self, request: Request, ns: str, name: str | None) -> Response:
        if name is None and request.method == "POST":
            body = json.loads(request.get_data())
            try:
                validate_jobset(body)
            except (jsonschema.ValidationError, AssertionError) as exc:
                return _status(422, "Invalid", f"JobSet is invalid: {exc}")
            if body["metadata"].get("namespace", ns) != ns:
                return _status(400, "BadRequest", "namespace does not match the path")
            key = (ns, body["metadata"]["name"])
            if key in self.jobsets:
                return _status(409, "AlreadyExists", f"jobsets {key[1]} already exists")
            self.created.append(copy.deepcopy(body))
            self._store(body)
            return Response(json.dumps(body), status=201, content_type="application/json")
        if name is None and request.method == "GET":
            return self._watch(request, ns)
        key = (ns, name or "")
        if key not in self.jobsets:
            return _status(404, "NotFound", f'jobsets.jobset.x-k8s.io "{name}" not found')
        if request.method == "GET":
            self._advance(key)
            return Response(json.dumps(self.jobsets[key]), content_type="application/json")
        if request.method == "DELETE":
            gone = self.jobsets.pop(key)
            self._record(key, "DELETED", gone)
            self.deleted.append(name)
            for pod_key in [k for k in self.pods if k[0] == ns and k[1].startswith(name + "-")]:
                self.pods.pop(pod_key)
            return Response(json.dumps(gone), content_type="application/json")
        return _status(405, "MethodNotAllowed", request.method)

    _WATCH_PARAMS = {"watch", "fieldSelector", "labelSelector", "resourceVersion",
                     "timeoutSeconds", "allowWatchBookmarks"}

    def _watch(self, request: Request, ns: str) -> Response:
        args = {k: request.args[k] for k in request.args}
        unknown = sorted(set(args) - self._WATCH_PARAMS)
        if unknown:
            return _status(400, "BadRequest", f"unknown query parameters {unknown}")
        if args.get("watch", "").lower() not in ("true", "1"):
            return _status(405, "MethodNotAllowed", "only watches of jobsets are served")
        timeout = args.get("timeoutSeconds", "")
        if not timeout.isdigit() or int(timeout) < 1:
            return _status(400, "BadRequest", "a watch must be bounded: timeoutSeconds >= 1")
        version = args.get("resourceVersion", "")
        if not version.isdigit():
            return _status(400, "BadRequest", "watch from a resourceVersion read before")
        selector = args.get("fieldSelector", "")
        if not selector.startswith("metadata.name=") or "," in selector:
            return _status(400, "BadRequest", f"unsupported fieldSelector {selector!r}")
        key = (ns, selector[len("metadata.name="):])
        self.watches.append(args)
        if self.gone_watches > 0:
            self.gone_watches -= 1
            message = f"too old resource version: {version} ({self._version})"
            if self.gone_as == "status":
                return _status(410, "Expired", message)
            gone = {"type": "ERROR", "object": {
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": message, "reason": "Expired", "code": 410}}
            return Response([json.dumps(gone).encode() + b"\n"],
                            content_type="application/json")
        return Response(self._events(key, int(version), int(timeout)),
                        content_type="application/json", direct_passthrough=True)

    def _events(self, key: tuple[str, str], after: int, timeout_s: int):
        """The watch stream: events of ``key`` newer than ``after``, one JSON line each."""
        deadline, sent = time.monotonic() + timeout_s, 0
        while time.monotonic() < deadline:
            with self._lock:
                if key in self.jobsets:
                    self._advance(key)
                pending = [e for e in self.history.get(key, []) if e[0] > after]
            for version, kind, manifest in pending:
                yield json.dumps({"type": kind, "object": manifest}).encode() + b"\n"
                after, sent = version, sent + 1
                if self.end_stream_after and sent >= self.end_stream_after:
                    return
            time.sleep(self.tick_s)

    def _pods(self, request: Request, ns: str, name: str | None, log: str | None) -> Response:
        if name is None:
            selector = dict(part.split("=", 1) for part in
                            request.args.get("labelSelector", "").split(",") if part)
            items = [p for (pns, _), p in sorted(self.pods.items()) if pns == ns and all(
                p["metadata"]["labels"].get(k) == v for k, v in selector.items())]
            return Response(json.dumps({"apiVersion": "v1", "kind": "PodList", "metadata": {},
                                        "items": items}), content_type="application/json")
        if (ns, name) not in self.pods:
            return _status(404, "NotFound", f'pods "{name}" not found')
        if log:
            return Response(self.logs.get((ns, name), ""), content_type="text/plain")
        return Response(json.dumps(self.pods[(ns, name)]), content_type="application/json")
