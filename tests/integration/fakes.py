"""Local fake Kubeflow Pipelines and Vertex AI HTTP servers that check what they are sent.

They are real HTTP servers on 127.0.0.1 (a thread each) for real clients: ``kfp.Client``
and ``google.cloud.aiplatform`` with ``api_transport="rest"``. They keep state in memory
(pipelines, versions, experiments, runs, recurring runs; pipeline jobs, schedules), advance
a run one step per status request, and can be told to fail (``inject``).

Strictness:

* KFP: every request is matched to an operation of ``kfp-v2beta1.swagger.json``; its query
  parameter names must be declared there and its JSON body must validate against the
  operation's body schema with unknown properties forbidden. (int64 fields are declared as
  strings, as grpc-gateway prints them, but it also accepts JSON numbers, which
  ``kfp_server_api`` sends; both are allowed.) Every pipeline spec (uploaded file or
  embedded) is parsed with ``json_format.ParseDict(..., ignore_unknown_fields=False)`` into
  ``PipelineSpec``, the platform spec into ``PlatformSpec`` and each Kubernetes executor
  config into ``KubernetesExecutorConfig``. The fake's own answers are validated too.
* Vertex: every body is parsed with ``google.cloud.aiplatform_v1.<Type>.from_json(body,
  ignore_unknown_fields=False)``, and the pipeline spec inside a PipelineJob as above.

A request that fails validation gets 400 and is recorded in ``violations``; the test
fixtures fail any test that leaves violations behind.
"""

from __future__ import annotations

import copy
import datetime as dt
import email.parser
import email.policy
import itertools
import json
import re
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

CONTRACTS = Path(__file__).resolve().parents[1] / "contracts"
KFP_SWAGGER = CONTRACTS / "kfp-v2beta1.swagger.json"


class Invalid(Exception):
    """A request broke the contract; becomes a 400 and a recorded violation."""


@dataclass
class Fault:
    method: str
    path_re: str
    status: int = 503
    count: int = 1
    delay_s: float = 0.0
    message: str = "injected failure"
    after: bool = False  # execute the request first, then answer with the failure


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-case names
    body: bytes


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_pipeline_spec_strict(spec: dict, platform: dict | None = None) -> None:
    """Parse a compiled pipeline spec (and its platform spec) strictly; raise Invalid."""
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    try:
        json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec(),
                              ignore_unknown_fields=False)
    except json_format.ParseError as exc:
        raise Invalid(f"pipeline spec does not parse as PipelineSpec: {exc}") from None
    if platform:
        try:
            json_format.ParseDict(platform, pipeline_spec_pb2.PlatformSpec(),
                                  ignore_unknown_fields=False)
        except json_format.ParseError as exc:
            raise Invalid(f"platform spec does not parse as PlatformSpec: {exc}") from None
        from kfp.kubernetes import kubernetes_executor_config_pb2 as k8s

        executors = (platform.get("platforms", {}).get("kubernetes", {})
                     .get("deploymentSpec", {}).get("executors", {}))
        for name, config in executors.items():
            try:
                json_format.ParseDict(config, k8s.KubernetesExecutorConfig(),
                                      ignore_unknown_fields=False)
            except json_format.ParseError as exc:
                raise Invalid(f"executor {name}: not a KubernetesExecutorConfig: {exc}") from None


def _task_names(spec: dict, dag: dict | None = None) -> list[str]:
    """The tasks in an order they can run in (each after its dependencies); a task running
    a sub-DAG (a condition, an exit handler, a loop) is followed by the sub-DAG's tasks, as
    the backends list them in a run's task details."""
    tasks = (dag if dag is not None else spec.get("root", {}).get("dag", {})).get("tasks", {})
    ordered: list[str] = []
    while len(ordered) < len(tasks):
        ready = sorted(t for t in tasks if t not in ordered and all(
            d in ordered or d not in tasks for d in tasks[t].get("dependentTasks", [])))
        ordered += ready or sorted(set(tasks) - set(ordered))  # a cycle: take the rest
    expanded: list[str] = []
    for name in ordered:
        expanded.append(name)
        component = spec.get("components", {}).get(
            tasks[name].get("componentRef", {}).get("name", ""), {})
        if "dag" in component:
            expanded += [t for t in _task_names(spec, component["dag"]) if t not in expanded]
    return expanded


