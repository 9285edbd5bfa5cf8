"""`gkeflow runs show` prints each step's duration x rate and the run's total, on the fake KFP
and Vertex servers, over a price cache written by the test beside gkeflow.yaml."""

from __future__ import annotations

import json
import re

import pytest

from gkeflow.pipelines.targets.runs import step_key
from gkeflow.pipelines.targets.submit import submit
from tests.cli.test_cost_cli import write_cache
from tests.integration.conftest import TOKEN, config_dict, gkeflow
from tests.integration.test_runs import _backend, kfp_runs, vertex_runs  # noqa: F401

A100 = {"accelerator": "nvidia-tesla-a100", "accelerator_count": 1, "cpu": "4",
        "memory": "16G", "timeout_s": 7200, "replicas": 2}  # 2 x $4.00/h on GKE


@pytest.fixture
def finished(kfp_runs, vertex_runs, token_env, make_config, tmp_path):  # noqa: F811
    data = config_dict(kfp_runs.url, vertex_runs.url, compute={"train-model": A100})
    config = make_config(kfp_runs.url, vertex_runs.url, compute={"train-model": A100})
    runs = {}
    for target, server in (("gke", kfp_runs), ("vertex", vertex_runs)):
        submission, _ = submit(config, "training", target, environment="default", overrides={},
                               workdir=tmp_path / target, backend=_backend(config, target),
                               version="gabc")
        server.finish(submission.run_id)
        runs[target] = submission.run_id
    return data, runs


def _show(tmp_path, write_config, data, run_id, target, *extra):
    result = gkeflow("runs", "show", run_id, "--target", target, "--config",
                     str(write_config(data)), *extra, cwd=tmp_path,
                     env={"GKEFLOW_TEST_KFP_TOKEN": TOKEN, "COLUMNS": "300"})
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_runs_show_prices_each_step_on_gke(finished, write_config, tmp_path):
    data, runs = finished
    write_cache(tmp_path)
    shown = json.loads(_show(tmp_path, write_config, data, runs["gke"], "gke",
                             "--output", "json"))
    durations = {step_key(t["name"]): t["duration_s"] for t in shown["tasks"]}
    cost = shown["cost"]
    assert cost["label"] == "estimate from list prices"
    steps = {row["step"]: row for row in cost["steps"]}
    train = steps["train-model"]
    assert train["duration_s"] == durations["train-model"] > 0
    assert train["usd"] == pytest.approx(8.0 * durations["train-model"] / 3600, abs=1e-4)
    # CPU-only steps: their requests at the e2 node pool's rates, so the total is known
    assert steps["prepare-data"]["usd"] > 0 and not steps["prepare-data"]["reason"]
    assert cost["total_usd"] == pytest.approx(sum(row["usd"] for row in steps.values()),
                                              abs=1e-3)

    table = _show(tmp_path, write_config, data, runs["gke"], "gke")
    assert "cost (estimate from list prices, us-central1" in table
    assert f"total ${cost['total_usd']:,.2f}" in table
    line = next(row for row in table.splitlines() if "Train model" in row)
    assert f"${train['usd']:,.2f}" in line

    # plan --history: the expected cost at the median duration of the succeeded runs
    planned = gkeflow("plan", "--target", "gke", "--history", "5", "--output", "json",
                      "--config", str(write_config(data)), cwd=tmp_path,
                      env={"GKEFLOW_TEST_KFP_TOKEN": TOKEN})
    assert planned.returncode == 0, planned.stderr
    cost = json.loads(planned.stdout)["cost"]
    assert cost["history_runs"] == 1
    expected = {row["step"]: row for row in cost["steps"]}["train-model"]
    assert expected["median_s"] == durations["train-model"]
    assert expected["expected_usd"] == train["usd"]


