"""Costing over a price catalogue given in the test: rates, ceilings, totals, savings."""

from datetime import date

from gkeflow.pipelines.compute.costing import (
    actual_cost,
    format_usd,
    median_durations,
    run_cost,
    step_cost,
)
from gkeflow.pipelines.compute.prices import Price
from gkeflow.pipelines.compute.profiles import ComputeProfile

READ = date(2026, 12, 1)
PRICES = (
    Price("machine", "a2-highgpu-1g", "standard", "us-central1", 1.0, "src", READ),
    Price("machine", "a2-highgpu-1g", "spot", "us-central1", 0.5, "src", READ),
    Price("gpu", "nvidia-tesla-a100", "standard", "us-central1", 3.0, "src", READ),
    Price("gpu", "nvidia-tesla-a100", "spot", "us-central1", 1.0, "src", READ),
)
TODAY = date(2026, 12, 2)


def a100(**fields) -> ComputeProfile:
    return ComputeProfile(**{"cpu": "4", "memory": "16G", "accelerator": "nvidia-tesla-a100",
                             "accelerator_count": 1, "timeout_s": 7200, **fields})


def test_rate_and_ceiling_multiply_out_nodes():
    cost = step_cost("train-model", a100(replicas=3), "gke", "us-central1", today=TODAY,
                     prices=PRICES)
    assert (cost.nodes, cost.usd_per_hour, cost.ceiling_usd) == (3, 12.0, 24.0)
    assert cost.source == "src" and cost.date_read == "2026-12-01"


def test_spot_saving_against_on_demand():
    cost = step_cost("train-model", a100(scheduling="spot"), "gke", "us-central1",
                     today=TODAY, prices=PRICES)
    assert (cost.usd_per_hour, cost.on_demand_usd_per_hour, cost.saving_pct) == (1.5, 4.0, 62.5)


def test_missing_price_is_missing_with_its_reason():
    cost = step_cost("train-model", a100(), "gke", "europe-west4", today=TODAY, prices=PRICES)
    assert cost.usd_per_hour is None and cost.ceiling_usd is None
    assert "europe-west4" in cost.reason
    assert format_usd(cost.ceiling_usd) == "missing"


def test_reservation_is_reserved_and_left_out_of_totals():
    profiles = {"train-model": a100(scheduling="reservation", reservation="r1"),
                "other": a100()}
    run = run_cost(profiles, "gke", "us-central1", today=TODAY, prices=PRICES)
    reserved = run.steps[0]
    assert reserved.reserved and reserved.usd_per_hour is None
    assert run.ceiling_usd == 8.0


def test_run_ceiling_missing_names_the_step():
    profiles = {"prepare-data": ComputeProfile(timeout_s=600), "train-model": a100()}
    run = run_cost(profiles, "gke", "us-central1", today=TODAY, prices=PRICES)
    assert run.ceiling_usd is None
    assert run.ceiling_reason.startswith("no ceiling for prepare-data: ")
    assert run.costliest.step == "train-model"


def test_no_timeout_leaves_the_ceiling_unbounded():
    cost = step_cost("train-model", a100(timeout_s=0), "gke", "us-central1", today=TODAY,
                     prices=PRICES)
    assert cost.usd_per_hour == 4.0 and cost.ceiling_usd is None
    assert "unbounded" in cost.reason


def test_expected_cost_from_median_durations():
    medians = median_durations([{"train-model": 1800}, {"train-model": 3600},
                                {"train-model": 5400, "x": None}])
    assert medians == {"train-model": 3600}
    run = run_cost({"train-model": a100()}, "gke", "us-central1", medians=medians,
                   today=TODAY, prices=PRICES)
    assert run.expected_usd == 4.0


def test_expected_cost_without_history_is_missing():
    run = run_cost({"train-model": a100()}, "gke", "us-central1", today=TODAY, prices=PRICES)
    assert run.expected_usd is None and "no earlier run" in run.expected_reason


def test_actual_cost_is_duration_times_rate():
    cost = actual_cost({"train-model": 900.0}, {"train-model": a100(replicas=2)}, "gke",
                       "us-central1", today=TODAY, prices=PRICES)
    assert cost.steps[0] == ("train-model", 900.0, 2.0, "")
    # the JobSet's launcher pod lives as long as the step: its row, missing here (the test
    # catalogue has no e2 rate), and so is the total, with the reason
    launcher = cost.steps[1]
    assert launcher[:3] == ("train-model (launcher)", 900.0, None) and "e2" in launcher[3]
    assert cost.total_usd is None and cost.label == "estimate from list prices"
    one = actual_cost({"train-model": 900.0}, {"train-model": a100()}, "gke", "us-central1",
                      today=TODAY, prices=PRICES)
    assert one.steps == [("train-model", 900.0, 1.0, "")] and one.total_usd == 1.0


def test_vertex_rates_are_missing_not_invented():
    cost = step_cost("train-model", a100(), "vertex", "us-central1", today=TODAY,
                     prices=PRICES)
    assert cost.usd_per_hour is None and "Vertex" in cost.reason


def test_runs_per_month_from_the_cron():
    from gkeflow.pipelines.compute.costing import runs_per_month

    assert runs_per_month("0 2 * * *", "UTC", date(2026, 1, 1)) == 365 / 12
    assert runs_per_month("0 */6 * * *", "Europe/Berlin", date(2026, 1, 1)) == 4 * 365 / 12
    assert runs_per_month("30 1 1 * *", "UTC", date(2026, 3, 5)) == 1
    # Mondays of 2027 (from 2027-01-01, a Friday): 52
    assert runs_per_month("0 3 * * 1", "UTC", date(2027, 1, 1)) == 52 / 12


def test_a_plan_with_no_priced_step_shows_no_zero_floor():
    from gkeflow.pipelines.cli.costs import cost_lines
    from gkeflow.pipelines.compute.costing import RunCost, StepCost

    unpriced = StepCost(step="train-model", nodes=1, usd_per_hour=None, ceiling_usd=None,
                        timeout_s=3600, reason="no price for tpu-v9")
    run = RunCost(steps=[unpriced], region="us-central1", ceiling_usd=None,
                  ceiling_reason="no ceiling for train-model", expected_usd=None,
                  expected_reason="no history")
    first = cost_lines(run)[0]
    assert "$0.00" not in first and "at least" not in first
    assert first.endswith("missing (no ceiling for train-model); no step of this run is priced")
    priced = StepCost(step="prepare-data", nodes=1, usd_per_hour=1.0, ceiling_usd=2.5,
                      timeout_s=9000)
    run = RunCost(steps=[unpriced, priced], region="us-central1", ceiling_usd=None,
                  ceiling_reason="no ceiling for train-model", expected_usd=None,
                  expected_reason="no history")
    assert "at least $2.50 from the priced steps" in cost_lines(run)[0]
