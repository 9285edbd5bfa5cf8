"""Hourly list prices of what a step runs on, with their sources: a look-up over prices.csv.

Each row of ``prices.csv`` (beside this module) is one price: ``kind`` (``gpu`` per GPU,
``tpu`` per chip with its host VM, ``machine`` for the vCPUs and memory of a machine type
without its GPUs, ``instance`` for a whole accelerator-optimised machine type with the
GPUs it always carries: A2, A3, G2, G4), ``item`` (GKE accelerator label, TPU generation
or machine type), ``capacity`` (``standard``, ``spot``, ``flex-start``), ``region``,
``usd_per_hour``, ``source`` (a key of :data:`SOURCES`, or the source itself) and
``date_read``. A row with no price records that
the price is missing and why (``note``); ``item`` and ``region`` may be patterns
(``g2-standard-*``, ``*``) that cover what no exact row names.
Missing prices are reported, never estimated: Spot and flex-start are their own SKUs, not a
fixed discount off on demand.

Sources:

- ``https://github.com/Cyclenerd/google-cloud-pricing-cost-calculator pricing.yml@<commit>``
  (written as the row's source, with the commit; date = the file's ``about.generated``):
  Cyclenerd/google-cloud-pricing-cost-calculator (Apache-2.0) generates ``pricing.yml`` from
  the Cloud Billing Catalog API. It gives whole machine types (``hour``, ``hour_spot``), GPUs
  included for A2 / A3 / G2 / G4, and no per-GPU rate: those become ``instance`` rows, N1
  types ``machine`` rows. Regenerate them with
  ``python -m gkeflow.pipelines.compute.price_import PATH/pricing.yml --commit SHA``
  (:mod:`gkeflow.pipelines.compute.price_import`); other rows are kept. A GKE GPU machine is
  priced from its ``instance`` row when one names it, else as machine + GPUs.
- ``skypilot-vms``: skypilot-org/skypilot-catalog ``catalogs/v8/gcp/vms.csv`` at commit
  006059e0f18acb1341e22a27751e9f80df6ba92f, generated from the Cloud Billing Catalog API
  (read 2026-12-02). A secondary source: rows without an accelerator are the machine's
  vCPUs and memory; accelerator rows are the GPUs (or the TPU chips) alone. It writes
  700.0 where it found no price; no such row was taken. Its on-demand H100 figures differ
  more than twofold between regions (us-central1 4.20 / GPU, us-east4 9.80) and its H200
  "on demand" rows fall below Spot in some regions (A3 Ultra has no on-demand offer); check
  them against the Compute Engine GPU pricing page before relying on them.

- ``vertex-pricing-transcript``: a transcription of https://cloud.google.com/vertex-ai/pricing
  (read there 2026-10-07; each figure found verbatim in the page) holding two custom-training
  rates: n1-standard-4 (0.21849885) and the NVIDIA_H100_80GB accelerator (9.79655057). It
  names no region; n1-standard-4 is recorded for us-central1 because its figure is Compute
  Engine's us-central1 rate x 1.15 and two other readings of the page give it for Iowa. Its
  H100 figure is not used: it is the Iowa training SKU of ``zenn-dws-skus`` / 1.15, i.e.
  Compute Engine's H100 rate, so the page may list the Vertex AI management fee apart.
- ``zenn-dws-skus``: yshimojo/zenn-articles ``articles/dws-flex-new-skus.md`` at commit
  bfceb8e (published 2025-08-20 in Google Cloud Japan's Zenn publication,
  https://zenn.dev/google_cloud_jp/articles/dws-flex-new-skus): the Cloud Billing SKUs (ids
  and unit prices, Iowa) of an a3-highgpu-8g Vertex AI training job run on demand and with
  flex-start (DWS), read from its author's billing report in August 2025. On demand is billed
  as Vertex AI "Training/Pipelines on ..." SKUs; flex-start as Compute Engine "DWS Defined
  Duration" SKUs plus Vertex AI management-fee SKUs. A row is the sum of the SKUs it names,
  times the machine's 208 vCPUs and 1872 GiB. It says, citing the Vertex AI pricing page,
  that Spot is billed like flex-start (Compute Engine SKUs plus the management fee), but no
  management fee billed on Spot was read, so Vertex AI Spot stays missing.
- ``kahnwong-gke-autopilot``: kahnwong/calculator ``src/models/GcpGkeModel.ts`` at commit
  583eacc (read 2026-12-06), a transcription of https://cloud.google.com/kubernetes-engine/pricing
  for asia-southeast1: GKE Autopilot general-purpose pods per vCPU-hour and GiB-hour, on
  demand and Spot (kinds ``autopilot-vcpu`` / ``autopilot-ram-gib``, item ``pod``). Other
  regions' Autopilot rates were not read.
- ``agent-platform-product-transcript``: api-evangelist/google-cloud-automl
  ``plans/google-cloud-automl-plans-pricing.yml`` at commit 0a5764f, a transcription of
  Google's product page https://cloud.google.com/products/gemini-enterprise-agent-platform
  (read there 2026-09-20, each figure found verbatim): "Agent Platform Pipelines execution
  and additional fees: Starting at $0.03 per pipeline run" (kind ``vertex-pipelines``, item
  ``run``, in USD per run).

Vertex AI rates are their own kinds: ``vertex-machine`` (a machine type's vCPUs and memory),
``vertex-gpu`` (per accelerator) and ``vertex-tpu``; a Vertex AI step is priced from them
only, never from Compute Engine rows. A Vertex AI Pipelines step with CPU and memory limits
runs on "the closest match" among supported machine types (:data:`VERTEX_PIPELINES_MACHINES`;
with no limits, an e2-standard-4), which the docs do not name: such steps stay missing. Its
steps are billed with the same "Training/Pipelines" SKUs as custom training (the SKU names
in ``zenn-dws-skus``); no E2 rate of them was read.

Not recorded yet (reported as missing): Vertex AI custom-training machine rates but
n1-standard-4 and a3-highgpu-8g in us-central1, its accelerator rates but the H100 in
us-central1, its Spot and TPU training rates, its flex-start rates but a3-highgpu-8g and the
H100 in us-central1; Compute Engine flex-start prices, the vCPU and memory of G2 (but
g2-standard-96), N1, E2, N2, A3 Mega / Ultra / 8-GPU High and A4 machines, and the GPUs and
TPUs whose rows were not read.

A refreshed cache (``gkeflow prices refresh``) lives beside gkeflow.yaml in
:data:`CACHE_FILE` (``.gkeflow/prices.csv``): prices read from the Cloud Billing Catalog API
(Compute Engine's SKUs, :mod:`sku_prices`; Vertex AI's, as ``vertex-machine`` and
``vertex-gpu`` rows, :mod:`price_vertex`), same columns plus ``currency``.
:func:`current_prices` reads it first: its rows replace the vendored rows of the same kind,
item, capacity and region; every other row stays as vendored.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from datetime import date
from fnmatch import fnmatchcase
from functools import lru_cache
from pathlib import Path

from gkeflow.pipelines.compute.gpu_catalogue import FAMILIES
from gkeflow.pipelines.settings.platforms import names, platform

PRICES_CSV = Path(__file__).with_name("prices.csv")
#: The refreshed cache, relative to the directory of gkeflow.yaml.
CACHE_FILE = Path(".gkeflow") / "prices.csv"
COLUMNS = ("kind", "item", "capacity", "region", "usd_per_hour", "source", "date_read", "note",
           "currency", "data_date", "basis")
#: A price whose data (not its reading) is older than this many days is stale.
STALE_AFTER_DAYS = 90
#: What a row's figure is: a price list or catalogue entry, a unit price read off a bill.
BASES = ("published", "billed")
CAPACITIES = ("standard", "spot", "flex-start", "reservation")
def priced_platforms() -> tuple[str, ...]:
    """The platforms that bill by the hour: every registered one but a local one."""
    return tuple(name for name in names() if platform(name).cloud)

#: Compute Engine kinds (GKE), Vertex AI custom-training kinds, and the per-run fee.
KINDS = ("gpu", "tpu", "machine", "instance", "vcpu", "ram-gib", "autopilot-vcpu",
         "autopilot-ram-gib", "autopilot-gpu", "autopilot-tpu", "vertex-gpu", "vertex-tpu",
         "vertex-machine", "vertex-pipelines")

SOURCES: dict[str, str] = {
    "skypilot-vms": "https://github.com/skypilot-org/skypilot-catalog/blob/"
                    "006059e0f18acb1341e22a27751e9f80df6ba92f/catalogs/v8/gcp/vms.csv",
    "vertex-pricing-transcript": "https://github.com/api-evangelist/google-vertex-ai/blob/"
                                "342263c39279d72204c9e1bb3058dceba0d215e1/plans/"
                                "google-vertex-ai-plans-pricing.yml",
    "zenn-dws-skus": "https://github.com/yshimojo/zenn-articles/blob/"
                     "bfceb8e372d4b2ecc7ac25f7b7e355e16ddcb877/articles/dws-flex-new-skus.md",
    "agent-platform-product-transcript": "https://github.com/api-evangelist/google-cloud-automl/"
                                         "blob/0a5764ff742eee7666c5bcd523ee68b3e343134a/plans/"
                                         "google-cloud-automl-plans-pricing.yml",
    "kahnwong-gke-autopilot": "https://github.com/kahnwong/calculator/blob/"
                              "583eaccc9053697f1100d5e14e6f584e899957dc/src/models/"
                              "GcpGkeModel.ts",
}
#: What Vertex AI Pipelines runs a step on (the rule the plan names for CPU-only steps).
VERTEX_PIPELINES_MACHINES = "https://cloud.google.com/vertex-ai/docs/pipelines/machine-types"


@dataclass(frozen=True)
class Price:
    """One row of the catalogue; ``usd_per_hour`` is None when the price is missing."""

    kind: str
    item: str
    capacity: str
    region: str
    usd_per_hour: float | None
    source: str
    date_read: date
    note: str = ""
    currency: str = "USD"
    #: When the data was published or observed (catalogue snapshot, page, bill, commit);
    #: None when the source does not say (staleness then falls back on ``date_read``).
    data_date: date | None = None
    #: ``published`` (a price list or catalogue) or ``billed`` (a unit price on a bill).
    basis: str = "published"

    @property
    def key(self) -> tuple[str, str, str, str]:
        return self.kind, self.item, self.capacity, self.region

    @property
    def as_of(self) -> date:
        """The date staleness is judged by: the data's own date, else the day it was read."""
        return self.data_date or self.date_read