def test_runs_show_on_vertex_derives_the_training_rate(finished, write_config, tmp_path):
    """No Vertex AI row for a2-highgpu-1g: Compute Engine's rate (the cache's $4.00/h a
    node) x Vertex AI's markup of the reference machine, for each of the two nodes."""
    from gkeflow.pipelines.compute.derived_rates import vertex_markup
    from gkeflow.pipelines.compute.prices import current_prices

    data, runs = finished
    write_cache(tmp_path)
    shown = json.loads(_show(tmp_path, write_config, data, runs["vertex"], "vertex",
                             "--output", "json"))
    train = {row["step"]: row for row in shown["cost"]["steps"]}["train-model"]
    markup, rule = vertex_markup("a2-highgpu-1g", "nvidia-tesla-a100", 1, "us-central1",
                                 current_prices(tmp_path))
    assert rule.startswith("n1-standard-4's Vertex AI / Compute Engine on-demand rates")
    assert train["usd"] == pytest.approx(2 * 4.0 * markup * train["duration_s"] / 3600,
                                         abs=1e-3)
    table = _show(tmp_path, write_config, data, runs["vertex"], "vertex")
    line = next(row for row in table.splitlines() if "train-model" in row)
    assert "missing" not in line


def test_schedule_list_shows_a_monthly_estimate_from_cron_and_history(
        kfp_runs, token_env, make_config, write_config, tmp_path):  # noqa: F811
    from gkeflow.pipelines.targets.schedule import apply

    daily = {"name": "daily", "target": "gke", "cron": "0 2 * * *"}
    config = make_config(kfp_runs.url, None, schedules=[daily], compute={"train-model": A100})
    apply(config, workdir=tmp_path, backends={"gke": _backend(config, "gke")})
    (recurring_id,) = kfp_runs.recurring_runs
    path = write_config(config_dict(kfp_runs.url, None, schedules=[daily],
                                    compute={"train-model": A100}))
    write_cache(tmp_path)
    env = {"GKEFLOW_TEST_KFP_TOKEN": TOKEN, "COLUMNS": "400"}
    before = gkeflow("schedule", "list", "--config", str(path), cwd=tmp_path, env=env)
    assert before.returncode == 0, before.stderr
    # no run yet: the ceiling (2 x $4.00/h x 2h, and cents of CPU steps) is the bound
    assert re.search(r"at most \$4\d\d\.\d\d \(30\.4 runs x ceiling \$16\.\d\d\)",
                     before.stdout), before.stdout

    fired = kfp_runs.fire(recurring_id)
    kfp_runs.finish(fired)
    shown = gkeflow("runs", "show", fired, "--target", "gke", "--output", "json", "--config",
                    str(path), cwd=tmp_path, env=env)
    train = next(t for t in json.loads(shown.stdout)["tasks"]
                 if step_key(t["name"]) == "train-model")
    assert train["duration_s"] > 0
    after = gkeflow("schedule", "list", "--config", str(path), cwd=tmp_path, env=env)
    assert after.returncode == 0, after.stderr
    # one succeeded run: its step durations price the month, not the ceiling
    assert re.search(r"\$[\d.,]+ \(30\.4 runs x \$[\d.,]+\)", after.stdout), after.stdout
    assert "ceiling" not in after.stdout.split("monthly:")[0].split("daily")[-1]


def test_submit_gives_the_expected_cost_from_the_earlier_runs(finished, write_config,
                                                               tmp_path):
    """A real submit reads the newest succeeded runs of the pipeline and gives the expected
    cost at their median step durations beside the ceiling; a dry run reads nothing."""
    data, runs = finished
    write_cache(tmp_path)
    path = str(write_config(data))
    env = {"GKEFLOW_TEST_KFP_TOKEN": TOKEN, "COLUMNS": "300"}
    planned = gkeflow("plan", "--target", "gke", "--history", "5", "--output", "json",
                      "--config", path, cwd=tmp_path, env=env)
    expected = json.loads(planned.stdout)["cost"]["expected_usd"]
    assert expected is not None
    sent = gkeflow("submit", "--target", "gke", "--config", path, cwd=tmp_path, env=env)
    assert sent.returncode == 0, sent.stderr
    assert f"; expected ${expected:,.2f} (median step durations of 1 earlier run)" in \
        " ".join(sent.stdout.split())
    dry = gkeflow("submit", "--target", "gke", "--dry-run", "--config", path, cwd=tmp_path,
                  env=env)
    assert dry.returncode == 0, dry.stderr
    assert "expected $" not in dry.stdout
