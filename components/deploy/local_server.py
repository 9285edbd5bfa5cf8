"""The local stand-in for an endpoint: deployments recorded next to the embedded registry,
served on loopback with TensorFlow Serving's REST API.

:class:`LocalEndpoints` keeps one JSON file per endpoint (``<registry dir>/deployments/
<name>.json``: the versions, their model directories, the split and the split before the
last change) and applies the same canary, promote and rollback rules as the cloud targets
(:mod:`~gkeflow.components.deploy.traffic`).

:func:`serve` answers, on ``127.0.0.1``:

- ``POST /v1/models/<name>:predict`` with ``{"instances": [...]}``: the version with the
  largest share answers (a canary is reachable by version);
- ``POST /v1/models/<name>/versions/<version>:predict``: that version answers;
- ``GET /v1/models/<name>``: the model status, as TensorFlow Serving reports it.

A ``:predict`` answer is TensorFlow Serving's ``{"predictions": [[p, ...], ...]}`` with
the class names from the model's metadata beside it (see :class:`Answerer`).

A request TensorFlow Serving would refuse gets its 400 with ``{"error": "..."}``.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from gkeflow.components.deploy import traffic as tr

_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


class LocalDeployError(RuntimeError):
    """A local deployment that cannot be carried out; the message says why."""


class VersionNotServed(KeyError):
    """A version the local endpoint does not serve (HTTP 404); its message unquoted."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else super().__str__()


@dataclass
class LocalVersion:
    key: str
    version: int
    model_dir: str


@dataclass
class LocalEndpoint:
    name: str
    versions: list[LocalVersion] = field(default_factory=list)
    split: dict[str, int] = field(default_factory=dict)
    previous: dict[str, int] = field(default_factory=dict)

    def version(self, key: str) -> LocalVersion:
        return next(v for v in self.versions if v.key == key)

    def stable(self) -> LocalVersion:
        key = tr.stable_of(self.split, [v.key for v in self.versions])
        if key is None:
            raise LocalDeployError(f"endpoint {self.name} serves nothing")
        return self.version(key)

    def describe(self) -> str:
        return tr.describe(self.split)


