"""The pricing.yml importer, over a small file built here."""

from __future__ import annotations

from datetime import date

import pytest
import yaml

from gkeflow.pipelines.compute import price_import, prices

COMMIT = "fd66b26ff84fee5cdd94f341ea89206e76c06b99"


def pricing(**instances):
    return {"about": {"generated": "Thu Jul 30 06:13:17 2026",
                      "url": "https://github.com/Cyclenerd/google-cloud-pricing-cost-calculator"},
            "compute": {"instance": instances}}


A3 = {"cpu": 208, "ram": 1872, "h100-80gb": 8,
      "cost": {"us-central1": {"hour": 88.25, "hour_spot": 50.5, "month": 1.0}}}
N1 = {"cpu": 4, "ram": 15, "cost": {"us-central1": {"hour": 0.25, "hour_spot": 0.0625},
                                    "us-east4": {"hour": 0.5}}}


def test_rows_carry_the_commit_the_generated_date_and_the_kind_of_machine():
    rows = {row.key: row for row in price_import.import_rows(
        pricing(**{"a3-highgpu-8g": A3, "n1-standard-4": N1, "x9-mega-1": N1}), COMMIT,
        ["us-central1", "us-east4"])}
    whole = rows[("instance", "a3-highgpu-8g", "spot", "us-central1")]
    # the data dates from the file's about.generated; the row was read the day it was imported
    assert whole.usd_per_hour == 50.5 and whole.data_date == date(2026, 7, 30)
    assert whole.date_read == date.today()
    assert whole.source == ("https://github.com/Cyclenerd/google-cloud-pricing-cost-calculator"
                            f" pricing.yml@{COMMIT}")
    assert "with 8 x nvidia-h100-80gb" in whole.note and "Cloud Billing Catalog API" in whole.note
    assert rows[("instance", "a3-highgpu-8g", "standard", "us-central1")].usd_per_hour == 88.25
    missing = rows[("instance", "a3-highgpu-8g", "standard", "us-east4")]
    assert missing.usd_per_hour is None and missing.note == (
        "pricing.yml gives no hour for a3-highgpu-8g in us-east4")
    # N1 takes GPUs at will: its rows are the machine alone
    assert rows[("machine", "n1-standard-4", "spot", "us-central1")].usd_per_hour == 0.0625
    assert rows[("machine", "n1-standard-4", "spot", "us-east4")].usd_per_hour is None
    assert not any(key[1] == "x9-mega-1" for key in rows)  # not in the GPU catalogue


def test_shapes_not_offered_on_demand_get_no_on_demand_row():
    one = {**A3, "h100-80gb": 1}
    rows = price_import.import_rows(pricing(**{"a3-highgpu-1g": one}), COMMIT, ["us-central1"])
    assert [row.capacity for row in rows if row.kind == "instance"] == ["spot"]


def _machine(cpu, ram, hour, spot=None):
    cost = {"hour": hour, **({"hour_spot": spot} if spot is not None else {})}
    return {"cpu": cpu, "ram": ram, "cost": {"us-central1": cost}}


def test_a_familys_vcpu_and_memory_rates_are_solved_from_its_machine_types():
    """vCPUs x 0.02 + GiB x 0.003 priced three e2 types (and a shared-core one that does not
    follow the rule): the rows give the two rates back, say they are derived, and a family
    priced at one memory-per-vCPU ratio only has no row, with the reason."""
    data = pricing(**{
        "e2-standard-2": _machine(2, 8, 2 * 0.02 + 8 * 0.003, 0.02),
        "e2-standard-4": _machine(4, 16, 4 * 0.02 + 16 * 0.003),
        "e2-highmem-2": _machine(2, 16, 2 * 0.02 + 16 * 0.003),
        "e2-medium": _machine(2, 4, 0.5),
        "n2-standard-2": _machine(2, 8, 0.1), "n2-standard-4": _machine(4, 16, 0.2)})
    rows = {row.key: row for row in price_import.import_rows(data, COMMIT, ["us-central1"])}
    vcpu = rows[("vcpu", "e2", "standard", "us-central1")]
    gib = rows[("ram-gib", "e2", "standard", "us-central1")]
    assert vcpu.usd_per_hour == pytest.approx(0.02) and gib.usd_per_hour == pytest.approx(0.003)
    assert vcpu.note.startswith("derived (estimate): least-squares fit of the hour rates of 3 "
                                "predefined e2 machine types")
    assert rows[("vcpu", "e2", "spot", "us-central1")].usd_per_hour is None  # one type only
    n2 = rows[("vcpu", "n2", "standard", "us-central1")]
    assert n2.usd_per_hour is None and "different memory per vCPU" in n2.note


