"""Cloud Billing Catalog SKUs -> rows of the price catalogue (no network here).

A SKU names what it prices in its description ("Nvidia Tesla T4 GPU running in Americas",
"Spot Preemptible Nvidia L4 GPU running in Belgium", "A2 Instance Core running in Americas",
"G2 Instance Ram running in Iowa", "TpuV6e ... "), the regions it applies to
(``service_regions``) and a unit price per ``usage_unit`` (``h`` for a GPU, a vCPU or a TPU
chip; ``GiBy.h`` for memory). The rules (description phrases per GPU, machine series and TPU
generation) follow SkyPilot's Cloud Billing fetcher (``sky/catalog/data_fetchers/
fetch_gcp.py``), which builds its GCP catalogue from the same API.

Capacity: usage type ``Preemptible`` or "Preemptible" in the description is Spot; "DWS
Defined Duration" ("Nvidia Tesla A100 GPU attached to DWS Defined Duration VMs running in
Americas", "DWS Defined Duration A2 Core running in Americas", "DWS Defined Duration V6e
running in Columbus"), "DWS Flex Start" (H4D) or "Flex Start" in the description is
flex-start. That "DWS Defined Duration" SKUs bill flex-start is what third-party readers of
the catalogue report (e.g. the SKU names quoted in public repositories that query it); no
Google page read for this catalogue says so, so every flex-start row a refresh writes carries
:data:`FLEX_NOTE`. Calendar mode ("... in Calendar Mode", "DWS Calendar Mode"), commitments,
reservations, sole tenancy, custom shapes and virtual workstations are not hourly list prices
and are skipped; so is "Dynamic Workload Scheduler" spelled out, a phrase no SKU description
seen here uses. A machine's row is its vCPU rate x vCPUs + its memory rate x GiB, both from
SKUs of the same series, region and capacity.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date
from fnmatch import fnmatchcase

from gkeflow.pipelines.compute.gpu_catalogue import FAMILIES
from gkeflow.pipelines.compute.prices import Price

SOURCE = "Cloud Billing Catalog API"
#: Services whose SKUs are read: Compute Engine (GPUs, vCPUs, memory, TPU v5e/v5p/v6e) and
#: Vertex AI (custom-training rates and management fees, mapped by :mod:`price_vertex`).
COMPUTE_ENGINE = "6F81-5844-456A"
VERTEX_AI = "C7E2-9256-1C43"

#: GKE accelerator label -> phrases in its SKU descriptions (whole words, any case).
GPU_PHRASES: dict[str, tuple[str, ...]] = {
    "nvidia-tesla-t4": ("T4 GPU",),
    "nvidia-tesla-v100": ("V100 GPU",),
    "nvidia-tesla-p100": ("P100 GPU",),
    "nvidia-tesla-p4": ("P4 GPU",),
    "nvidia-l4": ("L4 GPU",),
    "nvidia-tesla-a100": ("A100 GPU", "A100 40GB GPU"),
    "nvidia-a100-80gb": ("A100 80GB GPU",),
    "nvidia-h100-80gb": ("H100 80GB GPU",),
    "nvidia-h100-mega-80gb": ("H100 80GB Mega GPU", "H100 Mega 80GB GPU", "H100 80GB Plus GPU"),
    "nvidia-h200-141gb": ("H200 141GB GPU",),
    "nvidia-b200": ("B200",),
    "nvidia-gb200": ("GB200",),
    "nvidia-rtx-pro-6000": ("RTX PRO 6000",),
}
#: Machine series -> the words its vCPU and memory SKUs start with.
SERIES_PHRASES: dict[str, str] = {
    "a2": "A2 Instance", "g2": "G2 Instance", "g4": "G4 Instance", "n1": "N1 Predefined Instance",
    "n2": "N2 Instance", "e2": "E2 Instance", "a3": "A3 Instance", "a4": "A4 Instance",
}
#: Machine-type prefix -> series of its SKUs. A3 Mega / Ultra are not listed: their SKUs'
#: descriptions were not confirmed, so their rows stay as they were rather than take A3 High's.
MACHINE_SERIES: dict[str, str] = {
    "a2-": "a2", "g2-": "g2", "g4-": "g4", "n1-": "n1", "n2-": "n2", "e2-": "e2",
    "a3-highgpu-": "a3", "a3-edgegpu-": "a3", "a4-": "a4",
}
#: Catalogue TPU generation -> the word of its Compute Engine SKUs (priced per chip).
TPU_PHRASES: dict[str, str] = {"tpu-v5e": "TpuV5e", "tpu-v5p": "TpuV5p", "tpu-v6e": "TpuV6e"}
#: Descriptions that are not hourly list prices of a catalogue row.
SKIPPED = re.compile(r"commit|reserv|sole tenan|custom|premium|virtual workstation|vws|"
                     r"calendar|extended|dynamic workload scheduler", re.IGNORECASE)
FLEX = re.compile(r"dws defined duration|dws flex|flex[- ]start", re.IGNORECASE)
#: The note on every flex-start row a refresh writes (see the module's docstring).
FLEX_NOTE = ("flex-start read from a DWS SKU; that these SKUs bill flex-start is reported by "
             "third parties, not stated by Google's pages read here (unverified)")
_DWS = "DWS Defined Duration"
UNITS = {"gpu": "h", "tpu": "h", "core": "h", "ram": "GiBy.h"}


@dataclass(frozen=True)
class Sku:
    """What the mapping needs of one SKU (``price`` per ``usage_unit`` in ``currency``)."""

    sku_id: str
    description: str
    usage_type: str
    resource_group: str
    regions: tuple[str, ...]
    usage_unit: str
    price: float
    currency: str


@dataclass
class Refresh:
    """Refreshed rows and what could not be priced."""

    rows: list[Price] = field(default_factory=list)
    unmatched: list[Price] = field(default_factory=list)
    ambiguous: list[str] = field(default_factory=list)
    currency: str = "USD"
    #: What the Vertex AI SKUs gave (a price_vertex.VertexSummary; None when they were not
    #: read). Not imported here: price_vertex builds on this module.
    vertex: object | None = None
    #: What the Kubernetes Engine SKUs gave (a price_autopilot.AutopilotRows; None when they
    #: were not read).
    autopilot: object | None = None

#: (kind, item, capacity, region) -> {unit price: SKU}: what the SKUs read price.
Found = dict[tuple[str, str, str, str], dict[float, Sku]]


def _has(text: str, phrase: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(phrase)}(?![\w-])", text, re.IGNORECASE) is not None


def capacity_of(sku: Sku) -> str | None:
    """``standard``, ``spot``, ``flex-start``, or None for a SKU that is not a list price."""
    if sku.usage_type not in ("OnDemand", "Preemptible") or SKIPPED.search(sku.description):
        return None
    if FLEX.search(sku.description):
        return "flex-start"
    if sku.usage_type == "Preemptible" or _has(sku.description, "Preemptible"):
        return "spot"
    return "standard"


def what(sku: Sku) -> tuple[str, str] | None:
    """(kind, item) a SKU prices: ("gpu", label), ("tpu", generation), ("core"|"ram", series)."""
    text = sku.description
    for generation, word in TPU_PHRASES.items():  # "TpuV6e", flex-start: "... Duration V6e"
        if _has(text, word) or _has(text, f"{_DWS} {word[len('Tpu'):]}"):
            return "tpu", generation
    if sku.resource_group == "GPU" or _has(text, "GPU"):
        matches = [label for label, phrases in GPU_PHRASES.items()
                   if any(_has(text, phrase) for phrase in phrases)]
        return ("gpu", matches[0]) if len(matches) == 1 else None
    for series, words in SERIES_PHRASES.items():  # flex-start: "DWS Defined Duration A2 Core"
        if re.match(rf"((Spot Preemptible |Preemptible )?{re.escape(words)}|{_DWS} "
                    rf"{re.escape(series.upper())}( Instance)?) (Core|Ram)\b", text,
                    re.IGNORECASE):
            return ("core" if re.search(r"\bCore\b", text, re.IGNORECASE) else "ram"), series
    return None


def machine_shapes() -> dict[str, tuple[int, float]]:
    """Machine type -> (vCPUs, GiB) of every shape the GPU catalogue knows."""
    return {shape.name: (shape.vcpus, shape.memory_gib)
            for family in FAMILIES for shape in family.shapes}


def wanted_rows(catalogue: tuple[Price, ...], shapes: dict[str, tuple[int, float]]) -> set:
    """Keys (kind, item, capacity, region) a refresh tries to price: every exact catalogue
    row, and the known machine shapes a pattern row covers, in the catalogue's regions."""
    regions = sorted({row.region for row in catalogue if "*" not in row.region})
    keys = {row.key for row in catalogue
            if "*" not in row.item and "*" not in row.region and row.kind != "instance"}
    # a whole machine with its GPUs (``instance``) is refreshed as its vCPUs and memory
    items = {("machine" if row.kind == "instance" else row.kind, row.item)
             for row in catalogue if "*" not in row.item}
    items |= {("machine", name) for name in shapes for row in catalogue
              if row.kind == "machine" and "*" in row.item and fnmatchcase(name, row.item)}
    for kind, item in items:
        for region in regions:
            for capacity in ("standard", "spot", "flex-start"):
                keys.add((kind, item, capacity, region))
    return keys


