"""`submit` and `schedule` against a fake Vertex AI REST API, through google-cloud-aiplatform.

Every body is parsed with ``google.cloud.aiplatform_v1`` types (unknown fields rejected) and
the embedded pipeline spec with ``PipelineSpec`` (see fakes.py).
"""

from __future__ import annotations

import json

import pytest
import requests

from gkeflow.pipelines.targets.schedule import apply, set_enabled
from gkeflow.pipelines.targets.schedule_list import list_schedules
from gkeflow.pipelines.targets.submit import submit, wait_for_run
from gkeflow.pipelines.targets.transport import RemoteError, RetryPolicy
from gkeflow.pipelines.targets.vertex import VertexBackend, sanitise_labels
from tests.integration.conftest import FAST

PARENT = "projects/my-project/locations/us-central1"


def backend(config, policy=FAST, dry_run=False):
    return VertexBackend(config.targets.vertex, policy=policy, dry_run=dry_run)


def bodies(server, method, path_re):
    return [json.loads(r.body) for r in server.calls(method, path_re)]


def test_the_fake_rejects_what_the_api_rejects(vertex_server):
    answer = requests.post(f"{vertex_server.url}/v1/{PARENT}/pipelineJobs",
                           json={"displayName": "x", "notAField": 1}, timeout=60)
    assert answer.status_code == 400 and "notAField" in answer.json()["error"]["message"]
    answer = requests.post(f"{vertex_server.url}/v1/{PARENT}/schedules",
                           json={"displayName": "x", "cron": "0 2 * * *",
                                 "maxConcurrentRunCount": "1",
                                 "createPipelineJobRequest": {
                                     "parent": PARENT,
                                     "pipelineJob": {"pipelineSpec": {"bogus": 1}}}},
                           timeout=60)
    assert answer.status_code == 400 and "bogus" in answer.json()["error"]["message"]
    assert len(vertex_server.violations) == 2
    vertex_server.violations.clear()


def test_submit_sends_a_complete_pipeline_job(vertex_server, make_config, tmp_path):
    config = make_config(None, vertex_server.url)
    submission, _ = submit(config, "training", "vertex", environment="prod",
                           overrides={"learning_rate": "0.05"}, workdir=tmp_path,
                           backend=backend(config), version="gabc123")
    (body,) = bodies(vertex_server, "POST", r"/pipelineJobs$")
    (request,) = vertex_server.calls("POST", r"/pipelineJobs$")
    job_id = request.query["pipelineJobId"][0]
    assert submission.run_id == f"{PARENT}/pipelineJobs/{job_id}"
    assert submission.url == ("https://console.cloud.google.com/vertex-ai/locations/us-central1/"
                              f"pipelines/runs/{job_id}?project=my-project")
    assert body["serviceAccount"] == "pipelines@my-project.iam.gserviceaccount.com"
    assert body["network"] == "projects/123456/global/networks/ml-vpc"
    assert body["encryptionSpec"]["kmsKeyName"].endswith("/cryptoKeys/pipelines")
    assert body["runtimeConfig"]["gcsOutputDirectory"] == "gs://my-bucket/pipeline-root"
    # The registry defaults to the project's Vertex AI Model Registry on this target.
    assert body["runtimeConfig"]["parameterValues"] == {
        "epochs": 5, "min_accuracy": 0.9, "learning_rate": 0.05,
        "registry_uri": "vertex://projects/my-project/locations/us-central1"}
    labels = body["labels"]
    assert labels["team-name"] == "ml-platform" and labels["cost-center"] == "r-d-42"
    assert labels["gkeflow-environment"] == "prod"
    assert labels["gkeflow-version"] == submission.version_name
    caching = [task.get("cachingOptions", {}).get("enableCache", False)
               for task in body["pipelineSpec"]["root"]["dag"]["tasks"].values()]
    assert caching and not any(caching)  # enable_caching: false in the config


