"""`submit` and `schedule` against a fake Kubeflow Pipelines API, through the real kfp.Client.

Every request body is validated against the KFP v2beta1 swagger and every uploaded
pipeline spec parsed strictly (see fakes.py); the fixtures fail a test that broke either.
"""

from __future__ import annotations

import datetime as dt
import json
import logging

import pytest
import requests

from gkeflow.pipelines.targets.kfp import KfpBackend
from gkeflow.pipelines.targets.schedule import apply
from gkeflow.pipelines.targets.schedule_list import list_schedules
from gkeflow.pipelines.targets.submit import submit, wait_for_run
from gkeflow.pipelines.targets.transport import RemoteError, RetryPolicy
from tests.integration.conftest import FAST, TOKEN

WINTER = dt.datetime(2026, 1, 15, 12, tzinfo=dt.UTC)
SUMMER = dt.datetime(2026, 7, 15, 12, tzinfo=dt.UTC)


def backend(config, policy=FAST, dry_run=False):
    return KfpBackend(config.targets.gke, policy=policy, dry_run=dry_run)


def bodies(server, method, path_re):
    return [json.loads(r.body) for r in server.calls(method, path_re)]


def test_the_fake_rejects_what_the_contract_rejects(kfp_server, swagger_layer):
    headers = {"Authorization": f"Bearer {TOKEN}"}
    bad_run = {"display_name": "x", "experiment_id": "1", "no_such_field": True}
    answer = requests.post(f"{kfp_server.url}/apis/v2beta1/runs", json=bad_run,
                           headers=headers, timeout=5)
    assert answer.status_code == 400 and "no_such_field" in answer.json()["message"]
    bad_cron = {"display_name": "x", "max_concurrency": "one"}
    answer = requests.post(f"{kfp_server.url}/apis/v2beta1/recurringruns", json=bad_cron,
                           headers=headers, timeout=5)
    assert answer.status_code == 400
    spec = "pipelineInfo: {name: p}\nroot: {}\nschemaVersion: '2.1.0'\nsdkVersion: kfp\n" \
           "notAField: 1\n"
    answer = requests.post(f"{kfp_server.url}/apis/v2beta1/pipelines/upload?name=p",
                           files={"uploadfile": ("p.yaml", spec)}, headers=headers, timeout=5)
    assert answer.status_code == 400 and "notAField" in answer.json()["message"]
    answer = requests.get(f"{kfp_server.url}/apis/v2beta1/pipelines?bogus=1", headers=headers,
                          timeout=5)
    assert answer.status_code == 400 and "bogus" in answer.json()["message"]
    assert len(kfp_server.violations) == 4
    kfp_server.violations.clear()


def test_submit_creates_pipeline_once_and_one_version_per_commit(kfp_server, token_env,
                                                                 make_config, tmp_path):
    config = make_config(kfp_server.url, None)
    first, _ = submit(config, "training", "gke", environment="prod",
                      overrides={"epochs": "7"}, workdir=tmp_path / "a",
                      backend=backend(config), version="gabc123")
    again, _ = submit(config, "training", "gke", environment="prod", overrides={},
                      workdir=tmp_path / "b", backend=backend(config), version="gabc123")
    other, _ = submit(config, "training", "gke", environment="default", overrides={},
                      workdir=tmp_path / "c", backend=backend(config), version="gdef456")

    # The pipeline is created empty (an upload would add a default version of its own),
    # so the Kubeflow UI shows exactly one version per shipped spec.
    assert len(kfp_server.calls("POST", r"/pipelines$")) == 1
    assert kfp_server.calls("POST", r"/pipelines/upload$") == []
    assert len(kfp_server.calls("POST", r"/pipelines/upload_version$")) == 2
    assert [v["name"] for v in kfp_server.versions.values()] == [
        first.version_name, other.version_name]
    assert first.version_name.startswith("gabc123-") and again.version_name == first.version_name
    assert len(kfp_server.experiments) == 1
    runs = bodies(kfp_server, "POST", r"/runs$")
    assert len(runs) == 3
    assert runs[0]["runtime_config"]["parameters"] == {"epochs": 7, "min_accuracy": 0.9}
    assert runs[1]["runtime_config"]["parameters"] == {"epochs": 5, "min_accuracy": 0.9}
    assert runs[2]["runtime_config"]["parameters"] == {"epochs": 2}
    version_ids = {v["name"]: k for k, v in kfp_server.versions.items()}
    assert runs[0]["pipeline_version_reference"]["pipeline_version_id"] == \
        version_ids[first.version_name]
    assert runs[2]["pipeline_version_reference"]["pipeline_version_id"] == \
        version_ids[other.version_name]
    assert first.url == f"{kfp_server.url}/#/runs/details/{first.run_id}"
    assert all(r.headers["authorization"] == f"Bearer {TOKEN}" for r in kfp_server.requests)