@dataclass(frozen=True)
class Rate:
    """An hourly rate, or why there is none (``usd_per_hour`` None and ``reason``).

    ``date_read`` is the oldest data date of the rows it sums (see :attr:`Price.as_of`),
    ``read_on`` the oldest day gkeflow read one of them; ``sources`` the rows' sources as
    written (:func:`short_ref` shortens each, :func:`source_url` expands it)."""

    usd_per_hour: float | None
    source: str = ""
    date_read: date | None = None
    stale: bool = False
    reason: str = ""
    currency: str = "USD"
    #: How the rate was derived from other rows (empty: read as it is).
    derived: str = ""
    #: ``published``, ``billed``, ``published and billed``, or ``derived`` (a rule).
    basis: str = ""
    sources: tuple[str, ...] = ()
    read_on: date | None = None
    #: Whether every row it sums says when its data dates from (else ``date_read`` falls
    #: back on the day such a row was read).
    data_dated: bool = True

    @property
    def missing(self) -> bool:
        return self.usd_per_hour is None


def source_url(source: str) -> str:
    """The page a row's ``source`` names: a key of :data:`SOURCES`, else the source itself."""
    return SOURCES.get(source, source)


def short_ref(source: str) -> str:
    """A source as a short reference for one terminal line: a key of :data:`SOURCES` as it
    is, ``owner file@commit7`` for a file of a GitHub repository, the text before a comma otherwise
    (``Cloud Billing Catalog API``); ``plan --sources`` lists the full sources once."""
    if source in SOURCES:
        return source
    match = re.match(r"https://github\.com/([^/\s]+)/\S*\s+(\S+)@([0-9a-f]{7})", source)
    if match:
        return f"{match[1]} {match[2]}@{match[3]}"
    return source.split(",", 1)[0].strip()