class _Server:
    """Shared plumbing: a ThreadingHTTPServer, recording, fault injection."""

    def __init__(self):
        self.requests: list[Recorded] = []
        self.violations: list[str] = []
        self.faults: list[Fault] = []
        self.lock = threading.RLock()
        self.outcome = "SUCCEEDED"  # or "FAILED": how runs end
        self.steps_per_task = 1
        self._ids = itertools.count(1)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output clean
                pass

            def _handle(self):
                outer._dispatch(self)

            do_GET = do_POST = do_DELETE = do_PATCH = do_PUT = _handle

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def new_id(self) -> str:
        return f"{next(self._ids):06d}"

    def inject(self, method: str, path_re: str, status: int = 503, count: int = 1,
               delay_s: float = 0.0, message: str = "injected failure",
               after: bool = False) -> None:
        """The next ``count`` matching requests fail with ``status`` after ``delay_s``
        (``status=200``: answered normally, only late; ``status=0``: connection dropped).
        With ``after=True`` the request is carried out first (a create creates), and only
        the answer is the failure: what a client sees when a server fails after acting."""
        with self.lock:
            self.faults.append(Fault(method, path_re, status, count, delay_s, message, after))

    def calls(self, method: str | None = None, path_re: str = "") -> list[Recorded]:
        return [r for r in self.requests
                if (method is None or r.method == method) and re.search(path_re, r.path)]

    def _fault_for(self, method: str, path: str) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.count > 0 and fault.method == method and re.search(fault.path_re, path):
                    fault.count -= 1
                    return fault
        return None

    def _dispatch(self, handler: BaseHTTPRequestHandler) -> None:
        parsed = urllib.parse.urlsplit(handler.path)
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        query = urllib.parse.parse_qs(parsed.query, keep_blank_values=True)
        record = Recorded(handler.command, parsed.path, query,
                          {k.lower(): v for k, v in handler.headers.items()}, body)
        with self.lock:
            self.requests.append(record)
        fault = self._fault_for(handler.command, parsed.path)
        if fault and fault.after:
            try:
                self.route(record)
            except (Invalid, LookupError, Conflict) as exc:
                with self.lock:
                    self.violations.append(f"{record.method} {record.path}: {exc}")
        if fault:
            if fault.delay_s:
                time.sleep(fault.delay_s)
            if fault.status == 0:  # drop the connection without an answer
                handler.close_connection = True
                return
            if fault.status == 200:  # only slow: answer normally after the delay
                fault = None
        if fault:
            return self._send(handler, fault.status, self.error_body(fault.status,
                                                                     fault.message))
        try:
            status, payload = self.route(record)
        except Invalid as exc:
            with self.lock:
                self.violations.append(f"{record.method} {record.path}: {exc}")
            status, payload = 400, self.error_body(400, str(exc))
        except LookupError as exc:
            status, payload = 404, self.error_body(404, str(exc))
        except Conflict as exc:
            status, payload = 409, self.error_body(409, str(exc))
        self._send(handler, status, payload)

    def _send(self, handler, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def route(self, record: Recorded) -> tuple[int, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def error_body(self, status: int, message: str) -> dict:  # pragma: no cover - abstract
        raise NotImplementedError

    def _run_script(self, task_names: list[str]) -> list[tuple[str, dict[str, str]]]:
        """States a run goes through, one per status request: (run state, task states)."""
        script = [("PENDING", {})]
        states = {name: "PENDING" for name in task_names}
        fail_at = len(task_names) // 2 if self.outcome == "FAILED" else None
        for index, name in enumerate(task_names):
            states[name] = "RUNNING"
            script.append(("RUNNING", dict(states)))
            if index == fail_at:
                states[name] = "FAILED"
                script.append(("FAILED", dict(states)))
                return script
            states[name] = "SUCCEEDED"
        script.append(("SUCCEEDED", dict(states)))
        return script


class Conflict(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# Kubeflow Pipelines v2beta1


def _strict_definitions(definitions: dict) -> dict:
    """Forbid unknown properties everywhere; accept JSON numbers for int64 strings."""
    definitions = copy.deepcopy(definitions)

    def walk(schema):
        if isinstance(schema, dict):
            if schema.get("type") == "object" and "properties" in schema \
                    and "additionalProperties" not in schema:
                schema["additionalProperties"] = False
            if schema.get("type") == "string" and schema.get("format") in ("int64", "uint64"):
                schema["type"] = ["string", "integer"]
            for value in schema.values():
                walk(value)
        elif isinstance(schema, list):
            for value in schema:
                walk(value)

    walk(definitions)
    return definitions


class FakeKfpServer(_Server):
    """The Kubeflow Pipelines v2beta1 REST API, as far as gkeflow uses it."""

    def __init__(self, expected_token: str | None = None):
        super().__init__()
        self.expected_token = expected_token
        #: healthz tag_name: the backend release (the Kubeflow Platform's current one).
        self.tag_name = "2.16.0"
        self.swagger = json.loads(KFP_SWAGGER.read_text()) if KFP_SWAGGER.exists() else None
        self.pipelines: dict[str, dict] = {}
        self.versions: dict[str, dict] = {}
        self.specs: dict[str, dict] = {}  # version id -> pipeline spec
        self.experiments: dict[str, dict] = {}
        self.runs: dict[str, dict] = {}
        self.run_scripts: dict[str, list] = {}
        self.recurring_runs: dict[str, dict] = {}
        if self.swagger:
            self._definitions = _strict_definitions(self.swagger["definitions"])
            self._operations = []
            for template, methods in self.swagger["paths"].items():
                pattern = "^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)) + "$"
                for method, operation in methods.items():
                    self._operations.append((re.compile(pattern), method.upper(), template,
                                             operation))

    # -- contract checks ----------------------------------------------------------------------

    def _schema_validate(self, instance: Any, schema: dict, what: str) -> None:
        import jsonschema

        root = {"definitions": self._definitions, **_strict_definitions(schema)}
        validator = jsonschema.Draft4Validator(root)
        errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.path))
        if errors:
            error = errors[0]
            where = "/".join(str(p) for p in error.path) or "(body)"
            raise Invalid(f"{what} violates the KFP swagger at {where}: {error.message}")

    def _operation(self, record: Recorded) -> tuple[str, dict]:
        for pattern, method, template, operation in self._operations:
            if method == record.method and pattern.match(record.path):
                return template, operation
        raise Invalid(f"no {record.method} {record.path} in the KFP v2beta1 swagger")

    def _check_request(self, record: Recorded) -> dict | None:
        """Validate query names and the JSON body; return the parsed body."""
        if self.swagger is None:  # no contract here: parse JSON bodies, nothing more
            content_type = record.headers.get("content-type", "")
            if record.body and "json" in content_type:
                return json.loads(record.body)
            return None
        template, operation = self._operation(record)
        declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
        unknown = set(record.query) - declared
        if unknown:
            raise Invalid(f"query parameters {sorted(unknown)} are not declared for "
                          f"{record.method} {template}")
        body_params = [p for p in operation.get("parameters", []) if p["in"] == "body"]
        if not body_params:
            return None
        try:
            body = json.loads(record.body or b"null")
        except ValueError as exc:
            raise Invalid(f"body is not JSON: {exc}") from None
        self._schema_validate(body, body_params[0]["schema"],
                              f"{record.method} {template} body")
        return body

    def _check_response(self, record: Recorded, status: int, payload: Any) -> None:
        if self.swagger is None or status != 200:
            return
        template, operation = self._operation(record)
        schema = operation["responses"]["200"].get("schema")
        if template.endswith("/healthz"):  # see _route: the server adds these fields
            extra = {"commit_sha", "tag_name", "pipeline_store"}
            payload = {k: v for k, v in payload.items() if k not in extra}
        if schema:
            self._schema_validate(payload, schema, "the fake's own response")

    def error_body(self, status: int, message: str) -> dict:
        code = {400: 3, 401: 16, 403: 7, 404: 5, 409: 6}.get(status, 13 if status >= 500 else 2)
        return {"error": message, "code": code, "message": message, "details": []}

    # -- routing ------------------------------------------------------------------------------

    def route(self, record: Recorded) -> tuple[int, Any]:
        if self.expected_token is not None and \
                record.headers.get("authorization") != f"Bearer {self.expected_token}":
            return 401, self.error_body(401, "Unauthorized: missing or wrong bearer token")
        body = self._check_request(record)
        status, payload = self._route(record, body)
        self._check_response(record, status, payload)
        return status, payload

    def _first(self, record: Recorded, name: str, default: str = "") -> str:
        return record.query.get(name, [default])[0]

    @staticmethod
    def _filter(items: list[dict], filter_text: str) -> list[dict]:
        if not filter_text:
            return items
        predicates = json.loads(filter_text).get("predicates", [])
        for predicate in predicates:
            if predicate.get("operation") not in ("EQUALS", 1):
                raise Invalid(f"fake supports only EQUALS filters, got {predicate}")
            key = predicate["key"]
            value = predicate.get("stringValue", predicate.get("string_value"))
            items = [i for i in items if i.get(key) == value]
        return items

    def _route(self, record: Recorded, body: dict | None) -> tuple[int, Any]:
        path, method = record.path.removeprefix("/apis/v2beta1"), record.method
        with self.lock:
            if path == "/healthz" and method == "GET":
                # The API server's own handler (backend/src/apiserver/main.go
                # healthzResponse) answers more than the swagger's GetHealthzResponse.
                return 200, {"commit_sha": "0" * 40, "tag_name": self.tag_name,
                             "multi_user": False, "pipeline_store": "database"}
            if path == "/pipelines" and method == "GET":
                items = self._filter(list(self.pipelines.values()),
                                     self._first(record, "filter"))
                return 200, {"pipelines": items, "total_size": len(items)}
            if path == "/pipelines" and method == "POST":
                if any(p["name"] == body["name"] for p in self.pipelines.values()):
                    raise Conflict(f"pipeline with name {body['name']} already exists")
                pipeline_id = self.new_id()
                self.pipelines[pipeline_id] = {
                    **body, "pipeline_id": pipeline_id, "created_at": _now()}
                return 200, self.pipelines[pipeline_id]
            if path == "/pipelines/upload" and method == "POST":
                return self._upload(record, pipeline_id=None)
            if path == "/pipelines/upload_version" and method == "POST":
                pipeline_id = self._first(record, "pipelineid")
                if pipeline_id not in self.pipelines:
                    raise LookupError(f"pipeline {pipeline_id} not found")
                return self._upload(record, pipeline_id=pipeline_id)
            match = re.fullmatch(r"/pipelines/([^/]+)/versions", path)
            if match and method == "GET":
                items = [v for v in self.versions.values() if v["pipeline_id"] == match[1]]
                items = self._filter(items, self._first(record, "filter"))
                return 200, {"pipeline_versions": [self._public_version(v) for v in items],
                             "total_size": len(items)}
            if path == "/experiments" and method == "GET":
                items = self._filter(list(self.experiments.values()),
                                     self._first(record, "filter"))
                return 200, {"experiments": items, "total_size": len(items)}
            if path == "/experiments" and method == "POST":
                if any(e["display_name"] == body["display_name"]
                       for e in self.experiments.values()):
                    raise Conflict(f"experiment {body['display_name']} already exists")
                experiment = {**body, "experiment_id": self.new_id(), "created_at": _now(),
                              "storage_state": "AVAILABLE"}
                self.experiments[experiment["experiment_id"]] = experiment
                return 200, experiment
            if path == "/runs" and method == "POST":
                return 200, self._create_run(body)
            if path == "/runs" and method == "GET":
                experiment = self._first(record, "experiment_id")
                items = [r for r in self.runs.values()
                         if not experiment or r["experiment_id"] == experiment]
                items = self._filter(items, self._first(record, "filter"))
                return 200, {"runs": items, "total_size": len(items)}
            match = re.fullmatch(r"/runs/([^/:]+)", path)
            if match and method == "GET":
                return 200, self._advance_run(match[1])
            if path == "/recurringruns" and method == "POST":
                return 200, self._create_recurring(body)
            if path == "/recurringruns" and method == "GET":
                items = [r for r in self.recurring_runs.values()
                         if r["experiment_id"] == self._first(record, "experiment_id",
                                                              r["experiment_id"])]
                items = self._filter(items, self._first(record, "filter"))
                return 200, {"recurringRuns": items, "total_size": len(items)}
            match = re.fullmatch(r"/recurringruns/([^/:]+)(?::(enable|disable))?", path)
            if match:
                recurring = self.recurring_runs.get(match[1])
                if recurring is None:
                    raise LookupError(f"recurring run {match[1]} not found")
                if method == "DELETE" and not match[2]:
                    del self.recurring_runs[match[1]]
                    return 200, {}
                if method == "GET" and not match[2]:
                    return 200, recurring
                if method == "POST" and match[2]:
                    recurring["mode"] = "ENABLE" if match[2] == "enable" else "DISABLE"
                    recurring["status"] = "ENABLED" if match[2] == "enable" else "DISABLED"
                    return 200, {}
        raise Invalid(f"the fake does not implement {method} {record.path}")

    def _upload(self, record: Recorded, pipeline_id: str | None) -> tuple[int, Any]:
        content_type = record.headers.get("content-type", "")
        if not content_type.startswith("multipart/form-data"):
            raise Invalid(f"upload must be multipart/form-data, got {content_type!r}")
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            f"Content-Type: {content_type}\r\n\r\n".encode() + record.body)
        files = {part.get_param("name", header="content-disposition"): part.get_content()
                 for part in message.iter_parts()}
        if "uploadfile" not in files:
            raise Invalid(f"upload has no 'uploadfile' part (parts: {sorted(files)})")
        content = files["uploadfile"]
        docs = list(yaml.safe_load_all(content))
        if not docs or not isinstance(docs[0], dict):
            raise Invalid("uploaded file is not a pipeline spec YAML")
        parse_pipeline_spec_strict(docs[0], docs[1] if len(docs) > 1 else None)
        name = self._first(record, "name") or docs[0]["pipelineInfo"]["name"]
        if pipeline_id is None:
            if any(p["name"] == name for p in self.pipelines.values()):
                raise Conflict(f"pipeline with name {name} already exists")
            pipeline_id = self.new_id()
            self.pipelines[pipeline_id] = {
                "pipeline_id": pipeline_id, "name": name, "display_name": name,
                "description": self._first(record, "description"), "created_at": _now()}
            self._add_version(pipeline_id, name, docs[0])
            return 200, self.pipelines[pipeline_id]
        if any(v["pipeline_id"] == pipeline_id and v["name"] == name
               for v in self.versions.values()):
            raise Conflict(f"pipeline version with name {name} already exists")
        return 200, self._public_version(self._add_version(pipeline_id, name, docs[0],
                                                           self._first(record, "description")))

    def _add_version(self, pipeline_id: str, name: str, spec: dict, description: str = ""):
        version_id = self.new_id()
        version = {"pipeline_id": pipeline_id, "pipeline_version_id": version_id, "name": name,
                   "display_name": name, "description": description, "created_at": _now()}
        self.versions[version_id] = version
        self.specs[version_id] = spec
        return version

    @staticmethod
    def _public_version(version: dict) -> dict:
        return dict(version)

    def _spec_for(self, body: dict) -> dict:
        if body.get("pipeline_spec"):
            spec = body["pipeline_spec"]
            parse_pipeline_spec_strict(spec.get("pipeline_spec", spec),
                                       spec.get("platform_spec"))
            return spec.get("pipeline_spec", spec)
        reference = body.get("pipeline_version_reference") or {}
        version = self.versions.get(reference.get("pipeline_version_id", ""))
        if version is None or version["pipeline_id"] != reference.get("pipeline_id"):
            raise Invalid(f"pipeline_version_reference {reference} names no uploaded version")
        return self.specs[version["pipeline_version_id"]]

    def _check_parameters(self, spec: dict, body: dict) -> None:
        declared = spec.get("root", {}).get("inputDefinitions", {}).get("parameters", {})
        given = (body.get("runtime_config") or {}).get("parameters") or {}
        unknown = set(given) - set(declared)
        if unknown:
            raise Invalid(f"runtime_config.parameters {sorted(unknown)} are not pipeline inputs")

    @staticmethod
    def _check_plugins(body: dict) -> None:
        """``plugins_input`` as KFP 2.17's MLflow plugin reads it (KEP-12862)."""
        plugins = body.get("plugins_input")
        if plugins is None:
            return
        unknown = set(plugins) - {"mlflow"}
        if unknown:
            raise Invalid(f"plugins_input: unknown plugin(s) {sorted(unknown)}")
        mlflow = plugins["mlflow"]
        if set(mlflow) - {"experiment_name", "disabled"}:
            raise Invalid(f"plugins_input.mlflow: unknown keys in {sorted(mlflow)}")
        name = mlflow.get("experiment_name")
        if not isinstance(name, str) or not name.strip():
            raise Invalid("plugins_input.mlflow.experiment_name must be a non-empty string")

    def _create_run(self, body: dict) -> dict:
        if body.get("experiment_id") not in self.experiments:
            raise Invalid(f"experiment_id {body.get('experiment_id')!r} does not exist")
        self._check_plugins(body)
        if not body.get("display_name"):
            raise Invalid("display_name is required")
        spec = self._spec_for(body)
        self._check_parameters(spec, body)
        run_id = f"run-{self.new_id()}"
        run = {**body, "run_id": run_id, "state": "PENDING", "created_at": _now(),
               "storage_state": "AVAILABLE"}
        self.runs[run_id] = run
        self.run_scripts[run_id] = self._run_script(_task_names(spec))
        return run

    def _advance_run(self, run_id: str) -> dict:
        if run_id not in self.runs:
            raise LookupError(f"run {run_id} not found")
        script = self.run_scripts[run_id]
        state, tasks = script.pop(0) if len(script) > 1 else script[0]
        run = self.runs[run_id]
        run["state"] = state
        run["run_details"] = {"task_details": [
            {"run_id": run_id, "task_id": f"{run_id}-{i}", "display_name": name,
             "state": task_state}
            for i, (name, task_state) in enumerate(sorted(tasks.items()))]}
        if state == "FAILED":
            failed = [n for n, s in tasks.items() if s == "FAILED"]
            run["error"] = {"code": 2, "message": f"task {failed[0]} failed: exit code 1"}
        return run

    def _create_recurring(self, body: dict) -> dict:
        if body.get("experiment_id") not in self.experiments:
            raise Invalid(f"experiment_id {body.get('experiment_id')!r} does not exist")
        self._check_plugins(body)
        for required in ("display_name", "trigger", "max_concurrency"):
            if not body.get(required):
                raise Invalid(f"{required} is required")
        cron = (body["trigger"].get("cron_schedule") or {}).get("cron", "")
        fields = cron.split()
        if len(fields) != 6:
            raise Invalid(f"trigger.cron_schedule.cron {cron!r} must have 6 fields "
                          "(seconds first)")
        concurrency = int(body["max_concurrency"])
        if not 1 <= concurrency <= 10:
            raise Invalid(f"max_concurrency {concurrency} outside [1, 10]")
        if body.get("mode") not in ("ENABLE", "DISABLE"):
            raise Invalid(f"mode {body.get('mode')!r} must be ENABLE or DISABLE")
        spec = self._spec_for(body)
        self._check_parameters(spec, body)
        recurring_id = f"rr-{self.new_id()}"
        recurring = {**body, "recurring_run_id": recurring_id, "created_at": _now(),
                     "updated_at": _now(), "max_concurrency": str(concurrency),
                     "status": "ENABLED" if body["mode"] == "ENABLE" else "DISABLED"}
        self.recurring_runs[recurring_id] = recurring
        return recurring


