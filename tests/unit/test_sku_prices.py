"""Cloud Billing SKUs onto catalogue rows: capacity, item, machine sums, ambiguity."""

from __future__ import annotations

from datetime import date

import pytest

from gkeflow.pipelines.compute import prices, sku_prices
from gkeflow.pipelines.compute.sku_prices import Sku

TODAY = date(2027, 1, 5)
CATALOGUE = (
    prices.Price("gpu", "nvidia-l4", "standard", "us-central1", 0.5, "skypilot-vms",
                 date(2026, 12, 2)),
    prices.Price("gpu", "nvidia-b200", "standard", "us-central1", None, "", date(2026, 12, 2),
                 "not read"),
    prices.Price("machine", "g2-standard-*", "standard", "*", None, "", date(2026, 12, 2),
                 "not read"),
)


def sku(sku_id, description, price, *, usage="OnDemand", group="GPU", unit="h",
        regions=("us-central1",)):
    return Sku(sku_id, description, usage, group, regions, unit, price, "USD")


@pytest.mark.parametrize("description, usage, expected", [
    ("Nvidia L4 GPU running in Americas", "OnDemand", "standard"),
    ("Spot Preemptible Nvidia L4 GPU running in Americas", "Preemptible", "spot"),
    ("TpuV6e Preemptible chip running in Iowa", "OnDemand", "spot"),
    ("Nvidia Tesla A100 GPU attached to DWS Defined Duration VMs running in Americas",
     "OnDemand", "flex-start"),
    ("DWS Defined Duration V6e running in Columbus", "OnDemand", "flex-start"),
    ("DWS Flex Start H4D Core running in Americas", "OnDemand", "flex-start"),
    ("Commitment v1: Nvidia L4 GPU in Americas for 1 Year", "Commit1Yr", None),
    ("Reserved Nvidia L4 GPU in Americas", "OnDemand", None),
    ("Reserved V6e TPU in Columbus in Calendar Mode", "OnDemand", None),
    # a phrase no SKU description was seen to use: not taken as flex-start on a guess
    ("Nvidia L4 GPU attached to Dynamic Workload Scheduler VMs in Americas", "OnDemand", None),
])
def test_capacity_of_a_sku(description, usage, expected):
    assert sku_prices.capacity_of(sku("X", description, 1.0, usage=usage)) == expected


def test_b200_and_gb200_are_told_apart_and_g2_machines_are_summed_per_shape():
    skus = [
        sku("B", "Nvidia B200 (1 gpu slice) running in Americas", 10.0),
        sku("GB", "Nvidia GB200 (1 gpu slice) running in Americas", 12.0),
        sku("C", "G2 Instance Core running in Americas", 0.02, group="CPU"),
        sku("R", "G2 Instance Ram running in Americas", 0.0025, group="RAM", unit="GiBy.h"),
        sku("M", "G2 Instance Ram running in Americas", 0.0025, group="RAM", unit="GiBy.mo"),
    ]
    result = sku_prices.map_skus(skus, CATALOGUE, TODAY)
    rows = {row.key: row for row in result.rows}
    assert rows[("gpu", "nvidia-b200", "standard", "us-central1")].usd_per_hour == 10.0
    g2 = rows[("machine", "g2-standard-8", "standard", "us-central1")]
    assert g2.usd_per_hour == pytest.approx(8 * 0.02 + 32 * 0.0025)
    assert g2.source == "Cloud Billing Catalog API, SKU C + SKU R" and g2.date_read == TODAY
    # the L4 row matched no SKU: reported, and it stays in the merged catalogue as it was
    assert [row.key for row in result.unmatched if row.kind == "gpu"] == [
        ("gpu", "nvidia-l4", "standard", "us-central1")]
    merged = prices.merge_prices(tuple(result.rows), CATALOGUE)
    assert prices.find_price("gpu", "nvidia-l4", "standard", "us-central1", merged).source \
        == "skypilot-vms"


def test_two_skus_that_disagree_leave_the_row_as_it_was():
    skus = [sku("A", "Nvidia L4 GPU running in Americas", 0.6),
            sku("B", "Nvidia L4 GPU running in Iowa", 0.7)]
    result = sku_prices.map_skus(skus, CATALOGUE, TODAY)
    assert result.ambiguous == ["gpu nvidia-l4 standard us-central1"]
    assert not any(row.item == "nvidia-l4" for row in result.rows)


def test_the_cache_round_trips_and_wins_over_the_vendored_row(tmp_path):
    row = prices.Price("gpu", "nvidia-l4", "standard", "us-central1", 0.61, "Cloud Billing "
                       "Catalog API, SKU A", TODAY, currency="EUR")
    prices.write_prices(prices.cache_path(tmp_path), [row], "test")
    loaded = prices.current_prices(tmp_path)
    assert loaded[0] == row
    assert prices.find_price("gpu", "nvidia-l4", "standard", "us-central1", loaded) == row
    assert len(loaded) == len(prices.load_prices())


def test_dws_defined_duration_skus_price_flex_start_rows_marked_unverified():
    catalogue = CATALOGUE + (
        prices.Price("tpu", "tpu-v6e", "standard", "us-central1", 2.7, "skypilot-vms",
                     date(2026, 12, 2)),
        prices.Price("machine", "a2-highgpu-1g", "standard", "us-central1", 1.0,
                     "skypilot-vms", date(2026, 12, 2)),
        prices.Price("gpu", "nvidia-tesla-a100", "standard", "us-central1", 3.0,
                     "skypilot-vms", date(2026, 12, 2)),
    )
    skus = [
        sku("G", "Nvidia Tesla A100 GPU attached to DWS Defined Duration VMs running in "
                 "Americas", 1.6),
        sku("C", "DWS Defined Duration A2 Core running in Americas", 0.017, group="CPU"),
        sku("R", "DWS Defined Duration A2 Ram running in Americas", 0.0023, group="RAM",
            unit="GiBy.h"),
        sku("T", "DWS Defined Duration V6e running in Iowa", 1.35, group="TPU"),
    ]
    shapes = {"a2-highgpu-1g": (12, 85.0)}
    result = sku_prices.map_skus(skus, catalogue, TODAY, shapes)
    rows = {row.key: row for row in result.rows}
    gpu = rows[("gpu", "nvidia-tesla-a100", "flex-start", "us-central1")]
    assert gpu.usd_per_hour == 1.6 and gpu.note == sku_prices.FLEX_NOTE
    machine = rows[("machine", "a2-highgpu-1g", "flex-start", "us-central1")]
    assert machine.usd_per_hour == pytest.approx(12 * 0.017 + 85.0 * 0.0023)
    assert rows[("tpu", "tpu-v6e", "flex-start", "us-central1")].usd_per_hour == 1.35
    assert all("unverified" in row.note for row in result.rows)