def combine_basis(bases) -> str:
    """One label for a sum of rows: ``published``, ``billed`` or ``published and billed``."""
    found = sorted(set(bases), key=lambda b: (b != "published", b))
    return " and ".join(found)


def rate_of(total: float, rows, today: date | None, derived: str = "") -> Rate:
    """A :class:`Rate` of ``total`` summed from ``rows``: their sources, the oldest data date
    (staleness follows it), the oldest reading, and their basis (``derived`` with a rule)."""
    rows = list(rows)
    oldest = min(row.as_of for row in rows)
    sources = tuple(sorted({row.source for row in rows}))
    return Rate(round(total, 5), " + ".join(dict.fromkeys(short_ref(s) for s in sources)),
                oldest, is_stale(oldest, today or date.today()), currency=rows[0].currency,
                derived=derived, basis="derived" if derived else combine_basis(
                    row.basis for row in rows), sources=sources,
                read_on=min(row.date_read for row in rows),
                data_dated=all(row.data_date is not None for row in rows))


def _date(text: str | None) -> date | None:
    text = (text or "").strip()
    return date.fromisoformat(text) if text else None


def _row(raw: dict[str, str]) -> Price:
    price = raw["usd_per_hour"].strip()
    basis = (raw.get("basis") or "").strip() or "published"
    if basis not in BASES:
        raise ValueError(f"price row {raw['kind']} {raw['item']}: basis {basis!r} is not one of "
                         f"{', '.join(BASES)}")
    return Price(raw["kind"], raw["item"], raw["capacity"], raw["region"],
                 float(price) if price else None, raw["source"].strip(),
                 date.fromisoformat(raw["date_read"]), (raw.get("note") or "").strip(),
                 (raw.get("currency") or "").strip() or "USD", _date(raw.get("data_date")),
                 basis)


