"""A real MLflow tracking server for tests: SQLite backend store, artifacts served by the
server itself (``mlflow-artifacts:/``, as a cluster's server does) from a local folder, on
loopback; read back through MLflow's REST API."""

from __future__ import annotations

import importlib.metadata
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

#: First start creates the SQLite tables; on a busy machine that takes a minute.
START_TIMEOUT_S = 300


def mlflow_installed() -> bool:
    """Whether the full mlflow (the server), not only mlflow-skinny (the client), is here."""
    try:
        importlib.metadata.distribution("mlflow")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def start_or_skip(root: Path) -> MlflowServer:
    """A started server in ``root``; the test is skipped when mlflow is not installed."""
    import pytest

    if not mlflow_installed():
        pytest.skip("mlflow (the server) is not installed: pip install -e '.[dev]'")
    return MlflowServer(root).start()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MlflowServer:
    """``mlflow server`` in a subprocess; :meth:`stop` ends it (the tests of a server going
    away call it mid-step)."""

    def __init__(self, root: Path, port: int | None = None) -> None:
        self.root, self.port = root, port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None
        self.log_path = root / "server.log"

    def start(self) -> MlflowServer:
        (self.root / "artifacts").mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "mlflow", "server",
                   "--backend-store-uri", f"sqlite:///{self.root / 'mlflow.db'}",
                   "--serve-artifacts", "--artifacts-destination", str(self.root / "artifacts"),
                   "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"]
        # no background job runner: tracking needs none, and it slows the start
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        # the server is the dev environment's full MLflow: nothing of it hidden
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in env.get("PYTHONPATH", "").split(os.pathsep)
            if p and Path(p).name != "step_site")
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                            env=env, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mlflow server exited: {self.log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                    if response.status == 200:
                        return self
            except (OSError, urllib.error.URLError):
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"mlflow server not healthy after {START_TIMEOUT_S} s")

    def stop(self) -> None:
        """End the server and its worker processes (one process group)."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)
        self.process = None

    # --- the REST API -----------------------------------------------------------------------

    def api(self, endpoint: str, body: dict | None = None, **query: str) -> dict:
        """GET (or POST ``body``) ``/api/2.0/mlflow/<endpoint>``; the JSON answer."""
        url = f"{self.url}/api/2.0/mlflow/{endpoint}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read() or b"{}")

    def create_run(self, experiment: str, **tags: str) -> tuple[str, str]:
        """A run as Kubeflow Pipelines' MLflow plugin makes one: (experiment id, run id)."""
        try:
            experiment_id = self.api("experiments/get-by-name",
                                     experiment_name=experiment)["experiment"]["experiment_id"]
        except urllib.error.HTTPError:
            experiment_id = self.api("experiments/create", {"name": experiment})["experiment_id"]
        run = self.api("runs/create", {"experiment_id": experiment_id,
                                       "start_time": int(time.time() * 1000),
                                       "tags": [{"key": k, "value": v} for k, v in tags.items()]})
        return experiment_id, run["run"]["info"]["run_id"]

    def run(self, run_id: str) -> dict:
        """The run: info, and metrics, params and tags as {key: value}."""
        run = self.api("runs/get", run_id=run_id)["run"]
        data = run.get("data", {})
        return {"info": run["info"],
                "metrics": {m["key"]: m["value"] for m in data.get("metrics", [])},
                "params": {p["key"]: p["value"] for p in data.get("params", [])},
                "tags": {t["key"]: t["value"] for t in data.get("tags", [])}}

    def metric_history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        answer = self.api("metrics/get-history", run_id=run_id, metric_key=key)
        return sorted((m.get("step", 0), m["value"]) for m in answer.get("metrics", []))

    def metric_points(self, run_id: str, key: str) -> list[tuple[int, int, float]]:
        """(step, timestamp in ms, value) of every point of ``key``, by step."""
        answer = self.api("metrics/get-history", run_id=run_id, metric_key=key)
        return sorted((m.get("step", 0), int(m["timestamp"]), m["value"])
                      for m in answer.get("metrics", []))

    def artifacts(self, run_id: str, path: str = "") -> list[str]:
        """Every artifact file of the run under ``path``, recursively."""
        query = {"run_id": run_id, **({"path": path} if path else {})}
        files = []
        for entry in self.api("artifacts/list", **query).get("files", []):
            if entry.get("is_dir"):
                files += self.artifacts(run_id, entry["path"])
            else:
                files.append(entry["path"])
        return sorted(files)

    def artifact_bytes(self, run_id: str, path: str) -> bytes:
        url = f"{self.url}/get-artifact?" + urllib.parse.urlencode({"run_id": run_id,
                                                                    "path": path})
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.read()

    def search_runs(self, experiment_id: str, filter_string: str = "") -> list[dict]:
        answer = self.api("runs/search", {"experiment_ids": [experiment_id],
                                          "filter": filter_string, "max_results": 100})
        return answer.get("runs", [])
