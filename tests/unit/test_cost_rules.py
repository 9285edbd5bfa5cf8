"""How capacity and platform change a step's price, on the vendored catalogue: Vertex AI's
management fee on Spot and reservations, flex-start from the DWS SKUs, GKE Autopilot's
accelerator pods, and which stale prices a plan flags."""

from datetime import date

import pytest

from gkeflow.pipelines.cli.costs import cost_lines, stale_that_matter
from gkeflow.pipelines.compute import derived_rates, prices
from gkeflow.pipelines.compute.costing import run_cost, step_cost
from gkeflow.pipelines.compute.derived_rates import Cluster
from gkeflow.pipelines.compute.prices import Price
from gkeflow.pipelines.compute.profiles import ComputeProfile

TODAY = date(2026, 12, 7)
REGION = "us-central1"


def h100(scheduling="standard", **fields) -> ComputeProfile:
    return ComputeProfile(**{"cpu": "96", "memory": "624Gi", "accelerator": "nvidia-h100-80gb",
                             "accelerator_count": 8, "timeout_s": 3600,
                             "scheduling": scheduling, **fields})


def engine(capacity: str) -> float:
    return prices.hourly_rate("gke", "a3-highgpu-8g", "nvidia-h100-80gb", 8, capacity,
                              REGION).usd_per_hour


@pytest.mark.parametrize("scheduling", ["spot", "reservation"])
def test_vertex_spot_and_reservation_add_the_management_fee_to_compute_engine(scheduling):
    cost = step_cost("train-model", h100(scheduling), "vertex", REGION, today=TODAY)
    fee = derived_rates.MANAGEMENT_FEE_SHARE * engine("standard")
    base = engine("spot") if scheduling == "spot" else 0.0
    assert cost.usd_per_hour == pytest.approx(base + fee, abs=1e-3)
    assert cost.basis == "derived" and "management fee" in cost.derived
    assert "cloud.google.com/vertex-ai/pricing" in cost.derived
    # a reservation's ceiling is the fee for the timeout, not nothing
    assert cost.ceiling_usd == pytest.approx(cost.usd_per_hour, abs=1e-3)
    run = run_cost({"train-model": h100(scheduling)}, "vertex", REGION, today=TODAY)
    launcher = run.steps[1]
    assert launcher.step == "train-model (launcher)" and launcher.usd_per_hour > 0
    assert run.ceiling_usd == pytest.approx(
        cost.ceiling_usd + launcher.ceiling_usd + run.run_fee_usd, abs=1e-3)


def test_the_fee_share_is_the_one_the_billed_fee_skus_show():
    """1.4694826 (the H100's fee SKU) / 9.79655057 (the price list's H100) is 15%."""
    assert 1.4694826 / 9.79655057 == pytest.approx(derived_rates.MANAGEMENT_FEE_SHARE, rel=1e-4)


def test_reservation_on_gke_is_paid_by_the_reservation_and_left_out():
    run = run_cost({"train-model": h100("reservation")}, "gke", REGION, today=TODAY)
    step = run.steps[0]
    assert step.reserved and step.usd_per_hour is None and run.ceiling_usd == 0.0


def test_gke_flex_start_h100_is_priced_from_the_dws_skus():
    cost = step_cost("train-model", h100("flex-start"), "gke", REGION, today=TODAY)
    row = prices.find_price("instance", "a3-highgpu-8g", "flex-start", REGION)
    assert cost.usd_per_hour == pytest.approx(row.usd_per_hour, abs=1e-4)
    assert 38.0 < cost.usd_per_hour < 39.0 and cost.basis == "billed"
    assert cost.on_demand_usd_per_hour > cost.usd_per_hour
    # another region: missing with the reason, never a discount off on demand
    other = step_cost("train-model", h100("flex-start"), "gke", "europe-west4", today=TODAY)
    assert other.usd_per_hour is None and "DWS" in other.reason


@pytest.mark.parametrize("accelerator, count", [("nvidia-l4", 1), ("tpu-v6e", 4)])
def test_autopilot_accelerator_pods_are_missing_with_the_reason_not_standard_nodes(accelerator,
                                                                                   count):
    tpu = {"topology": "2x2"} if accelerator.startswith("tpu") else {}
    profile = ComputeProfile(cpu="4", memory="16G", accelerator=accelerator,
                             accelerator_count=count, timeout_s=3600, **tpu)
    standard = step_cost("train-model", profile, "gke", REGION, today=TODAY)
    autopilot = step_cost("train-model", profile, "gke", REGION, today=TODAY,
                          cluster=Cluster(autopilot=True))
    assert standard.usd_per_hour is not None
    assert autopilot.usd_per_hour is None
    assert "GKE Autopilot" in autopilot.reason and "not priced as a Standard node" in \
        autopilot.reason


def test_staleness_follows_the_data_date_not_the_reading():
    fresh_read_old_data = Price("machine", "a2-highgpu-1g", "standard", REGION, 1.0, "src",
                                TODAY, data_date=date(2024, 5, 24))
    rate = prices.hourly_rate("gke", "a2-highgpu-1g", None, 0, "standard", REGION,
                              today=TODAY, prices=(fresh_read_old_data,))
    assert rate.stale and rate.date_read == date(2024, 5, 24) and rate.read_on == TODAY


def test_only_the_stale_prices_that_matter_are_flagged():
    old = date(2025, 1, 1)
    rows = (Price("instance", "a3-highgpu-8g", "standard", REGION, 80.0, "big-src", TODAY, "",
                  "USD", old),
            Price("vcpu", "e2", "standard", REGION, 0.02, "small-src", TODAY, "", "USD", old),
            Price("ram-gib", "e2", "standard", REGION, 0.003, "small-src", TODAY, "", "USD",
                  old))
    small = ComputeProfile(cpu="1", memory="2G", timeout_s=600)
    run = run_cost({"prepare-data": small, "train-model": h100()}, "gke", REGION,
                   today=TODAY, prices=rows)
    matter, others = stale_that_matter(run)
    assert [step.step for step in matter] == ["train-model"] and others == 1
    lines = cost_lines(run, sources=True)
    assert lines[1] == ("prices as of 2025-01-01 (the dates their data was published or "
                        f"billed; read {TODAY}; `--sources` lists the sources)")
    assert any(line.startswith("note: stale prices (data over 90 days old) for train-model "
                               "(data of 2025-01-01); 1 smaller step(s)") for line in lines)
    assert "source big-src: big-src" in lines and "source small-src: small-src" in lines
