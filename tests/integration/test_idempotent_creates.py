"""A create that the server carries out and then answers with a 5xx (or drops) is retried
without making a second run, version, pipeline, experiment, job or schedule."""

from __future__ import annotations

from gkeflow.pipelines.targets.kfp import KfpBackend
from gkeflow.pipelines.targets.schedule import apply
from gkeflow.pipelines.targets.submit import prepare_pipeline, submit
from gkeflow.pipelines.targets.vertex import VertexBackend
from tests.integration.conftest import FAST


def _kfp(config):
    return KfpBackend(config.targets.gke, policy=FAST)


def _vertex(config):
    return VertexBackend(config.targets.vertex, policy=FAST)


def test_kfp_submit_executed_then_5xx_leaves_one_of_everything(kfp_server, token_env,
                                                                make_config, tmp_path):
    config = make_config(kfp_server.url, None)
    for path in (r"/pipelines$", r"/pipelines/upload_version$", r"/experiments$", r"/runs$"):
        kfp_server.inject("POST", path, status=503, after=True)
    submission, _ = submit(config, "training", "gke", environment="default", overrides={},
                           workdir=tmp_path, backend=_kfp(config), version="g1")
    assert len(kfp_server.pipelines) == 1
    assert len(kfp_server.versions) == 1
    assert len(kfp_server.experiments) == 1
    assert list(kfp_server.runs) == [submission.run_id]
    # Each create was sent once; the look-up found what the server had done.
    for path in (r"/pipelines$", r"/pipelines/upload_version$", r"/experiments$", r"/runs$"):
        assert len(kfp_server.calls("POST", path)) == 1, path


def test_kfp_run_create_not_executed_is_retried(kfp_server, token_env, make_config, tmp_path):
    config = make_config(kfp_server.url, None)
    kfp_server.inject("POST", r"/runs$", status=503, count=1)  # refused before acting
    submission, _ = submit(config, "training", "gke", environment="default", overrides={},
                           workdir=tmp_path, backend=_kfp(config), version="g1")
    assert len(kfp_server.calls("POST", r"/runs$")) == 2
    assert list(kfp_server.runs) == [submission.run_id]


def test_kfp_recurring_run_executed_then_dropped_is_created_once(kfp_server, token_env,
                                                                  make_config, tmp_path):
    schedule = {"name": "nightly", "target": "gke", "cron": "0 2 * * *", "time_zone": "UTC"}
    config = make_config(kfp_server.url, None, schedules=[schedule])
    kfp_server.inject("POST", r"/recurringruns$", status=0, after=True)  # connection dropped
    apply(config, workdir=tmp_path / "1", backends={"gke": _kfp(config)}, version="g1")
    assert len(kfp_server.recurring_runs) == 1
    assert len(kfp_server.calls("POST", r"/recurringruns$")) == 1
    again = apply(config, workdir=tmp_path / "2", backends={"gke": _kfp(config)}, version="g1")
    assert [a.kind for a in again.actions] == ["unchanged"]


def test_vertex_job_executed_then_5xx_and_409_for_our_own_id_are_success(
        vertex_server, make_config, tmp_path):
    config = make_config(None, vertex_server.url)
    vertex_server.inject("POST", r"/pipelineJobs$", status=500, after=True)
    submission, _ = submit(config, "training", "vertex", environment="default", overrides={},
                           workdir=tmp_path / "a", backend=_vertex(config))
    assert list(vertex_server.jobs) == [submission.run_id]
    assert len(vertex_server.calls("POST", r"/pipelineJobs$")) == 1

    # The same job id again (a retry from a previous attempt): 409 -> the existing job.
    prepared = prepare_pipeline("training", "vertex", tmp_path / "b", version="g1")
    job_id = submission.run_id.rsplit("/", 1)[-1]
    name = _vertex(config).submit(prepared, job_id, {}, {})
    assert name == submission.run_id and len(vertex_server.jobs) == 1


def test_vertex_schedule_executed_then_5xx_is_created_once(vertex_server, make_config,
                                                           tmp_path):
    schedule = {"name": "nightly", "target": "vertex", "cron": "0 2 * * *",
                "time_zone": "Europe/Berlin"}
    config = make_config(None, vertex_server.url, schedules=[schedule])
    vertex_server.inject("POST", r"/schedules$", status=503, after=True)
    apply(config, workdir=tmp_path, backends={"vertex": _vertex(config)}, version="g1")
    assert len(vertex_server.schedules) == 1
    assert len(vertex_server.calls("POST", r"/schedules$")) == 1
    (created,) = vertex_server.schedules.values()
    labels = created.create_pipeline_job_request.pipeline_job.labels
    assert labels["gkeflow-schedule"] == "nightly" and len(labels["gkeflow-request"]) == 16