# ---------------------------------------------------------------------------------------------
# Vertex AI


_LABEL_CLAUSE = re.compile(r'^labels\.([a-z][a-z0-9_-]*)="([a-z0-9_-]*)"$')


class FakeVertexServer(_Server):
    """The parts of the Vertex AI v1 REST API that gkeflow uses (pipeline jobs, schedules,
    and the ML Metadata calls of Vertex AI Experiments: fake_vertex_metadata.py)."""

    def __init__(self):
        super().__init__()
        self.jobs: dict[str, Any] = {}  # name -> aiplatform_v1.PipelineJob
        self.job_scripts: dict[str, list] = {}
        self.schedules: dict[str, Any] = {}  # name -> aiplatform_v1.Schedule
        from tests.integration.fake_vertex_metadata import FakeMetadata

        self.metadata = FakeMetadata(self)  # Vertex ML Metadata: stores, contexts

    def error_body(self, status: int, message: str) -> dict:
        names = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
                 404: "NOT_FOUND", 409: "ALREADY_EXISTS", 429: "RESOURCE_EXHAUSTED",
                 500: "INTERNAL", 503: "UNAVAILABLE"}
        return {"error": {"code": status, "message": message,
                          "status": names.get(status, "UNKNOWN")}}

    @staticmethod
    def _parse(message_type, body: bytes, what: str):
        try:
            return message_type.from_json(body.decode() or "{}", ignore_unknown_fields=False)
        except Exception as exc:  # noqa: BLE001 - any parse failure is a contract violation
            raise Invalid(f"{what} does not parse as {message_type.__name__}: {exc}") from None

    @staticmethod
    def _json(message) -> dict:
        return json.loads(type(message).to_json(message))

    def _check_job(self, job, where: str) -> None:
        from google.protobuf import json_format

        spec = json_format.MessageToDict(job._pb.pipeline_spec)
        if not spec:
            raise Invalid(f"{where}: pipelineSpec is empty")
        parse_pipeline_spec_strict(spec)
        if not job.runtime_config.gcs_output_directory.startswith("gs://"):
            raise Invalid(f"{where}: runtimeConfig.gcsOutputDirectory must be gs://, got "
                          f"{job.runtime_config.gcs_output_directory!r}")
        for key, value in job.labels.items():
            if not re.fullmatch(r"[a-z][a-z0-9_-]{0,62}", key) or \
                    not re.fullmatch(r"[a-z0-9_-]{0,63}", value):
                raise Invalid(f"{where}: label {key}={value} breaks Vertex label rules")
        declared = spec.get("root", {}).get("inputDefinitions", {}).get("parameters", {})
        unknown = set(job.runtime_config.parameter_values) - set(declared)
        if unknown:
            raise Invalid(f"{where}: parameterValues {sorted(unknown)} are not pipeline inputs")

    def route(self, record: Recorded) -> tuple[int, Any]:
        from google.cloud import aiplatform_v1

        path, method = record.path, record.method
        with self.lock:
            match = re.fullmatch(r"/v1/(projects/[^/]+/locations/[^/]+)/pipelineJobs", path)
            if match and method == "POST":
                job = self._parse(aiplatform_v1.PipelineJob, record.body, "PipelineJob body")
                self._check_job(job, "PipelineJob")
                job_id = record.query.get("pipelineJobId", [f"job-{self.new_id()}"])[0]
                job.name = f"{match[1]}/pipelineJobs/{job_id}"
                if job.name in self.jobs:
                    raise Conflict(f"PipelineJob {job.name} already exists")
                job.state = aiplatform_v1.PipelineState.PIPELINE_STATE_PENDING
                job.create_time = dt.datetime.now(dt.UTC)
                self.jobs[job.name] = job
                from google.protobuf import json_format

                spec = json_format.MessageToDict(job._pb.pipeline_spec)
                self.job_scripts[job.name] = self._run_script(_task_names(spec))
                return 200, self._json(job)
            if match and method == "GET":  # list: newest first, by label, paged
                return 200, self._list_jobs(match[1], record)
            match = re.fullmatch(r"/v1/(projects/[^/]+/locations/[^/]+/pipelineJobs/[^/:]+)",
                                 path)
            if match and method == "GET":
                return 200, self._json(self._advance_job(match[1]))
            match = re.fullmatch(r"/v1/(projects/[^/]+/locations/[^/]+)/schedules", path)
            if match and method == "POST":
                schedule = self._parse(aiplatform_v1.Schedule, record.body, "Schedule body")
                self._check_schedule(schedule)
                schedule.name = f"{match[1]}/schedules/{self.new_id()}"
                schedule.state = aiplatform_v1.Schedule.State.ACTIVE
                schedule.create_time = dt.datetime.now(dt.UTC)
                self._set_next_run(schedule)
                self.schedules[schedule.name] = schedule
                return 200, self._json(schedule)
            if match and method == "GET":
                unknown = set(record.query) - {"filter", "pageSize", "pageToken", "orderBy",
                                               "$alt", "readMask"}
                if unknown:
                    raise Invalid(f"unknown list parameters {sorted(unknown)}")
                items = [s for s in self.schedules.values() if s.name.startswith(match[1])]
                return 200, {"schedules": [self._json(s) for s in items]}
            match = re.fullmatch(
                r"/v1/(projects/[^/]+/locations/[^/]+/schedules/[^/:]+)(?::(pause|resume))?",
                path)
            if match:
                name, verb = match[1], match[2]
                if name not in self.schedules:
                    raise LookupError(f"Schedule {name} not found")
                schedule = self.schedules[name]
                if verb == "pause" and method == "POST":
                    self._parse(aiplatform_v1.PauseScheduleRequest, record.body, "pause body")
                    if schedule.state != aiplatform_v1.Schedule.State.ACTIVE:
                        raise Invalid("only an ACTIVE schedule can be paused")
                    schedule.state = aiplatform_v1.Schedule.State.PAUSED
                    return 200, {}
                if verb == "resume" and method == "POST":
                    request = self._parse(aiplatform_v1.ResumeScheduleRequest, record.body,
                                          "resume body")
                    if schedule.state != aiplatform_v1.Schedule.State.PAUSED:
                        raise Invalid("only a PAUSED schedule can be resumed")
                    schedule.state = aiplatform_v1.Schedule.State.ACTIVE
                    schedule.catch_up = request.catch_up
                    return 200, {}
                if method == "GET" and not verb:
                    return 200, self._json(schedule)
                if method == "DELETE" and not verb:
                    del self.schedules[name]
                    return 200, {"name": f"{name}/operations/{self.new_id()}", "done": True,
                                 "response": {"@type": "type.googleapis.com/google.protobuf."
                                                       "Empty"}}
                if method == "PATCH" and not verb:
                    update = self._parse(aiplatform_v1.Schedule, record.body, "Schedule body")
                    mask = record.query.get("updateMask", [""])[0].split(",")
                    allowed = {"cron", "maxConcurrentRunCount", "displayName"}
                    if not mask or not set(mask) <= allowed:
                        raise Invalid(f"updateMask {mask} must be a subset of {allowed}")
                    if "cron" in mask:
                        schedule.cron = update.cron
                    if "maxConcurrentRunCount" in mask:
                        schedule.max_concurrent_run_count = update.max_concurrent_run_count
                    self._set_next_run(schedule)
                    return 200, self._json(schedule)
            if self.metadata.handles(path):
                return self.metadata.route(record)
        raise Invalid(f"the fake does not implement {method} {path}")

    def _list_jobs(self, parent: str, record: Recorded) -> dict:
        unknown = set(record.query) - {"filter", "pageSize", "pageToken", "orderBy",
                                       "readMask", "$alt"}
        if unknown:
            raise Invalid(f"unknown list parameters {sorted(unknown)}")
        wanted = {}
        text = record.query.get("filter", [""])[0]
        for clause in filter(None, (c.strip() for c in text.split(" AND "))):
            found = _LABEL_CLAUSE.match(clause)
            if not found:
                raise Invalid(f"filter clause {clause!r} is not labels.KEY=\"VALUE\"")
            wanted[found[1]] = found[2]
        order = record.query.get("orderBy", [""])[0]
        if order not in ("", "create_time desc"):
            raise Invalid(f"orderBy {order!r} is not a PipelineJob field ordering")
        jobs = [j for j in self.jobs.values() if j.name.startswith(parent + "/")
                and all(j.labels.get(k) == v for k, v in wanted.items())]
        jobs.sort(key=lambda j: (j.create_time, j.name), reverse=True)
        start = int(record.query.get("pageToken", ["0"])[0] or 0)
        size = int(record.query.get("pageSize", ["20"])[0] or 20)
        page = jobs[start:start + size]
        answer = {"pipelineJobs": [self._json(j) for j in page]}
        if start + size < len(jobs):
            answer["nextPageToken"] = str(start + size)
        return answer

    def _check_schedule(self, schedule) -> None:
        if not schedule.display_name:
            raise Invalid("Schedule.displayName is required")
        if not schedule.cron:
            raise Invalid("Schedule.cron is required")
        from gkeflow.pipelines.cron import (
            CronError,
            CronExpression,
            split_vertex_cron,
            zone,
        )

        cron, time_zone = split_vertex_cron(schedule.cron)
        try:
            CronExpression.parse(cron)
            zone(time_zone)
        except CronError as exc:
            raise Invalid(f"Schedule.cron {schedule.cron!r}: {exc}") from None
        if schedule.max_concurrent_run_count < 1:
            raise Invalid("Schedule.maxConcurrentRunCount must be >= 1")
        request = schedule.create_pipeline_job_request
        if not request.parent:
            raise Invalid("Schedule.createPipelineJobRequest.parent is required")
        self._check_job(request.pipeline_job, "Schedule.createPipelineJobRequest.pipelineJob")

    @staticmethod
    def _set_next_run(schedule) -> None:
        from gkeflow.pipelines.cron import next_runs, split_vertex_cron

        cron, time_zone = split_vertex_cron(schedule.cron)
        schedule.next_run_time = next_runs(cron, time_zone, 1)[0].astimezone(dt.UTC)

    def _advance_job(self, name: str):
        from google.cloud import aiplatform_v1

        if name not in self.jobs:
            raise LookupError(f"PipelineJob {name} not found")
        job = self.jobs[name]
        script = self.job_scripts[name]
        state, tasks = script.pop(0) if len(script) > 1 else script[0]
        job.state = getattr(aiplatform_v1.PipelineState, f"PIPELINE_STATE_{state}")
        task_state_type = aiplatform_v1.PipelineTaskDetail.State
        details = [aiplatform_v1.PipelineTaskDetail(task_id=1, task_name=job.display_name,
                                                    state=task_state_type[state])]
        for index, (task, task_state) in enumerate(sorted(tasks.items()), start=2):
            details.append(aiplatform_v1.PipelineTaskDetail(
                task_id=index, parent_task_id=1, task_name=task,
                state=task_state_type[task_state]))
        job.job_detail = aiplatform_v1.PipelineJobDetail(task_details=details)
        if state != "PENDING":  # Vertex AI makes the run's metadata context as it starts
            job.job_detail.pipeline_run_context = self.metadata.run_context(job)
        if state == "FAILED":
            failed = [n for n, s in tasks.items() if s == "FAILED"]
            job.error = {"code": 9, "message": f"The DAG failed because task {failed[0]} "
                                               "failed."}
        return job


@dataclass
class Servers:
    kfp: FakeKfpServer
    vertex: FakeVertexServer
    extra: dict = field(default_factory=dict)