@pytest.mark.parametrize("outcome", ["SUCCEEDED", "FAILED"])
def test_wait_follows_steps_to_the_final_state(vertex_server, make_config, tmp_path, outcome):
    vertex_server.outcome = outcome
    config = make_config(None, vertex_server.url)
    submission, used = submit(config, "training", "vertex", environment="default",
                              overrides={}, workdir=tmp_path, backend=backend(config))
    changes = []
    status = wait_for_run(used, submission.run_id, poll_s=0.01,
                          on_change=lambda *change: changes.append(change))
    assert status.state == outcome
    assert "gkeflow-training" not in status.tasks  # the pipeline itself is not a step
    assert ("prepare-data", "RUNNING", "SUCCEEDED") in changes
    if outcome == "FAILED":
        assert "failed" in status.error


def test_5xx_retried_4xx_surfaced_timeouts_retried_on_reads(vertex_server, make_config,
                                                            tmp_path):
    config = make_config(None, vertex_server.url)
    vertex_server.inject("POST", r"/pipelineJobs$", status=503, count=2)
    submission, _ = submit(config, "training", "vertex", environment="default",
                           overrides={}, workdir=tmp_path / "a", backend=backend(config))
    assert len(vertex_server.calls("POST", r"/pipelineJobs$")) == 3
    assert list(vertex_server.jobs) == [submission.run_id]
    # Before each retry the job id (ours) was looked up: it did not exist yet.
    assert len(vertex_server.calls("GET", r"/pipelineJobs/")) == 2

    slow = RetryPolicy(attempts=3, base_delay_s=0.01, max_delay_s=0.02, timeout_s=0.5)
    vertex_server.inject("GET", r"/pipelineJobs/", status=200, delay_s=1.5, count=1)
    status = backend(config, slow).run_status(submission.run_id)
    assert status.state in ("PENDING", "RUNNING")
    assert len(vertex_server.calls("GET", r"/pipelineJobs/")) == 4

    vertex_server.inject("POST", r"/pipelineJobs$", status=403, count=5,
                         message="Permission 'aiplatform.pipelineJobs.create' denied")
    with pytest.raises(RemoteError) as error:
        submit(config, "training", "vertex", environment="default", overrides={},
               workdir=tmp_path / "b", backend=backend(config))
    assert "refused (HTTP 403): Permission 'aiplatform.pipelineJobs.create' denied" in \
        str(error.value)
    assert len(vertex_server.calls("POST", r"/pipelineJobs$")) == 4


def _schedule(**changes):
    return {"name": "nightly", "target": "vertex", "cron": "0 2 * * *",
            "time_zone": "Europe/Berlin", "environment": "prod", "max_concurrency": 2,
            **changes}


def test_apply_is_idempotent_updates_in_place_and_replaces_on_new_parameters(
        vertex_server, make_config, tmp_path):
    config = make_config(None, vertex_server.url, schedules=[_schedule()])
    first = apply(config, workdir=tmp_path / "1", backends={"vertex": backend(config)},
                  version="g1")
    second = apply(config, workdir=tmp_path / "2", backends={"vertex": backend(config)},
                   version="g1")
    assert [a.kind for a in first.actions] == ["create"]
    assert [a.kind for a in second.actions] == ["unchanged"]
    (schedule_body,) = bodies(vertex_server, "POST", r"/schedules$")
    assert schedule_body["cron"] == "TZ=Europe/Berlin 0 2 * * *"
    assert int(schedule_body["maxConcurrentRunCount"]) == 2
    job = schedule_body["createPipelineJobRequest"]["pipelineJob"]
    assert job["serviceAccount"] == "pipelines@my-project.iam.gserviceaccount.com"
    assert job["labels"]["gkeflow-schedule"] == "nightly"
    assert job["runtimeConfig"]["parameterValues"] == {
        "epochs": 5, "min_accuracy": 0.9,
        "registry_uri": "vertex://projects/my-project/locations/us-central1"}
    (original,) = vertex_server.schedules

    retimed = make_config(None, vertex_server.url,
                          schedules=[_schedule(cron="30 4 * * 1-5", max_concurrency=1)])
    result = apply(retimed, workdir=tmp_path / "3", backends={"vertex": backend(retimed)},
                   version="g1")
    assert [a.kind for a in result.actions] == ["update"]
    assert list(vertex_server.schedules) == [original]  # updated in place
    assert vertex_server.schedules[original].cron == "TZ=Europe/Berlin 30 4 * * 1-5"
    assert vertex_server.schedules[original].max_concurrent_run_count == 1
    (patch,) = vertex_server.calls("PATCH")
    assert set(patch.query["updateMask"][0].split(",")) == {"cron", "maxConcurrentRunCount"}

    reparametrised = make_config(None, vertex_server.url, schedules=[
        _schedule(cron="30 4 * * 1-5", max_concurrency=1, parameters={"epochs": 9})])
    result = apply(reparametrised, workdir=tmp_path / "4",
                   backends={"vertex": backend(reparametrised)}, version="g1")
    assert [a.kind for a in result.actions] == ["replace"]
    (replacement,) = vertex_server.schedules.values()
    assert replacement.name != original
    assert replacement.create_pipeline_job_request.pipeline_job.runtime_config \
        .parameter_values["epochs"] == 9


