"""Vertex AI SKUs (service C7E2-9256-1C43) -> ``vertex-machine`` and ``vertex-gpu`` rows.

Only description shapes seen in a source are mapped (``<place>`` is a region name such as
"Iowa"; the regions come from the SKU's ``service_regions``):

- ``Vertex AI: Training/Pipelines on <part> in <place>``: on-demand training, per GPU-hour,
  vCPU-hour or GiB-hour. Seen: "NVIDIA H100 80GB", "A3 Instance Core", "A3 Instance RAM"
  (SKUs 3F95-001E-B747, 2E83-99F1-391A, B045-9255-8314 of an a3-highgpu-8g job billed on
  demand: source ``zenn-dws-skus`` of prices.py); "E2 Instance Core / Ram running in",
  "N1 Predefined Instance Core / Ram running in" (a public course script that prices
  Vertex AI training from this catalogue, ``scripts/price_check.py``).
- ``Vertex AI: Training/Pipelines management fee on <part> in <place>``: the Vertex AI fee
  billed on top of Compute Engine SKUs. Seen: "NVIDIA H100 80GB", "A3 Instance Core",
  "A3 Instance RAM" (SKUs 5853-505F-A5C4, 9AC1-7D9B-C47E, D30D-69C9-F057, billed on a
  flex-start job, ``zenn-dws-skus``); "Management fee on E2 Instance Core in", "... on N1
  Instance RAM in" (the same script).

``<part>`` is ``<series>[ Predefined] Instance Core|Ram|RAM`` for a series of
:data:`sku_prices.SERIES_PHRASES`, or ``[NVIDIA ]<GPU>`` where ``<GPU>`` is a phrase of
:data:`sku_prices.GPU_PHRASES` without its trailing "GPU" ("H100 80GB"; only the H100's
spelling was seen, a GPU spelled otherwise is skipped). Every other Vertex AI SKU
(prediction, disks, other products, descriptions with other words) is skipped and counted.

Rows, per machine shape or GPU, region and capacity (never a ratio of another rate):

- standard: the "Training/Pipelines on" SKUs.
- flex-start: Compute Engine "DWS Defined Duration" SKUs plus the management-fee SKUs, as
  the flex-start job of ``zenn-dws-skus`` was billed.
- spot: Compute Engine Spot SKUs plus a management fee that applies to Spot (the Vertex AI
  pricing page, as that article quotes it). A fee applies to Spot when its usage type is
  ``Preemptible`` or its description says "Spot" or "Preemptible", as Compute Engine's Spot
  SKUs do; no such SKU has been seen. Without one, a Spot row whose Compute Engine SKUs were
  found is written with no price and a note naming what was not found.

A machine is its series' vCPU rate x vCPUs + memory rate x GiB (disks and local SSD are left
out, as everywhere in the catalogue). Every row's note names the SKUs (ids) that made it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date
from functools import lru_cache

from gkeflow.pipelines.compute import sku_prices
from gkeflow.pipelines.compute.prices import Price
from gkeflow.pipelines.compute.sku_prices import Found, Refresh, Sku

SHAPE = re.compile(r"Vertex AI: Training/Pipelines (?P<fee>management fee )?on (?P<part>.+?)"
                   r" (?:running )?in (?P<place>[^,]+)", re.IGNORECASE)
MACHINE_PART = re.compile(r"(?P<series>[A-Z]\d+)(?: Predefined)? Instance (?P<part>Core|Ram)",
                          re.IGNORECASE)
SPOT_WORDS = re.compile(r"\b(spot|preemptible)\b", re.IGNORECASE)
#: The capacities a row is written for (see the module docstring for what each sums).
CAPACITIES = ("standard", "flex-start", "spot")
NOTE = "Vertex AI custom training, {capacity}: {parts}"
SPOT_MISSING = ("Vertex AI bills Spot as Compute Engine Spot SKUs plus a Vertex AI management "
                "fee; the Compute Engine Spot SKUs were read ({parts}), but no Vertex AI "
                "management-fee SKU for {item} that applies to Spot (usage type Preemptible, "
                "or 'Spot'/'Preemptible' in its description) in {region} was among the "
                "{read} Vertex AI SKUs read")


@dataclass
class VertexSummary:
    """How many Vertex AI SKUs were read, understood (``mapped``) and skipped, and the rows
    written per kind; ``spot_missing`` counts Spot rows written without a price."""

    read: int = 0
    mapped: int = 0
    skipped: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    spot_missing: int = 0


@lru_cache(maxsize=1)
def gpu_names() -> dict[str, str]:
    """Lower-cased GPU name in a Vertex AI description -> GKE accelerator label."""
    names = {}
    for label, phrases in sku_prices.GPU_PHRASES.items():
        for phrase in phrases:
            if phrase.endswith(" GPU"):
                names[phrase.removesuffix(" GPU").lower()] = label
    return names


def parse(sku: Sku) -> tuple[str, str, str] | None:
    """(part kind "gpu" | "core" | "ram", item, capacity) of a Vertex AI SKU, capacity being
    ``standard`` for a training rate, ``flex-start`` or ``spot`` for a management fee; None
    for a description this mapping does not understand."""
    match = SHAPE.fullmatch(sku.description.strip())
    if match is None or sku.usage_type not in ("OnDemand", "Preemptible") \
            or sku_prices.SKIPPED.search(sku.description) or sku_prices.FLEX.search(
                sku.description):
        return None
    fee = bool(match["fee"])
    spot = sku.usage_type == "Preemptible" or SPOT_WORDS.search(sku.description) is not None
    if spot and not fee:
        return None  # no Spot training SKU has been seen: its meaning is unknown
    part = SPOT_WORDS.sub("", match["part"]).strip() if fee else match["part"]
    part = re.sub(r"\s+", " ", part)
    capacity = "spot" if spot else "flex-start" if fee else "standard"
    machine = MACHINE_PART.fullmatch(part)
    if machine:
        series = machine["series"].lower()
        kind = "core" if machine["part"].lower() == "core" else "ram"
        if series not in sku_prices.SERIES_PHRASES:
            return None
        parsed = (kind, series, capacity)
    else:
        label = gpu_names().get(re.sub(r"^nvidia ", "", part, flags=re.IGNORECASE).lower())
        if label is None:
            return None
        parsed = ("gpu", label, capacity)
    return parsed if sku.usage_unit == sku_prices.UNITS[parsed[0]] else None


def vertex_prices(skus: Iterable[Sku], regions: set[str],
                  summary: VertexSummary) -> Found:
    """What the Vertex AI ``skus`` price in ``regions``, counting them in ``summary``."""
    found: Found = {}
    for sku in skus:
        summary.read += 1
        parsed = parse(sku)
        if parsed is None:
            summary.skipped += 1
            continue
        summary.mapped += 1
        kind, item, capacity = parsed
        for region in set(sku.regions) & regions:
            found.setdefault((kind, item, capacity, region), {})[sku.price] = sku
    return found


def _parts(kind: str, item: str, capacity: str, region: str,
           shapes: dict[str, tuple[int, float]]) -> list[tuple[str, str, str, str, float]]:
    """(source "ce" | "vertex", part kind, item, capacity, quantity) summed into one row."""
    if kind == "vertex-machine":
        series = sku_prices.series_of(item)
        if not series or item not in shapes:
            return []
        vcpus, gib = shapes[item]
        wanted = [("core", series, vcpus), ("ram", series, gib)]
    else:
        wanted = [("gpu", item, 1)]
    if capacity == "standard":
        return [("vertex", part, name, "standard", count) for part, name, count in wanted]
    return [(source, part, name, capacity, count) for source in ("ce", "vertex")
            for part, name, count in wanted]


def _describe(sku: Sku, count: float, kind: str) -> str:
    per = "" if count == 1 and kind == "gpu" else f" x {count:g}" + (
        " GiB" if kind == "ram" else "")
    return f"SKU {sku.sku_id} ({sku.description}){per}"


def wanted_items(catalogue: tuple[Price, ...],
                 shapes: dict[str, tuple[int, float]]) -> set[tuple[str, str]]:
    """(kind, item) a refresh tries to price: every machine shape and GPU the mapping knows,
    and every exact ``vertex-machine`` / ``vertex-gpu`` item of the catalogue."""
    items = {("vertex-machine", name) for name in shapes}
    items |= {("vertex-gpu", label) for label in sku_prices.GPU_PHRASES}
    items |= {(row.kind, row.item) for row in catalogue
              if row.kind in ("vertex-machine", "vertex-gpu") and "*" not in row.item}
    return items


def map_vertex(ce_found: Found, vertex_skus: Iterable[Sku], catalogue: tuple[Price, ...],
               today: date, shapes: dict[str, tuple[int, float]],
               currency: str = "USD") -> tuple[list[Price], list[str], VertexSummary]:
    """Rows priced from ``vertex_skus`` (and, for flex-start and Spot, the Compute Engine
    SKUs in ``ce_found``), the keys left as they were because SKUs disagree, the counts."""
    regions = {row.region for row in catalogue if "*" not in row.region}
    summary = VertexSummary()
    found = {"ce": ce_found, "vertex": vertex_prices(vertex_skus, regions, summary)}
    rows, ambiguous = [], []
    for kind, item in sorted(wanted_items(catalogue, shapes)):
        for region in sorted(regions):
            for capacity in CAPACITIES:
                key = (kind, item, capacity, region)
                picked = [(source, part, count, found[source].get((part, name, wanted, region),
                                                                  {}))
                          for source, part, name, wanted, count in _parts(*key, shapes)]
                if not picked:
                    continue
                if all(prices for *_, prices in picked):
                    if any(len(prices) > 1 for *_, prices in picked):
                        ambiguous.append(" ".join(key))
                        continue
                    used = [(count, part, *next(iter(prices.items())))
                            for _source, part, count, prices in picked]
                    amount = sum(price * count for count, _part, price, _sku in used)
                    text = " + ".join(_describe(sku, count, part)
                                      for count, part, _price, sku in used)
                    rows.append(Price(*key, round(amount, 9), sku_prices.SOURCE, today,
                                      NOTE.format(capacity=capacity, parts=text),
                                      currency=currency, data_date=today))
                    summary.rows[kind] = summary.rows.get(kind, 0) + 1
                    continue
                compute = [prices for source, _part, _count, prices in picked if source == "ce"]
                if capacity == "spot" and all(len(prices) == 1 for prices in compute):
                    ids = ", ".join(f"SKU {next(iter(prices.values())).sku_id}"
                                    for prices in compute)
                    rows.append(Price(*key, None, sku_prices.SOURCE, today, SPOT_MISSING.format(
                        parts=ids, item=item, region=region, read=summary.read), currency=currency))
                    summary.spot_missing += 1
    return rows, ambiguous, summary


def map_all(ce_skus: Iterable[Sku], vertex_skus: Iterable[Sku], catalogue: tuple[Price, ...],
            today: date, shapes: dict[str, tuple[int, float]] | None = None,
            currency: str = "USD") -> Refresh:
    """Compute Engine rows (:func:`sku_prices.map_skus`) and Vertex AI rows together; the
    catalogue rows neither priced are ``unmatched``."""
    shapes = sku_prices.machine_shapes() if shapes is None else shapes
    ce_skus = list(ce_skus)
    result = sku_prices.map_skus(ce_skus, catalogue, today, shapes, currency)
    regions = {row.region for row in catalogue if "*" not in row.region}
    rows, ambiguous, summary = map_vertex(sku_prices.found_prices(ce_skus, regions),
                                          vertex_skus, catalogue, today, shapes, currency)
    priced = {row.key for row in rows if row.usd_per_hour is not None}
    result.rows += rows
    result.ambiguous += ambiguous
    result.unmatched = [row for row in result.unmatched if row.key not in priced]
    result.vertex = summary
    return result