def test_unknown_or_mistyped_parameters_are_refused_before_any_request(kfp_server, token_env,
                                                                       make_config, tmp_path):
    from gkeflow.pipelines.targets.submit import SubmitError

    config = make_config(kfp_server.url, None)
    with pytest.raises(SubmitError, match="has no parameter 'epoch'"):
        submit(config, "training", "gke", environment="default", overrides={"epoch": "3"},
               workdir=tmp_path, backend=backend(config))
    with pytest.raises(SubmitError, match="'epochs' expects an integer, got 'many'"):
        submit(config, "training", "gke", environment="default", overrides={"epochs": "many"},
               workdir=tmp_path, backend=backend(config))
    with pytest.raises(SubmitError, match="environment 'staging' is not under parameters"):
        submit(config, "training", "gke", environment="staging", overrides={},
               workdir=tmp_path, backend=backend(config))
    assert kfp_server.requests == []


@pytest.mark.parametrize("outcome", ["SUCCEEDED", "FAILED"])
def test_wait_follows_steps_to_the_final_state(kfp_server, token_env, make_config, tmp_path,
                                               outcome):
    kfp_server.outcome = outcome
    config = make_config(kfp_server.url, None)
    submission, used = submit(config, "training", "gke", environment="default", overrides={},
                              workdir=tmp_path, backend=backend(config), version="g1")
    changes = []
    status = wait_for_run(used, submission.run_id, poll_s=0.01,
                          on_change=lambda *change: changes.append(change))
    assert status.state == outcome
    assert ("prepare-data", "RUNNING", "SUCCEEDED") in changes
    assert changes[-1][0] == "" and changes[-1][2] == outcome
    if outcome == "FAILED":
        assert "failed" in status.error
        assert any(new == "FAILED" for task, _, new in changes if task)


def test_5xx_is_retried_with_backoff_and_the_run_created_once(kfp_server, token_env,
                                                              make_config, tmp_path):
    config = make_config(kfp_server.url, None)
    kfp_server.inject("POST", r"/runs$", status=503, count=2)
    kfp_server.inject("GET", r"/pipelines$", status=500, count=1)
    submission, _ = submit(config, "training", "gke", environment="default", overrides={},
                           workdir=tmp_path, backend=backend(config), version="g1")
    assert len(kfp_server.calls("POST", r"/runs$")) == 3
    assert list(kfp_server.runs) == [submission.run_id]


def test_4xx_is_not_retried_and_carries_the_servers_message(kfp_server, token_env,
                                                            make_config, tmp_path):
    config = make_config(kfp_server.url, None)
    kfp_server.inject("POST", r"/upload_version$", status=400, count=5,
                      message="Invalid input error: pipeline spec is too large")
    with pytest.raises(RemoteError) as error:
        submit(config, "training", "gke", environment="default", overrides={},
               workdir=tmp_path, backend=backend(config), version="g1")
    assert "refused (HTTP 400): Invalid input error: pipeline spec is too large" in \
        str(error.value)
    assert len(kfp_server.calls("POST", r"/upload_version$")) == 1


def test_wrong_token_is_a_clear_401_and_the_token_is_never_shown(kfp_server, monkeypatch,
                                                                 make_config, tmp_path, caplog):
    monkeypatch.setenv("GKEFLOW_TEST_KFP_TOKEN", "wrong-token-0b7d41")
    config = make_config(kfp_server.url, None)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(RemoteError) as error:
        submit(config, "training", "gke", environment="default", overrides={},
               workdir=tmp_path, backend=backend(config), version="g1")
    assert "HTTP 401" in str(error.value) and "bearer token" in str(error.value)
    assert "wrong-token-0b7d41" not in str(error.value)
    assert "wrong-token-0b7d41" not in caplog.text


def test_missing_token_variable_is_named(kfp_server, monkeypatch, make_config, tmp_path):
    monkeypatch.delenv("GKEFLOW_TEST_KFP_TOKEN", raising=False)
    config = make_config(kfp_server.url, None)
    from gkeflow.pipelines.targets.credentials import CredentialsError

    with pytest.raises(CredentialsError, match="GKEFLOW_TEST_KFP_TOKEN is empty or not set"):
        submit(config, "training", "gke", environment="default", overrides={},
               workdir=tmp_path, backend=backend(config), version="g1")


