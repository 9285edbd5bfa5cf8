"""`gkeflow prices refresh` against a strict fake of the Cloud Billing Catalog REST API.

Pages are real ``billing_v1.ListSkusResponse`` messages serialised to JSON; every request is
checked for its path and query (service, page token, currency) before it is answered. Both
services are served: Compute Engine and Vertex AI.
"""

from __future__ import annotations

import csv
import json
from datetime import date

import pytest
from google.cloud import billing_v1
from werkzeug.wrappers import Response

from gkeflow.pipelines.compute import prices
from gkeflow.pipelines.compute.costing import format_usd
from tests.integration.conftest import gkeflow

SERVICE = "6F81-5844-456A"
VERTEX = "C7E2-9256-1C43"
GKE = "CCD8-9BF1-090E"
TODAY = date.today()


def _sku(sku_id, description, regions, units, nanos, *, usage_type="OnDemand", group="GPU",
         unit="h", currency="USD", service=SERVICE):
    money = {"currency_code": currency, "units": units, "nanos": nanos}
    display, family = {VERTEX: ("Vertex AI", "ApplicationServices"),
                       GKE: ("Kubernetes Engine", "Compute")}.get(
        service, ("Compute Engine", "Compute"))
    return billing_v1.Sku(
        name=f"services/{service}/skus/{sku_id}", sku_id=sku_id, description=description,
        category=billing_v1.Category(service_display_name=display,
                                     resource_family=family, resource_group=group,
                                     usage_type=usage_type),
        service_regions=regions,
        pricing_info=[billing_v1.PricingInfo(
            pricing_expression=billing_v1.PricingExpression(
                usage_unit=unit, usage_unit_description="hour", base_unit="s",
                base_unit_conversion_factor=3600, display_quantity=1,
                tiered_rates=[billing_v1.PricingExpression.TierRate(
                    start_usage_amount=0, unit_price=money)]),
            currency_conversion_rate=1)],
        service_provider_name="Google")


PAGES = [
    [_sku("AAAA-T4-OD", "Nvidia Tesla T4 GPU running in Americas", ["us-central1", "us-east4"],
          0, 350000000),
     _sku("AAAA-T4-SP", "Spot Preemptible Nvidia Tesla T4 GPU running in Americas",
          ["us-central1"], 0, 88000000, usage_type="Preemptible"),
     # a region the catalogue does not name: ignored
     _sku("AAAA-T4-SA", "Nvidia Tesla T4 GPU running in Sao Paulo", ["southamerica-east1"],
          0, 470000000),
     # a commitment is not an hourly list price
     _sku("AAAA-T4-CUD", "Commitment v1: Nvidia Tesla T4 GPU in Americas for 1 Year",
          ["us-central1"], 0, 220000000, usage_type="Commit1Yr")],
    [_sku("BBBB-A2-CORE", "A2 Instance Core running in Americas", ["us-central1"], 0,
          31611000, group="CPU"),
     _sku("BBBB-A2-RAM", "A2 Instance Ram running in Americas", ["us-central1"], 0, 4237000,
          group="RAM", unit="GiBy.h"),
     _sku("BBBB-L4-EU", "Nvidia L4 GPU running in Netherlands", ["europe-west4"], 0,
          644000000)],
    [_sku("CCCC-V6E-SP", "TpuV6e Preemptible chip running in Iowa", ["us-central1"], 1,
          50000000, group="TPU")],
]


