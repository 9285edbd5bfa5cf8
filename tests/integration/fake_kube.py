"""A fake Kubernetes API server on loopback: JobSets (validated against the vendored CRD) and
the pods and logs a JobSet controller would create.

It speaks the REST paths the ``kubernetes`` client calls. A test decides what the "controller"
does: how many looks a JobSet stays running, whether it then completes or fails, and what
happens on completion (``on_complete``, e.g. the chief publishing its model).
"""

from __future__ import annotations

import copy
import json
import re
import threading
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
                 message: str = "", on_complete: Callable[[dict], None] | None = None):
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
    def _store(self, manifest: dict) -> None:
        ns, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
        manifest.setdefault("status", {})
        self.jobsets[(ns, name)] = manifest
        self.looks[(ns, name)] = 0
        job = manifest["spec"]["replicatedJobs"][0]
        for index in range(job["template"]["spec"]["parallelism"]):
            pod = f"{name}-{job['name']}-0-{index}-abcde"
            self.add_pod(ns, pod, labels={"jobset.sigs.k8s.io/jobset-name": name,
                                          "batch.kubernetes.io/job-completion-index": str(index)})
            self.logs[(ns, pod)] = f"worker {index} started\n"

    def _advance(self, key: tuple[str, str]) -> None:
        manifest = self.jobsets[key]
        if manifest["status"].get("terminalState"):
            return
        self.looks[key] += 1
        for (ns, pod), text in list(self.logs.items()):
            if ns == key[0] and pod.startswith(key[1] + "-"):
                self.logs[(ns, pod)] = text + f"epoch {self.looks[key]}\n"
        if self.looks[key] <= self.running_looks or self.outcome == "Running":
            manifest["status"]["replicatedJobsStatus"] = [
                {"name": "worker", "ready": 1, "succeeded": 0, "failed": 0, "active": 1,
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
        key = (ns, name or "")
        if key not in self.jobsets:
            return _status(404, "NotFound", f'jobsets.jobset.x-k8s.io "{name}" not found')
        if request.method == "GET":
            self._advance(key)
            return Response(json.dumps(self.jobsets[key]), content_type="application/json")
        if request.method == "DELETE":
            gone = self.jobsets.pop(key)
            self.deleted.append(name)
            for pod_key in [k for k in self.pods if k[0] == ns and k[1].startswith(name + "-")]:
                self.pods.pop(pod_key)
            return Response(json.dumps(gone), content_type="application/json")
        return _status(405, "MethodNotAllowed", request.method)

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
