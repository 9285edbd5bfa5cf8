"""The price catalogue: its rows, the look-up, missing and stale prices."""

from __future__ import annotations

import re
from datetime import date

import pytest

from gkeflow.pipelines.compute import gpu_catalogue, prices, tpu_catalogue

ROWS = prices.load_prices()
READ = date(2026, 12, 2)


def test_every_price_is_positive_with_a_source_url_and_an_iso_date():
    priced = [row for row in ROWS if row.usd_per_hour is not None]
    assert priced
    for row in priced:
        assert row.usd_per_hour > 0, row
        assert prices.source_url(row.source).startswith("https://"), row
        assert row.date_read <= date.today()
    for row in ROWS:
        assert row.capacity in prices.CAPACITIES and row.kind in prices.KINDS
        if row.usd_per_hour is None:
            assert row.note, f"missing price without a reason: {row}"


def test_vertex_rates_are_their_own_rows_with_their_source_and_region_said():
    """A Vertex AI job is priced from vertex-* rows only; the n1-standard-4 figure says its
    region was inferred, the H100 names the Iowa SKU it was read from."""
    row = prices.find_price("vertex-machine", "n1-standard-4", "standard", "us-central1")
    assert row.source == "vertex-pricing-transcript" and "region inferred" in row.note
    assert row.item == "n1-standard-4"  # an exact row, not a pattern
    h100 = prices.find_price("vertex-gpu", "nvidia-h100-80gb", "standard", "us-central1")
    # the price list's figure, not the bill's (the bill is named in the note, not used)
    assert (h100.item, h100.source, h100.basis) == (
        "nvidia-h100-80gb", "vertex-pricing-transcript", "published")
    assert h100.usd_per_hour == 9.79655057 and h100.data_date == date(2026, 10, 7)
    assert "SKU 3F95-001E-B747" in h100.note and "11.2660332" in h100.note
    rate = prices.hourly_rate("vertex", "n1-standard-4", None, 0, "standard", "us-central1")
    assert rate.usd_per_hour == round(row.usd_per_hour, 5)
    assert rate.date_read == row.as_of == row.data_date and rate.read_on == row.date_read
    gke = prices.hourly_rate("gke", "n1-standard-4", None, 0, "standard", "us-central1")
    compute = prices.find_price("machine", "n1-standard-4", "standard", "us-central1")
    # a GKE node is priced from the Compute Engine row, never from the Vertex AI one
    assert compute.source != row.source
    assert gke.usd_per_hour == round(compute.usd_per_hour, 5)


@pytest.mark.parametrize("capacity, sources, basis", [
    ("standard", "vertex-pricing-transcript + zenn-dws-skus", "published and billed"),
    ("flex-start", "zenn-dws-skus", "billed")])
def test_eight_h100_on_vertex_are_the_a3_machine_row_plus_eight_gpu_rows(capacity, sources,
                                                                        basis):
    """a3-highgpu-8g with 8 x H100 on Vertex AI: its machine row plus 8 GPU rows; on demand
    the GPUs from the price list and the machine from a bill's SKUs, with flex-start both
    from the bill; each label says which."""
    machine = prices.find_price("vertex-machine", "a3-highgpu-8g", capacity, "us-central1")
    gpu = prices.find_price("vertex-gpu", "nvidia-h100-80gb", capacity, "us-central1")
    assert (machine.item, gpu.item) == ("a3-highgpu-8g", "nvidia-h100-80gb")
    assert machine.basis == "billed" and "SKU " in machine.note and "SKU " in gpu.note
    rate = prices.hourly_rate("vertex", "a3-highgpu-8g", "nvidia-h100-80gb", 8, capacity,
                              "us-central1", today=date(2025, 9, 1))
    assert rate.usd_per_hour == pytest.approx(machine.usd_per_hour + 8 * gpu.usd_per_hour,
                                              abs=1e-5)
    assert (rate.source, rate.basis) == (sources, basis) and not rate.stale
    assert rate.date_read == date(2025, 8, 20)  # the bill's month, not the day it was read
    assert prices.is_stale(rate.date_read, date(2026, 12, 7))
    # only Iowa was read: another region stays missing, with the reason
    other = prices.hourly_rate("vertex", "a3-highgpu-8g", "nvidia-h100-80gb", 8, capacity,
                               "europe-west4")
    assert other.missing and "not read" in other.reason


