"""The exit task writes a compiled run's end into its trackers: the parent MLflow run ends
FINISHED, FAILED or KILLED from each backend's own final state (a real MLflow server), a
GKE run's Vertex AI experiment run is marked, and a run a Vertex AI schedule fired joins
its experiment (the fake Vertex AI server, aiplatform_v1 bodies)."""

from __future__ import annotations

import json

import pytest
from kfp import dsl

from gkeflow.components.tracking.client import ENV_RUN_ID, ENV_TRACKING_URI
from gkeflow.components.tracking.component import end_tracking
from gkeflow.components.tracking.pipeline_run import (
    ARG_RUN_ID,
    ENV_EXPERIMENT,
    ENV_URI,
    open_step_run,
)
from gkeflow.components.tracking.run_end import end_run
from tests.integration.conftest import FAST
from tests.integration.mlflow_server import free_port

pytest.importorskip("mlflow", reason="mlflow is not installed (pip install -e '.[dev]')")

PARENT = "projects/my-project/locations/us-central1"
EXPERIMENT = f"{PARENT}/metadataStores/default/contexts/penguins-prod"


def _env(url: str, experiment: str) -> dict[str, str]:
    return {ENV_URI: url, ENV_EXPERIMENT: experiment, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}


def _steps(server, experiment: str, run_id: str) -> tuple[str, str, str]:
    """Two steps of pipeline run ``run_id`` in direct mode: prepare-data ends, train-model
    is killed mid-way (its run left RUNNING). (parent, prepare's run, train's run)."""
    env = _env(server.url, experiment)
    argv = ["x", ARG_RUN_ID, run_id]
    prepare = open_step_run("prepare-data", environ=env, argv=argv, settle_s=0)
    prepare.finish()
    train = open_step_run("train-model", environ=env, argv=argv, settle_s=0)
    assert prepare.parent_run_id == train.parent_run_id
    return train.parent_run_id, prepare.run_id, train.run_id


