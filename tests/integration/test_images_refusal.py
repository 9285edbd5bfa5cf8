"""`submit` and `schedule apply` against the strict fake Vertex AI server: images never built
for the configured registry are refused before anything is created; a pipeline needs only
the images it runs."""

from __future__ import annotations

import json

import pytest

from gkeflow.pipelines.settings.config import GkeflowConfig
from gkeflow.pipelines.settings.image_lock import LockEntry, record
from gkeflow.pipelines.targets.schedule import apply
from gkeflow.pipelines.targets.submit import SubmitError, submit
from gkeflow.pipelines.targets.vertex import VertexBackend
from tests.integration.conftest import FAST, config_dict

USER = "europe-west4-docker.pkg.dev/my-project/ml"


def _config(vertex_url: str, lock, schedules=()) -> GkeflowConfig:
    data = config_dict(None, vertex_url, schedules=list(schedules))
    data["images"] = {"registry": USER, "lock": str(lock)}
    return GkeflowConfig.model_validate(data)


def _only_slim_built(lock) -> None:
    record(lock, f"{USER}/gkeflow:0.1.0",
           LockEntry("sha256:" + "c" * 64, "2026-12-01T00:00:00Z", "podman", True))


def _backend(config):
    return VertexBackend(config.targets.vertex, policy=FAST)


def test_submit_refuses_before_creating_anything(vertex_server, tmp_path):
    lock = tmp_path / "gkeflow.lock"
    _only_slim_built(lock)
    config = _config(vertex_server.url, lock)
    with pytest.raises(SubmitError, match=f"{USER}/gkeflow-gpu:0.1.0 was never built"):
        submit(config, "training", "vertex", environment="default", overrides={},
               workdir=tmp_path / "w", backend=_backend(config))
    assert not vertex_server.calls("POST")
    # fan-out preparation runs only the slim image, which is built and pushed
    submission, _ = submit(config, "fanout-prepare", "vertex", environment="default",
                           overrides={"data_uri": "gs://b/in/*.csv"}, workdir=tmp_path / "w2",
                           backend=_backend(config))
    (job,) = vertex_server.jobs.values()
    assert job.name == submission.run_id
    spec = json.dumps(type(job).to_dict(job)["pipeline_spec"])
    assert f"{USER}/gkeflow@sha256:" in spec
    assert "gkeflow-gpu" not in spec and "gkeflow-cpu" not in spec


def test_schedule_apply_refuses_before_changing_any_schedule(vertex_server, tmp_path):
    lock = tmp_path / "gkeflow.lock"
    _only_slim_built(lock)
    schedules = [{"name": "a-prepare", "pipeline": "fanout-prepare", "target": "vertex",
                  "cron": "0 1 * * *", "parameters": {"data_uri": "gs://b/in/*.csv"}},
                 {"name": "b-train", "pipeline": "training", "target": "vertex",
                  "cron": "0 2 * * *"}]
    config = _config(vertex_server.url, lock, schedules)
    with pytest.raises(SubmitError, match="refusing to send training to vertex"):
        apply(config, workdir=tmp_path / "w", backends={"vertex": _backend(config)},
              version="g1")
    assert not vertex_server.calls("POST") and not vertex_server.schedules