def test_rates_that_do_not_follow_vcpus_plus_memory_are_not_fitted():
    data = pricing(**{"e2-standard-2": _machine(2, 8, 0.1), "e2-standard-4": _machine(4, 16, 0.3),
                      "e2-highmem-2": _machine(2, 16, 0.1)})
    rows = {row.key: row for row in price_import.import_rows(data, COMMIT, ["us-central1"])}
    row = rows[("vcpu", "e2", "standard", "us-central1")]
    assert row.usd_per_hour is None and "the fit misses a machine's rate by" in row.note


@pytest.mark.parametrize("data, commit, message", [
    (pricing(**{"a3-highgpu-8g": {**A3, "h100-80gb": 4}}), COMMIT,
     "a3-highgpu-8g: pricing.yml gives GPUs {'nvidia-h100-80gb': 4}, the GPU catalogue 8 x "
     "nvidia-h100-80gb"),
    (pricing(), "fd66b26", "--commit must be the full 40-hex commit"),
    ({**pricing(), "about": {"generated": "yesterday", "url": price_import.REPOSITORY}}, COMMIT,
     "about.generated 'yesterday' is not a date"),
    ({**pricing(), "about": {"generated": "x", "url": "https://example.com"}}, COMMIT,
     "about.url is 'https://example.com'"),
])
def test_a_file_that_does_not_fit_is_refused_in_one_line(data, commit, message):
    with pytest.raises(price_import.PricingFileError) as error:
        price_import.import_rows(data, commit, ["us-central1"])
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_main_rewrites_machine_rows_and_keeps_every_other_row(tmp_path):
    source = tmp_path / "pricing.yml"
    source.write_text(yaml.safe_dump(pricing(**{"a3-highgpu-8g": A3})), encoding="utf-8")
    target = tmp_path / "prices.csv"
    old = (prices.Price("machine", "a3-highgpu-8g", "standard", "*", None, "", date(2026, 1, 1),
                        "not read"),
           prices.Price("gpu", "nvidia-h100-80gb", "spot", "us-central1", 3.0, "skypilot-vms",
                        date(2026, 1, 1)),
           prices.Price("tpu", "tpu-v6e", "standard", "us-central1", 2.7, "skypilot-vms",
                        date(2026, 1, 1)))
    prices.write_prices(target, old, "test")
    assert price_import.main([str(source), "--commit", COMMIT, "--output", str(target)]) == 0
    rows = {row.key: row for row in prices.load_prices(target)}
    assert ("machine", "a3-highgpu-8g", "standard", "*") not in rows
    assert rows[old[1].key] == old[1] and rows[old[2].key] == old[2]
    assert rows[("instance", "a3-highgpu-8g", "spot", "us-central1")].usd_per_hour == 50.5
    rate = prices.hourly_rate("gke", "a3-highgpu-8g", "nvidia-h100-80gb", 8, "spot",
                              "us-central1", today=date(2026, 8, 1), prices=tuple(rows.values()))
    assert rate.usd_per_hour == 50.5 and not rate.stale


def test_main_refuses_a_bad_file_in_one_line(tmp_path, capsys):
    source = tmp_path / "pricing.yml"
    source.write_text(yaml.safe_dump(pricing()), encoding="utf-8")
    prices.write_prices(tmp_path / "p.csv", (), "test")
    assert price_import.main([str(source), "--commit", "abc",
                              "--output", str(tmp_path / "p.csv")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: --commit must be") and len(err.strip().splitlines()) == 1