def test_flex_start_on_vertex_is_under_on_demand_and_spot_is_missing_with_the_reason():
    on_demand, flex = (prices.hourly_rate("vertex", "a3-highgpu-8g", "nvidia-h100-80gb", 8, c,
                                          "us-central1") for c in ("standard", "flex-start"))
    assert flex.usd_per_hour < on_demand.usd_per_hour
    spot = prices.hourly_rate("vertex", "a3-highgpu-8g", "nvidia-h100-80gb", 8, "spot",
                              "us-central1")
    assert spot.missing
    assert spot.reason.startswith("no Vertex AI spot training rate for a3-highgpu-8g in "
                                  "us-central1: not read (Vertex AI bills Spot as Compute "
                                  "Engine Spot SKUs plus Vertex AI management-fee SKUs")


def test_the_vertex_pipelines_run_fee_is_read_from_google_s_product_page_per_run():
    fee = prices.find_price("vertex-pipelines", "run", "standard", "us-central1")
    assert (fee.usd_per_hour, fee.source) == (0.03, "agent-platform-product-transcript")
    assert "per pipeline run" in fee.note and "not per hour" in fee.note
    assert "google-cloud-automl" in prices.SOURCES[fee.source]


def test_suspect_h100_rows_are_missing_with_the_conflict_named():
    for region in ("us-central1", "asia-southeast1"):
        row = prices.find_price("gpu", "nvidia-h100-80gb", "standard", region)
        assert row.usd_per_hour is None and row.note.startswith("suspect, not used")


def test_the_file_names_no_row_twice():
    keys = [(r.kind, r.item, r.capacity, r.region) for r in ROWS]
    assert len(keys) == len(set(keys))


def test_sources_are_cited_in_the_module():
    for key in prices.SOURCES:
        assert f"``{key}``" in prices.__doc__


@pytest.mark.parametrize("accelerator", sorted({f.accelerator for f in gpu_catalogue.FAMILIES}))
def test_every_gpu_has_an_on_demand_price_in_us_central1_or_a_reason(accelerator):
    row = prices.find_price("gpu", accelerator, "standard", "us-central1")
    assert row is not None, f"{accelerator}: no row at all"
    assert row.usd_per_hour is not None or row.note


@pytest.mark.parametrize("generation", [g.name for g in tpu_catalogue.GENERATIONS])
def test_every_tpu_has_an_on_demand_price_in_us_central1_or_a_reason(generation):
    row = prices.find_price("tpu", generation, "standard", "us-central1")
    assert row is not None and (row.usd_per_hour is not None or row.note)


def test_spot_is_never_dearer_than_on_demand():
    by_key = {(r.kind, r.item, r.capacity, r.region): r.usd_per_hour for r in ROWS}
    for (kind, item, capacity, region), spot in by_key.items():
        on_demand = by_key.get((kind, item, "standard", region))
        if capacity == "spot" and spot is not None and on_demand is not None:
            assert spot < on_demand, (kind, item, region)


def test_a_gpu_machine_without_a_whole_machine_row_is_its_host_plus_its_gpus():
    rate = prices.hourly_rate("gke", "a3-edgegpu-8g", "nvidia-h100-80gb", 8, "standard",
                              "us-east4", today=READ)
    host = prices.find_price("machine", "a3-edgegpu-8g", "standard", "us-east4")
    gpu = prices.find_price("gpu", "nvidia-h100-80gb", "standard", "us-east4")
    assert prices.find_price("instance", "a3-edgegpu-8g", "standard", "us-east4") is None
    assert rate.usd_per_hour == round(host.usd_per_hour + 8 * gpu.usd_per_hour, 5)
    assert rate.source == "skypilot-vms" and rate.basis == "published"
    assert rate.date_read == READ and not rate.stale and not rate.missing


