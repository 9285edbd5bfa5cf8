"""A fake Kubernetes API server on loopback: JobSets (validated against the vendored CRD), the
pods and logs a JobSet controller would create, and the faults a real API server serves.

It speaks the REST paths the ``kubernetes`` client calls, and checks query parameters
strictly (unknown ones are a 400). A test decides what the "controller" does: how many looks
a JobSet stays running, whether it then completes or fails, and what happens on completion
(``on_complete``, e.g. the chief publishing its model). With a simulated ``clock`` instead
(the soak), a JobSet runs for ``duration_s`` simulated seconds, each watch window lasting
``timeoutSeconds * sim_scale`` of them and ``timeoutSeconds * time_scale`` real seconds.

Served as the API server does:

- **watches** (``GET .../jobsets?watch=true&resourceVersion=N&timeoutSeconds=T``): a
  chunked stream of one JSON event per line (``ADDED`` / ``MODIFIED`` / ``DELETED``), ending
  after ``timeoutSeconds``; a version older than the watch cache holds (:meth:`compact`,
  or the first ``gone_watches``) is answered 410 Gone, as an ``ERROR`` event or as an HTTP
  status (``gone_as``);
- **LIST** with ``fieldSelector=metadata.name=<name>``: the list's own ``resourceVersion``;
- **deletes**: ``propagationPolicy=Foreground`` leaves the JobSet, with a
  ``deletionTimestamp``, for ``delete_lag`` more looks;
- **logs** with ``timestamps``, ``sinceTime`` (RFC 3339) and ``limitBytes``.

:class:`KubeFaults` injects failures per request: error statuses (429, 5xx), connections
reset before the request is carried out, answers lost after it was, reads that hang past the
client's timeout, watch streams cut (or ended cleanly) in the middle of an event, 410s, and
ERROR events.

What the launcher did is recorded: :attr:`requests` (method, path, query), :attr:`created`,
:attr:`deleted` (with the JobSet's state when deleted), :attr:`log_bytes` per log read.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import random
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import jsonschema
import yaml
from werkzeug.wrappers import Request, Response

from tests.integration.wsgi_fake import WsgiFake

CRD = Path(__file__).resolve().parents[1] / "contracts" / "jobset.x-k8s.io_jobsets.yaml"
_CUSTOM = re.compile(r"^/apis/([^/]+)/([^/]+)/namespaces/([^/]+)/([^/]+?)(?:/([^/]+))?$")
_PODS = re.compile(r"^/api/v1/namespaces/([^/]+)/pods(?:/([^/]+))?(/log)?$")
_ACCOUNTS = re.compile(r"^/api/v1/namespaces/([^/]+)/serviceaccounts/([^/]+)$")
_EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


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
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: megabytes of YAML
    crd = yaml.load(CRD.read_text(), Loader=loader)  # noqa: S506 (a safe loader)
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha2"]
    return _closed(version["schema"]["openAPIV3Schema"])


_VALIDATOR = None


def _validator():
    global _VALIDATOR
    if _VALIDATOR is None:
        _VALIDATOR = jsonschema.Draft7Validator(jobset_schema())
    return _VALIDATOR


def validate_jobset(manifest: dict) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``manifest`` is a valid v1alpha2 JobSet."""
    _validator().validate(manifest)
    assert manifest["apiVersion"] == "jobset.x-k8s.io/v1alpha2" and manifest["kind"] == "JobSet"
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", manifest["metadata"]["name"])


