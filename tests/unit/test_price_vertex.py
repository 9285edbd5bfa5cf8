"""Vertex AI SKUs onto vertex-machine / vertex-gpu rows: shapes understood, sums, Spot."""

from __future__ import annotations

from datetime import date

import pytest

from gkeflow.pipelines.compute import price_vertex, prices
from gkeflow.pipelines.compute.sku_prices import Sku

TODAY = date(2027, 1, 5)
CATALOGUE = (prices.Price("vertex-machine", "*", "standard", "*", None, "", TODAY, "not read"),
             prices.Price("gpu", "nvidia-l4", "standard", "us-central1", 0.5, "x", TODAY))
SHAPES = {"a3-highgpu-8g": (208, 1872.0), "n1-standard-4": (4, 15.0)}


def sku(sku_id, description, price, *, usage="OnDemand", unit="h", regions=("us-central1",)):
    return Sku(sku_id, description, usage, "", regions, unit, price, "USD")


@pytest.mark.parametrize("description, unit, usage, expected", [
    ("Vertex AI: Training/Pipelines on NVIDIA H100 80GB in Iowa", "h", "OnDemand",
     ("gpu", "nvidia-h100-80gb", "standard")),
    ("Vertex AI: Training/Pipelines on A3 Instance RAM in Iowa", "GiBy.h", "OnDemand",
     ("ram", "a3", "standard")),
    ("Vertex AI: Training/Pipelines on N1 Predefined Instance Core running in Singapore", "h",
     "OnDemand", ("core", "n1", "standard")),
    ("Vertex AI: Training/Pipelines management fee on A3 Instance Core in Iowa", "h",
     "OnDemand", ("core", "a3", "flex-start")),
    ("Vertex AI: Training/Pipelines Management fee on N1 Instance RAM in Iowa", "GiBy.h",
     "OnDemand", ("ram", "n1", "flex-start")),
    ("Vertex AI: Training/Pipelines management fee on Spot Preemptible NVIDIA H100 80GB in Iowa",
     "h", "Preemptible", ("gpu", "nvidia-h100-80gb", "spot")),
    # not understood: a disk, prediction, a unit that does not fit, a Spot training rate
    # (never seen), a series or GPU spelled otherwise, a commitment
    ("Vertex AI: Training/Pipelines on SSD backed PD Capacity", "GiBy.mo", "OnDemand", None),
    ("Vertex AI: Online/Batch Prediction Nvidia H100 80gb GPU running in Iowa", "h",
     "OnDemand", None),
    ("Vertex AI: Training/Pipelines on A3 Instance RAM in Iowa", "h", "OnDemand", None),
    ("Vertex AI: Training/Pipelines on NVIDIA H100 80GB in Iowa", "h", "Preemptible", None),
    ("Vertex AI: Training/Pipelines on A3 Mega Instance Core in Iowa", "h", "OnDemand", None),
    ("Vertex AI: Training/Pipelines on NVIDIA Tesla T4 in Iowa", "h", "OnDemand", None),
    ("Vertex AI: Training/Pipelines on N1 Instance Core in Iowa for 1 Year commitment", "h",
     "Commit1Yr", None),
])
def test_description_shapes(description, unit, usage, expected):
    assert price_vertex.parse(sku("X", description, 1.0, usage=usage, unit=unit)) == expected


def test_on_demand_machine_sums_its_series_and_two_rates_for_one_key_are_left_alone():
    vertex = [sku("C", "Vertex AI: Training/Pipelines on N1 Predefined Instance Core running "
                  "in Iowa", 0.25),
              sku("R", "Vertex AI: Training/Pipelines on N1 Predefined Instance Ram running in "
                  "Iowa", 0.5, unit="GiBy.h"),
              sku("H1", "Vertex AI: Training/Pipelines on NVIDIA H100 80GB in Iowa", 11.0),
              sku("H2", "Vertex AI: Training/Pipelines on NVIDIA H100 80GB in Iowa", 12.0),
              sku("Z", "Vertex AI: Gemini 2.5 Pro Text Input", 0.000125, unit="count")]
    rows, ambiguous, summary = price_vertex.map_vertex({}, vertex, CATALOGUE, TODAY, SHAPES)
    assert [(row.key, row.usd_per_hour) for row in rows] == [
        (("vertex-machine", "n1-standard-4", "standard", "us-central1"), 4 * 0.25 + 15 * 0.5)]
    assert rows[0].source == "Cloud Billing Catalog API" and rows[0].date_read == TODAY
    assert "SKU C (" in rows[0].note and "x 15 GiB" in rows[0].note
    assert ambiguous == ["vertex-gpu nvidia-h100-80gb standard us-central1"]
    assert (summary.read, summary.mapped, summary.skipped) == (5, 4, 1)
    assert summary.rows == {"vertex-machine": 1}


def test_flex_start_needs_both_the_dws_skus_and_the_fee():
    fee = [sku("F", "Vertex AI: Training/Pipelines management fee on NVIDIA H100 80GB in Iowa",
               1.5)]
    rows, _, _ = price_vertex.map_vertex({}, fee, CATALOGUE, TODAY, SHAPES)
    assert rows == []  # the fee alone is not the rate
    dws = Sku("D", "Nvidia H100 80GB GPU attached to DWS Defined Duration VMs running in "
              "Americas", "OnDemand", "GPU", ("us-central1",), "h", 4.0, "USD")
    result = price_vertex.map_all([dws], fee, CATALOGUE, TODAY, SHAPES)
    (row,) = [row for row in result.rows if row.kind == "vertex-gpu"]
    assert (row.key, row.usd_per_hour) == (
        ("vertex-gpu", "nvidia-h100-80gb", "flex-start", "us-central1"), 5.5)
    assert "SKU D (" in row.note and "SKU F (" in row.note
    assert result.vertex.rows == {"vertex-gpu": 1}
