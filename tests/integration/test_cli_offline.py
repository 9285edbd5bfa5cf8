"""`--dry-run` needs no token, credentials or network; missing credentials and unreachable
hosts fail with one line naming the fix (the traceback only with --debug)."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from tests.gkeflow_cli import gkeflow
from tests.integration.conftest import config_dict

ADC_FIX = "gcloud auth application-default login"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _run(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """The console script, in a fresh process, with no Google credentials and no KFP token
    anywhere (a process that has found credentials before may hold them)."""
    return gkeflow(*args, cwd=cwd, env={
        "GOOGLE_APPLICATION_CREDENTIALS": None, "GKEFLOW_TEST_KFP_TOKEN": None,
        "GKEFLOW_DEBUG": None, "HOME": str(cwd), "CLOUDSDK_CONFIG": str(cwd / "gcloud"),
        "NO_GCE_CHECK": "true", **(env or {})}, timeout=300, subprocess_only=True)


@pytest.fixture
def offline_config(tmp_path, write_config):
    """GKE on a closed port, Vertex on its real (unreachable from tests) endpoint."""
    schedules = [{"name": "nightly", "target": "gke", "cron": "0 2 * * *"},
                 {"name": "nightly-v", "target": "vertex", "cron": "0 2 * * *",
                  "time_zone": "Europe/Berlin"}]
    data = config_dict(f"http://127.0.0.1:{_closed_port()}", "unused", schedules=schedules)
    del data["targets"]["vertex"]["api_endpoint"]
    data["targets"]["gke"].update({"retries": 0, "timeout_s": 2})
    return write_config(data)


def test_dry_runs_need_no_token_credentials_or_network(offline_config, tmp_path):
    gke = _run("submit", "--target", "gke", "--dry-run", "--config", str(offline_config),
               cwd=tmp_path)
    assert gke.returncode == 0, gke.stderr
    for text in ("POST http://127.0.0.1:", "/apis/v2beta1/runs", '"<experiment_id>"',
                 "pipelineid=<pipeline_id>", "Authorization: Bearer ***"):
        assert text in gke.stdout
    vertex = _run("submit", "--target", "vertex", "--dry-run", "--config", str(offline_config),
                  cwd=tmp_path)
    assert vertex.returncode == 0, vertex.stderr
    assert "POST https://us-central1-aiplatform.googleapis.com/v1/projects/my-project/" \
           "locations/us-central1/pipelineJobs?pipelineJobId=training-default-" in vertex.stdout
    schedules = _run("schedule", "apply", "--dry-run", "--config", str(offline_config),
                     cwd=tmp_path)
    assert schedules.returncode == 0, schedules.stderr
    assert "would create" in schedules.stdout
    assert "/apis/v2beta1/recurringruns" in schedules.stdout
    assert "/locations/us-central1/schedules" in schedules.stdout
    assert "Traceback" not in gke.stderr + vertex.stderr + schedules.stderr


def test_credential_and_connection_errors_are_one_line_with_the_fix(offline_config, tmp_path):
    config = ("--config", str(offline_config))
    for command in (["submit", "--target", "vertex", *config],
                    ["schedule", "list", "--target", "vertex", *config],
                    ["models", "list", "--backend", "vertex", "--project", "my-project",
                     "--location", "us-central1"]):
        result = _run(*command, cwd=tmp_path)
        assert result.returncode == 1
        assert ADC_FIX in result.stderr and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr

    no_token = _run("submit", "--target", "gke", *config, cwd=tmp_path)
    assert no_token.returncode == 1 and "Traceback" not in no_token.stderr
    assert "GKEFLOW_TEST_KFP_TOKEN is empty or not set" in no_token.stderr

    unreachable = _run("schedule", "list", "--target", "gke", *config, cwd=tmp_path,
                       env={"GKEFLOW_TEST_KFP_TOKEN": "t0ken-abc"})
    assert unreachable.returncode == 1 and "Traceback" not in unreachable.stderr
    assert "check that targets.gke.host (http://127.0.0.1:" in unreachable.stderr

    debug = _run("--debug", "schedule", "list", "--target", "vertex", *config, cwd=tmp_path)
    assert debug.returncode == 1 and "Traceback" in debug.stderr
