"""Kubernetes Engine SKUs -> GKE Autopilot's per-pod rows (no network): one row per region
and capacity, a key two SKUs price differently left out however many SKUs name it."""

from __future__ import annotations

from datetime import date

from gkeflow.pipelines.compute.price_autopilot import map_autopilot
from gkeflow.pipelines.compute.sku_prices import Sku


def _sku(sku_id, description, price, regions=("us-central1",), unit="h"):
    return Sku(sku_id, description, "OnDemand", "CPU", tuple(regions), unit, price, "USD")


def test_each_region_gets_its_rate_and_disagreeing_skus_leave_the_row_out():
    rows = map_autopilot([
        _sku("A", "Autopilot Pod mCPU Requests (us-central1)", 0.0000445),
        _sku("B", "Autopilot Pod mCPU Requests (europe-west4)", 0.000049,
             regions=("europe-west4",)),
        # three SKUs for one key, two prices: no row, said once
        _sku("C", "Autopilot Spot Pod mCPU Requests (us-central1)", 0.0000133),
        _sku("D", "Autopilot Spot Pod mCPU Requests (us-central1)", 0.0000140),
        _sku("E", "Autopilot Spot Pod mCPU Requests (us-central1)", 0.0000133),
        _sku("F", "Autopilot Balanced Pod mCPU Requests (us-central1)", 0.000063),
    ], date(2026, 12, 7))
    found = {row.key: row.usd_per_hour for row in rows.rows}
    assert found == {("autopilot-vcpu", "pod", "standard", "us-central1"): 0.0445,
                     ("autopilot-vcpu", "pod", "standard", "europe-west4"): 0.049}
    assert rows.skipped == ["autopilot-vcpu pod spot us-central1: two SKUs price it "
                            "differently; left as it was"]
