"""`gkeflow submit sweep` and a sweep schedule, through the console script, against the fakes."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.integration.conftest import config_dict, gkeflow
from tests.integration.test_cli_remote import TOKEN_ENV

SWEEP = {"algorithm": "grid", "max_trials": 3, "parallel_trials": 3,
         "parameters": {"learning_rate": {"type": "choice", "values": [0.001, 0.01, 0.1]}}}
#: The sweep of a ./gkeflow.yaml that a --config elsewhere must win over.
DECOY = {"algorithm": "grid",
         "parameters": {"learning_rate": {"type": "choice", "values": [0.0999]}}}


def _vertex_parameters(vertex_server) -> dict:
    job = next(iter(vertex_server.jobs.values()))
    return json.loads(type(job).to_json(job))["runtimeConfig"]["parameterValues"]


def _config_elsewhere(tmp_path, data: dict) -> Path:
    """``data`` as a config in another directory, and a different ./gkeflow.yaml in the
    directory the command runs in: only --config may shape what is compiled."""
    (tmp_path / "gkeflow.yaml").write_text(yaml.safe_dump({"sweep": DECOY}))
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    path = folder / "team.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _cpu_limit(spec: dict, executor: str) -> float:
    container = spec["deploymentSpec"]["executors"][executor]["container"]
    return container["resources"]["cpuLimit"]


def test_submit_sweep_to_vertex_sends_the_configured_trials(vertex_server, tmp_path):
    path = _config_elsewhere(tmp_path, config_dict(
        None, vertex_server.url, sweep=SWEEP, compute={"select-best-trial": {"cpu": "3"}}))
    result = gkeflow("submit", "sweep", "--target", "vertex", "--param", "min_accuracy=0.5",
                     "--config", str(path), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(vertex_server.jobs) == 1
    job = next(iter(vertex_server.jobs.values()))
    spec = json.loads(type(job).to_json(job))["pipelineSpec"]
    assert spec["pipelineInfo"]["name"] == "gkeflow-sweep"
    trials = spec["root"]["inputDefinitions"]["parameters"]["trials"]["defaultValue"]
    assert [t["learning_rate"] for t in trials] == [0.001, 0.01, 0.1]
    assert _cpu_limit(spec, "exec-select-best-trial") == 3  # the config's compute: too
    loop = next(t for t in spec["root"]["dag"]["tasks"].values() if "parameterIterator" in t)
    assert loop["iteratorPolicy"]["parallelismLimit"] == 3
    # the environment's training parameters (epochs) apply to every trial
    assert _vertex_parameters(vertex_server)["epochs"] == 2


def test_submit_sweep_to_gke_with_overridden_trials(kfp_server, tmp_path, write_config):
    path = write_config(config_dict(kfp_server.url, None, sweep=SWEEP))
    trials = json.dumps([{"trial_id": "trial-000", "learning_rate": 0.05}])
    result = gkeflow("submit", "sweep", "--target", "gke", "--param", f"trials={trials}",
                     "--wait", "--poll", "0.05", "--config", str(path), cwd=tmp_path,
                     env=TOKEN_ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    run = json.loads(kfp_server.calls("POST", r"/runs$")[0].body)
    assert run["runtime_config"]["parameters"]["trials"] == json.loads(trials)
    assert "SUCCEEDED" in result.stdout.splitlines()[-1]
    bad = gkeflow("submit", "sweep", "--target", "gke", "--param", "trials=[oops",
                  "--config", str(path), cwd=tmp_path, env=TOKEN_ENV)
    assert bad.returncode == 1 and "parameter 'trials' expects a JSON list" in bad.stderr


def test_a_sweep_schedule_is_applied(vertex_server, tmp_path):
    schedule = {"name": "weekly-sweep", "pipeline": "sweep", "target": "vertex",
                "cron": "0 3 * * 0", "time_zone": "UTC"}
    path = _config_elsewhere(tmp_path, config_dict(None, vertex_server.url,
                                                   schedules=[schedule], sweep=SWEEP))
    result = gkeflow("schedule", "apply", "--config", str(path), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "create" in result.stdout and "weekly-sweep" in result.stdout
    (created,) = vertex_server.schedules.values()
    body = json.loads(type(created).to_json(created))
    spec = body["createPipelineJobRequest"]["pipelineJob"]["pipelineSpec"]
    trials = spec["root"]["inputDefinitions"]["parameters"]["trials"]["defaultValue"]
    assert [t["learning_rate"] for t in trials] == [0.001, 0.01, 0.1]
