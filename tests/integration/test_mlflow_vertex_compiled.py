"""MLflow for a compiled Vertex AI pipeline (no Kubeflow Pipelines plugin there), against a
real MLflow server: each task of training.vertex.yaml run as Vertex AI would start it (its
compiled environment and arguments, the run's id resolved in place of its placeholder)
opens the run's one parent run and a nested run of its own; the exit task closes the parent
with the pipeline's state. Nothing but the compiled YAML tells the tasks where to log."""

from __future__ import annotations

import pytest
import yaml

from gkeflow.components import yamlio
from gkeflow.components.tracking.client import PARENT_TAG
from gkeflow.components.tracking.pipeline_run import (
    ARG_RUN_ID,
    ARG_RUN_NAME,
    ENV_URI,
    PIPELINE_RUN_TAG,
    open_step_run,
)
from gkeflow.components.tracking.run_end import end_run
from tests.integration.conftest import gkeflow

pytest.importorskip("mlflow", reason="mlflow is not installed (pip install -e '.[dev]')")

JOB = "training-20261206-0001"


def _resolved(args: list[str]) -> list[str]:
    """The task's arguments with the run's id and name where Vertex AI puts them."""
    out = list(args)
    for flag, value in ((ARG_RUN_ID, JOB), (ARG_RUN_NAME, JOB)):
        if flag in out and out.index(flag) + 1 < len(out):
            out[out.index(flag) + 1] = value
    return out


def test_a_compiled_vertex_pipeline_opens_fills_and_closes_one_parent_run(
        tmp_path, mlflow_server):
    config = {"tracking": {"default": {"mlflow": {
        "experiment": "vertex-compiled", "tracking_uri": mlflow_server.url,
        "allow_local_uri": True}}}}  # the test server is on loopback
    (tmp_path / "gkeflow.yaml").write_text(yaml.safe_dump(config))
    compiled = gkeflow("compile", "--target", "vertex", "--output", "out", cwd=tmp_path)
    assert compiled.returncode == 0, compiled.stderr
    spec = yamlio.load((tmp_path / "out" / "training.vertex.yaml").read_text())
    executors = spec["deploymentSpec"]["executors"]
    tasks, exit_env = {}, None
    for name, executor in executors.items():
        container = executor.get("container", {})
        env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
        if ENV_URI not in env:
            continue
        if name == "exec-end-tracking":
            exit_env = env
            continue
        tasks[name.removeprefix("exec-")] = (env, _resolved(container.get("args", [])))
    assert {"fingerprint-data", "prepare-data", "train-model", "evaluate-model",
            "register-model"} <= set(tasks) and exit_env is not None
    assert all(env[ENV_URI] == mlflow_server.url for env, _ in tasks.values())

    for step, (env, argv) in tasks.items():  # as each task's code would
        tracker = open_step_run(step, environ=env, argv=argv, settle_s=0.2)
        assert tracker.enabled, step
        tracker.log_metrics({"ran": 1.0})
        tracker.finish()
    end_run("SUCCEEDED", "vertex", JOB, JOB, environ=exit_env)

    experiment = mlflow_server.api("experiments/get-by-name",
                                   experiment_name="vertex-compiled")["experiment"]
    parents = mlflow_server.search_runs(experiment["experiment_id"],
                                        f"tags.`{PIPELINE_RUN_TAG}` = '{JOB}'")
    assert len(parents) == 1
    parent = mlflow_server.run(parents[0]["info"]["run_id"])
    assert parent["info"]["status"] == "FINISHED"
    assert parent["tags"]["gkeflow.target"] == "vertex"
    children = {r["info"]["run_name"]: mlflow_server.run(r["info"]["run_id"]) for r in
                mlflow_server.search_runs(experiment["experiment_id"],
                                          f"tags.`{PARENT_TAG}` = '{parent['info']['run_id']}'")}
    assert sorted(children) == sorted(tasks)
    assert all(run["metrics"]["ran"] == 1.0 and run["info"]["status"] == "FINISHED"
               for run in children.values())
