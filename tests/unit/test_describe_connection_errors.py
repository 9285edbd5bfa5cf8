"""Connection errors in one line: the host, the port and the reason, whichever client
library raised them (urllib3 inside requests inside google-api-core)."""

from __future__ import annotations

import socket

import pytest
import requests

from gkeflow.components.cloud.retry import describe_error


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_refused_connection_names_host_port_and_reason():
    port = _closed_port()
    with pytest.raises(requests.ConnectionError) as caught:
        requests.get(f"http://127.0.0.1:{port}/v1/x", timeout=5)
    assert describe_error(caught.value) == (
        f"ConnectionError: cannot connect to 127.0.0.1:{port}: Connection refused")


def test_a_server_that_never_answers_is_a_read_timeout():
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        with pytest.raises(requests.ReadTimeout) as caught:
            requests.get(f"http://127.0.0.1:{port}/v1/x", timeout=0.3)
    assert describe_error(caught.value) == (
        f"ReadTimeout: 127.0.0.1:{port} did not answer in time (read timeout)")


def test_other_errors_keep_their_first_line():
    assert describe_error(ValueError("bad value\nmore")) == "ValueError: bad value"
