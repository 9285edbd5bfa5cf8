"""Steps served from cache in a compiled pipeline (MLflow direct mode, both targets): the
exit task reads from the backend which steps came from cache (Vertex AI: task state
SKIPPED; Kubeflow Pipelines: the step's ML Metadata execution CACHED, since its run API's
SKIPPED also covers a condition that was not met) and gives each its nested run, tagged
cached and pointing at the run that made the cached model; a step a condition left out
gets none. The run is submitted to the fakes (strict bodies), the steps that ran log from
their compiled environment, the exit task runs with its compiled inputs, against a real
MLflow server."""

from __future__ import annotations

import pytest
from kfp import dsl

from gkeflow.components.tracking.cached import CACHED_FROM_TAG, CACHED_TAG
from gkeflow.components.tracking.client import MODEL_URI_TAG, PARENT_TAG
from gkeflow.components.tracking.component import end_tracking
from gkeflow.components.tracking.pipeline_run import (
    ARG_RUN_ID,
    PIPELINE_RUN_TAG,
    open_step_run,
)
from gkeflow.pipelines.targets.kfp import KfpBackend
from gkeflow.pipelines.targets.submit import submit
from gkeflow.pipelines.targets.vertex import VertexBackend
from tests.integration.conftest import FAST, TOKEN
from tests.integration.fake_runs import FakeKfpRuns, FakeVertexRuns

pytest.importorskip("mlflow", reason="mlflow is not installed (pip install -e '.[dev]')")

CACHED = frozenset({"fingerprint-data", "prepare-data", "train-model"})
RAN = ("evaluate-model", "register-model")


def _spec(server, target: str, submission) -> dict:
    if target == "gke":
        (spec,) = server.specs.values()
        return spec
    from google.protobuf import json_format

    return json_format.MessageToDict(server.jobs[submission.run_id]._pb.pipeline_spec)


def _executor_env(spec: dict, task: str) -> dict[str, str]:
    container = spec["deploymentSpec"]["executors"][f"exec-{task}"]["container"]
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def _log_step(spec: dict, step: str, run_id: str, tags: dict | None = None) -> str:
    """Step ``step`` of pipeline run ``run_id`` logging as its compiled code would."""
    tracker = open_step_run(step, environ=_executor_env(spec, step),
                            argv=["x", ARG_RUN_ID, run_id], settle_s=0)
    assert tracker.enabled, step
    tracker.log_metrics({"ran": 1.0})
    if tags:
        tracker.set_tags(tags)
    tracker.finish()
    return tracker.run_id


@pytest.mark.parametrize("target", ["gke", "vertex"])
def test_cached_steps_of_a_compiled_run_get_their_runs_from_the_exit_task(
        target, mlflow_server, make_config, token_env, tmp_path, monkeypatch, capsys):
    experiment = f"cached-compiled-{target}"
    tracking = {"default": {"mlflow": {"experiment": experiment,
                                       "tracking_uri": mlflow_server.url,
                                       "allow_local_uri": True}}}  # the test server
    server = FakeKfpRuns(expected_token=TOKEN) if target == "gke" else FakeVertexRuns()
    with server:
        server.cached_tasks, server.untriggered_tasks = CACHED, frozenset({"deploy-model"})
        config = make_config(*((server.url, None) if target == "gke" else (None, server.url)),
                             tracking=tracking)
        backend = (KfpBackend(config.targets.gke, policy=FAST) if target == "gke" else
                   VertexBackend(config.targets.vertex, policy=FAST))
        submission, _ = submit(config, "training", target, environment="default",
                               overrides={}, workdir=tmp_path, backend=backend, version="g1")
        spec = _spec(server, target, submission)
        exit_task = spec["root"]["dag"]["tasks"]["end-tracking"]
        inputs = {name: value["runtimeValue"]["constant"]
                  for name, value in exit_task["inputs"]["parameters"].items()
                  if "runtimeValue" in value}
        assert inputs["run_api"]  # compiled in: the in-cluster API, or Vertex AI's endpoint
        assert bool(inputs["metadata_api"]) == (target == "gke")

        # an earlier run made the model the cached train-model hands on
        earlier = _log_step(spec, "train-model", "earlier-run",
                            {MODEL_URI_TAG: server.CACHED_MODEL_URI})
        _log_step(spec, "train-model", "another-run", {MODEL_URI_TAG: "gs://b/other/model"})
        run = server.finish(submission.run_id)
        run_id = submission.run_id if target == "vertex" else run["run_id"]
        for step in RAN:
            _log_step(spec, step, run_id)

        for key, value in _executor_env(spec, "end-tracking").items():
            monkeypatch.setenv(key, value)
        if target == "gke":
            token_file = tmp_path / "sa-token"
            token_file.write_text(TOKEN)
            monkeypatch.setenv("KF_PIPELINES_SA_TOKEN_PATH", str(token_file))
        status = dsl.PipelineTaskFinalStatus(
            state="COMPLETE" if target == "gke" else "SUCCEEDED",
            pipeline_job_resource_name=submission.run_id, pipeline_task_name="exit-handler-1",
            error_code=None, error_message=None)
        for _ in range(2):  # a retried exit task records each cached step once
            assert end_tracking.python_func(
                status=status, target=target, run_id=run_id, run_name=run_id,
                run_api=server.url, metadata_api=server.url if target == "gke" else ""
            ) == "SUCCEEDED"
        assert not server.violations, "\n".join(server.violations)

    assert "served from cache, recorded as cached runs: fingerprint-data, prepare-data, " \
           "train-model" in capsys.readouterr().out
    found = mlflow_server.api("experiments/get-by-name", experiment_name=experiment)
    experiment_id = found["experiment"]["experiment_id"]
    (parent,) = mlflow_server.search_runs(experiment_id, f"tags.`{PIPELINE_RUN_TAG}` = '{run_id}'")
    assert mlflow_server.run(parent["info"]["run_id"])["info"]["status"] == "FINISHED"
    children = {r["info"]["run_name"]: mlflow_server.run(r["info"]["run_id"]) for r in
                mlflow_server.search_runs(experiment_id,
                                          f"tags.`{PARENT_TAG}` = '{parent['info']['run_id']}'")}
    assert sorted(children) == sorted([*CACHED, *RAN])  # not deploy-model: not triggered
    for step in RAN:
        assert CACHED_TAG not in children[step]["tags"]
    for step in CACHED:
        assert children[step]["tags"][CACHED_TAG] == "true"
        assert children[step]["info"]["status"] == "FINISHED"
    # the cached model's run, found by the model's URI, not the newest train-model run
    assert children["train-model"]["tags"][CACHED_FROM_TAG] == earlier
    assert children["train-model"]["metrics"]["ran"] == 1.0
