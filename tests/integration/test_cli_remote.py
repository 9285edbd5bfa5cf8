"""`gkeflow init`, `submit` and `schedule` through the real console script, against the fakes."""

from __future__ import annotations

import pytest

from gkeflow.components import yamlio
from tests.integration.conftest import TOKEN, config_dict, gkeflow

TOKEN_ENV = {"GKEFLOW_TEST_KFP_TOKEN": TOKEN}


@pytest.mark.parametrize("command", [
    ["init"], ["submit"], ["schedule"], ["schedule", "apply"], ["schedule", "list"],
    ["schedule", "pause"], ["schedule", "resume"], ["schedule", "delete"],
])
def test_every_new_command_has_help(command, tmp_path):
    result = gkeflow(*command, "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Usage: gkeflow" in result.stdout and len(result.stdout.splitlines()) > 3


def test_init_writes_a_valid_commented_example_once(tmp_path):
    from gkeflow.pipelines.settings.config import load_config

    result = gkeflow("init", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "gkeflow.yaml").read_text()
    assert text.count("#") > 20 and "token_env: KFP_TOKEN" in text
    config = load_config(tmp_path / "gkeflow.yaml")
    assert {s.target for s in config.schedules} == {"gke", "vertex"}
    again = gkeflow("init", cwd=tmp_path)
    assert again.returncode == 1 and "already exists; pass --force" in again.stderr
    assert gkeflow("init", "--force", cwd=tmp_path).returncode == 0


def test_config_errors_name_file_key_and_problem(tmp_path, write_config):
    data = config_dict("http://127.0.0.1:9", None, schedules=[
        {"name": "Nightly Run", "target": "gke", "cron": "0 25 * * *"}])
    data["targets"]["gke"]["auth"] = {"token_env": "GKEFLOW_TEST_KFP_TOKEN",
                                      "iap_client_id": "x"}
    path = write_config(data)
    result = gkeflow("submit", "--target", "gke", "--config", str(path), cwd=tmp_path)
    assert result.returncode == 1
    error = result.stderr.strip()
    assert len(error.splitlines()) == 1 and error.startswith(f"Error: {path}: "), error
    assert "targets.gke.auth: choose one authentication method" in error
    assert "schedules.0.name: must be 1-63 lowercase" in error and "Nightly Run" not in error
    assert "schedules.0.cron: hour field: 25 is outside 0-23" in error


def test_submit_gke_wait_shows_steps_url_and_never_the_token(kfp_server, tmp_path,
                                                              write_config):
    path = write_config(config_dict(kfp_server.url, None))
    result = gkeflow("submit", "training", "--target", "gke", "--env", "prod", "--param",
                     "epochs=3", "--wait", "--poll", "0.05", "--config", str(path),
                     cwd=tmp_path, env=TOKEN_ENV)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert f"Run URL: {kfp_server.url}/#/runs/details/run-" in result.stdout
    assert "✓ prepare-data succeeded" in result.stdout
    assert "SUCCEEDED" in result.stdout.splitlines()[-1]
    assert TOKEN not in output
    assert kfp_server.calls("POST", r"/runs$")


def test_submit_wait_exits_non_zero_when_the_run_fails(vertex_server, tmp_path, write_config):
    vertex_server.outcome = "FAILED"
    path = write_config(config_dict(None, vertex_server.url))
    result = gkeflow("submit", "--target", "vertex", "--wait", "--poll", "0.05", "--config",
                     str(path), cwd=tmp_path)
    assert result.returncode == 1
    assert "✗" in result.stdout and "failed" in result.stdout
    assert "ended FAILED" in result.stderr and "console.cloud.google.com" in result.stderr


def test_submit_dry_run_shows_requests_and_sends_no_writes(kfp_server, tmp_path,
                                                           write_config):
    path = write_config(config_dict(kfp_server.url, None))
    result = gkeflow("submit", "--target", "gke", "--dry-run", "--config", str(path),
                     cwd=tmp_path, env=TOKEN_ENV)
    assert result.returncode == 0, result.stderr
    assert "request(s) would be sent; nothing was changed" in result.stdout
    assert f"POST {kfp_server.url}/apis/v2beta1/runs" in result.stdout
    assert "Authorization: Bearer ***" in result.stdout
    assert TOKEN not in result.stdout + result.stderr
    assert [r.method for r in kfp_server.requests if r.method != "GET"] == []


def test_server_message_reaches_the_user(kfp_server, tmp_path, write_config):
    path = write_config(config_dict(kfp_server.url, None))
    result = gkeflow("submit", "--target", "gke", "--config", str(path), cwd=tmp_path,
                     env={"GKEFLOW_TEST_KFP_TOKEN": "not-the-right-one-9d2"})
    assert result.returncode == 1
    assert "HTTP 401" in result.stderr and "missing or wrong bearer token" in result.stderr
    assert "not-the-right-one-9d2" not in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_schedule_apply_twice_then_list_pause_resume_delete(kfp_server, vertex_server,
                                                            tmp_path, write_config):
    schedules = [
        {"name": "nightly", "target": "vertex", "cron": "0 2 * * *",
         "time_zone": "Europe/Berlin"},
        {"name": "weekly", "target": "gke", "cron": "30 6 * * 1", "time_zone": "UTC",
         "max_concurrency": 3},
    ]
    path = write_config(config_dict(kfp_server.url, vertex_server.url, schedules=schedules))
    args = ("--config", str(path))

    dry = gkeflow("schedule", "apply", "--dry-run", *args, cwd=tmp_path, env=TOKEN_ENV)
    assert dry.returncode == 0, dry.stderr
    assert "would create" in dry.stdout and "POST " in dry.stdout
    assert not kfp_server.recurring_runs and not vertex_server.schedules

    first = gkeflow("schedule", "apply", *args, cwd=tmp_path, env=TOKEN_ENV)
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("create") >= 2
    second = gkeflow("schedule", "apply", *args, cwd=tmp_path, env=TOKEN_ENV)
    assert second.returncode == 0, second.stderr
    assert "everything already matches gkeflow.yaml" in second.stdout
    assert len(kfp_server.recurring_runs) == 1 and len(vertex_server.schedules) == 1

    listed = gkeflow("schedule", "list", "--next", "2", *args, cwd=tmp_path, env=TOKEN_ENV)
    assert listed.returncode == 0, listed.stderr
    assert "TZ=Europe/Berlin 0 2 * * *" in listed.stdout and "0 30 6 * * 1" in listed.stdout
    assert "02:00 CE" in listed.stdout and "06:30 UTC" in listed.stdout

    paused = gkeflow("schedule", "pause", "weekly", *args, cwd=tmp_path, env=TOKEN_ENV)
    assert paused.returncode == 0 and "gke: weekly paused" in paused.stdout
    (recurring,) = kfp_server.recurring_runs.values()
    assert recurring["mode"] == "DISABLE"
    resumed = gkeflow("schedule", "resume", "weekly", *args, cwd=tmp_path, env=TOKEN_ENV)
    assert resumed.returncode == 0 and "gke: weekly resumed" in resumed.stdout
    missing = gkeflow("schedule", "delete", "nope", *args, cwd=tmp_path, env=TOKEN_ENV)
    assert missing.returncode == 1 and "no schedule named 'nope'" in missing.stderr
    deleted = gkeflow("schedule", "delete", "nightly", *args, cwd=tmp_path, env=TOKEN_ENV)
    assert deleted.returncode == 0 and "vertex: nightly deleted" in deleted.stdout
    assert not vertex_server.schedules
    assert TOKEN not in "".join(r.stdout + r.stderr for r in (first, second, listed, paused))
    data = yamlio.load(path.read_text())
    assert data["schedules"] == schedules  # the file is never rewritten


def test_a_delete_or_pause_whose_answer_is_lost_is_done_not_failed(kfp_server, vertex_server,
                                                                   tmp_path, write_config):
    schedules = [
        {"name": "nightly", "target": "vertex", "cron": "0 2 * * *", "time_zone": "UTC"},
        {"name": "weekly", "target": "gke", "cron": "30 6 * * 1", "time_zone": "UTC"},
    ]
    data = config_dict(kfp_server.url, vertex_server.url, schedules=schedules)
    for target in ("gke", "vertex"):
        data["targets"][target].update(timeout_s=3, retries=2)
    args = ("--config", str(write_config(data)))
    assert gkeflow("schedule", "apply", *args, cwd=tmp_path, env=TOKEN_ENV).returncode == 0
    # each server acts, then drops the connection: the retry meets what was done
    vertex_server.inject("POST", r":pause$", status=0, after=True)
    paused = gkeflow("schedule", "pause", "nightly", *args, cwd=tmp_path, env=TOKEN_ENV)
    assert paused.returncode == 0, paused.stderr
    assert "vertex: nightly paused" in paused.stdout
    assert next(iter(vertex_server.schedules.values())).state.name == "PAUSED"
    kfp_server.inject("DELETE", r"/recurringruns/", status=0, after=True)
    vertex_server.inject("DELETE", r"/schedules/", status=0, after=True)
    for name, target in (("weekly", "gke"), ("nightly", "vertex")):
        deleted = gkeflow("schedule", "delete", name, *args, cwd=tmp_path, env=TOKEN_ENV)
        assert deleted.returncode == 0, deleted.stderr
        assert f"{target}: {name} deleted" in deleted.stdout
    assert not kfp_server.recurring_runs and not vertex_server.schedules


def test_a_schedule_that_cannot_be_converted_stops_apply_before_any_change(
        kfp_server, vertex_server, tmp_path, write_config):
    schedules = [
        {"name": "aaa", "target": "gke", "cron": "0 2 * * *", "time_zone": "UTC"},
        # 00:30 on the 15th in Berlin is 22:30 on the 14th in UTC: no single UTC cron
        {"name": "bbb", "target": "gke", "cron": "30 0 15 * *", "time_zone": "Europe/Berlin"},
        {"name": "ccc", "target": "vertex", "cron": "0 3 * * *", "time_zone": "UTC"},
    ]
    path = write_config(config_dict(kfp_server.url, vertex_server.url, schedules=schedules))
    result = gkeflow("schedule", "apply", "--config", str(path), cwd=tmp_path, env=TOKEN_ENV)
    assert result.returncode == 1
    assert "schedules.1 (bbb): cron '30 0 15 * *' in Europe/Berlin" in result.stderr
    assert not kfp_server.recurring_runs and not vertex_server.schedules
