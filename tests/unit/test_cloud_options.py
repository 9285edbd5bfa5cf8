"""The launchers' reliability options: flags, environment, component parameters."""

from __future__ import annotations

import argparse

import pytest

from gkeflow.components.cloud import options
from gkeflow.components.sweep import vizier


def parse(argv, monkeypatch, **env):
    for name in ("GKEFLOW_CALL_TIMEOUT_S", "GKEFLOW_RETRY_BUDGET_S"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    parser = argparse.ArgumentParser()
    options.add_arguments(parser)
    return options.policy_from_args(parser.parse_args(argv))


def test_defaults_environment_then_flags(monkeypatch):
    policy = parse([], monkeypatch)
    assert (policy.call_timeout_s, policy.budget_s) == (60.0, 900.0)
    policy = parse([], monkeypatch, GKEFLOW_CALL_TIMEOUT_S="30", GKEFLOW_RETRY_BUDGET_S="120")
    assert (policy.call_timeout_s, policy.budget_s) == (30.0, 120.0)
    policy = parse(["--call-timeout", "5", "--retry-budget", "3600"], monkeypatch,
                   GKEFLOW_CALL_TIMEOUT_S="30", GKEFLOW_RETRY_BUDGET_S="120")
    assert (policy.call_timeout_s, policy.budget_s) == (5.0, 3600.0)


def test_component_parameters_of_zero_leave_the_environment(monkeypatch):
    monkeypatch.setenv("GKEFLOW_RETRY_BUDGET_S", "240")
    monkeypatch.delenv("GKEFLOW_CALL_TIMEOUT_S", raising=False)
    policy = options.policy_from(0.0, 0.0)
    assert (policy.call_timeout_s, policy.budget_s) == (60.0, 240.0)
    assert options.policy_from(7.0, 70.0).budget_s == 70.0


@pytest.mark.parametrize("bad", ["0", "-3", "soon"])
def test_bad_values_are_refused(bad, monkeypatch, capsys):
    with pytest.raises(SystemExit):
        parse(["--retry-budget", bad], monkeypatch)
    assert "--retry-budget" in capsys.readouterr().err
    with pytest.raises(ValueError, match="GKEFLOW_CALL_TIMEOUT_S"):
        parse([], monkeypatch, GKEFLOW_CALL_TIMEOUT_S=bad)


def test_the_tuning_step_outside_vertex_ends_in_one_line(monkeypatch, capsys):
    from gkeflow.components.cloud.follow import run_step

    for name in ("CLOUD_ML_PROJECT_ID", "CLOUD_ML_REGION", "GOOGLE_CLOUD_REGION",
                 "GKEFLOW_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SystemExit) as info:
        run_step(vizier.step_location)
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "runs on Vertex AI Pipelines only" in err
    monkeypatch.setenv("CLOUD_ML_PROJECT_ID", "p")
    monkeypatch.setenv("CLOUD_ML_REGION", "europe-west4")
    assert run_step(vizier.step_location) == ("p", "europe-west4")