def _comes_with(machine_type: str) -> tuple[str, int] | None:
    """(GPU, count) a machine type of the GPU catalogue always carries; None for N1 (GPUs
    attached at will) and for machine types the catalogue does not know."""
    for family in FAMILIES:
        for shape in family.shapes:
            if shape.name == machine_type and family.name != "N1":
                return shape.accelerator, shape.accelerator_count
    return None


@lru_cache(maxsize=4)
def load_prices(path: Path = PRICES_CSV) -> tuple[Price, ...]:
    """Every row of the price file at ``path``."""
    with open(path, newline="", encoding="utf-8") as handle:
        lines = (line for line in handle if not line.startswith("#"))
        return tuple(_row(raw) for raw in csv.DictReader(lines))


def merge_prices(cache: tuple[Price, ...], base: tuple[Price, ...]) -> tuple[Price, ...]:
    """``cache`` rows, then the ``base`` rows whose key the cache does not hold. A refreshed
    ``machine`` row also replaces the ``instance`` row of the same machine type: the cache
    prices such a machine as its vCPUs and memory plus its GPUs."""
    refreshed = {row.key for row in cache}
    return cache + tuple(row for row in base if row.key not in refreshed and not (
        row.kind == "instance" and ("machine", *row.key[1:]) in refreshed))


def cache_path(directory: Path | None = None) -> Path:
    """Where the refreshed cache of the project in ``directory`` (default: here) lives."""
    return (Path.cwd() if directory is None else Path(directory)) / CACHE_FILE


def current_prices(directory: Path | None = None) -> tuple[Price, ...]:
    """The catalogue in use: the refreshed cache beside gkeflow.yaml over the vendored file."""
    cache = cache_path(directory)
    if not cache.is_file():
        return load_prices()
    return merge_prices(load_prices(cache.resolve()), load_prices())


