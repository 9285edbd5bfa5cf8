"""A mistyped pipeline, environment, parameter, step, field or column name is answered in one
line with the closest valid one, through the real command."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from gkeflow.pipelines.cli.main import main
from tests.integration.conftest import config_dict

UNREACHABLE = "http://127.0.0.1:9"  # no request may be sent before these refusals


def _refusal(args: list[str], exit_code: int = 1) -> str:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == exit_code, result.output
    lines = [line for line in result.stderr.strip().splitlines() if line.startswith("Error")]
    assert len(lines) == 1 and "Traceback" not in result.output, result.stderr
    return lines[0]


@pytest.mark.parametrize("args, expected", [
    (["run", "--pipeline", "predicton"], "(did you mean 'prediction'?)"),
    (["plan", "swep"], "unknown pipeline 'swep' (did you mean 'sweep'?)"),
    (["plan", "--pipeline", "trainig"], "unknown pipeline 'trainig' (did you mean 'training'?)"),
])
def test_a_mistyped_pipeline_names_the_closest(args, expected):
    assert expected in _refusal(args, exit_code=2)


def test_submit_names_the_closest_pipeline_environment_and_parameter(tmp_path, write_config,
                                                                      monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = str(write_config(config_dict(UNREACHABLE, None)))
    base = ["--target", "gke", "--config", path, "--dry-run"]
    assert "unknown pipeline 'swep' (did you mean 'sweep'?)" in _refusal(
        ["submit", "swep", *base])
    assert "environment 'prdo' is not under parameters in gkeflow.yaml (did you mean " \
           "'prod'?)" in _refusal(["submit", "training", "--env", "prdo", *base])
    assert "has no parameter 'epoch' (did you mean 'epochs'?)" in _refusal(
        ["submit", "training", "--param", "epoch=3", *base])


def test_environment_names_in_gkeflow_yaml_name_the_closest(tmp_path, write_config):
    schedules = [{"name": "nightly", "pipeline": "training", "target": "gke",
                  "cron": "0 3 * * *", "environment": "prdo"}]
    path = write_config(config_dict(UNREACHABLE, None, schedules=schedules))
    assert "schedules.0.environment: 'prdo' is not under parameters (did you mean " \
           "'prod'?)" in _refusal(["plan", "--config", str(path)])
    path = write_config(config_dict(UNREACHABLE, None, notifications={
        "prdo": {"webhook": {"gke_secret": "hook"}}}))
    assert "notifications.prdo: no such environment under parameters (did you mean " \
           "'prod'?)" in _refusal(["plan", "--config", str(path)])
    path = write_config(config_dict(UNREACHABLE, None, schedules=[
        {**schedules[0], "environment": "default", "pipeline": "trainig"}]))
    assert "unknown pipeline 'trainig' (did you mean 'training'?)" in _refusal(
        ["plan", "--config", str(path)])


def test_run_names_the_closest_label_and_compute_step(tmp_path, write_csv):
    data = write_csv("id,amount,decision\n1,2.0,yes\n2,3.5,no\n3,1.0,yes\n")
    line = _refusal(["run", "--data", str(data), "--label", "decison", "--output",
                     str(tmp_path / "out")])
    assert "label_column: unknown column(s) 'decison' (did you mean 'decision'?)" in line
    assert not (tmp_path / "out").exists()
    assert "unknown step 'train-modle' (did you mean 'train-model'?)" in _refusal(
        ["run", "--compute", "train-modle.cpu=2"], exit_code=2)
    assert "(did you mean 'accelerator'?)" in _refusal(
        ["compile", "--check", "--compute", "train-model.acelerator=nvidia-l4"], exit_code=2)