def test_timeouts_retry_reads_but_not_run_creation(kfp_server, token_env, make_config,
                                                   tmp_path):
    config = make_config(kfp_server.url, None)
    policy = RetryPolicy(attempts=3, base_delay_s=0.01, max_delay_s=0.02, timeout_s=0.5)
    kfp_server.inject("GET", r"/experiments$", status=200, delay_s=1.5, count=1)
    kfp_server.inject("POST", r"/runs$", status=200, delay_s=1.5, count=1)
    with pytest.raises(RemoteError, match="create run .* failed \\(timed out\\) after 1 attempt"):
        submit(config, "training", "gke", environment="default", overrides={},
               workdir=tmp_path, backend=backend(config, policy), version="g1")
    # The read that timed out was retried; the create was sent once (the server made it).
    assert len(kfp_server.calls("GET", r"/experiments$")) >= 2
    assert len(kfp_server.calls("POST", r"/runs$")) == 1


def test_connection_errors_are_retried_then_reported(make_config, token_env, tmp_path):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = make_config(f"http://127.0.0.1:{port}", None)
    with pytest.raises(RemoteError, match="cannot connect .* after 4 attempts"):
        submit(config, "training", "gke", environment="default", overrides={},
               workdir=tmp_path, backend=backend(config), version="g1")


def _schedule(**changes):
    return {"name": "nightly", "target": "gke", "cron": "0 2 * * *",
            "time_zone": "Europe/Berlin", "environment": "prod", "max_concurrency": 2,
            **changes}


def test_apply_is_idempotent_and_pins_the_uploaded_version(kfp_server, token_env,
                                                           make_config, tmp_path):
    config = make_config(kfp_server.url, None, schedules=[
        _schedule(), _schedule(name="hourly", cron="15 * * * *", time_zone="UTC",
                               catch_up=True, parameters={"epochs": 1})])
    first = apply(config, workdir=tmp_path / "1", backends={"gke": backend(config)},
                  version="g1", at=WINTER)
    second = apply(config, workdir=tmp_path / "2", backends={"gke": backend(config)},
                   version="g1", at=WINTER)
    assert sorted(a.kind for a in first.actions if a.kind != "upload") == ["create", "create"]
    assert [a.kind for a in second.actions] == ["unchanged", "unchanged"]
    assert not second.changed
    assert sorted(r["display_name"] for r in kfp_server.recurring_runs.values()) == \
        ["hourly", "nightly"]
    created = {b["display_name"]: b for b in bodies(kfp_server, "POST", r"/recurringruns$")}
    nightly = created["nightly"]
    assert nightly["trigger"]["cron_schedule"]["cron"] == "0 0 1 * * *"  # 02:00 CET in UTC
    assert nightly["no_catchup"] is True and int(nightly["max_concurrency"]) == 2
    assert nightly["mode"] == "ENABLE"
    assert nightly["runtime_config"]["parameters"] == {"epochs": 5, "min_accuracy": 0.9}
    assert created["hourly"]["no_catchup"] is False
    assert created["hourly"]["trigger"]["cron_schedule"]["cron"] == "0 15 * * * *"
    (version_id,) = [k for k, v in kfp_server.versions.items() if v["name"].startswith("g1-")]
    assert nightly["pipeline_version_reference"]["pipeline_version_id"] == version_id


def test_apply_replaces_changed_pauses_disabled_and_prunes_only_when_asked(
        kfp_server, token_env, make_config, tmp_path):
    config = make_config(kfp_server.url, None, schedules=[_schedule(), _schedule(name="b")])
    apply(config, workdir=tmp_path / "1", backends={"gke": backend(config)}, version="g1",
          at=WINTER)
    original = {r["display_name"]: k for k, r in kfp_server.recurring_runs.items()}
    # A recurring run made by someone else in the same experiment: never touched.
    foreign = backend(config).client.create_recurring_run(
        backend(config).experiment_id(), "hand-made", cron_expression="0 0 0 * * *",
        pipeline_id=next(iter(kfp_server.pipelines)),
        version_id=next(iter(kfp_server.versions)))

    changed = make_config(kfp_server.url, None, schedules=[
        _schedule(cron="0 3 * * *"), _schedule(name="b", enabled=False)])
    result = apply(changed, workdir=tmp_path / "2", backends={"gke": backend(changed)},
                   version="g1", at=WINTER)
    kinds = {(a.schedule, a.kind) for a in result.actions}
    assert ("nightly", "replace") in kinds and ("b", "pause") in kinds
    runs = {r["display_name"]: (k, r) for k, r in kfp_server.recurring_runs.items()}
    assert runs["nightly"][0] != original["nightly"]
    assert runs["nightly"][1]["trigger"]["cron_schedule"]["cron"] == "0 0 2 * * *"
    assert runs["b"][0] == original["b"] and runs["b"][1]["mode"] == "DISABLE"

    removed = make_config(kfp_server.url, None, schedules=[_schedule(cron="0 3 * * *")])
    kept = apply(removed, workdir=tmp_path / "3", backends={"gke": backend(removed)},
                 version="g1", at=WINTER)
    assert ("b", "kept") in {(a.schedule, a.kind) for a in kept.actions}
    assert len(kfp_server.recurring_runs) == 3
    pruned = apply(removed, workdir=tmp_path / "4", backends={"gke": backend(removed)},
                   version="g1", at=WINTER, prune=True)
    assert ("b", "delete") in {(a.schedule, a.kind) for a in pruned.actions}
    assert sorted(r["display_name"] for r in kfp_server.recurring_runs.values()) == \
        ["hand-made", "nightly"]
    assert foreign.recurring_run_id in kfp_server.recurring_runs


