"""Cost figures in `gkeflow plan`, through the console script, over a price cache written by
the test beside gkeflow.yaml."""

from __future__ import annotations

import csv
import json
from datetime import date

import pytest

from gkeflow.pipelines.compute import prices
from gkeflow.pipelines.compute.costing import format_usd
from gkeflow.pipelines.compute.prices import CACHE_FILE, Price, write_prices
from tests.integration.conftest import gkeflow

TODAY = date.today()
#: train-model's compute goes to the Keras candidate of model_type auto (the default), priced
#: as train-mlp; with replicas > 1 train-model trains the candidates itself.
A100 = ("--compute", "train-model.accelerator=nvidia-tesla-a100",
        "--compute", "train-model.accelerator_count=1", "--compute", "train-model.cpu=4",
        "--compute", "train-model.memory=16G", "--compute", "train-model.timeout_s=7200")


def write_cache(directory, region="us-central1", rows=()):
    rows = rows or (
        Price("machine", "a2-highgpu-1g", "standard", region, 1.0, "test-src", TODAY),
        Price("machine", "a2-highgpu-1g", "spot", region, 0.5, "test-src", TODAY),
        Price("gpu", "nvidia-tesla-a100", "standard", region, 3.0, "test-src", TODAY),
        Price("gpu", "nvidia-tesla-a100", "spot", region, 1.0, "test-src", TODAY),
    )
    write_prices(directory / CACHE_FILE, rows, "prices for a test")