def found_prices(skus: Iterable[Sku], regions: set[str]) -> Found:
    """What the Compute Engine ``skus`` price in ``regions``: ("gpu", label), ("tpu",
    generation), ("core" | "ram", series), per capacity and region."""
    found: Found = {}
    for sku in skus:
        capacity = capacity_of(sku)
        priced = what(sku) if capacity else None
        if priced is None or sku.usage_unit != UNITS[priced[0]]:
            continue
        for region in set(sku.regions) & regions:
            found.setdefault((priced[0], priced[1], capacity, region), {})[sku.price] = sku
    return found


def series_of(machine_type: str) -> str:
    """The SKU series of a machine type ("" when :data:`MACHINE_SERIES` names none)."""
    return next((s for p, s in MACHINE_SERIES.items() if machine_type.startswith(p)), "")


def map_skus(skus: Iterable[Sku], catalogue: tuple[Price, ...], today: date,
             shapes: dict[str, tuple[int, float]] | None = None,
             currency: str = "USD") -> Refresh:
    """Price what :func:`wanted_rows` names from ``skus``; catalogue rows no SKU priced are
    ``unmatched``; a key two SKUs price differently is ``ambiguous`` (left as it was)."""
    shapes = machine_shapes() if shapes is None else shapes
    wanted = wanted_rows(catalogue, shapes)
    found = found_prices(skus, {key[3] for key in wanted})
    result = Refresh(currency=currency)
    priced = set()
    for key in sorted(wanted):
        kind, item, capacity, region = key
        if kind == "machine":
            series = series_of(item)
            core = found.get(("core", series, capacity, region), {})
            ram = found.get(("ram", series, capacity, region), {})
            if item not in shapes or not core or not ram:
                continue
            if len(core) > 1 or len(ram) > 1:
                result.ambiguous.append(" ".join(key))
                continue
            (core_price, core_sku), (ram_price, ram_sku) = next(iter(core.items())), next(
                iter(ram.items()))
            vcpus, gib = shapes[item]
            amount = core_price * vcpus + ram_price * gib
            source = f"{SOURCE}, SKU {core_sku.sku_id} + SKU {ram_sku.sku_id}"
        else:
            prices = found.get(key, {})
            if not prices:
                continue
            if len(prices) > 1:
                result.ambiguous.append(" ".join(key))
                continue
            amount, one = next(iter(prices.items()))
            source = f"{SOURCE}, SKU {one.sku_id}"
        priced.add(key)
        result.rows.append(Price(kind, item, capacity, region, round(amount, 6), source, today,
                                 FLEX_NOTE if capacity == "flex-start" else "",
                                 currency=currency, data_date=today))
    result.unmatched = [row for row in catalogue if row.key not in priced and not (
        row.kind == "instance" and ("machine", *row.key[1:]) in priced)]
    return result