def write_prices(path: Path, rows: tuple[Price, ...] | list[Price], header: str) -> None:
    """Write ``rows`` as a price file (``header`` becomes its ``#`` comment line)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "w", newline="", encoding="utf-8") as handle:
        handle.write(f"# {header}\n")
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(COLUMNS)
        for row in rows:
            price = "" if row.usd_per_hour is None else repr(row.usd_per_hour)
            writer.writerow([row.kind, row.item, row.capacity, row.region, price, row.source,
                             row.date_read.isoformat(), row.note, row.currency,
                             row.data_date.isoformat() if row.data_date else "", row.basis])
    temporary.replace(path)
    load_prices.cache_clear()


def is_stale(as_of: date, today: date) -> bool:
    """Whether a price whose data dates from ``as_of`` is older than :data:`STALE_AFTER_DAYS`."""
    return (today - as_of).days > STALE_AFTER_DAYS


def find_price(kind: str, item: str, capacity: str, region: str,
               prices: tuple[Price, ...] | None = None) -> Price | None:
    """The row for exactly this item, else the ``*`` row that covers it; None if neither."""
    rows = current_prices() if prices is None else prices
    fallback = None
    for row in rows:
        if row.kind != kind or row.capacity != capacity:
            continue
        if row.item == item and row.region == region:
            return row
        if (fallback is None and fnmatchcase(item, row.item)
                and fnmatchcase(region, row.region)):
            fallback = row
    return fallback


def _part(kind: str, item: str, capacity: str, region: str, count: int,
          prices: tuple[Price, ...] | None) -> tuple[float | None, Price | None, str]:
    row = find_price(kind, item, capacity, region, prices)
    what = f"{capacity} {item} in {region} price"
    if kind.startswith("vertex-"):
        what = f"Vertex AI {capacity} training rate for {item} in {region}"
    if row is None:
        return None, None, f"no {what} in the catalogue"
    if row.usd_per_hour is None:
        return None, row, f"no {what}: {row.note or 'missing'}"
    return row.usd_per_hour * count, row, ""


def rate_parts(target: str, machine_type: str, accelerator: str | None,
               count: int) -> list[tuple[str, str, int]]:
    """(kind, item, count) rows whose sum is one machine's rate on ``target``: on Vertex AI
    the ``vertex-*`` kinds (custom-training rates), on GKE the Compute Engine kinds."""
    where = platform(target)
    prefix = where.price_kinds
    if accelerator and accelerator.startswith("tpu"):
        return [(f"{prefix}tpu", accelerator, count)]
    if not prefix and _comes_with(machine_type) == (accelerator or "", count) and count:
        return [("instance", machine_type, 1)]
    parts = [(f"{prefix}machine", machine_type, 1)]
    if accelerator and count:
        parts.append((f"{prefix}gpu", accelerator, count))
    return parts


def hourly_rate(target: str, machine_type: str, accelerator: str | None, count: int,
                capacity: str, region: str, *, today: date | None = None,
                prices: tuple[Price, ...] | None = None) -> Rate:
    """What one machine of ``machine_type`` with ``count`` ``accelerator`` GPUs (or, for a
    ``tpu-*`` generation, ``count`` chips) costs per hour on ``target`` under ``capacity``.

    GPU machines are the machine's own row plus ``count`` GPUs; TPU slices are ``count``
    chips (their host VMs are in the chip price). Reservation capacity has no hourly rate
    here: it is paid for by the reservation.
    """
    if target not in priced_platforms():
        raise ValueError(f"unknown target {target!r}; choose one of "
                         f"{', '.join(priced_platforms())}")
    if capacity not in CAPACITIES:
        raise ValueError(f"unknown capacity {capacity!r}; choose one of {', '.join(CAPACITIES)}")
    if count < 0:
        raise ValueError(f"accelerator count must be 0 or more, not {count}")
    if capacity == "reservation":
        return Rate(None, reason="reserved: paid for by the reservation, not by the hour")
    parts = rate_parts(target, machine_type, accelerator, count)
    if parts[0][0] == "instance":
        row = find_price("instance", machine_type, capacity, region, prices)
        if row is None or row.item != machine_type:  # no whole-machine row: host + GPUs
            parts = rate_parts("gke", machine_type, None, 0) + [("gpu", accelerator, count)]
    total, rows = 0.0, []
    for kind, item, n in parts:
        amount, row, reason = _part(kind, item, capacity, region, n, prices)
        if amount is None:
            return Rate(None, reason=reason)
        total += amount
        rows.append(row)
    currencies = sorted({row.currency for row in rows})
    if len(currencies) > 1:
        return Rate(None, reason=f"prices in more than one currency ({', '.join(currencies)}); "
                                 "run `gkeflow prices refresh` with one --currency")
    return rate_of(total, rows, today)