class JobSetWorkload:
    """What the fake serves and controls by default: JobSets, as the JobSet controller runs
    them (one pod per index of each replicated job, ``terminalState`` and a condition at
    the end). :mod:`tests.integration.fake_rayjob` serves RayJobs the same way."""

    group, version, plural, kind = "jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"

    def prepare(self) -> None:
        _validator()

    def validate(self, manifest: dict) -> None:
        validate_jobset(manifest)

    def refusal(self, manifest: dict) -> str:
        """What the controller refuses after the create was accepted; "" when none."""
        return ""

    def admit(self, manifest: dict) -> dict:
        """What the API server stores of an accepted body (its CRD may prune fields)."""
        return manifest

    def pods(self, manifest: dict):
        """(pod name, labels, service account) of every pod the controller creates."""
        name = manifest["metadata"]["name"]
        for job in manifest["spec"]["replicatedJobs"]:
            pod_spec = job["template"]["spec"]["template"]["spec"]
            for job_index in range(int(job.get("replicas", 1))):
                for index in range(job["template"]["spec"]["parallelism"]):
                    yield (f"{name}-{job['name']}-{job_index}-{index}-abcde", {
                        "jobset.sigs.k8s.io/jobset-name": name,
                        "jobset.sigs.k8s.io/replicatedjob-name": job["name"],
                        "jobset.sigs.k8s.io/job-index": str(job_index),
                        "batch.kubernetes.io/job-completion-index": str(index)},
                        pod_spec.get("serviceAccountName", "default"),
                        f"worker {job_index}/{index} started")

    def ended(self, manifest: dict) -> bool:
        return bool(manifest["status"].get("terminalState"))

    def state(self, manifest: dict) -> str:
        return manifest["status"].get("terminalState") or "Running"

    def running(self, manifest: dict, ready: bool) -> None:
        manifest["status"]["replicatedJobsStatus"] = [
            {"name": "worker", "ready": int(ready), "succeeded": 0, "failed": 0, "active": 1,
             "suspended": 0}]

    def end(self, manifest: dict, outcome: str, message: str) -> None:
        manifest["status"]["terminalState"] = outcome
        manifest["status"]["conditions"] = [{
            "type": outcome, "status": "True", "reason": f"AllJobs{outcome}",
            "message": message or f"jobset {outcome.lower()}",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}]


def _status(code: int, reason: str, message: str) -> Response:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}
    return Response(json.dumps(body), status=code, content_type="application/json")


