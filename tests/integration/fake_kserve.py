"""A fake Kubernetes API server for KServe InferenceServices, on loopback.

It speaks the REST paths the ``kubernetes`` client calls (``/apis/serving.kserve.io/v1beta1/
namespaces/<ns>/inferenceservices[/<name>]``: GET, LIST, POST, PUT) and serves the
InferenceService CRD (``/apis/apiextensions.k8s.io/v1/customresourcedefinitions/<name>``),
so a client can look for ``spec.canary``; ``canary_list=False`` serves it without (KServe
releases up to v0.19).

Every object written is validated against the vendored CRD's ``openAPIV3Schema`` with
unknown fields rejected (the API server would prune them), and against the rules KServe's
webhook and runtime enforce that the suite relies on: the runtime named exists and supports
the model format (the vendored ``kserve-tensorflow-serving`` ClusterServingRuntime),
``spec.canary[]`` only with ``serving.kserve.io/deploymentMode: Standard`` and then with
fixed replicas (no ``maxReplicas``/``scaleTarget``/``workerSpec``) and shares adding up to
at most 100 (``validateCanarySpecs``), ``canaryTrafficPercent`` only in Serverless mode,
and a GPU limit only with a ``-gpu`` runtimeVersion (the CPU image cannot use the GPU). A
PUT must carry the current ``resourceVersion`` (else 409 Conflict); a POST of an existing
name gets 409 AlreadyExists, both as the API server's ``Status`` objects (reason, message,
details). A violation is answered with 422 and recorded in :attr:`violations`. A test can
ask for failures (:meth:`fail`: an error before anything is done; :meth:`lose`: done, then
answered 503; :meth:`hang`: done, answered after the client's timeout), refusals as the
API server words them (:meth:`deny`: 403 for one verb; :meth:`unauthorized`: 401), a
cluster without KServe (``installed=False``: its paths answer ``404 page not found``),
others' writes (:meth:`created_meanwhile`, :meth:`changed_meanwhile`), and a busy
controller (:meth:`busy`: it writes the status, bumping ``resourceVersion``, just
before each of the next N writes arrives, so each meets a 409).

The "controller" keeps what traffic each model gets (:meth:`traffic`): in Serverless mode a
new predictor spec with ``canaryTrafficPercent: N`` gets N% and the last rolled-out revision
the rest; without it the new revision is rolled out at 100% (Knative's revision routing);
in Standard mode the predictor gets what the canaries leave.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from pathlib import Path

import jsonschema
import yaml
from werkzeug.wrappers import Request, Response

from gkeflow.components import yamlio
from tests.integration.fake_kube import _closed, _status
from tests.integration.wsgi_fake import WsgiFake

CONTRACTS = Path(__file__).resolve().parents[1] / "contracts" / "kserve"
CRD = CONTRACTS / "serving.kserve.io_inferenceservices.yaml"
RUNTIME = CONTRACTS / "kserve-tensorflow-serving.yaml"
_ISVC = re.compile(r"^/apis/serving\.kserve\.io/v1beta1/namespaces/([^/]+)/inferenceservices"
                   r"(?:/([^/]+))?$")
_CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
_VALIDATOR = None
_CRD_TEXT: str | None = None


def crd() -> dict:
    """The vendored CRD (a fresh copy; parsed once, it is megabytes of YAML)."""
    global _CRD_TEXT
    if _CRD_TEXT is None:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        _CRD_TEXT = json.dumps(yaml.load(CRD.read_text(), Loader=loader))
    return json.loads(_CRD_TEXT)


def isvc_schema() -> dict:
    [version] = [v for v in crd()["spec"]["versions"] if v["name"] == "v1beta1"]
    return _closed(version["schema"]["openAPIV3Schema"])


def validate_isvc(manifest: dict) -> list[str]:
    """Everything wrong with an InferenceService manifest; empty when valid."""
    global _VALIDATOR
    if _VALIDATOR is None:
        _VALIDATOR = jsonschema.Draft7Validator(isvc_schema())
    problems = [f"{'.'.join(str(p) for p in e.path)}: {e.message}"
                for e in _VALIDATOR.iter_errors(manifest)]
    if manifest.get("apiVersion") != "serving.kserve.io/v1beta1" or manifest.get(
            "kind") != "InferenceService":
        problems.append("not a serving.kserve.io/v1beta1 InferenceService")
    metadata = manifest.get("metadata", {})
    if not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", metadata.get("name", "")):
        problems.append(f"metadata.name {metadata.get('name')!r} is not a DNS label")
    if problems:
        return problems
    standard = (metadata.get("annotations") or {}).get(
        "serving.kserve.io/deploymentMode") == "Standard"
    spec = manifest["spec"]
    predictors = [("spec.predictor", spec["predictor"])] + [
        (f"spec.canary[{i}].predictor", c["predictor"]) for i, c in enumerate(
            spec.get("canary", []))]
    runtime = yamlio.load(RUNTIME.read_text())
    formats = {(f["name"], str(f["version"])) for f in runtime["spec"]["supportedModelFormats"]}
    for where, predictor in predictors:
        model = predictor.get("model")
        if not model:
            problems.append(f"{where}.model is required")
            continue
        if model.get("runtime") != runtime["metadata"]["name"]:
            problems.append(f"{where}.model.runtime {model.get('runtime')!r}: no such runtime")
        fmt = model.get("modelFormat", {})
        if (fmt.get("name"), str(fmt.get("version"))) not in formats:
            problems.append(f"{where}.model.modelFormat {fmt} is not supported by the runtime")
        if not re.match(r"^(gs|s3|pvc|https?|hf|oci)://.+", model.get("storageUri", "")):
            problems.append(f"{where}.model.storageUri {model.get('storageUri')!r} is not a "
                            "storage URI the storage initializer reads")
        gpus = ((model.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu")
        if gpus and not str(model.get("runtimeVersion", "")).endswith("-gpu"):
            problems.append(f"{where}: a GPU limit needs a -gpu runtimeVersion")
        if where != "spec.predictor" or standard:
            for forbidden in ("maxReplicas", "scaleTarget", "workerSpec"):
                if spec.get("canary") and forbidden in predictor:
                    problems.append(f"{where}.{forbidden}: canary predictors need fixed "
                                    "replicas")
    if spec.get("canary"):
        if not standard:
            problems.append("spec.canary needs the serving.kserve.io/deploymentMode: Standard "
                            "annotation")
        if sum(c["trafficPercent"] for c in spec["canary"]) > 100:
            problems.append("spec.canary trafficPercent adds up to more than 100")
        names = [c["predictor"].get("name") for c in spec["canary"]]
        if not all(names) or len(set(names)) != len(names):
            problems.append("every spec.canary predictor needs a unique name")
    if standard and "canaryTrafficPercent" in spec["predictor"]:
        problems.append("canaryTrafficPercent is a Serverless-mode field")
    return problems


class FakeKServe(WsgiFake):
    """``with FakeKServe() as kube:`` serves at ``kube.url``."""

    def __init__(self, canary_list: bool = True, crd_readable: bool = True,
                 ready_after_reads: int = 0, installed: bool = True,
                 terse_not_found: bool = False):
        self.canary_list = canary_list
        self.installed = installed
        #: A missing object's 404 without details (as some proxies and fakes answer).
        self.terse_not_found = terse_not_found
        self.denied: dict[str, str] = {}  # verb -> user refused
        self.bumps = 0
        self.meanwhile: list[dict] = []
        self.changes: list = []
        self.crd_readable = crd_readable
        #: A written revision becomes ready (and, without a canary, rolled out) after this
        #: many reads of its object; until then traffic stays as it was, as in Knative.
        self.ready_after_reads = ready_after_reads
        self.pending: dict[tuple[str, str], int] = {}
        self.objects: dict[tuple[str, str], dict] = {}
        self.rolled_out: dict[tuple[str, str], str] = {}
        self.served: dict[tuple[str, str], dict[str, int]] = {}
        self.requests: list[tuple[str, str]] = []
        self.violations: list[str] = []
        self.failures: list[list] = []
        self.creates = 0
        self._version = 100
        self._lock = threading.Lock()

    def fail(self, status: int, times: int = 1, method: str | None = None) -> None:
        """Answer the next ``times`` matching requests with ``status``, doing nothing."""
        self.failures.append(["fail", status, method, times])

    def hang(self, seconds: float, times: int = 1, method: str | None = None) -> None:
        """Carry out the next ``times`` matching requests, answering after ``seconds`` (a
        hung read: the client's timeout fires first)."""
        self.failures.append(["hang", seconds, method, times])

    def lose(self, times: int = 1, method: str | None = None) -> None:
        """Carry out the next ``times`` matching requests, then answer 503."""
        self.failures.append(["lose", 503, method, times])

    def deny(self, verb: str, user: str = "system:serviceaccount:kubeflow:pipeline-runner"
             ) -> None:
        """Refuse every request of ``verb`` (get, list, create, update) with a 403."""
        self.denied[verb] = user

    def unauthorized(self, times: int = 1) -> None:
        self.failures.append(["unauthorized", 401, None, times])

    def created_meanwhile(self, obj: dict) -> None:
        """``obj`` is created (by someone else) right before the next POST arrives."""
        self.meanwhile.append(obj)

    def changed_meanwhile(self, change) -> None:
        """``change(stored object)`` is made (by someone else) right before the next PUT
        arrives."""
        self.changes.append(change)

    def busy(self, writes: int) -> None:
        """The controller updates the status of the object right before each of the next
        ``writes`` PUTs or POSTs arrives (a rollout in progress)."""
        self.bumps = writes

    def traffic(self, namespace: str = "models", name: str = "penguins") -> dict[str, int]:
        """storageUri -> percent, as the controller routes it now."""
        return dict(self.served.get((namespace, name), {}))

    def count(self) -> int:
        return len(self.objects)

    # -- HTTP ---------------------------------------------------------------------------------

    def _wsgi(self, environ, start_response):
        request = Request(environ)
        self.requests.append((request.method, request.path))
        injected = None
        with self._lock:
            for failure in self.failures:
                kind, status, method, remaining = failure
                if remaining > 0 and (not method or method == request.method):
                    failure[3] -= 1
                    injected = (kind, status)
                    break
        if injected and injected[0] == "fail":
            return _status(injected[1], "ServiceUnavailable", "injected")(environ,
                                                                        start_response)
        if injected and injected[0] == "unauthorized":
            return _status(401, "Unauthorized", "Unauthorized")(environ, start_response)
        with self._lock:
            response = self._route(request)
        if injected and injected[0] == "hang":
            time.sleep(injected[1])
        elif injected:
            response = _status(503, "ServiceUnavailable", "connection reset")
        return response(environ, start_response)

    def _route(self, request: Request) -> Response:
        if request.path.startswith(_CRD_PATH) and request.method == "GET":
            if not self.installed:
                name = request.path[len(_CRD_PATH):]
                return Response(json.dumps({
                    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": f'customresourcedefinitions.apiextensions.k8s.io "{name}" not '
                               "found", "reason": "NotFound", "code": 404,
                    "details": {"name": name, "group": "apiextensions.k8s.io",
                                "kind": "customresourcedefinitions"}}),
                    status=404, content_type="application/json")
            if not self.crd_readable:
                return _status(403, "Forbidden", 'customresourcedefinitions.apiextensions.k8s.io '
                               '"inferenceservices.serving.kserve.io" is forbidden: User '
                               '"system:serviceaccount:kubeflow:pipeline-runner" cannot get '
                               'resource "customresourcedefinitions" in API group '
                               '"apiextensions.k8s.io" at the cluster scope')
            definition = crd()
            if request.path[len(_CRD_PATH):] != definition["metadata"]["name"]:
                return _status(404, "NotFound", "no such CRD")
            if not self.canary_list:
                for version in definition["spec"]["versions"]:
                    version["schema"]["openAPIV3Schema"]["properties"]["spec"][
                        "properties"].pop("canary", None)
            return Response(json.dumps(definition), content_type="application/json")
        match = _ISVC.match(request.path)
        if not match or not self.installed:  # what the API server says of an unserved path
            return Response("404 page not found\n", status=404, content_type="text/plain")
        namespace, name = match.groups()
        key = (namespace, name or "")
        verb = {"POST": "create", "PUT": "update"}.get(request.method,
                                                       "get" if name else "list")
        if verb in self.denied:
            return _forbidden(self.denied[verb], verb, namespace, name)
        if request.method == "POST" and self.meanwhile:
            other = self.meanwhile.pop(0)
            self._write((namespace, other["metadata"]["name"]), other, creating=True)
        if request.method == "PUT" and self.changes and key in self.objects:
            changed = copy.deepcopy(self.objects[key])
            self.changes.pop(0)(changed)
            changed.pop("status", None)  # kept by the write, as the API server does
            self._write(key, changed, creating=False)
        if request.method in ("PUT", "POST") and self.bumps > 0:
            self.bumps -= 1
            self._controller_writes_status(namespace, name or (
                request.get_json(silent=True) or {}).get("metadata", {}).get("name", ""))
        if request.method == "GET" and name:
            found = self.objects.get(key)
            if found is None:
                return _status(404, "NotFound", "not found") if self.terse_not_found \
                    else _not_found(name)
            if key in self.pending:
                self.pending[key] -= 1
                if self.pending[key] <= 0:
                    self._reconcile(key)
            return Response(json.dumps(found), content_type="application/json")
        if request.method == "GET":
            selector = request.args.get("labelSelector", "")
            items = [o for (ns, _), o in self.objects.items() if ns == namespace
                     and _selected(o, selector)]
            return Response(json.dumps({"apiVersion": "serving.kserve.io/v1beta1",
                                        "kind": "InferenceServiceList", "items": items,
                                        "metadata": {"resourceVersion": str(self._version)}}),
                            content_type="application/json")
        body = request.get_json(silent=True) or {}
        if request.method == "POST" and not name:
            key = (namespace, body.get("metadata", {}).get("name", ""))
            if key in self.objects:
                return _details(409, "AlreadyExists",
                                f'{_RESOURCE} "{key[1]}" already exists', key[1])
            return self._write(key, body, creating=True)
        if request.method == "PUT" and name:
            current = self.objects.get(key)
            if current is None:
                return _not_found(name)
            if body.get("metadata", {}).get("resourceVersion") != current["metadata"][
                    "resourceVersion"]:
                return _details(409, "Conflict", f'Operation cannot be fulfilled on '
                                f'{_RESOURCE} "{name}": the object has been modified; please '
                                "apply your changes to the latest version and try again", name)
            return self._write(key, body, creating=False)
        return _status(405, "MethodNotAllowed", f"{request.method} {request.path}")

    def _write(self, key, body: dict, creating: bool) -> Response:
        manifest = copy.deepcopy(body)
        manifest.get("metadata", {}).pop("resourceVersion", None)
        problems = validate_isvc(manifest)
        if manifest.get("metadata", {}).get("namespace", key[0]) != key[0]:
            problems.append("metadata.namespace does not match the URL")
        if problems:
            self.violations.extend(problems)
            return _status(422, "Invalid", "; ".join(problems))
        if creating:
            self.creates += 1
        self._version += 1
        previous = self.objects.get(key, {})
        manifest["metadata"]["resourceVersion"] = str(self._version)
        manifest["metadata"]["generation"] = previous.get("metadata", {}).get("generation", 0) + 1
        manifest["metadata"].setdefault("namespace", key[0])
        manifest["status"] = copy.deepcopy(previous.get("status")) or {
            "url": f"http://{key[1]}.{key[0]}.example.com"}
        self.objects[key] = manifest
        self.pending[key] = self.ready_after_reads
        if self.ready_after_reads <= 0:
            self._reconcile(key)
        return Response(json.dumps(manifest), status=201 if creating else 200,
                        content_type="application/json")

    def _controller_writes_status(self, namespace: str, name: str) -> None:
        found = self.objects.get((namespace, name))
        if found is not None:
            self._version += 1
            found["metadata"]["resourceVersion"] = str(self._version)
            found.setdefault("status", {})["modelStatus"] = {  # what KServe reports as pods
                "states": {"activeModelState": "Loaded", "targetModelState": "Loaded"},
                "copies": {"totalCopies": self._version}}

    def _reconcile(self, key) -> None:
        """The controller's work once the latest revision is ready: traffic, and the status's
        revisions (``latestRolledoutRevision``: the last one that took all the traffic)."""
        self.pending.pop(key, None)
        manifest = self.objects[key]
        generation = manifest["metadata"]["generation"]
        revision = f"{key[1]}-predictor-{generation:05d}"
        self._route_traffic(key, manifest)
        predictor = manifest["status"].setdefault("components", {}).setdefault("predictor", {})
        predictor["latestCreatedRevision"] = predictor["latestReadyRevision"] = revision
        if self.served[key].get(manifest["spec"]["predictor"]["model"]["storageUri"]) == 100:
            predictor["previousRolledoutRevision"] = predictor.get("latestRolledoutRevision")
            predictor["latestRolledoutRevision"] = revision
        manifest["status"]["observedGeneration"] = generation
        manifest["status"]["conditions"] = [{"type": "Ready", "status": "True"}]

    def _route_traffic(self, key, manifest: dict) -> None:
        spec = manifest["spec"]
        latest = spec["predictor"]["model"]["storageUri"]
        if spec.get("canary"):
            served = {c["predictor"]["model"]["storageUri"]: c["trafficPercent"]
                      for c in spec["canary"]}
            served[latest] = 100 - sum(served.values())
        elif "canaryTrafficPercent" in spec["predictor"] and self.rolled_out.get(key) not in (
                None, latest):
            percent = spec["predictor"]["canaryTrafficPercent"]
            served = {self.rolled_out[key]: 100 - percent, latest: percent}
        else:
            served = {latest: 100}
            self.rolled_out[key] = latest
        self.served[key] = {k: v for k, v in served.items() if v}


def _selected(obj: dict, selector: str) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    for term in filter(None, selector.split(",")):
        k, _, v = term.partition("=")
        if labels.get(k) != v:
            return False
    return True


_RESOURCE = "inferenceservices.serving.kserve.io"


def _details(code: int, reason: str, message: str, name: str) -> Response:
    """A Status naming the object, as the API server sends for NotFound, Conflict,
    AlreadyExists and Forbidden."""
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code,
            "details": {"name": name, "group": "serving.kserve.io",
                        "kind": "inferenceservices"}}
    return Response(json.dumps(body), status=code, content_type="application/json")


def _not_found(name: str) -> Response:
    return _details(404, "NotFound", f'{_RESOURCE} "{name}" not found', name)


def _forbidden(user: str, verb: str, namespace: str, name: str | None) -> Response:
    subject = f'{_RESOURCE} "{name}"' if name else _RESOURCE
    return _details(403, "Forbidden", f'{subject} is forbidden: User "{user}" cannot {verb} '
                    'resource "inferenceservices" in API group "serving.kserve.io" in the '
                    f'namespace "{namespace}"', name or "")
