"""Before a cloud run, its MLflow tracking server is asked once whether it answers: a real
server answers, a closed port and an unknown host are one warning line each, and a
cluster-internal name is said to be unchecked (nothing is refused)."""

from __future__ import annotations

import socket

from gkeflow.pipelines.targets.tracking_probe import cluster_internal, probe


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_real_tracking_server_answers(mlflow_server):
    assert probe(mlflow_server.url) == ""


def test_a_server_that_is_down_is_one_warning_line():
    uri = f"http://127.0.0.1:{_closed_port()}"
    found = probe(uri, timeout_s=2)
    assert found.startswith(f"tracking server {uri} did not answer from here (")
    assert "\n" not in found and "tracking.mlflow.tracking_uri" in found


def test_a_host_that_does_not_resolve_is_one_warning_line():
    found = probe("http://mlflow.invalid:5000", timeout_s=2)
    assert "did not answer from here" in found and "\n" not in found


def test_cluster_internal_names_are_not_asked_from_outside():
    assert cluster_internal("mlflow") and cluster_internal("mlflow.mlflow.svc.cluster.local")
    assert not cluster_internal("mlflow.example.com")
    assert probe("http://mlflow.mlflow.svc.cluster.local:5000") == (
        "tracking server http://mlflow.mlflow.svc.cluster.local:5000 is a cluster-internal "
        "name: not checked from here; the steps log there")


def test_a_proxy_of_this_machine_does_not_answer_for_the_server(monkeypatch, mlflow_server):
    """The steps connect straight to the server: an HTTP proxy set here (which would answer
    502 for a host it cannot reach) is not asked."""
    monkeypatch.setenv("http_proxy", mlflow_server.url)  # a server that answers everything
    monkeypatch.setenv("HTTP_PROXY", mlflow_server.url)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    assert "did not answer" in probe(f"http://127.0.0.1:{_closed_port()}", timeout_s=2)