class FakeCatalog:
    """Answers ``GET /v1/services/{service}/skus`` page by page for Compute Engine
    (``pages``), Vertex AI (``vertex_pages``) and Kubernetes Engine (``gke_pages``; each
    default one empty page); ``failures`` are answered first (status, JSON body)."""

    def __init__(self, pages, currency="USD", failures=(), vertex_pages=((),),
                 gke_pages=((),)):
        self.services = {SERVICE: list(pages), VERTEX: list(vertex_pages),
                         GKE: list(gke_pages)}
        self.currency, self.failures = currency, list(failures)
        self.requests: list[dict] = []
        self.paths: list[str] = []

    def __call__(self, request):
        service = request.path.removeprefix("/v1/services/").removesuffix("/skus")
        assert request.method == "GET" and service in self.services \
            and request.path == f"/v1/services/{service}/skus", request.path
        self.pages = self.services[service]
        args = request.args.to_dict()
        unknown = set(args) - {"pageToken", "pageSize", "currencyCode", "$alt", "startTime",
                               "endTime"}
        assert not unknown, unknown
        assert args.get("currencyCode") == self.currency, args
        self.requests.append(args)
        self.paths.append(request.path)
        if self.failures:
            status, body = self.failures.pop(0)
            return Response(json.dumps(body), status=status, content_type="application/json")
        token = args.get("pageToken", "")
        index = int(token.removeprefix("page-")) if token else 0
        assert 0 <= index < len(self.pages), token
        response = billing_v1.ListSkusResponse(
            skus=self.pages[index],
            next_page_token=f"page-{index + 1}" if index + 1 < len(self.pages) else "")
        return Response(billing_v1.ListSkusResponse.to_json(response), status=200,
                        content_type="application/json")


UNAVAILABLE = (503, {"error": {"code": 503, "message": "The service is currently unavailable.",
                               "status": "UNAVAILABLE"}})


def _refresh(httpserver, tmp_path, fake, *extra):
    for service in (SERVICE, VERTEX, GKE):
        httpserver.expect_request(f"/v1/services/{service}/skus").respond_with_handler(fake)
    (tmp_path / "gkeflow.yaml").write_text("{}\n")
    return gkeflow("prices", "refresh", "--api-endpoint", httpserver.url_for("").rstrip("/"),
                   *extra, cwd=tmp_path, env={"GKEFLOW_DEBUG": ""})


def _cache(tmp_path):
    with open(tmp_path / ".gkeflow" / "prices.csv", newline="") as handle:
        return {(r["kind"], r["item"], r["capacity"], r["region"]): r
                for r in csv.DictReader(line for line in handle if not line.startswith("#"))}


