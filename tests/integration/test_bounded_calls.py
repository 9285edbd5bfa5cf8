"""Every remote call is bounded: a server that accepts connections and never answers costs
at most ``(retries + 1) x timeout`` plus backoff, for reads and writes, on both targets.

The silent server counts connections: urllib3's or the client library's own retries
would show up as more connections than gkeflow's attempts.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest

from gkeflow.pipelines.targets.kfp import KfpBackend
from gkeflow.pipelines.targets.transport import RemoteError, RetryPolicy, max_total_s
from gkeflow.pipelines.targets.vertex import VertexBackend

POLICY = RetryPolicy(attempts=3, base_delay_s=0.05, max_delay_s=0.1, timeout_s=0.5)
#: Process scheduling and first-call set-up on a loaded 2-core machine. The bound still
#: catches what it is for: a call that hangs, or retries beyond its budget (the silent
#: server also counts the connections).
SLACK_S = 5.0


class SilentServer:
    """Accepts every connection, reads what is sent, never answers."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.connections = 0
        self._open: list[socket.socket] = []
        self._stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self):
        self.sock.settimeout(0.1)
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            self._open.append(conn)

    def close(self):
        self._stop = True
        for conn in self._open:
            conn.close()
        self.sock.close()


@pytest.fixture
def silent():
    server = SilentServer()
    yield server
    server.close()


def _timed(func):
    import google.cloud.aiplatform  # noqa: F401 - imports are not part of the call's time
    import kfp  # noqa: F401

    started = time.monotonic()
    with pytest.raises(RemoteError) as error:
        func()
    return time.monotonic() - started, str(error.value)


def test_budget_formula():
    assert max_total_s(POLICY) == pytest.approx(3 * 0.5 + 0.05 + 0.1)
    # gkeflow's defaults: 4 retries of 30 s -> at most 5 x 30 s plus 0.5+1+2+4 s of backoff.
    assert max_total_s(RetryPolicy(attempts=5)) == pytest.approx(157.5)


def test_hung_kfp_read_is_bounded_and_not_retried_inside_urllib3(silent, make_config,
                                                                  token_env):
    config = make_config(silent.url, None)
    backend = KfpBackend(config.targets.gke, policy=POLICY)
    elapsed, message = _timed(lambda: backend.run_status("run-1"))
    assert elapsed <= max_total_s(POLICY) + SLACK_S
    assert silent.connections == POLICY.attempts  # not 4x: urllib3's own retries are off
    assert "timed out" in message and f"targets.gke.host ({silent.url})" in message


def test_hung_kfp_create_is_bounded_and_sent_once(silent, make_config, token_env, tmp_path):
    config = make_config(silent.url, None)
    backend = KfpBackend(config.targets.gke, policy=POLICY)
    backend._experiment_id = "e1"  # skip the experiment look-up (it would hang the same way)
    elapsed, message = _timed(lambda: backend.create_run(None, "p1", "v1", "run-x", {}))
    assert elapsed <= max_total_s(POLICY) + SLACK_S
    # The create timed out: looked up once (also hung), never sent a second time.
    assert silent.connections == 2
    assert "create run 'run-x' failed (timed out)" in message


def test_hung_vertex_read_and_create_are_bounded(silent, make_config, tmp_path):
    from gkeflow.pipelines.targets.submit import prepare_pipeline

    config = make_config(None, silent.url)
    backend = VertexBackend(config.targets.vertex, policy=POLICY)
    elapsed, message = _timed(lambda: backend.run_status(
        "projects/my-project/locations/us-central1/pipelineJobs/j1"))
    assert elapsed <= max_total_s(POLICY) + SLACK_S
    assert silent.connections == POLICY.attempts and "timed out" in message

    prepared = prepare_pipeline("training", "vertex", tmp_path, version="g1")
    before = silent.connections
    elapsed, message = _timed(lambda: backend.submit(prepared, "job-1", {}, {}))
    assert elapsed <= max_total_s(POLICY) + SLACK_S
    assert silent.connections - before == 2  # the create, then the look-up of its job id
    assert "create pipeline job 'job-1' failed (timed out)" in message