def test_new_pipeline_version_replaces_the_pinned_schedule(kfp_server, token_env,
                                                           make_config, tmp_path):
    config = make_config(kfp_server.url, None, schedules=[_schedule()])
    apply(config, workdir=tmp_path / "1", backends={"gke": backend(config)}, version="g1",
          at=WINTER)
    result = apply(config, workdir=tmp_path / "2", backends={"gke": backend(config)},
                   version="g2", at=WINTER)
    assert [a.kind for a in result.actions if a.schedule == "nightly"] == ["replace"]
    (recurring,) = kfp_server.recurring_runs.values()
    pinned = kfp_server.versions[recurring["pipeline_version_reference"]["pipeline_version_id"]]
    assert pinned["name"].startswith("g2-")


def test_daylight_saving_change_is_flagged_and_fixed_by_apply(kfp_server, token_env,
                                                              make_config, tmp_path):
    config = make_config(kfp_server.url, None, schedules=[_schedule()])
    apply(config, workdir=tmp_path / "1", backends={"gke": backend(config)}, version="g1",
          at=WINTER)
    (row,) = list_schedules(config, backends={"gke": backend(config)}, now=SUMMER, count=2)
    assert "UTC+2h" in row.warning and "UTC+1h" in row.warning
    # What KFP will really do in summer: 01:00 UTC = 03:00 in Berlin.
    assert [t.strftime("%H:%M %Z") for t in row.next_runs] == ["03:00 CEST", "03:00 CEST"]
    result = apply(config, workdir=tmp_path / "2", backends={"gke": backend(config)},
                   version="g1", at=SUMMER)
    assert [a.kind for a in result.actions] == ["replace"]
    (recurring,) = kfp_server.recurring_runs.values()
    assert recurring["trigger"]["cron_schedule"]["cron"] == "0 0 0 * * *"
    (row,) = list_schedules(config, backends={"gke": backend(config)}, now=SUMMER)
    assert row.warning == "" and row.next_runs[0].strftime("%H:%M") == "02:00"


def test_dry_run_is_offline_and_shows_every_request_with_placeholders(
        kfp_server, make_config, tmp_path, monkeypatch):
    # No token in the environment, and the server must not be contacted at all.
    monkeypatch.delenv("GKEFLOW_TEST_KFP_TOKEN", raising=False)
    config = make_config(kfp_server.url, None, schedules=[_schedule()])
    result = apply(config, workdir=tmp_path, backends={"gke": backend(config, dry_run=True)},
                   version="g1", at=WINTER)
    assert kfp_server.requests == []
    rendered = "\n".join(p.render() for p in result.planned)
    host = kfp_server.url
    for line in (f"GET {host}/apis/v2beta1/pipelines?filter=",
                 f"POST {host}/apis/v2beta1/pipelines    # only if the pipeline does not exist",
                 f"POST {host}/apis/v2beta1/pipelines/upload_version?name=g1-",
                 "&pipelineid=<pipeline_id>",
                 f"POST {host}/apis/v2beta1/experiments    # only if",
                 f"POST {host}/apis/v2beta1/recurringruns"):
        assert line in rendered
    assert '"experiment_id": "<experiment_id>"' in rendered
    assert '"pipeline_version_id": "<pipeline_version_id>"' in rendered
    assert '"cron": "0 0 1 * * *"' in rendered and "Authorization: Bearer ***" in rendered
    assert [a.kind for a in result.actions] == ["create"]