def test_refresh_reads_every_page_after_a_503_and_maps_skus_to_rows(httpserver, tmp_path):
    fake = FakeCatalog(PAGES, failures=[UNAVAILABLE])
    result = _refresh(httpserver, tmp_path, fake)
    assert result.returncode == 0, result.stderr
    # the 503 was retried, then all three pages were read in order, then Vertex AI's one,
    # then Kubernetes Engine's
    assert [r.get("pageToken", "") for r in fake.requests] == ["", "", "page-1", "page-2", "",
                                                               ""]
    assert fake.paths[-2:] == [f"/v1/services/{VERTEX}/skus", f"/v1/services/{GKE}/skus"]
    assert "page 3" in result.stderr
    cache = _cache(tmp_path)
    on_demand = cache[("gpu", "nvidia-tesla-t4", "standard", "us-central1")]
    spot = cache[("gpu", "nvidia-tesla-t4", "spot", "us-central1")]
    assert (on_demand["usd_per_hour"], on_demand["source"]) == (
        "0.35", "Cloud Billing Catalog API, SKU AAAA-T4-OD")
    assert (spot["usd_per_hour"], spot["source"]) == (
        "0.088", "Cloud Billing Catalog API, SKU AAAA-T4-SP")
    assert on_demand["date_read"] == TODAY.isoformat() and on_demand["currency"] == "USD"
    assert ("gpu", "nvidia-tesla-t4", "standard", "us-east4") in cache
    assert not any(key[3] == "southamerica-east1" for key in cache)
    assert "AAAA-T4-CUD" not in (tmp_path / ".gkeflow" / "prices.csv").read_text()
    # a machine row: 12 vCPUs x core rate + 85 GiB x memory rate
    a2 = cache[("machine", "a2-highgpu-1g", "standard", "us-central1")]
    assert float(a2["usd_per_hour"]) == pytest.approx(12 * 0.031611 + 85 * 0.004237)
    assert a2["source"] == "Cloud Billing Catalog API, SKU BBBB-A2-CORE + SKU BBBB-A2-RAM"
    assert cache[("tpu", "tpu-v6e", "spot", "us-central1")]["usd_per_hour"] == "1.05"
    # the summary counts the rows no SKU matched, which keep their vendored price and date
    summary, vertex = result.stdout.strip().splitlines()[-2:]
    # no Vertex AI SKU: the T4's Compute Engine Spot SKU alone does not price Vertex AI Spot
    assert vertex == ("Vertex AI: 0 SKUs read, 0 mapped, 0 skipped (descriptions not mapped); "
                      "rows written: none; 1 Spot rows left missing: no Vertex AI management fee "
                      "that applies to Spot was found for them")
    t4 = cache[("vertex-gpu", "nvidia-tesla-t4", "spot", "us-central1")]
    assert t4["usd_per_hour"] == "" and "(SKU AAAA-T4-SP)" in t4["note"]
    priced = [row for row in cache.values() if row["usd_per_hour"]]
    assert summary.startswith(f"refreshed {len(priced)} prices into ")
    assert "catalogue rows matched no SKU" in summary
    catalogue = prices.current_prices(tmp_path)
    kept = prices.find_price("gpu", "nvidia-h100-80gb", "standard", "us-central1", catalogue)
    assert kept.source == "skypilot-vms" and kept.date_read == date(2026, 12, 2)
    rate = prices.hourly_rate("gke", "n1-standard-4", "nvidia-tesla-t4", 2, "spot",
                              "us-central1", prices=catalogue)
    gpu = prices.find_price("gpu", "nvidia-tesla-t4", "spot", "us-central1", catalogue)
    assert gpu.usd_per_hour == 0.088 and gpu.source.endswith("AAAA-T4-SP")
    # the N1 machine was not in the SKUs: its vendored row, with the refreshed GPUs
    host = prices.find_price("machine", "n1-standard-4", "spot", "us-central1", catalogue)
    assert host.item == "n1-standard-4" and not host.source.startswith("Cloud Billing")
    assert rate.usd_per_hour == round(host.usd_per_hour + 2 * gpu.usd_per_hour, 5)
    assert rate.date_read == host.as_of  # the oldest data of the two
    assert rate.read_on == min(host.date_read, gpu.date_read)


def test_prices_list_reads_the_cache_first_and_marks_stale_prices(httpserver, tmp_path):
    assert _refresh(httpserver, tmp_path, FakeCatalog(PAGES)).returncode == 0
    listing = gkeflow("prices", "list", "--kind", "gpu", "--format", "json", cwd=tmp_path)
    assert listing.returncode == 0, listing.stderr
    records = {(r["item"], r["capacity"], r["region"]): r for r in json.loads(listing.stdout)}
    t4 = records[("nvidia-tesla-t4", "spot", "us-central1")]
    assert t4["source"] == "Cloud Billing Catalog API, SKU AAAA-T4-SP" and t4["stale"] == ""
    old = records[("nvidia-l4", "standard", "us-central1")]
    expected = "STALE" if (TODAY - date(2026, 12, 2)).days > 90 else ""
    assert old["stale"] == expected and old["source"] == "skypilot-vms"


def test_a_disabled_api_is_one_line_naming_the_gcloud_fix(httpserver, tmp_path):
    disabled = (403, {"error": {
        "code": 403, "status": "PERMISSION_DENIED",
        "message": "Cloud Billing API has not been used in project 123 before or it is "
                   "disabled. Enable it by visiting https://console.developers.google.com/"
                   "apis/api/cloudbilling.googleapis.com/overview?project=123 then retry.",
        "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                     "reason": "SERVICE_DISABLED", "domain": "googleapis.com",
                     "metadata": {"service": "cloudbilling.googleapis.com",
                                  "consumer": "projects/123"}}]}})
    fake = FakeCatalog(PAGES, failures=[disabled])
    result = _refresh(httpserver, tmp_path, fake)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "Error: the Cloud Billing API is not enabled: run `gcloud services enable "
        "cloudbilling.googleapis.com` in your project"]
    assert len(fake.requests) == 1 and not (tmp_path / ".gkeflow").exists()