def _end(monkeypatch, env: dict[str, str], target: str, state: str, run_id: str) -> str:
    """The compiled exit task, given the backend's own final state."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return end_tracking.python_func(
        status=dsl.PipelineTaskFinalStatus(
            state=state, pipeline_job_resource_name=f"{PARENT}/pipelineJobs/{run_id}",
            pipeline_task_name="exit-handler-1", error_code=None, error_message=None),
        target=target, run_id=run_id, run_name=f"name-{run_id}")


@pytest.mark.parametrize("target, state, parent_status, train_status", [
    ("gke", "COMPLETE", "FINISHED", "RUNNING"),
    ("gke", "FAILED", "FAILED", "FAILED"),
    ("gke", "CANCELED", "KILLED", "KILLED"),
    ("vertex", "SUCCEEDED", "FINISHED", "RUNNING"),
    ("vertex", "FAILED", "FAILED", "FAILED"),
    ("vertex", "CANCELLED", "KILLED", "KILLED"),
    ("gke", "RUNNING", "RUNNING", "RUNNING"),  # not an end: left as the steps left it
])
def test_the_parent_run_ends_as_the_backend_says_the_run_ended(
        mlflow_server, monkeypatch, target, state, parent_status, train_status):
    experiment = f"run-end-{target}-{state.lower()}"
    run_id = f"{target}-{state.lower()}-1"
    parent, prepare, train = _steps(mlflow_server, experiment, run_id)
    assert mlflow_server.run(parent)["info"]["status"] == "RUNNING"  # reopened by train-model
    _end(monkeypatch, _env(mlflow_server.url, experiment), target, state, run_id)
    assert mlflow_server.run(parent)["info"]["status"] == parent_status
    assert mlflow_server.run(train)["info"]["status"] == train_status
    assert mlflow_server.run(prepare)["info"]["status"] == "FINISHED"


def test_under_the_plugin_and_without_steps_nothing_is_made_or_ended(mlflow_server,
                                                                     monkeypatch, capsys):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=mlflow_server.url)
    experiment_id, plugin_run = mlflow_server.create_run("run-end-plugin")
    env = {**_env(mlflow_server.url, "run-end-plugin"), ENV_TRACKING_URI: mlflow_server.url,
           ENV_RUN_ID: plugin_run}
    _end(monkeypatch, env, "gke", "FAILED", "plugin-1")
    assert mlflow_server.run(plugin_run)["info"]["status"] == "RUNNING"  # the plugin's own
    assert len(client.search_runs([experiment_id])) == 1

    monkeypatch.delenv(ENV_RUN_ID)
    lines: list[str] = []
    end_run("FAILED", "vertex", "never-logged", environ=_env(mlflow_server.url,
                                                              "run-end-plugin"),
            log=lines.append)
    assert lines == ["mlflow: no step of run never-logged logged to experiment "
                     "'run-end-plugin'; nothing to end"]
    assert len(client.search_runs([experiment_id])) == 1


def test_a_server_that_is_down_is_one_line_and_the_task_succeeds():
    lines: list[str] = []
    end_run("FAILED", "gke", "run-1", environ=_env(f"http://127.0.0.1:{free_port()}", "e"),
            log=lines.append)
    assert len(lines) == 1 and lines[0].startswith("mlflow: tracking off for the rest of "
                                                    "the run's end")


def test_untracked_runs_send_nothing(capsys):
    end_run("FAILED", "gke", "run-1", environ={}, log=print)
    assert capsys.readouterr().out == ""


def _run_state(vertex_server, name: str) -> str:
    context = vertex_server.metadata.contexts[name]
    return json.loads(type(context).to_json(context))["metadata"]["_state"]


def test_a_failed_gke_run_marks_its_vertex_experiment_run_failed(vertex_server):
    from gkeflow.components.tracking.pipeline_run import ENV_RUN_ID_FIELD
    from gkeflow.components.tracking.vertex_run import (
        ENV_ENDPOINT,
        ENV_LOCATION,
        ENV_PROJECT,
        log_step,
    )
    from gkeflow.components.tracking.vertex_run import (
        ENV_EXPERIMENT as VERTEX_EXPERIMENT,
    )

    env = {VERTEX_EXPERIMENT: "penguins-prod", ENV_PROJECT: "my-project",
           ENV_LOCATION: "us-central1", ENV_ENDPOINT: vertex_server.url}
    assert log_step("prepare-data", {"data_uri": "gs://b/d.csv"}, {"rows_read": 344},
                    environ={**env, ENV_RUN_ID_FIELD: "kfp-run-7"}, argv=["x"])
    (name,) = vertex_server.metadata.experiment_runs(EXPERIMENT)
    assert _run_state(vertex_server, name) == "COMPLETE"  # as the step left it
    end_run("FAILED", "gke", "kfp-run-7", environ=env)
    assert vertex_server.metadata.experiment_runs(EXPERIMENT) == [name]
    assert _run_state(vertex_server, name) == "FAILED"


def test_a_run_fired_by_a_vertex_schedule_joins_the_experiment(make_config, tmp_path,
                                                              monkeypatch):
    from google.protobuf import json_format

    from gkeflow.pipelines.targets.schedule import apply
    from gkeflow.pipelines.targets.vertex import VertexBackend
    from tests.integration.fake_runs import FakeVertexRuns

    nightly = {"name": "nightly", "target": "vertex", "cron": "0 2 * * *",
               "environment": "prod"}
    tracking = {"prod": {"vertex_experiments": {"experiment": "penguins-prod"}}}
    with FakeVertexRuns() as server:
        config = make_config(None, server.url, schedules=[nightly], tracking=tracking)
        result = apply(config, workdir=tmp_path, version="g1", backends={
            "vertex": VertexBackend(config.targets.vertex, policy=FAST)})
        assert not [a for a in result.actions if a.kind == "warning"]
        # the experiment is made (or checked) with the schedule, before any run
        assert server.metadata.contexts[EXPERIMENT].schema_title == "system.Experiment"
        (schedule_name,) = server.schedules
        spec = json_format.MessageToDict(
            server.schedules[schedule_name].create_pipeline_job_request.pipeline_job._pb
            .pipeline_spec)
        executor = spec["deploymentSpec"]["executors"]["exec-end-tracking"]["container"]
        env = {e["name"]: e["value"] for e in executor["env"]}
        assert env["GKEFLOW_VERTEX_EXPERIMENT"] == "penguins-prod"

        server.fail_task = "train-model"
        job_name = server.fire(schedule_name)
        server.finish(job_name)
        assert server.metadata.experiment_runs(EXPERIMENT) == []  # nothing joined it yet
        env["GKEFLOW_VERTEX_API_ENDPOINT"] = server.url
        for _ in range(2):  # a retried exit task: the run is in the experiment once
            assert _end_vertex(monkeypatch, env, job_name) == "FAILED"
        run_context = f"{PARENT}/metadataStores/default/contexts/{job_name.rsplit('/', 1)[-1]}"
        assert server.metadata.experiment_runs(EXPERIMENT) == [run_context]
        assert not server.violations, "\n".join(server.violations)


def _end_vertex(monkeypatch, env: dict[str, str], job_name: str) -> str:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    job_id = job_name.rsplit("/", 1)[-1]
    return end_tracking.python_func(
        status=dsl.PipelineTaskFinalStatus(
            state="FAILED", pipeline_job_resource_name=job_name,
            pipeline_task_name="exit-handler-1", error_code=9,
            error_message="The DAG failed because some tasks failed."),
        target="vertex", run_id=f"uuid-{job_id}", run_name=job_id)


def test_a_refused_association_is_one_line(vertex_server, capsys):
    from gkeflow.components.tracking.vertex_pipeline_run import add_to_experiment

    env = {"GKEFLOW_VERTEX_EXPERIMENT": "penguins-prod", "GKEFLOW_VERTEX_PROJECT": "my-project",
           "GKEFLOW_VERTEX_LOCATION": "us-central1",
           "GKEFLOW_VERTEX_API_ENDPOINT": vertex_server.url}
    lines: list[str] = []
    assert not add_to_experiment(f"{PARENT}/pipelineJobs/missing-1", env, lines.append)
    assert len(lines) == 1 and lines[0].startswith(
        "vertex experiments: run not added to experiment 'penguins-prod' (")
    assert lines[0].endswith("the run's outcome is unchanged")
    assert not add_to_experiment("{{$.pipeline_job_resource_name}}", env, lines.append)
    assert "does not know its pipeline job" in lines[1]
