"""What the fake Kubeflow Pipelines and Vertex AI servers share (fakes.py says how strict they
are): a threaded HTTP server on 127.0.0.1 that records requests, injects faults and answers
JSON; the strict pipeline-spec parse; and the errors the fakes raise."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import re
import threading
import time
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

#: ``serve_forever``'s arguments for the fakes: ``shutdown()`` waits for the loop's next poll
#: (0.5 s by default, at every fake's end).
SERVE_FOREVER = {"poll_interval": 0.05}

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


def now() -> str:
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


def task_names(spec: dict, dag: dict | None = None) -> list[str]:
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
            expanded += [t for t in task_names(spec, component["dag"]) if t not in expanded]
    return expanded


class Server:
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
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       kwargs=SERVE_FOREVER, daemon=True)

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

    def _run_script(self, task_names: list[str], failing: str | None = None
                    ) -> list[tuple[str, dict[str, str]]]:
        """States a run goes through, one per status request: (run state, task states); the
        task ``failing`` fails (else the middle one when ``outcome`` is FAILED)."""
        script = [("PENDING", {})]
        states = {name: "PENDING" for name in task_names}
        if failing is None and self.outcome == "FAILED" and task_names:
            failing = task_names[len(task_names) // 2]
        for name in task_names:
            states[name] = "RUNNING"
            script.append(("RUNNING", dict(states)))
            if name == failing:
                states[name] = "FAILED"
                script.append(("FAILED", dict(states)))
                return script
            states[name] = "SUCCEEDED"
        script.append(("SUCCEEDED", dict(states)))
        return script


class Conflict(Exception):
    pass