def test_retries_are_bounded_and_the_cache_is_left_alone(httpserver, tmp_path):
    fake = FakeCatalog(PAGES, failures=[UNAVAILABLE] * 10)
    result = _refresh(httpserver, tmp_path, fake)
    assert result.returncode == 1 and len(fake.requests) == 5
    assert "HTTP 503" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / ".gkeflow").exists()


def test_currency_is_asked_for_and_recorded(httpserver, tmp_path):
    eur = [[_sku("EEEE-T4", "Nvidia Tesla T4 GPU running in Americas", ["us-central1"], 0,
                 320000000, currency="EUR")]]
    result = _refresh(httpserver, tmp_path, FakeCatalog(eur, currency="EUR"), "--currency",
                      "eur")
    assert result.returncode == 0, result.stderr
    row = _cache(tmp_path)[("gpu", "nvidia-tesla-t4", "standard", "us-central1")]
    assert (row["usd_per_hour"], row["currency"]) == ("0.32", "EUR")
    # EUR GPUs and vendored USD machines are not added up
    rate = prices.hourly_rate("gke", "n1-standard-4", "nvidia-tesla-t4", 1, "standard",
                              "us-central1", prices=prices.current_prices(tmp_path))
    assert rate.missing and "more than one currency" in rate.reason


def test_no_credentials_is_one_line_naming_the_fix(tmp_path):
    env = {"GOOGLE_APPLICATION_CREDENTIALS": "", "CLOUDSDK_CONFIG": str(tmp_path / "gcloud"),
           "NO_GCE_CHECK": "true", "GKEFLOW_DEBUG": ""}
    result = gkeflow("prices", "refresh", cwd=tmp_path, env=env)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "gcloud auth application-default login" in lines[0], lines


def _vertex(sku_id, description, units, nanos, *, unit="h", usage_type="OnDemand"):
    return _sku(sku_id, description, ["us-central1"], units, nanos, unit=unit,
                usage_type=usage_type, group="", service=VERTEX)


# The SKUs an a3-highgpu-8g Vertex AI training job was billed in us-central1 (ids,
# descriptions and unit prices from the zenn-dws-skus article, see prices.py), on demand and
# with flex-start; the Vertex AI category fields other than the usage type are placeholders.
CE_DWS = [
    _sku("341A-49A5-0C07", "Nvidia H100 80GB GPU attached to DWS Defined Duration VMs running "
         "in Americas", ["us-central1"], 4, 200761000),
    _sku("9A32-36B2-7FBC", "DWS Defined Duration A3 Core running in Americas", ["us-central1"],
         0, 10934000, group="CPU"),
    _sku("ED19-A584-4A84", "DWS Defined Duration A3 Ram running in Americas", ["us-central1"],
         0, 952000, group="RAM", unit="GiBy.h"),
    # Spot SKUs with test prices (Compute Engine's Spot wording, see sku_prices.py)
    _sku("TEST-H100-SPOT", "Nvidia H100 80GB GPU attached to Spot Preemptible VMs running in "
         "Americas", ["us-central1"], 2, 0, usage_type="Preemptible"),
    _sku("TEST-A3-CORE-SPOT", "Spot Preemptible A3 Instance Core running in Americas",
         ["us-central1"], 0, 10000000, group="CPU", usage_type="Preemptible"),
    _sku("TEST-A3-RAM-SPOT", "Spot Preemptible A3 Instance Ram running in Americas",
         ["us-central1"], 0, 1000000, group="RAM", unit="GiBy.h", usage_type="Preemptible"),
]
VERTEX_SKUS = [
    _vertex("3F95-001E-B747", "Vertex AI: Training/Pipelines on NVIDIA H100 80GB in Iowa", 11,
            266033200),
    _vertex("2E83-99F1-391A", "Vertex AI: Training/Pipelines on A3 Instance Core in Iowa", 0,
            29322700),
    _vertex("B045-9255-8314", "Vertex AI: Training/Pipelines on A3 Instance RAM in Iowa", 0,
            2553400, unit="GiBy.h"),
    _vertex("5853-505F-A5C4", "Vertex AI: Training/Pipelines management fee on NVIDIA H100 "
            "80GB in Iowa", 1, 469482600),
    _vertex("9AC1-7D9B-C47E", "Vertex AI: Training/Pipelines management fee on A3 Instance "
            "Core in Iowa", 0, 3824700),
    _vertex("D30D-69C9-F057", "Vertex AI: Training/Pipelines management fee on A3 Instance "
            "RAM in Iowa", 0, 333100, unit="GiBy.h"),
    # shapes the mapping does not understand: a disk, prediction, prediction's fee
    _vertex("A005-98FE-36CC", "Vertex AI: Training/Pipelines on SSD backed PD Capacity", 0,
            195494, unit="GiBy.mo"),
    _vertex("AE9C-DB60-DF46", "Vertex AI: Online/Batch Prediction Nvidia H100 80gb GPU "
            "running in Iowa", 11, 266033200),
    _vertex("1797-967A-274D", "Vertex AI: Online/Batch Prediction management fee on NVIDIA "
            "H100 80GB in Iowa", 1, 469482600),
]
# No such SKU has been seen: a management fee that says it applies to Spot (test prices).
SPOT_FEES = [
    _vertex("TEST-FEE-H100-SPOT", "Vertex AI: Training/Pipelines management fee on Spot "
            "Preemptible NVIDIA H100 80GB in Iowa", 0, 300000000, usage_type="Preemptible"),
    _vertex("TEST-FEE-CORE-SPOT", "Vertex AI: Training/Pipelines management fee on Spot "
            "Preemptible A3 Instance Core in Iowa", 0, 2000000, usage_type="Preemptible"),
    _vertex("TEST-FEE-RAM-SPOT", "Vertex AI: Training/Pipelines management fee on Spot "
            "Preemptible A3 Instance RAM in Iowa", 0, 200000, unit="GiBy.h",
            usage_type="Preemptible"),
]
H100_ON_VERTEX = ("plan", "--target", "vertex", "--compute",
                  "train-model.accelerator=nvidia-h100-80gb", "--compute",
                  "train-model.accelerator_count=8", "--output", "json")