def test_disable_pause_resume_and_prune(vertex_server, make_config, tmp_path):
    config = make_config(None, vertex_server.url,
                         schedules=[_schedule(), _schedule(name="weekly", cron="0 6 * * 1")])
    apply(config, workdir=tmp_path / "1", backends={"vertex": backend(config)}, version="g1")
    disabled = make_config(None, vertex_server.url, schedules=[
        _schedule(enabled=False), _schedule(name="weekly", cron="0 6 * * 1")])
    result = apply(disabled, workdir=tmp_path / "2", backends={"vertex": backend(disabled)},
                   version="g1")
    assert ("nightly", "pause") in {(a.schedule, a.kind) for a in result.actions}
    states = {s.display_name: s.state.name for s in vertex_server.schedules.values()}
    assert states == {"nightly": "PAUSED", "weekly": "ACTIVE"}

    done = set_enabled(config, "nightly", True, catch_up=True,
                       backends={"vertex": backend(config)})
    assert done == ["vertex: nightly resumed"]
    (resume,) = vertex_server.calls("POST", r":resume$")
    assert json.loads(resume.body) == {"catchUp": True}

    rows = list_schedules(config, backends={"vertex": backend(config)})
    assert [(r.name, r.enabled) for r in rows] == [("nightly", True), ("weekly", True)]
    server_next = vertex_server.schedules[
        next(k for k, s in vertex_server.schedules.items() if s.display_name == "nightly")
    ].next_run_time
    assert rows[0].next_runs[0] == server_next
    assert rows[0].next_runs[0].tzinfo is not None

    only_nightly = make_config(None, vertex_server.url, schedules=[_schedule()])
    kept = apply(only_nightly, workdir=tmp_path / "3",
                 backends={"vertex": backend(only_nightly)}, version="g1")
    assert ("weekly", "kept") in {(a.schedule, a.kind) for a in kept.actions}
    apply(only_nightly, workdir=tmp_path / "4", backends={"vertex": backend(only_nightly)},
          version="g1", prune=True)
    assert [s.display_name for s in vertex_server.schedules.values()] == ["nightly"]


def test_schedule_create_retries_5xx_and_dry_run_writes_nothing(vertex_server, make_config,
                                                                tmp_path):
    config = make_config(None, vertex_server.url, schedules=[_schedule()])
    planned = apply(config, workdir=tmp_path / "1",
                    backends={"vertex": backend(config, dry_run=True)}, version="g1")
    assert vertex_server.requests == []  # a dry run is offline
    assert planned.planned[0].method == "GET"  # shown: the read apply would make first
    assert '"cron": "TZ=Europe/Berlin 0 2 * * *"' in planned.planned[1].render()
    vertex_server.inject("POST", r"/schedules$", status=500, count=1)
    apply(config, workdir=tmp_path / "2", backends={"vertex": backend(config)}, version="g1")
    assert len(vertex_server.calls("POST", r"/schedules$")) == 2
    assert len(vertex_server.schedules) == 1


def test_labels_are_sanitised_to_vertex_rules():
    assert sanitise_labels({"Team Name": "ML Platform!", "1st": "A/B", "ok_key": "x" * 80}) == {
        "team-name": "ml-platform", "k-1st": "a-b", "ok_key": "x" * 63}
    with pytest.raises(ValueError, match="both become 'team-name'"):
        sanitise_labels({"Team Name": "a", "team-name": "b"})
