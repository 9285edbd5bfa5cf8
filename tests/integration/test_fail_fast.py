"""Failures that retrying cannot fix are reported at once: a host name that does not resolve,
no Google credentials (the metadata server is asked once, not three times); Vertex AI
connection errors say what to check."""

from __future__ import annotations

import socket

import pytest
from werkzeug import Response

from gkeflow.pipelines.targets.credentials import CredentialsError, google_credentials
from gkeflow.pipelines.targets.kfp import KfpBackend
from gkeflow.pipelines.targets.transport import RemoteError, RetryPolicy
from gkeflow.pipelines.targets.vertex import VertexBackend
from tests.integration.conftest import config_dict, gkeflow

UNRESOLVABLE = "no-such-host.invalid"
MANY = RetryPolicy(attempts=5, base_delay_s=0.01, max_delay_s=0.02, timeout_s=5)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def lookups(monkeypatch):
    """Every name look-up of UNRESOLVABLE, counted; the real resolver answers."""
    seen = []
    real = socket.getaddrinfo

    def counting(host, *args, **kwargs):
        if host == UNRESOLVABLE:
            seen.append(host)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", counting)
    return seen


def test_a_gke_host_that_does_not_resolve_fails_on_the_first_attempt(make_config, lookups,
                                                                      token_env):
    config = make_config(f"http://{UNRESOLVABLE}:8888", None)
    backend = KfpBackend(config.targets.gke, policy=MANY)
    with pytest.raises(RemoteError) as caught:
        backend.list_schedules()
    message = str(caught.value)
    assert f"cannot resolve host name '{UNRESOLVABLE}'" in message
    assert "after 1 attempt;" in message
    assert f"check that targets.gke.host (http://{UNRESOLVABLE}:8888)" in message
    assert len(lookups) == 1


def test_vertex_connection_errors_name_the_endpoint_to_check(make_config):
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    config = make_config(None, endpoint)
    backend = VertexBackend(config.targets.vertex,
                            policy=RetryPolicy(attempts=2, base_delay_s=0.01, timeout_s=5))
    with pytest.raises(RemoteError) as caught:
        backend.list_schedules()
    assert str(caught.value).endswith(
        f"check targets.vertex.api_endpoint ({endpoint}) and the network")
    assert "after 2 attempts" in str(caught.value)


def test_vertex_refusals_carry_no_connection_hint(vertex_server, make_config):
    vertex_server.inject("GET", r"/schedules", status=403)
    config = make_config(None, vertex_server.url)
    backend = VertexBackend(config.targets.vertex,
                            policy=RetryPolicy(attempts=1, base_delay_s=0.01, timeout_s=5))
    with pytest.raises(RemoteError) as caught:
        backend.list_schedules()
    assert caught.value.status == 403 and "api_endpoint" not in str(caught.value)


@pytest.fixture
def no_credentials(tmp_path, monkeypatch, httpserver):
    """No key file, no gcloud credentials; the metadata server is the local fake."""
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.delenv("NO_GCE_CHECK", raising=False)
    monkeypatch.delenv("GCE_METADATA_TIMEOUT", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    address = f"127.0.0.1:{httpserver.port}"
    monkeypatch.setenv("GCE_METADATA_IP", address)
    monkeypatch.setenv("GCE_METADATA_HOST", address)
    # google-auth reads GCE_METADATA_HOST once, when it is first imported; in a process
    # where an earlier test imported it, it would still ask the real metadata host.
    from google.auth.compute_engine import _metadata

    monkeypatch.setattr(_metadata, "_GCE_METADATA_HOST", address)
    return httpserver


def test_without_credentials_the_metadata_server_is_asked_once(no_credentials):
    no_credentials.expect_request("/").respond_with_data("not a metadata server", status=404)
    with pytest.raises(CredentialsError, match="gcloud auth application-default login"):
        google_credentials("targets.vertex")
    assert len(no_credentials.log) == 1
    (request, _), = no_credentials.log
    assert request.headers["Metadata-Flavor"] == "Google"


def test_no_metadata_server_at_all_is_no_credentials(no_credentials, monkeypatch):
    monkeypatch.setenv("GCE_METADATA_IP", f"127.0.0.1:{_closed_port()}")
    with pytest.raises(CredentialsError, match="no Google credentials found for targets.vertex"):
        google_credentials("targets.vertex")


def test_a_metadata_server_that_answers_gives_its_credentials(no_credentials):
    from google.auth import compute_engine

    flavour = {"Metadata-Flavor": "Google"}
    no_credentials.expect_request("/").respond_with_response(Response("", headers=flavour))
    no_credentials.expect_request("/computeMetadata/v1/project/project-id").respond_with_response(
        Response("my-project", headers=flavour))
    assert isinstance(google_credentials("targets.vertex"), compute_engine.Credentials)


def test_schedule_list_on_vertex_without_credentials_is_one_line_after_one_probe(
        no_credentials, write_config, tmp_path):
    no_credentials.expect_request("/").respond_with_data("", status=404)
    data = config_dict(None, "unused",
                       schedules=[{"name": "weekly", "target": "vertex", "cron": "0 6 * * 1"}])
    del data["targets"]["vertex"]["api_endpoint"]
    path = write_config(data)
    result = gkeflow("schedule", "list", "--target", "vertex", "--config", str(path),
                     cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "Error: no Google credentials found for targets.vertex: run `gcloud auth "
        "application-default login` (or set GOOGLE_APPLICATION_CREDENTIALS to a "
        "service-account key file)"]
    assert len(no_credentials.log) == 1