def _train_step(tmp_path, capacity):
    result = gkeflow(*H100_ON_VERTEX, "--compute", f"train-model.scheduling={capacity}",
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    # train-model's compute goes to the Keras candidate of model_type auto
    return next(step for step in json.loads(result.stdout)["cost"]["steps"]
                if step["step"] == "train-mlp")


def test_vertex_ai_skus_become_training_rows_and_plan_prints_them(httpserver, tmp_path):
    fake = FakeCatalog([CE_DWS], vertex_pages=[VERTEX_SKUS[:4], VERTEX_SKUS[4:]])
    result = _refresh(httpserver, tmp_path, fake)
    assert result.returncode == 0, result.stderr
    assert fake.paths == ([f"/v1/services/{SERVICE}/skus"] + [f"/v1/services/{VERTEX}/skus"] * 2
                          + [f"/v1/services/{GKE}/skus"])
    assert [r.get("pageToken", "") for r in fake.requests] == ["", "", "page-1", ""]
    cache = _cache(tmp_path)
    machine = cache[("vertex-machine", "a3-highgpu-8g", "standard", "us-central1")]
    gpu = cache[("vertex-gpu", "nvidia-h100-80gb", "standard", "us-central1")]
    assert float(machine["usd_per_hour"]) == pytest.approx(208 * 0.0293227 + 1872 * 0.0025534)
    assert float(gpu["usd_per_hour"]) == pytest.approx(11.2660332)
    for row in (machine, gpu):
        assert (row["source"], row["date_read"]) == ("Cloud Billing Catalog API",
                                                     TODAY.isoformat())
    assert "SKU 2E83-99F1-391A" in machine["note"] and "SKU B045-9255-8314" in machine["note"]
    assert "SKU 3F95-001E-B747" in gpu["note"]
    # flex-start: the DWS Compute Engine SKUs plus the Vertex AI management fees
    flex_machine = cache[("vertex-machine", "a3-highgpu-8g", "flex-start", "us-central1")]
    flex_gpu = cache[("vertex-gpu", "nvidia-h100-80gb", "flex-start", "us-central1")]
    assert float(flex_machine["usd_per_hour"]) == pytest.approx(
        208 * (0.010934 + 0.0038247) + 1872 * (0.000952 + 0.0003331))
    assert float(flex_gpu["usd_per_hour"]) == pytest.approx(4.200761 + 1.4694826)
    assert all(f"SKU {sku_id}" in flex_machine["note"] for sku_id in (
        "9A32-36B2-7FBC", "ED19-A584-4A84", "9AC1-7D9B-C47E", "D30D-69C9-F057"))
    # Spot: the Compute Engine Spot SKUs were read, no fee that applies to Spot: missing
    spot = cache[("vertex-gpu", "nvidia-h100-80gb", "spot", "us-central1")]
    assert spot["usd_per_hour"] == "" and "(SKU TEST-H100-SPOT)" in spot["note"]
    assert "no Vertex AI management-fee SKU for nvidia-h100-80gb that applies to Spot" \
        in spot["note"]
    # the three shapes it does not understand are skipped and counted
    assert "A005-98FE-36CC" not in (tmp_path / ".gkeflow" / "prices.csv").read_text()
    vertex = result.stdout.strip().splitlines()[-1]
    machines = sum(1 for key in cache if key[0] == "vertex-machine" and cache[key][
        "usd_per_hour"])
    assert vertex.startswith(
        f"Vertex AI: 9 SKUs read, 6 mapped, 3 skipped (descriptions not mapped); rows "
        f"written: 2 vertex-gpu, {machines} vertex-machine; ")
    assert "Spot rows left missing" in vertex

    train = _train_step(tmp_path, "standard")
    assert train["usd_per_hour"] == pytest.approx(
        float(machine["usd_per_hour"]) + 8 * float(gpu["usd_per_hour"]), abs=1e-4)
    assert (train["source"], train["date_read"]) == ("Cloud Billing Catalog API",
                                                     TODAY.isoformat())
    assert train["stale"] is False
    table = gkeflow(*H100_ON_VERTEX[:-2], cwd=tmp_path, env={"COLUMNS": "400"})
    assert table.returncode == 0, table.stderr
    line = next(row for row in table.stdout.splitlines() if row.startswith("cost of train-mlp"))
    assert line.startswith(f"cost of train-mlp: {format_usd(train['usd_per_hour'])}/h,")
    assert line.endswith(f"[published, data of {TODAY.isoformat()}: Cloud Billing Catalog API]")
    flex = _train_step(tmp_path, "flex-start")
    assert flex["usd_per_hour"] == pytest.approx(
        float(flex_machine["usd_per_hour"]) + 8 * float(flex_gpu["usd_per_hour"]), abs=1e-4)
    # no management-fee SKU read for Spot: the Spot rate stays derived (Compute Engine's Spot
    # rate plus the management fee's rule), and says so
    spot_step = _train_step(tmp_path, "spot")
    assert spot_step["estimate"] and "Compute Engine's spot rate + management fee" in \
        spot_step["derived"]


def test_a_management_fee_that_applies_to_spot_prices_vertex_ai_spot(httpserver, tmp_path):
    fake = FakeCatalog([CE_DWS], vertex_pages=[VERTEX_SKUS + SPOT_FEES])
    result = _refresh(httpserver, tmp_path, fake)
    assert result.returncode == 0, result.stderr
    cache = _cache(tmp_path)
    machine = cache[("vertex-machine", "a3-highgpu-8g", "spot", "us-central1")]
    gpu = cache[("vertex-gpu", "nvidia-h100-80gb", "spot", "us-central1")]
    assert float(machine["usd_per_hour"]) == pytest.approx(208 * (0.01 + 0.002)
                                                           + 1872 * (0.001 + 0.0002))
    assert float(gpu["usd_per_hour"]) == pytest.approx(2.0 + 0.3)
    assert "SKU TEST-H100-SPOT" in gpu["note"] and "SKU TEST-FEE-H100-SPOT" in gpu["note"]
    vertex = result.stdout.strip().splitlines()[-1]
    assert vertex.startswith("Vertex AI: 12 SKUs read, 9 mapped, 3 skipped")
    assert "Spot rows left missing" not in vertex
    spot = _train_step(tmp_path, "spot")
    assert spot["usd_per_hour"] == pytest.approx(
        float(machine["usd_per_hour"]) + 8 * float(gpu["usd_per_hour"]), abs=1e-4)
    assert (spot["source"], spot["date_read"]) == ("Cloud Billing Catalog API",
                                                   TODAY.isoformat())


#: Kubernetes Engine SKUs as the catalogue names them: per mCPU-hour and GiB-hour, on
#: demand and Spot, and other compute classes that are not general-purpose pods.
GKE_SKUS = [
    _sku("GGGG-CPU", "Autopilot Pod mCPU Requests (us-central1)", ["us-central1"], 0, 44500,
         service=GKE, group="CPU"),
    _sku("GGGG-RAM", "Autopilot Pod Memory Requests (us-central1)", ["us-central1"], 0,
         4922500, service=GKE, group="RAM", unit="GiBy.h"),
    _sku("GGGG-SCPU", "Autopilot Spot Pod mCPU Requests (us-central1)", ["us-central1"], 0,
         13300, service=GKE, group="CPU", usage_type="Preemptible"),
    _sku("GGGG-SRAM", "Autopilot Spot Pod Memory Requests (us-central1)", ["us-central1"], 0,
         1476700, service=GKE, group="RAM", unit="GiBy.h", usage_type="Preemptible"),
    _sku("GGGG-BAL", "Autopilot Balanced Pod mCPU Requests (us-central1)", ["us-central1"],
         0, 63000, service=GKE, group="CPU"),
    # a memory SKU in another unit is not read as GiB-hours
    _sku("GGGG-ODD", "Autopilot Pod Memory Requests (europe-west4)", ["europe-west4"], 0,
         5400000, service=GKE, group="RAM", unit="MiBy.h"),
]


def test_autopilot_pod_rates_are_read_per_region_and_plan_prices_autopilot_pods(
        httpserver, tmp_path):
    fake = FakeCatalog(PAGES, gke_pages=[GKE_SKUS[:3], GKE_SKUS[3:]])
    result = _refresh(httpserver, tmp_path, fake)
    assert result.returncode == 0, result.stderr
    assert fake.paths[-2:] == [f"/v1/services/{GKE}/skus"] * 2
    assert "GKE Autopilot: general-purpose pod rates for 1 region (us-central1); 1 SKUs " \
           "skipped, e.g. SKU GGGG-ODD" in result.stdout
    cache = _cache(tmp_path)
    cpu = cache[("autopilot-vcpu", "pod", "standard", "us-central1")]
    ram = cache[("autopilot-ram-gib", "pod", "standard", "us-central1")]
    spot_cpu = cache[("autopilot-vcpu", "pod", "spot", "us-central1")]
    assert float(cpu["usd_per_hour"]) == pytest.approx(0.0445)  # per mCPU-hour x 1000
    assert float(ram["usd_per_hour"]) == pytest.approx(0.0049225)
    assert float(spot_cpu["usd_per_hour"]) == pytest.approx(0.0133)
    assert cpu["source"] == "Cloud Billing Catalog API, SKU GGGG-CPU"
    assert cpu["data_date"] == TODAY.isoformat()
    assert ("autopilot-ram-gib", "pod", "standard", "europe-west4") not in cache
    # plan on GKE Autopilot prices a CPU pod from these rows: its requests x the rates
    plan = gkeflow("plan", "--target", "autopilot", "--region", "us-central1", "--output",
                   "json", cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    steps = {s["step"]: s for s in json.loads(plan.stdout)["cost"]["steps"]}
    prepare = steps["prepare-data"]  # 2 vCPU and 8G
    assert prepare["usd_per_hour"] == pytest.approx(
        round(2 * 0.0445 + 8e9 / 2**30 * 0.0049225, 4), abs=1e-4)
    gpu = steps["train-mlp"]
    assert gpu["usd_per_hour"] is None and "not priced as a Standard node" in gpu["reason"]
