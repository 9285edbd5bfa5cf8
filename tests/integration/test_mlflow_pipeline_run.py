"""Direct mode of compiled pipelines against a real MLflow server: the parent run two steps
race to create ends up one, the plugin's run wins over the compiled settings, a server
that is down costs one line, and a Vertex AI step reads its token from Secret Manager."""

from __future__ import annotations

import base64
import threading

import pytest

from gkeflow.components.tracking import pipeline_run
from gkeflow.components.tracking.client import ENV_RUN_ID, ENV_TRACKING_URI
from gkeflow.components.tracking.pipeline_run import (
    ARG_RUN_ID,
    ARG_RUN_NAME,
    ENV_EXPERIMENT,
    ENV_SECRET_MANAGER,
    ENV_TOKEN_SECRET,
    ENV_URI,
    PIPELINE_RUN_TAG,
    SUPERSEDED_TAG,
    find_or_create_parent,
    load_credentials,
    open_step_run,
)
from tests.integration.mlflow_server import free_port

pytest.importorskip("mlflow", reason="mlflow is not installed (pip install -e '.[dev]')")


class SearchTogether:
    """An MLflow client whose first search waits for the other racer's first search, so
    both find no parent and both create one (the race, every time)."""

    def __init__(self, client, barrier: threading.Barrier) -> None:
        self._client, self._barrier, self._searched = client, barrier, False

    def search_runs(self, *args, **kwargs):
        found = self._client.search_runs(*args, **kwargs)
        if not self._searched:
            self._searched = True
            self._barrier.wait(timeout=30)
        return found

    def __getattr__(self, name):
        return getattr(self._client, name)


def test_two_steps_starting_at_once_leave_one_parent_run(mlflow_server):
    from mlflow import MlflowClient
    from mlflow.entities import ViewType

    barrier = threading.Barrier(2)
    chosen: list[str] = []

    def step() -> None:
        client = SearchTogether(MlflowClient(tracking_uri=mlflow_server.url), barrier)
        chosen.append(find_or_create_parent(client, "race", "run-race-1",
                                            {"gkeflow.pipeline": "p"}, settle_s=0.5))

    threads = [threading.Thread(target=step) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(chosen) == 2 and chosen[0] == chosen[1]

    client = MlflowClient(tracking_uri=mlflow_server.url)
    experiment_id = client.get_experiment_by_name("race").experiment_id
    query = f"tags.`{PIPELINE_RUN_TAG}` = 'run-race-1'"
    live = client.search_runs([experiment_id], filter_string=query)
    assert [run.info.run_id for run in live] == chosen[:1]
    every = client.search_runs([experiment_id], filter_string=query,
                               run_view_type=ViewType.ALL)
    assert len(every) == 2  # both created one: the race happened
    (loser,) = [run for run in every if run.info.run_id != chosen[0]]
    assert loser.info.lifecycle_stage == "deleted"
    assert loser.data.tags[SUPERSEDED_TAG] == chosen[0]


def _compiled_env(url: str, experiment: str) -> dict[str, str]:
    return {ENV_URI: url, ENV_EXPERIMENT: experiment, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}


def test_the_plugins_run_wins_over_the_compiled_settings(mlflow_server):
    experiment_id, plugin_run = mlflow_server.create_run("kfp-plugin-wins")
    env = {**_compiled_env(mlflow_server.url, "compiled-not-used"),
           ENV_TRACKING_URI: mlflow_server.url, ENV_RUN_ID: plugin_run}
    tracker = open_step_run("evaluate-model", environ=env,
                            argv=["x", ARG_RUN_ID, "run-9", ARG_RUN_NAME, "job-9"])
    assert tracker.enabled and tracker.run_id == plugin_run and not tracker.owns_run
    from mlflow import MlflowClient

    assert MlflowClient(tracking_uri=mlflow_server.url).get_experiment_by_name(
        "compiled-not-used") is None


def test_a_server_that_is_down_turns_tracking_off_in_one_line():
    lines: list[str] = []
    env = _compiled_env(f"http://127.0.0.1:{free_port()}", "down")
    tracker = open_step_run("prepare-data", environ=env, log=lines.append,
                            argv=["x", ARG_RUN_ID, "run-1"])
    assert not tracker.enabled
    assert len(lines) == 1 and "the run goes on" in lines[0]
    tracker.finish()  # nothing more is sent, nothing raises


def test_an_unresolved_placeholder_is_no_run_id():
    assert pipeline_run.argument(ARG_RUN_ID, ["x", ARG_RUN_ID, "{{$.pipeline_job_uuid}}"]) == ""
    assert pipeline_run.argument(ARG_RUN_ID, ["x", ARG_RUN_ID, "abc", "--other"]) == "abc"
    assert pipeline_run.argument(ARG_RUN_ID, ["x", ARG_RUN_ID]) == ""
    assert pipeline_run.run_url("https://c/runs/{run_name}?p=1", "id", "job") == (
        "https://c/runs/job?p=1")


def test_a_vertex_step_reads_its_token_from_secret_manager(httpserver):
    secret = "projects/my-project/secrets/mlflow-token"
    httpserver.expect_request(f"/v1/{secret}/versions/latest:access").respond_with_json(
        {"payload": {"data": base64.b64encode(b"t0ken-value\n").decode()}})
    env = {ENV_TOKEN_SECRET: secret,
           ENV_SECRET_MANAGER: httpserver.url_for("").rstrip("/")}
    load_credentials(env)
    assert env["MLFLOW_TRACKING_TOKEN"] == "t0ken-value"

    lines: list[str] = []
    missing = {ENV_TOKEN_SECRET: "projects/my-project/secrets/other",
               ENV_SECRET_MANAGER: env[ENV_SECRET_MANAGER]}
    load_credentials(missing, log=lines.append)
    assert "MLFLOW_TRACKING_TOKEN" not in missing
    assert len(lines) == 1 and "projects/my-project/secrets/other" in lines[0]
