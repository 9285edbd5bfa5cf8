"""Direct tracking of a local run: the steps' environment during the run, restored after,
and a tracking server that cannot be reached costing one line."""

from __future__ import annotations

import os

import pytest

from gkeflow.components.tracking.client import ENV_PARENT_RUN_ID, ENV_RUN_ID, ENV_TRACKING_URI
from gkeflow.pipelines.settings.tracking_config import TrackingSettings
from gkeflow.pipelines.targets.local_tracking import credentials_problem, direct_tracking
from tests.integration.mlflow_server import free_port

pytest.importorskip("mlflow", reason="mlflow is not installed (pip install -e '.[dev]')")


def _settings(uri: str, **credentials) -> TrackingSettings:
    return TrackingSettings.model_validate({"mlflow": {
        "experiment": "e", "tracking_uri": uri, "credentials": credentials}})


def test_untracked_runs_change_nothing(monkeypatch):
    monkeypatch.delenv(ENV_TRACKING_URI, raising=False)
    with direct_tracking(TrackingSettings(), "training") as tracked:
        assert ENV_TRACKING_URI not in os.environ
    assert tracked.parent_run_id == "" and tracked.pipeline_run_id == ""


def test_an_unreachable_server_is_one_line_and_the_environment_is_restored(monkeypatch):
    monkeypatch.setenv(ENV_RUN_ID, "from-a-plugin")
    monkeypatch.delenv(ENV_TRACKING_URI, raising=False)
    monkeypatch.setenv("MY_TOKEN", "secret-value")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.delenv("MLFLOW_TRACKING_TOKEN", raising=False)
    uri = f"http://127.0.0.1:{free_port()}"
    lines: list[str] = []
    with direct_tracking(_settings(uri, token_env="MY_TOKEN"), "training",
                         log=lines.append) as tracked:
        assert os.environ[ENV_TRACKING_URI] == uri
        assert os.environ["MLFLOW_TRACKING_TOKEN"] == "secret-value"
        assert ENV_RUN_ID not in os.environ  # a direct run is not the plugin's
        assert ENV_PARENT_RUN_ID not in os.environ  # no parent: steps track nothing
        tracked.succeeded = True
    assert tracked.parent_run_id == "" and tracked.pipeline_run_id.startswith("local-training-")
    assert len(lines) == 1 and lines[0].startswith("mlflow: ")
    assert "secret-value" not in lines[0]
    assert os.environ[ENV_RUN_ID] == "from-a-plugin"
    assert "MLFLOW_TRACKING_TOKEN" not in os.environ and ENV_TRACKING_URI not in os.environ


def test_a_named_variable_that_is_unset_is_a_problem_before_the_run(monkeypatch):
    monkeypatch.delenv("NOT_SET_TOKEN", raising=False)
    problem = credentials_problem(_settings("http://m:5000", token_env="NOT_SET_TOKEN"))
    assert "$NOT_SET_TOKEN" in problem and "export NOT_SET_TOKEN" in problem
    assert credentials_problem(TrackingSettings()) == ""


@pytest.mark.parametrize("uri, registry", [
    ("http://127.0.0.1:5000", "mlflow://127.0.0.1:5000"),
    ("https://mlflow.example.com/team-a", "mlflow+https://mlflow.example.com/team-a"),
])
def test_the_default_registry_is_the_tracking_servers(uri, registry):
    from gkeflow.components.register.mlflow_registry import parse_mlflow_uri
    from gkeflow.pipelines.targets.local_tracking import default_registry

    assert default_registry(_settings(uri)) == registry
    assert parse_mlflow_uri(registry) == uri  # the same server, as the registry reads it
    assert default_registry(TrackingSettings()) == ""
    assert default_registry(TrackingSettings.model_validate(
        {"mlflow": {"experiment": "e"}})) == ""  # GKE only: no server for local runs


def test_a_registry_server_is_checked_before_the_run(mlflow_server):
    from gkeflow.pipelines.targets.local_tracking import registry_problem

    assert registry_problem(f"mlflow://{mlflow_server.url.split('://')[1]}", "dev") == ""
    port = free_port()
    problem = registry_problem(f"mlflow://127.0.0.1:{port}", "dev")
    assert problem.startswith(f"the model registry is tracking.dev.mlflow's server "
                              f"http://127.0.0.1:{port}, which cannot be reached")