@pytest.mark.parametrize("machine, gpus, capacity, region", [
    ("a2-highgpu-1g", ("nvidia-tesla-a100", 1), "standard", "us-central1"),
    ("g2-standard-96", ("nvidia-l4", 8), "spot", "us-east4"),
    ("g2-standard-48", ("nvidia-l4", 4), "standard", "us-central1"),
    ("a3-highgpu-8g", ("nvidia-h100-80gb", 8), "standard", "asia-southeast1"),
])
def test_an_accelerator_optimised_machine_is_its_whole_machine_row(machine, gpus, capacity,
                                                                  region):
    """A2 / A3 / G2 / G4 machine types are billed with their GPUs: one row, GPUs included."""
    rate = prices.hourly_rate("gke", machine, *gpus, capacity, region, today=READ)
    row = prices.find_price("instance", machine, capacity, region)
    assert row.item == machine and f"with {gpus[1]} x {gpus[0]}" in row.note
    assert rate.usd_per_hour == round(row.usd_per_hour, 5)
    assert rate.source == prices.short_ref(row.source) and rate.date_read == row.as_of
    assert rate.sources == (row.source,) and rate.read_on == row.date_read


def test_a_whole_machine_row_never_prices_other_gpus():
    """A request the machine type does not carry (T4 on A2) is priced as host + GPUs, which
    the catalogue does not hold for A2: missing, not the A100 machine's figure."""
    rate = prices.hourly_rate("gke", "a2-highgpu-1g", "nvidia-tesla-t4", 1, "standard",
                              "us-central1", today=READ)
    assert rate.missing and "a2-highgpu-1g" in rate.reason


def test_spot_uses_the_spot_rows_not_a_discount():
    rows = (prices.Price("instance", "a2-highgpu-1g", "standard", "us-central1", 3.0,
                         "skypilot-vms", READ),
            prices.Price("instance", "a2-highgpu-1g", "spot", "us-central1", None,
                         "skypilot-vms", READ, "not read"))
    rate = prices.hourly_rate("gke", "a2-highgpu-1g", "nvidia-tesla-a100", 1, "spot",
                              "us-central1", today=READ, prices=rows)
    assert rate.missing  # no Spot figure: no guess from on demand
    assert rate.reason == "no spot a2-highgpu-1g in us-central1 price: not read"


def test_a_refreshed_machine_row_replaces_the_whole_machine_row():
    cache = (prices.Price("machine", "a2-highgpu-1g", "standard", "us-central1", 1.0,
                          "Cloud Billing Catalog API", READ),
             prices.Price("gpu", "nvidia-tesla-a100", "standard", "us-central1", 2.0,
                          "Cloud Billing Catalog API", READ))
    merged = prices.merge_prices(cache, ROWS)
    assert prices.find_price("instance", "a2-highgpu-1g", "standard", "us-central1",
                             merged) is None
    rate = prices.hourly_rate("gke", "a2-highgpu-1g", "nvidia-tesla-a100", 1, "standard",
                              "us-central1", today=READ, prices=merged)
    assert rate.usd_per_hour == 3.0 and rate.source == "Cloud Billing Catalog API"


def test_a_tpu_slice_is_chips_times_the_chip_price():
    rate = prices.hourly_rate("gke", "ct6e-standard-4t", "tpu-v6e", 16, "standard",
                              "us-central1", today=READ)
    assert rate.usd_per_hour == pytest.approx(16 * 2.7, abs=1e-9)


def test_staleness_is_relative_to_today():
    rate = prices.hourly_rate("gke", "ct6e-standard-4t", "tpu-v6e", 4, "spot", "europe-west4",
                              today=date(2027, 3, 2))  # 90 days after reading
    assert not rate.stale
    rate = prices.hourly_rate("gke", "ct6e-standard-4t", "tpu-v6e", 4, "spot", "europe-west4",
                              today=date(2027, 3, 3))
    assert rate.stale and rate.usd_per_hour == pytest.approx(4 * 1.03748, abs=1e-9)
    assert prices.is_stale(date(2026, 1, 1), date(2026, 4, 2))
    assert not prices.is_stale(date(2026, 1, 1), date(2026, 4, 1))


