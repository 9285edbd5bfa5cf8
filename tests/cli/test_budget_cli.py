"""The budget guard of `gkeflow submit --dry-run` and `gkeflow schedule apply --dry-run`
(offline), over a price cache written by the test beside gkeflow.yaml."""

from __future__ import annotations

import json
import re
import socket

import yaml

from tests.cli.test_cost_cli import write_cache
from tests.integration.conftest import config_dict, gkeflow

A100 = {"accelerator": "nvidia-tesla-a100", "accelerator_count": 1, "cpu": "4",
        "memory": "16G", "timeout_s": 7200, "replicas": 2}  # 2 x $4.00/h x 2h = $16


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write(tmp_path, budget=None, schedule_budget=None, train=A100, cache=True, host=None):
    schedule = {"name": "nightly", "target": "gke", "cron": "0 2 * * *"}
    if schedule_budget is not None:
        schedule["budget"] = (schedule_budget if isinstance(schedule_budget, dict)
                              else {"max_run_usd": schedule_budget})
    data = config_dict(host or f"http://127.0.0.1:{_closed_port()}", None, schedules=[schedule],
                       compute={"train-model": train})
    if budget is not None:
        data["budget"] = {"default": {"max_run_usd": budget}}
    (tmp_path / "gkeflow.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    if cache:
        write_cache(tmp_path)


CEILING = r"\$16\.\d\d"  # 2 x $4.00/h x 2h of training, and cents of CPU-only steps


def submit(tmp_path, *extra):
    return gkeflow("submit", "--target", "gke", "--dry-run", *extra, cwd=tmp_path,
                   env={"GKEFLOW_TEST_KFP_TOKEN": "t"})


def test_a_ceiling_over_the_budget_is_refused_in_one_line_naming_the_costliest_step(tmp_path):
    write(tmp_path, budget=10)
    result = submit(tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert re.search(rf"the run's ceiling {CEILING} exceeds budget.default \(\$10.00\); "
                     r"most from train-model \(\$16.00\)", result.stderr), result.stderr
    assert "--over-budget" in result.stderr and "POST" not in result.stdout

    allowed = submit(tmp_path, "--over-budget")
    assert allowed.returncode == 0, allowed.stderr
    assert "warning: would be submitted with --over-budget: the run's ceiling" in allowed.stdout
    assert "/apis/v2beta1/runs" in allowed.stdout


def test_over_budget_is_not_called_submitted_when_the_submission_is_refused(tmp_path,
                                                                            httpserver):
    httpserver.expect_request("").respond_with_json(  # every request: not allowed
        {"error": "not allowed", "code": 7, "message": "not allowed"}, status=403)
    write(tmp_path, budget=10, host=httpserver.url_for("").rstrip("/"))
    refused = gkeflow("submit", "--target", "gke", "--over-budget", cwd=tmp_path,
                      env={"GKEFLOW_TEST_KFP_TOKEN": "t"})
    assert refused.returncode != 0 and "403" in refused.stderr, refused.stderr
    assert "submitted with --over-budget" not in refused.stdout + refused.stderr
    assert httpserver.log  # the submission reached the server and was refused there


def test_a_ceiling_that_cannot_be_computed_is_refused_with_the_reason(tmp_path):
    write(tmp_path, budget=100, train={**A100, "scheduling": "flex-start"})  # no DWS price
    result = submit(tmp_path)
    assert result.returncode == 1 and len(result.stderr.strip().splitlines()) == 1
    assert "cannot check the run against budget.default ($100.00): no ceiling for " \
           "train-model: no flex-start" in result.stderr
    assert "pass --over-budget to submit anyway" in result.stderr


H100_SPOT = {"accelerator": "nvidia-h100-80gb", "accelerator_count": 8, "scheduling": "spot"}


def test_8_h100_on_spot_passes_a_2000_budget_with_no_flag_and_a_5_budget_refuses(tmp_path):
    """At the vendored list prices the whole run is priced, so a budget can say yes: the
    approval says by how much, and `plan` gives the same verdict; $5 refuses in one line."""
    write(tmp_path, budget=2000, train=H100_SPOT, cache=False)
    planned = gkeflow("plan", "--target", "gke", "--output", "json", cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    cost = json.loads(planned.stdout)["cost"]
    assert cost["ceiling_usd"] is not None
    verdict = cost["budget"]
    assert verdict["verdict"] == "under" and verdict["budget"] == "budget.default"
    assert verdict["margin_usd"] == round(2000 - cost["ceiling_usd"], 4)
    accepted = submit(tmp_path)
    assert accepted.returncode == 0, accepted.stderr
    assert f"budget: ceiling ${cost['ceiling_usd']:,.2f} is under budget.default ($2,000.00)" \
           in accepted.stdout and "--over-budget" not in accepted.stdout

    write(tmp_path, budget=5, train=H100_SPOT, cache=False)
    refused = submit(tmp_path)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    # train-model's GPUs go to the Keras candidate of model_type auto (the default)
    assert "exceeds budget.default ($5.00); most from train-mlp" in refused.stderr
    table = gkeflow("plan", "--target", "gke", cwd=tmp_path, env={"COLUMNS": "300"})
    assert f"budget: ceiling ${cost['ceiling_usd']:,.2f} is over budget.default ($5.00) by " \
           in table.stdout and "most from train-mlp" in table.stdout


def test_a_schedules_month_is_held_to_its_monthly_budget(tmp_path):
    """A daily schedule runs about 30.4 times a month: x the run's ceiling, against
    max_month_usd (an upper bound, before any run gives a median)."""
    write(tmp_path, schedule_budget={"max_month_usd": 100})
    refused = gkeflow("schedule", "apply", "--dry-run", cwd=tmp_path)
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1
    assert re.search(rf"30\.4 runs a month x ceiling {CEILING} = at most \$4\d\d\.\d\d, over "
                     r"schedule nightly's budget \(\$100\.00 a month\)", refused.stderr), \
        refused.stderr
    write(tmp_path, schedule_budget={"max_month_usd": 1000, "max_run_usd": 20})
    accepted = gkeflow("schedule", "apply", "--dry-run", cwd=tmp_path)
    assert accepted.returncode == 0, accepted.stderr
    assert "schedule nightly: budget: ceiling $16." in accepted.stdout
    assert "within schedule nightly's budget ($1,000.00 a month)" in accepted.stdout


def test_no_budget_no_check(tmp_path):
    write(tmp_path)
    result = submit(tmp_path)
    assert result.returncode == 0, result.stderr


def test_schedule_apply_holds_each_schedule_to_its_own_budget(tmp_path):
    write(tmp_path, budget=1000, schedule_budget=5)
    result = gkeflow("schedule", "apply", "--dry-run", cwd=tmp_path)
    assert result.returncode == 1 and len(result.stderr.strip().splitlines()) == 1
    assert re.search(rf"schedule nightly: training on gke: the run's ceiling {CEILING} "
                     r"exceeds schedule nightly's budget \(\$5.00\)", result.stderr)
    allowed = gkeflow("schedule", "apply", "--dry-run", "--over-budget", cwd=tmp_path)
    assert allowed.returncode == 0, allowed.stderr
    assert "would create" in allowed.stdout
    assert "schedule nightly: would be scheduled with --over-budget" in allowed.stdout


def test_budget_config_is_validated():
    import pytest

    from gkeflow.pipelines.settings.config import GkeflowConfig

    with pytest.raises(ValueError, match="budget.staging: no such environment"):
        GkeflowConfig.model_validate({"budget": {"staging": {"max_run_usd": 5}}})
    with pytest.raises(ValueError, match="max_run_usd"):
        GkeflowConfig.model_validate({"budget": {"default": {"max_run_usd": 0}}})
    with pytest.raises(ValueError, match="give max_run_usd"):
        GkeflowConfig.model_validate({"budget": {"default": {}}})