def plan_json(tmp_path, *args):
    result = gkeflow("plan", *A100, *args, "--output", "json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    cost = json.loads(result.stdout)["cost"]
    return cost, {step["step"]: step for step in cost["steps"]}


def test_plan_prices_spot_multi_node_training_with_saving_and_source(tmp_path):
    write_cache(tmp_path)
    cost, steps = plan_json(tmp_path, "--target", "gke", "--compute",
                            "train-model.scheduling=spot", "--compute", "train-model.replicas=3")
    train = steps["train-model"]
    assert (train["nodes"], train["usd_per_hour"], train["ceiling_usd"]) == (3, 4.5, 9.0)
    assert (train["on_demand_usd_per_hour"], train["saving_pct"]) == (12.0, 62.5)
    assert (train["source"], train["date_read"]) == ("test-src", TODAY.isoformat())
    assert cost["label"] == "estimate from list prices" and cost["region"] == "us-central1"
    # a CPU-only step pays for its requests at the e2 node pool's per-vCPU and per-GiB
    # rates (vendored, derived from the e2 machine types): an estimate that says so
    prepare = steps["prepare-data"]
    vcpu = prices.find_price("vcpu", "e2", "standard", "us-central1")
    gib = prices.find_price("ram-gib", "e2", "standard", "us-central1")
    assert prepare["usd_per_hour"] == pytest.approx(
        2 * vcpu.usd_per_hour + 8e9 / 2**30 * gib.usd_per_hour, abs=1e-4)
    assert prepare["estimate"] and "e2 node pool" in prepare["derived"]
    assert cost["ceiling_usd"] == pytest.approx(sum(s["ceiling_usd"] for s in steps.values()),
                                                abs=1e-3)

    table = gkeflow("plan", "--wide", *A100, "--target", "gke", "--compute",
                    "train-model.scheduling=spot", "--compute", "train-model.replicas=3",
                    cwd=tmp_path, env={"COLUMNS": "400"})
    assert table.returncode == 0, table.stderr
    line = next(row for row in table.stdout.splitlines() if "train-model" in row)
    assert "$4.50/h (3 nodes), 62.5% under on demand $12.00/h" in line and "$9.00" in line
    # the test's rows do not say when their data dates from: the line says so
    assert f"[published, read {TODAY}, data date unknown: test-src]" in table.stdout
    assert f" to {TODAY} (the dates their data was published or billed" in table.stdout
    assert f"ceiling per run {format_usd(cost['ceiling_usd'])}" in table.stdout
    assert "note: rate of fingerprint-data, register-model, train-model (launcher) is an " \
           "estimate: 1 vCPU and 1.86 GiB requested x the e2 node pool's per-vCPU and per-GiB " \
           "rates" in table.stdout
    # the JobSet's launcher pod is priced for the JobSet's deadline and its provisioning
    launcher = steps["train-model (launcher)"]
    assert launcher["usd_per_hour"] == steps["fingerprint-data"]["usd_per_hour"]
    assert launcher["timeout_s"] > train["timeout_s"]


def test_plan_region_option_and_reservation_shown_as_reserved(tmp_path):
    write_cache(tmp_path, region="europe-west4")
    _cost, steps = plan_json(tmp_path, "--target", "gke", "--region", "europe-west4")
    assert steps["train-mlp"]["usd_per_hour"] == 4.0
    _cost, steps = plan_json(tmp_path, "--target", "gke")  # us-central1: not in the cache
    assert steps["train-mlp"]["usd_per_hour"] != 4.0
    cost, steps = plan_json(tmp_path, "--target", "gke", "--region", "europe-west4",
                            "--compute", "train-model.scheduling=reservation",
                            "--compute", "train-model.reservation=my-res")
    assert steps["train-mlp"]["reserved"] and steps["train-mlp"]["usd_per_hour"] is None
    table = gkeflow("plan", "--wide", *A100, "--target", "gke", "--compute",
                    "train-model.scheduling=reservation", "--compute",
                    "train-model.reservation=my-res", cwd=tmp_path, env={"COLUMNS": "400"})
    line = next(row for row in table.stdout.splitlines() if "train-mlp" in row)
    assert "reserved" in line and "$0" not in line


def test_plan_on_vertex_prices_spot_as_compute_engine_spot_plus_the_management_fee(tmp_path):
    """Vertex AI bills Spot as Compute Engine's Spot SKUs plus its management fee (15% of
    Compute Engine's on-demand rate): derived, with the rule named."""
    rows = (Price("instance", "a3-highgpu-8g", "spot", "us-central1", 40.0, "ce-src", TODAY),
            Price("instance", "a3-highgpu-8g", "standard", "us-central1", 80.0, "ce-src",
                  TODAY),
            Price("vertex-machine", "a3-highgpu-8g", "standard", "us-central1", 12.0, "vx-src",
                  TODAY),
            Price("vertex-gpu", "nvidia-h100-80gb", "standard", "us-central1", 11.5, "vx-src",
                  TODAY))
    write_cache(tmp_path, rows=rows)
    result = gkeflow(*DONE_WHEN, "--output", "json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    train = next(step for step in json.loads(result.stdout)["cost"]["steps"]
                 if step["step"] == "train-mlp")
    assert train["usd_per_hour"] == pytest.approx(40.0 + 0.15 * 80.0, abs=1e-4)
    assert train["on_demand_usd_per_hour"] == pytest.approx(104.0)
    assert train["estimate"] and train["source"] == "ce-src" and train["basis"] == "derived"
    assert train["derived"].startswith("Vertex AI spot: Compute Engine's spot rate + "
                                       "management fee 12/h (Vertex AI bills Spot VMs")
    table = gkeflow(*DONE_WHEN, "--wide", cwd=tmp_path, env={"COLUMNS": "400"})
    line = next(row for row in table.stdout.splitlines() if "train-mlp" in row)
    assert "(estimate)" in line and "missing" not in line
    assert "note: rate of train-mlp: Vertex AI spot: Compute Engine's spot rate + " \
           "management fee" in table.stdout


DONE_WHEN = ("plan", "--target", "vertex", "--compute", "train-model.accelerator=nvidia-h100-80gb",
             "--compute", "train-model.accelerator_count=8",
             "--compute", "train-model.scheduling=spot")


def test_plan_on_vertex_prices_the_custom_job_from_vertex_rows_times_count(tmp_path):
    """Vertex AI training is priced from the ``vertex-*`` rows only (machine + count x GPU),
    with the source and date read, under the table without --wide."""
    machine = Price("vertex-machine", "a3-highgpu-8g", "spot", "us-central1", 7.0, "vx-src",
                    TODAY)
    gpu = Price("vertex-gpu", "nvidia-h100-80gb", "spot", "us-central1", 2.5, "vx-src", TODAY)
    compute_engine = Price("gpu", "nvidia-h100-80gb", "spot", "us-central1", 99.0, "ce-src",
                           TODAY)
    on_demand = (Price("vertex-machine", "a3-highgpu-8g", "standard", "us-central1", 10.0,
                       "vx-src", TODAY),
                 Price("vertex-gpu", "nvidia-h100-80gb", "standard", "us-central1", 5.0,
                       "vx-src", TODAY))
    write_cache(tmp_path, rows=(machine, gpu, compute_engine, *on_demand))
    result = gkeflow(*DONE_WHEN, "--output", "json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    cost = json.loads(result.stdout)["cost"]
    train = next(step for step in cost["steps"] if step["step"] == "train-mlp")
    hourly = machine.usd_per_hour + 8 * gpu.usd_per_hour
    assert train["usd_per_hour"] == pytest.approx(hourly)
    assert train["ceiling_usd"] == pytest.approx(hourly * train["timeout_s"] / 3600)
    assert (train["source"], train["date_read"]) == ("vx-src", TODAY.isoformat())
    # the saving is against the Vertex AI on-demand rows (10 + 8 x 5), not Compute Engine's
    assert (train["on_demand_usd_per_hour"], train["saving_pct"]) == (50.0, 46.0)
    fee = prices.find_price("vertex-pipelines", "run", "standard", "us-central1")
    assert cost["run_fee_usd"] == fee.usd_per_hour
    assert cost["ceiling_usd"] == pytest.approx(
        sum(step["ceiling_usd"] for step in cost["steps"]) + fee.usd_per_hour, abs=1e-3)

    table = gkeflow(*DONE_WHEN, cwd=tmp_path, env={"COLUMNS": "200"})
    assert table.returncode == 0, table.stderr
    line = next(row for row in table.stdout.splitlines() if row.startswith("cost of train-mlp"))
    assert line == (f"cost of train-mlp: {format_usd(train['usd_per_hour'])}/h, 46% under "
                    f"on demand {format_usd(50.0)}/h, ceiling "
                    f"{format_usd(train['ceiling_usd'])} [published, read {TODAY}, data date "
                    "unknown: vx-src]")
    assert "ce-src" not in table.stdout  # Compute Engine rows never price a Vertex AI job
    assert all(len(row) <= 200 for row in table.stdout.splitlines())


def _h100_vertex_plan(tmp_path, capacity, *args):
    return gkeflow("plan", "--target", "vertex", "--compute",
                   "train-model.accelerator=nvidia-h100-80gb", "--compute",
                   "train-model.accelerator_count=8", "--compute",
                   f"train-model.scheduling={capacity}", *args, cwd=tmp_path,
                   env={"COLUMNS": "400"})


def test_plan_prices_8_h100_on_vertex_on_demand_and_flex_start_from_the_vendored_rows(tmp_path):
    """With no price cache, 8 x H100 on Vertex AI on demand is the price list's H100 rate x 8
    plus the a3-highgpu-8g machine's billed SKUs; flex-start the billed DWS and fee SKUs;
    each with its label and data date, flagged stale by the data's age; Spot is Compute
    Engine Spot plus the management fee."""
    steps = {}
    for capacity in ("standard", "flex-start"):
        result = _h100_vertex_plan(tmp_path, capacity, "--output", "json")
        assert result.returncode == 0, result.stderr
        steps[capacity] = next(step for step in json.loads(result.stdout)["cost"]["steps"]
                               if step["step"] == "train-mlp")
        rate = prices.hourly_rate("vertex", "a3-highgpu-8g", "nvidia-h100-80gb", 8, capacity,
                                  "us-central1")
        train = steps[capacity]
        assert train["usd_per_hour"] == pytest.approx(rate.usd_per_hour, abs=1e-4)
        assert train["ceiling_usd"] == pytest.approx(
            rate.usd_per_hour * train["timeout_s"] / 3600, abs=1e-3)
        assert train["data_date"] == "2025-08-20"
        assert (train["source"], train["basis"]) == {
            "standard": ("vertex-pricing-transcript + zenn-dws-skus", "published and billed"),
            "flex-start": ("zenn-dws-skus", "billed")}[capacity]
        assert train["stale"] is rate.stale
    flex = steps["flex-start"]
    assert flex["on_demand_usd_per_hour"] == pytest.approx(steps["standard"]["usd_per_hour"],
                                                           abs=1e-4)
    assert 0 < flex["saving_pct"] < 100

    table = _h100_vertex_plan(tmp_path, "standard")
    assert table.returncode == 0, table.stderr
    line = next(row for row in table.stdout.splitlines() if row.startswith("cost of train-mlp"))
    stale = " (stale)," if steps["standard"]["stale"] else ","
    assert line.startswith(
        f"cost of train-mlp: {format_usd(steps['standard']['usd_per_hour'])}/h{stale}")
    assert line.endswith("[published and billed, data of 2025-08-20: vertex-pricing-transcript + "
                         "zenn-dws-skus]")
    # within 2% of the price list's H100 rate x 8 plus the machine
    published = 8 * 9.79655057 + prices.find_price("vertex-machine", "a3-highgpu-8g",
                                                    "standard", "us-central1").usd_per_hour
    assert steps["standard"]["usd_per_hour"] == pytest.approx(published, rel=0.02)

    spot = _h100_vertex_plan(tmp_path, "spot", "--output", "json")
    train = next(step for step in json.loads(spot.stdout)["cost"]["steps"]
                 if step["step"] == "train-mlp")
    engine = prices.hourly_rate("gke", "a3-highgpu-8g", "nvidia-h100-80gb", 8, "spot",
                                "us-central1")
    on_demand = prices.hourly_rate("gke", "a3-highgpu-8g", "nvidia-h100-80gb", 8, "standard",
                                   "us-central1")
    fee = 0.15 * on_demand.usd_per_hour
    assert train["usd_per_hour"] == pytest.approx(engine.usd_per_hour + fee, abs=1e-3)
    assert train["usd_per_hour"] > engine.usd_per_hour
    assert train["estimate"] and "management fee" in train["derived"]


H100_SPOT_GKE = ("plan", "--target", "gke", "--compute", "train-model.accelerator=nvidia-h100-80gb",
                 "--compute", "train-model.accelerator_count=8",
                 "--compute", "train-model.scheduling=spot")


def _vendored_row(kind, item, capacity, region):
    with open(prices.PRICES_CSV, newline="", encoding="utf-8") as handle:
        lines = (line for line in handle if not line.startswith("#"))
        return next(row for row in csv.DictReader(lines) if (
            row["kind"], row["item"], row["capacity"], row["region"]) == (
            kind, item, capacity, region))


def test_plan_prices_spot_h100_on_gke_from_the_whole_machine_row_and_flags_it_stale(tmp_path):
    """8 x H100 on Spot is one a3-highgpu-8g: the vendored whole-machine rows (GPUs
    included), with their source and date; over 90 days old, they are flagged stale."""
    spot = _vendored_row("instance", "a3-highgpu-8g", "spot", "us-central1")
    on_demand = _vendored_row("instance", "a3-highgpu-8g", "standard", "us-central1")
    result = gkeflow(*H100_SPOT_GKE, "--output", "json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    train = next(step for step in json.loads(result.stdout)["cost"]["steps"]
                 if step["step"] == "train-mlp")
    assert train["usd_per_hour"] == pytest.approx(float(spot["usd_per_hour"]), abs=1e-4)
    assert train["on_demand_usd_per_hour"] == pytest.approx(float(on_demand["usd_per_hour"]),
                                                            abs=1e-4)
    assert train["ceiling_usd"] == pytest.approx(
        float(spot["usd_per_hour"]) * train["timeout_s"] / 3600, abs=1e-3)
    assert train["source"] == prices.short_ref(spot["source"])
    assert (train["data_date"], train["date_read"]) == (spot["data_date"], spot["date_read"])
    # staleness follows the data's date, not the day the row was read
    stale = (TODAY - date.fromisoformat(spot["data_date"])).days > prices.STALE_AFTER_DAYS
    assert train["stale"] is stale

    table = gkeflow(*H100_SPOT_GKE, "--wide", cwd=tmp_path, env={"COLUMNS": "400"})
    assert table.returncode == 0, table.stderr
    rate = format_usd(train["usd_per_hour"])
    line = next(row for row in table.stdout.splitlines() if row.startswith("cost of train-mlp"))
    assert line.startswith(f"cost of train-mlp: {rate}/h" + (" (stale)," if stale else ","))
    assert line.endswith(f"[published, data of {spot['data_date']}: "
                         f"{prices.short_ref(spot['source'])}]")
    refresh = next((row for row in table.stdout.splitlines()
                    if row.startswith("note: stale prices (data over 90 days old) for ")), "")
    assert ("train-mlp" in refresh) is stale


def test_the_price_cache_beside_the_config_given_is_used_from_any_folder(tmp_path):
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / "gkeflow.yaml").write_text("compute: {}\n")
    write_cache(project)
    args = ("plan", *A100, "--target", "gke", "--output", "json")
    beside = gkeflow(*args, "--config", str(project / "gkeflow.yaml"), cwd=elsewhere)
    assert beside.returncode == 0, beside.stderr
    train = {s["step"]: s for s in json.loads(beside.stdout)["cost"]["steps"]}["train-mlp"]
    assert (train["usd_per_hour"], train["source"]) == (4.0, "test-src")
    # the cache of the folder the command runs in is not the project's
    write_cache(elsewhere, rows=(
        Price("machine", "a2-highgpu-1g", "standard", "us-central1", 7.0, "other", TODAY),
        Price("gpu", "nvidia-tesla-a100", "standard", "us-central1", 7.0, "other", TODAY)))
    again = gkeflow(*args, "--config", str(project / "gkeflow.yaml"), cwd=elsewhere)
    assert json.loads(again.stdout)["cost"]["steps"] == json.loads(beside.stdout)["cost"]["steps"]


@pytest.mark.parametrize("pipeline", ["training", "prediction", "sweep", "fanout-prepare"])
def test_every_step_of_every_pipeline_is_priced_on_both_targets(tmp_path, pipeline):
    """No `missing` on the vendored catalogue: every step (launcher pods included) has a rate
    and the run a ceiling, on GKE and on Vertex AI."""
    for target in ("gke", "vertex"):
        result = gkeflow("plan", pipeline, "--target", target, "--output", "json",
                         cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        cost = json.loads(result.stdout)["cost"]
        missing = [(s["step"], s["reason"]) for s in cost["steps"] if s["usd_per_hour"] is None]
        assert not missing and cost["ceiling_usd"] is not None, (target, missing)
        assert all(s["basis"] in ("published", "billed", "published and billed", "derived")
                   for s in cost["steps"])