@pytest.mark.parametrize("args, reason", [
    (("gke", "g2-standard-8", "nvidia-l4", 1, "standard", "us-west1"),
     "no standard g2-standard-8 in us-west1 price: not read from a source yet"),
    (("gke", "a2-highgpu-1g", "nvidia-tesla-a100", 1, "flex-start", "us-central1"),
     "no flex-start a2-highgpu-1g in us-central1 price: no flex-start (DWS) price read"),
    (("gke", "a3-megagpu-8g", "nvidia-h100-mega-80gb", 8, "standard", "us-central1"),
     "no standard a3-megagpu-8g in us-central1 price: pricing.yml gives no hour for "
     "a3-megagpu-8g in us-central1"),
    (("gke", "a3-ultragpu-8g", "nvidia-h200-141gb", 8, "standard", "us-central1"),
     "no standard a3-ultragpu-8g in us-central1 price"),
    (("gke", "tpu7x-standard-4t", "tpu7x", 8, "standard", "us-central1"),
     "no standard tpu7x in us-central1 price: not read from a source yet"),
    (("gke", "ct5p-hightpu-4t", "tpu-v5p", 8, "standard", "us-east4"),
     "no standard tpu-v5p in us-east4 price: no row for this region in the source"),
    (("gke", "x9-mega-1", None, 0, "standard", "mars-north1"),
     "no standard x9-mega-1 in mars-north1 price in the catalogue"),
    (("vertex", "a2-highgpu-1g", "nvidia-tesla-a100", 1, "standard", "us-central1"),
     "no Vertex AI standard training rate for a2-highgpu-1g in us-central1: not read"),
    (("gke", "a2-highgpu-1g", "nvidia-tesla-a100", 1, "reservation", "us-central1"),
     "reserved"),
])
def test_missing_prices_are_reported_with_a_reason(args, reason):
    rate = prices.hourly_rate(*args, today=READ)
    assert rate.missing and rate.usd_per_hour is None
    assert rate.reason.startswith(reason), rate.reason
    assert "\n" not in rate.reason


def test_the_h200_is_not_priced_on_demand():
    row = prices.find_price("gpu", "nvidia-h200-141gb", "standard", "us-central1")
    assert row.usd_per_hour is None and "not offered on demand" in row.note
    spot = prices.find_price("gpu", "nvidia-h200-141gb", "spot", "us-central1")
    assert spot.usd_per_hour == pytest.approx(37.2472 / 8, abs=1e-5)


@pytest.mark.parametrize("kwargs, message", [
    ({"target": "aws"}, "unknown target 'aws'; choose one of gke, vertex, autopilot"),
    ({"capacity": "cheap"}, "unknown capacity 'cheap'; choose one of standard, spot, "
                            "flex-start, reservation"),
    ({"count": -1}, "accelerator count must be 0 or more, not -1"),
])
def test_bad_arguments_are_refused_in_one_line(kwargs, message):
    args = {"target": "gke", "machine_type": "a2-highgpu-1g",
            "accelerator": "nvidia-tesla-a100", "count": 1, "capacity": "standard",
            "region": "us-central1", **kwargs}
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        prices.hourly_rate(**args)


def test_a_price_file_of_its_own_is_read(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("# comment\nkind,item,capacity,region,usd_per_hour,source,date_read,note\n"
                    "machine,n2-standard-4,standard,us-central1,0.2,skypilot-vms,2026-01-01,\n")
    rows = prices.load_prices(path)
    rate = prices.hourly_rate("gke", "n2-standard-4", None, 0, "standard", "us-central1",
                              today=date(2026, 12, 2), prices=rows)
    assert rate.usd_per_hour == pytest.approx(0.2) and rate.stale