def _gone_event(message: str) -> bytes:
    return json.dumps({"type": "ERROR", "object": {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": "Expired", "code": 410}}).encode() + b"\n"


def _stamp(seconds: float) -> str:
    """RFC 3339 with nanoseconds, trailing zeros trimmed, as the kubelet writes them."""
    moment = _EPOCH + dt.timedelta(seconds=seconds)
    fraction = f"{moment.microsecond:06d}000".rstrip("0")
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + (f".{fraction}" if fraction else "") + "Z"


def _parse_since(text: str) -> float:
    moment = dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    return (moment - _EPOCH).total_seconds()


class _Dropped(ConnectionError):
    """Raised into the server once a connection was closed on purpose (werkzeug ignores it)."""


def _drop(environ):
    try:
        environ["werkzeug.socket"].shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    raise _Dropped()


#: Fault kinds, and the requests each applies to ("watch": watch streams; "call": the rest).
STATUSES = ("429", "500", "502", "503", "504")
KINDS = {**{s: ("watch", "call") for s in STATUSES}, "reset": ("watch", "call"),
         "lost": ("call",), "hang": ("watch", "call"), "cut": ("watch",),
         "gone_status": ("watch",), "gone_event": ("watch",), "error_event": ("watch",),
         "truncate": ("watch",),
         "403": ("call",)}
#: What random faults are drawn from: everything a cloud serves now and then (not a 403).
TRANSIENT = tuple(kind for kind in KINDS if kind != "403")


class KubeFaults:
    """Which requests fail, and how: scripted faults first, then random ones at ``rate``.

    ``resource`` names what a request is about: ``jobset`` (GET/POST/DELETE of one),
    ``list``, ``watch``, ``pods`` (the pod list), ``log``, ``serviceaccount``.
    """

    def __init__(self, rate: float = 0.0, seed: int = 0, kinds=TRANSIENT,
                 hang_s: float = 1.0):
        unknown = set(kinds) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}")
        self.rate, self.kinds, self.hang_s = rate, tuple(kinds), hang_s
        self._random = random.Random(seed)
        self._script: list[list] = []
        self._lock = threading.Lock()
        self.injected: Counter = Counter()

    def script(self, kind: str, times: int = 1, resource: str | None = None,
               method: str | None = None) -> KubeFaults:
        if kind not in KINDS:
            raise ValueError(f"unknown fault kind {kind!r}")
        self._script.append([kind, resource, method, times])
        return self

    @property
    def total(self) -> int:
        return sum(self.injected.values())

    def unused(self) -> list[tuple[str, str | None, int]]:
        """Scripted faults no request met: (kind, resource, times left)."""
        return [(kind, resource, left) for kind, resource, _, left in self._script if left]

    def pick(self, method: str, resource: str) -> str | None:
        group = "watch" if resource == "watch" else "call"
        with self._lock:
            for entry in self._script:
                kind, want, want_method, left = entry
                if left > 0 and want in (None, resource) and want_method in (None, method):
                    entry[3] -= 1
                    self.injected[kind] += 1
                    return kind
            if self.rate and self._random.random() < self.rate:
                kinds = [k for k in self.kinds if group in KINDS[k]]
                kind = self._random.choice(kinds)
                self.injected[kind] += 1
                return kind
        return None


class FakeKube(WsgiFake):
    """``with FakeKube() as kube:`` serves at ``kube.url``."""

    def __init__(self, running_looks: int = 2, outcome: str = "Completed",
                 message: str = "", on_complete: Callable[[dict], None] | None = None,
                 tick_s: float = 0.01, end_stream_after: int = 0, gone_watches: int = 0,
                 gone_as: str = "event", faults: KubeFaults | None = None,
                 clock=None, duration_s: float = 0.0, time_scale: float = 0.001,
                 sim_scale: float = 1.0,
                 delete_lag: int = 0, service_accounts=("default", "gkeflow-worker",
                                                        "pipeline-runner"),
                 log_time: Callable[[], float] | None = None, workload=None):
        self.workload = workload or JobSetWorkload()
        self.workload.prepare()  # its schema loaded before serving: not a request's seconds
        self.tick_s = tick_s
        self.end_stream_after = end_stream_after
        self.gone_watches = gone_watches
        self.gone_as = gone_as
        self.faults = faults or KubeFaults()
        self.clock, self.duration_s, self.time_scale = clock, duration_s, time_scale
        self.sim_scale = sim_scale  # simulated seconds per second of a watch window
        self.hang_sim_s = 60.0
        self.log_time = log_time or self.now  # when each log line is stamped
        self.delete_lag = delete_lag
        self.service_accounts = set(service_accounts)
        self.watches: list[dict[str, str]] = []
        self.history: dict[tuple[str, str], list[tuple[int, str, dict]]] = {}
        self._version = 0
        self.compacted = 0  # watches from an older resourceVersion are answered 410
        self.compact_pending = False
        self.running_looks = running_looks
        self.outcome = outcome
        self.message = message
        self.on_complete = on_complete
        self.jobsets: dict[tuple[str, str], dict] = {}
        self.looks: dict[tuple[str, str], int] = {}
        self.born: dict[tuple[str, str], float] = {}
        self.deleting: dict[tuple[str, str], int] = {}
        self.pods: dict[tuple[str, str], dict] = {}
        self.logs: dict[tuple[str, str], list[tuple[float, str]]] = {}
        self.requests: list[tuple[str, str, dict]] = []
        self.created: list[dict] = []
        self.deleted: list[str] = []
        self.deleted_states: list[str] = []  # the JobSet's state when each delete came
        self.log_bytes: list[int] = []
        self.pod_accounts: set[str] = set()  # accounts the JobSets' pods ran as
        self.last_read: dict[tuple[str, str], float] = {}
        self.max_gap_s = 0.0
        self._lock = threading.RLock()

    # -- time -----------------------------------------------------------------------------------
    def now(self) -> float:
        return self.clock() if self.clock is not None else time.time() - _EPOCH.timestamp()

    def _observed(self, key: tuple[str, str]) -> None:
        """The launcher got an answer about ``key``: the gap since the last one."""
        now = self.now()
        with self._lock:
            self.max_gap_s = max(self.max_gap_s, now - self.last_read.get(key, now))
            self.last_read[key] = now

    # -- what a test sets up ------------------------------------------------------------------
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
        with self._lock:
            self._store(copy.deepcopy(manifest))

    def compact(self) -> None:
        """What a watch-cache restart does, just before the next watch: every version up to
        then is too old to watch from, though the JobSet itself has not changed (a GET
        returns its old version; a LIST gives a newer one)."""
        self.compact_pending = True

    def delete_externally(self, namespace: str, name: str) -> None:
        with self._lock:
            self._remove((namespace, name))

    def log_text(self, namespace: str, pod: str) -> str:
        return "".join(f"{line}\n" for _, line in self.logs.get((namespace, pod), []))

    def count(self, method: str, resource: str) -> int:
        return sum(1 for m, path, query in self.requests
                   if m == method and _resource(path, query, m, self.workload.plural)
                   == resource)

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
        manifest["metadata"]["uid"] = f"uid-{name}-{self._version + 1}"
        manifest["metadata"]["creationTimestamp"] = _stamp(self.now())[:19] + "Z"
        self.jobsets[(ns, name)] = manifest
        self.looks[(ns, name)] = 0
        self.born[(ns, name)] = self.now()
        self._record((ns, name), "ADDED", manifest)
        for pod, labels, account, first_line in self.workload.pods(manifest):
            self.pod_accounts.add(account)
            self.add_pod(ns, pod, service_account=account, labels=labels)
            self.logs[(ns, pod)] = [(self.log_time(), first_line)]

    def _remove(self, key: tuple[str, str]) -> None:
        gone = self.jobsets.pop(key)
        self.deleting.pop(key, None)
        self._record(key, "DELETED", gone)
        for pod_key in [k for k in self.pods if k[0] == key[0]
                        and k[1].startswith(key[1] + "-")]:
            self.pods.pop(pod_key)

    def _advance(self, key: tuple[str, str]) -> None:
        if key in self.deleting:
            self.deleting[key] -= 1
            if self.deleting[key] < 0:
                self._remove(key)
            return
        manifest = self.jobsets[key]
        before = json.dumps(manifest["status"], sort_keys=True)
        self._progress(key)
        if json.dumps(manifest["status"], sort_keys=True) != before:
            self._record(key, "MODIFIED", manifest)

    def _log(self, key: tuple[str, str], line: str) -> None:
        at = self.log_time()
        for (ns, pod), lines in list(self.logs.items()):
            if ns == key[0] and pod.startswith(key[1] + "-"):
                lines.append((at, line))

    def _progress(self, key: tuple[str, str]) -> None:
        manifest = self.jobsets[key]
        if self.workload.ended(manifest):
            return
        if refusal := self.workload.refusal(manifest):  # the controller's own validation
            self.workload.end(manifest, "Invalid", refusal)
            return
        self.looks[key] += 1
        if self.clock is not None:
            running = self.now() - self.born[key] < self.duration_s
            self._log(key, f"at {self.now() - self.born[key]:.0f}s")
        else:
            running = self.looks[key] <= self.running_looks
            self._log(key, f"epoch {self.looks[key]}")
        if running or self.outcome == "Running":
            # the Job turns ready on the last running look (its pods took that long)
            ready = self.looks[key] >= (1 if self.clock else self.running_looks)
            self.workload.running(manifest, ready)
            return
        if self.outcome == "Completed" and self.on_complete:
            self.on_complete(manifest)
        self.workload.end(manifest, self.outcome, self.message)

    # -- HTTP ----------------------------------------------------------------------------------
    def _wsgi(self, environ, start_response):
        request = Request(environ)
        query = {k: request.args[k] for k in request.args}
        resource = _resource(request.path, query, request.method, self.workload.plural)
        with self._lock:
            self.requests.append((request.method, request.path, query))
        fault = self.faults.pick(request.method, resource)
        if fault in STATUSES or fault == "403":
            return _status(int(fault), "InternalError", f"injected {fault}")(
                environ, start_response)
        if fault == "reset":
            return _drop(environ)
        if resource == "watch":
            return self._watch(request, query, fault)(environ, start_response)
        with self._lock:
            response, key = self._route(request, query)
        if fault == "lost":
            return _drop(environ)
        if fault == "hang":
            if self.clock is not None:
                self.clock.sleep(self.hang_sim_s)  # a client's call timeout, simulated
            time.sleep(self.faults.hang_s)
            return _drop(environ)
        if key is not None and response.status_code < 300:
            self._observed(key)
        return response(environ, start_response)

    def _route(self, request: Request, query: dict) -> tuple[Response, tuple | None]:
        if match := self._custom(request.path):
            return self._jobsets(request, query, *match)
        if match := _PODS.match(request.path):
            return self._pods(query, *match.groups()), None
        if match := _ACCOUNTS.match(request.path):
            if request.method != "GET":
                return _status(405, "MethodNotAllowed", request.method), None
            if match.group(2) not in self.service_accounts:
                return _status(404, "NotFound",
                               f'serviceaccounts "{match.group(2)}" not found'), None
            return Response(json.dumps({"apiVersion": "v1", "kind": "ServiceAccount",
                                        "metadata": {"name": match.group(2),
                                                     "namespace": match.group(1)}}),
                            content_type="application/json"), None
        return _status(404, "NotFound", f"no route {request.path}"), None

    def _jobsets(self, request: Request, query: dict, ns: str, name: str | None):
        if name is None and request.method == "POST":
            body = json.loads(request.get_data())
            try:
                self.workload.validate(body)
            except (jsonschema.ValidationError, AssertionError) as exc:
                return _status(422, "Invalid", f"{self.workload.kind} is invalid: {exc}"), None
            if body["metadata"].get("namespace", ns) != ns:
                return _status(400, "BadRequest", "namespace does not match the path"), None
            key = (ns, body["metadata"]["name"])
            if key in self.jobsets:
                return _status(409, "AlreadyExists",
                               f"{self.workload.plural} {key[1]} already exists"), None
            self.created.append(copy.deepcopy(body))
            self._store(self.workload.admit(body))
            return Response(json.dumps(self.jobsets[key]), status=201,
                            content_type="application/json"), key
        if name is None and request.method == "GET":
            return self._list(query, ns)
        key = (ns, name or "")
        if key not in self.jobsets:
            return _status(404, "NotFound", f'{self.workload.plural}.{self.workload.group} '
                           f'"{name}" not found'), None
        if request.method == "GET":
            unknown = sorted(set(query) - {"pretty"})
            if unknown:
                return _status(400, "BadRequest", f"unknown query parameters {unknown}"), None
            self._advance(key)
            if key not in self.jobsets:
                return _status(404, "NotFound", f'{self.workload.plural} "{name}" not found'
                               ), None
            return Response(json.dumps(self.jobsets[key]), content_type="application/json"), key
        if request.method == "DELETE":
            body = json.loads(request.get_data() or b"{}")
            policy = query.get("propagationPolicy", body.get("propagationPolicy", "Background"))
            if policy not in ("Foreground", "Background", "Orphan"):
                return _status(400, "BadRequest", f"propagationPolicy {policy!r}"), None
            manifest = self.jobsets[key]
            self.deleted.append(name)
            self.deleted_states.append(self.workload.state(manifest))
            if policy == "Foreground" and self.delete_lag > 0:
                if key not in self.deleting:
                    self.deleting[key] = self.delete_lag
                    manifest["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
                    manifest["metadata"]["finalizers"] = ["foregroundDeletion"]
                    self._record(key, "MODIFIED", manifest)
                return Response(json.dumps(manifest), status=202,
                                content_type="application/json"), None
            gone = copy.deepcopy(manifest)
            self._remove(key)
            return Response(json.dumps(gone), content_type="application/json"), None
        return _status(405, "MethodNotAllowed", request.method), None

    def _custom(self, path: str) -> tuple[str, str | None] | None:
        """(namespace, name) of a path to this fake's custom resource; None otherwise."""
        match = _CUSTOM.match(path)
        w = self.workload
        if match and match.group(1, 2, 4) == (w.group, w.version, w.plural):
            return match.group(3), match.group(5)
        return None

    _LIST_PARAMS = {"fieldSelector", "labelSelector", "resourceVersion", "limit"}
    _WATCH_PARAMS = {"watch", "fieldSelector", "labelSelector", "resourceVersion",
                     "timeoutSeconds", "allowWatchBookmarks"}

    def _selected(self, query: dict, ns: str):
        selector = query.get("fieldSelector", "")
        if not selector.startswith("metadata.name=") or "," in selector:
            return None
        return ns, selector[len("metadata.name="):]

    def _list(self, query: dict, ns: str):
        unknown = sorted(set(query) - self._LIST_PARAMS)
        if unknown:
            return _status(400, "BadRequest", f"unknown query parameters {unknown}"), None
        key = self._selected(query, ns)
        if key is None:
            return _status(400, "BadRequest", "list one JobSet: fieldSelector=metadata.name="
                           ), None
        items = [copy.deepcopy(self.jobsets[key])] if key in self.jobsets else []
        body = {"apiVersion": f"{self.workload.group}/{self.workload.version}",
                "kind": f"{self.workload.kind}List",
                "metadata": {"resourceVersion": str(self._version)}, "items": items}
        return Response(json.dumps(body), content_type="application/json"), key

    def _watch(self, request: Request, query: dict, fault: str | None) -> Response:
        unknown = sorted(set(query) - self._WATCH_PARAMS)
        if unknown:
            return _status(400, "BadRequest", f"unknown query parameters {unknown}")
        timeout = query.get("timeoutSeconds", "")
        if not timeout.isdigit() or int(timeout) < 1:
            return _status(400, "BadRequest", "a watch must be bounded: timeoutSeconds >= 1")
        version = query.get("resourceVersion", "")
        if not version.isdigit():
            return _status(400, "BadRequest", "watch from a resourceVersion read before")
        key = self._selected(query, self._custom(request.path)[0])
        if key is None:
            return _status(400, "BadRequest", f"unsupported fieldSelector {query}")
        with self._lock:
            self.watches.append(query)
            gone = None
            if self.compact_pending:
                self.compact_pending = False
                self._version += 1  # something else in the cluster changed meanwhile
                self.compacted = self._version
            if fault in ("gone_status", "gone_event"):
                gone = fault.removeprefix("gone_")
            elif int(version) < self.compacted:
                gone = self.gone_as
            elif self.gone_watches > 0:
                self.gone_watches -= 1
                gone = self.gone_as
        message = f"too old resource version: {version} ({self._version})"
        if gone == "status":
            return _status(410, "Expired", message)
        if gone == "event":
            return Response([_gone_event(message)], content_type="application/json")
        if fault == "error_event":  # e.g. the API server's storage timed out mid-watch
            error = {"type": "ERROR", "object": {
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "etcdserver: request timed out", "reason": "InternalError",
                "code": 500}}
            return Response([json.dumps(error).encode() + b"\n"],
                            content_type="application/json")
        return Response(self._events(key, int(version), int(timeout), fault),
                        content_type="application/json", direct_passthrough=True)

    def _events(self, key: tuple[str, str], after: int, timeout_s: int, fault: str | None):
        """The watch stream: events of ``key`` newer than ``after``, one JSON line each."""
        if fault == "hang":
            if self.clock is not None:
                self.clock.sleep(timeout_s * self.sim_scale + self.hang_sim_s)
            time.sleep(self.faults.hang_s)
            return
        scale = self.time_scale if self.clock is not None else 1.0
        deadline, sent = time.monotonic() + timeout_s * scale, 0
        ended = False
        while True:
            with self._lock:
                if ended and self.clock is not None:
                    self.clock.sleep(timeout_s * self.sim_scale)  # the window passed
                if key in self.jobsets:
                    self._advance(key)
                pending = [e for e in self.history.get(key, []) if e[0] > after]
            for version, kind, manifest in pending:
                line = json.dumps({"type": kind, "object": manifest}).encode() + b"\n"
                if fault in ("cut", "truncate"):
                    yield line[:len(line) // 2]
                    if fault == "cut":
                        raise _Dropped()
                    return  # a clean end of the stream, in the middle of an event
                self._observed(key)
                yield line
                after, sent = version, sent + 1
                if self.end_stream_after and sent >= self.end_stream_after:
                    return
            if ended:
                break
            if fault in ("cut", "truncate"):
                yield b'{"type": "MODIF'
                if fault == "cut":
                    raise _Dropped()
                return
            if time.monotonic() >= deadline:
                ended = True
                continue
            time.sleep(self.tick_s if self.clock is None else timeout_s * scale / 4)
        self._observed(key)

    def _pods(self, query: dict, ns: str, name: str | None, log: str | None) -> Response:
        if name is None:
            unknown = sorted(set(query) - {"labelSelector"})
            if unknown:
                return _status(400, "BadRequest", f"unknown query parameters {unknown}")
            selector = dict(part.split("=", 1) for part in
                            query.get("labelSelector", "").split(",") if part)
            items = [p for (pns, _), p in sorted(self.pods.items()) if pns == ns and all(
                p["metadata"]["labels"].get(k) == v for k, v in selector.items())]
            return Response(json.dumps({"apiVersion": "v1", "kind": "PodList", "metadata": {},
                                        "items": items}), content_type="application/json")
        if (ns, name) not in self.pods:
            return _status(404, "NotFound", f'pods "{name}" not found')
        if log:
            return self._log_response(query, ns, name)
        return Response(json.dumps(self.pods[(ns, name)]), content_type="application/json")

    _LOG_PARAMS = {"timestamps", "sinceTime", "sinceSeconds", "limitBytes", "container",
                   "tailLines"}

    def _log_response(self, query: dict, ns: str, name: str) -> Response:
        unknown = sorted(set(query) - self._LOG_PARAMS)
        if unknown:
            return _status(400, "BadRequest", f"unknown query parameters {unknown}")
        if "sinceTime" in query and "sinceSeconds" in query:
            return _status(400, "BadRequest", "at most one of sinceTime or sinceSeconds")
        since = -1e18
        if "sinceTime" in query:
            try:
                since = _parse_since(query["sinceTime"])
            except ValueError:
                return _status(400, "BadRequest", f"sinceTime {query['sinceTime']!r}")
        if "sinceSeconds" in query:
            since = self.now() - int(query["sinceSeconds"])
        stamps = query.get("timestamps") == "true"
        text = "".join((f"{_stamp(at)} " if stamps else "") + f"{line}\n"
                       for at, line in self.logs.get((ns, name), []) if at >= since)
        data = text.encode()
        if "limitBytes" in query:
            data = data[:int(query["limitBytes"])]
        self.log_bytes.append(len(data))
        return Response(data, content_type="text/plain")


def _true(text: str) -> bool:
    """A boolean query parameter as the API server parses it (Go's strconv.ParseBool)."""
    return text in ("1", "t", "T", "true", "TRUE", "True")


def _resource(path: str, query: dict, method: str = "GET", plural: str = "jobsets") -> str:
    """What a request is about; one custom resource is ``jobset`` whatever its kind."""
    match = _CUSTOM.match(path)
    if match and match.group(4) == plural:
        if match.group(5) is None and method != "POST":
            return "watch" if _true(query.get("watch", "")) else "list"
        return "jobset"
    if path.endswith("/log"):
        return "log"
    if _ACCOUNTS.match(path):
        return "serviceaccount"
    return "pods"