class LocalEndpoints:
    """Endpoints recorded under ``root`` (``<registry dir>/deployments``)."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def _path(self, name: str) -> Path:
        if not _NAME.match(name or ""):
            raise LocalDeployError(f"endpoint name {name!r} must be lower-case letters, digits "
                                   "and '-', starting with a letter")
        return self.root / f"{name}.json"

    def get(self, name: str) -> LocalEndpoint | None:
        path = self._path(name)
        if not path.exists():
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or "versions" not in data:
            return None
        return LocalEndpoint(data["name"], [LocalVersion(**v) for v in data["versions"]],
                             data["split"], data.get("previous", {}))

    def list(self) -> list[LocalEndpoint]:
        if not self.root.is_dir():
            return []
        return [e for p in sorted(self.root.glob("*.json")) if (e := self.get(p.stem))]

    def _save(self, endpoint: LocalEndpoint) -> LocalEndpoint:
        from gkeflow.components._atomic import write_text_atomic

        self.root.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self._path(endpoint.name), json.dumps(asdict(endpoint), indent=2))
        return endpoint

    def deploy(self, name: str, version: int, model_dir: Path, percent: int = 10
               ) -> LocalEndpoint:
        current = self.get(name) or LocalEndpoint(name)
        key = f"v{int(version)}"
        versions = [v for v in current.versions if v.key != key]
        versions.append(LocalVersion(key, int(version), str(Path(model_dir).resolve())))
        split = tr.canary(current.split, key, percent, [v.key for v in versions])
        if split == current.split and key in {v.key for v in current.versions}:
            return current
        return self._save(LocalEndpoint(name, versions, split, current.split))

    def promote(self, name: str, keep: int = 1) -> LocalEndpoint:
        current = self._require(name)
        newest = current.versions[-1].key
        promotion = tr.promote(current.split, newest, [v.key for v in current.versions], keep)
        return self._save(LocalEndpoint(
            name, [v for v in current.versions if v.key in promotion.split], promotion.split,
            current.split))

    def rollback(self, name: str) -> LocalEndpoint:
        current = self._require(name)
        try:
            back = tr.rollback(current.split, current.previous)
        except tr.TrafficError as exc:
            raise LocalDeployError(f"endpoint {name}: {exc}") from exc
        return self._save(LocalEndpoint(
            name, [v for v in current.versions if v.key in back.split], back.split,
            current.split))

    def _require(self, name: str) -> LocalEndpoint:
        endpoint = self.get(name)
        if endpoint is None:
            raise LocalDeployError(f"no local endpoint {name} under {self.root}; run "
                                   "`gkeflow run --deploy local` first")
        return endpoint


def class_names(model_dir: Path) -> list[str]:
    """The classes a model's probabilities score, in order (``label_vocabulary`` of its
    ``gkeflow_model.json``); empty when the model records none."""
    from gkeflow.components.deploy.servable import METADATA_FILE

    path = Path(model_dir) / METADATA_FILE
    try:
        metadata = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [str(label) for label in metadata.get("label_vocabulary") or []]


class Answerer:
    """Loads each version once and answers REST bodies for an endpoint.

    The answer is TensorFlow Serving's (``predictions``: one list of class probabilities per
    instance, unchanged), with the names next to it: ``class_names`` (the class each
    probability scores, in order), ``classes`` (the most likely class per instance) and
    ``model_version`` (the version that answered)."""

    def __init__(self, endpoint: LocalEndpoint):
        from gkeflow.components.deploy.servable import ServedModel

        self.endpoint = endpoint
        served = [v for v in endpoint.versions
                  if endpoint.split.get(v.key, 0) or v is endpoint.stable()]
        self.models = {v.version: ServedModel(Path(v.model_dir)) for v in served}
        self.names = {v.version: class_names(Path(v.model_dir)) for v in served}
        self.stable = endpoint.stable().version

    def predict(self, body: dict, version: int | None = None) -> dict:
        version = self.stable if version is None else version
        model = self.models.get(version)
        if model is None:
            raise VersionNotServed(f"version {version} of {self.endpoint.name} is not served")
        answer = model.predict(body)
        names = self.names[version]
        rows = answer["predictions"]
        if names and all(isinstance(p, list) and len(p) == len(names) for p in rows):
            answer["class_names"] = names
            answer["classes"] = [names[max(range(len(p)), key=p.__getitem__)] for p in rows]
        answer["model_version"] = version
        return answer


def make_server(endpoint: LocalEndpoint, port: int = 0,
                log: Callable[[str], None] | None = None) -> ThreadingHTTPServer:
    """A server answering ``endpoint``'s requests on 127.0.0.1:``port`` (0: any free port)."""
    from gkeflow.components.deploy.servable import RequestError

    answerer = Answerer(endpoint)
    name = endpoint.name
    predict = re.compile(rf"^/v1/models/{re.escape(name)}(?:/versions/(\d+))?:predict$")

    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802 - http.server's name
            if self.path.rstrip("/") == f"/v1/models/{name}":
                self._send(200, {"model_version_status": [
                    {"version": str(v), "state": "AVAILABLE",
                     "status": {"error_code": "OK", "error_message": ""}}
                    for v in sorted(answerer.models)]})
            else:
                self._send(404, {"error": f"no model at {self.path}; try /v1/models/{name}"})

        def do_POST(self):  # noqa: N802 - http.server's name
            match = predict.match(self.path)
            if not match:
                self._send(404, {"error": f"no such path {self.path}; POST "
                                          f"/v1/models/{name}:predict"})
                return
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"null")
                version = int(match.group(1)) if match.group(1) else None
                self._send(200, answerer.predict(body, version))
            except (ValueError, RequestError) as exc:
                self._send(400, {"error": str(exc)})
            except KeyError as exc:
                self._send(404, {"error": str(exc.args[0])})

        def log_message(self, format, *args):  # noqa: A002 - http.server's signature
            if log is not None:
                log(format % args)

    return ThreadingHTTPServer(("127.0.0.1", port), Handler)


def serve_in_background(endpoint: LocalEndpoint, port: int = 0) -> ThreadingHTTPServer:
    """Start :func:`make_server` in a daemon thread; ``server.shutdown()`` stops it."""
    server = make_server(endpoint, port)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
