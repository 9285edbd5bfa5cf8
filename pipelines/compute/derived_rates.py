"""Rates no price row gives directly, derived from rows that exist, each with its rule.

- **A CPU step on GKE Standard** pays for its share of a node: its CPU and memory requests
  at the per-vCPU and per-GiB rates of the node pool's machine family (``vcpu`` / ``ram-gib``
  rows, solved from the family's machine types: :mod:`price_family`). On GKE Autopilot a
  pod is billed by its requests at Autopilot's own rates (``autopilot-vcpu`` /
  ``autopilot-ram-gib`` rows).
- **A Vertex AI Pipelines step** runs on a machine Vertex AI chooses: ``e2-standard-4`` with
  no limits, else "the closest match" to the step's CPU and memory limits
  (https://cloud.google.com/vertex-ai/docs/pipelines/machine-types); it is priced as the
  smallest machine type of :data:`VERTEX_PIPELINE_MACHINES` that fits the limits.
- **A Vertex AI on-demand rate with no row** (most machine types, TPUs) is the Compute
  Engine rate of the same machine x Vertex AI's markup *for that machine* read from its
  on-demand rates (Vertex AI training / Compute Engine), else the markup of the reference
  machine :data:`MARKUP_REFERENCE` (n1-standard-4 in us-central1, 1.15).
- **Vertex AI Spot, flex-start and reservations with no row** are billed as Compute
  Engine's SKUs of that capacity (a reservation: nothing, it is paid for) plus Vertex AI's
  management fee, :data:`MANAGEMENT_FEE_SHARE` of Compute Engine's on-demand rate
  (:data:`MANAGEMENT_FEE_RULE` cites the rule and the figures it was read from).

Every derived rate says so (:attr:`Rate.derived`); plan and notifications mark it an
estimate.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import date

from gkeflow.pipelines.compute.prices import (
    Price,
    Rate,
    find_price,
    hourly_rate,
    rate_of,
)

#: Vertex AI's management fee on Spot, flex-start and reserved training machines, as a share
#: of Compute Engine's on-demand rate of the same resources.
MANAGEMENT_FEE_SHARE = 0.15
MANAGEMENT_FEE_RULE = (
    "Vertex AI bills Spot VMs, reservations and flex-start used by training as the Compute "
    "Engine SKUs plus a Vertex AI management fee (cloud.google.com/vertex-ai/pricing, as "
    "quoted by zenn-dws-skus); the fee is 15% of Compute Engine's on-demand rate, as the "
    "management-fee SKUs of zenn-dws-skus bill it (H100 1.4694826 = 0.15 x 9.79655; A3 core "
    "0.0038247 = 0.15 x 0.025498)")
FEE_CAPACITIES = ("spot", "flex-start", "reservation")
#: The machine whose Vertex AI and Compute Engine on-demand rates give the default markup.
MARKUP_REFERENCE = ("n1-standard-4", "us-central1")
DEFAULT_FAMILY = "e2"
#: Vertex AI Pipelines' machine with no CPU or memory limits.
VERTEX_DEFAULT_MACHINE = "e2-standard-4"
#: Predefined general-purpose shapes: series -> (GiB per vCPU, vCPU sizes).
SERIES = {
    "e2-highcpu": (1, (2, 4, 8, 16, 32)), "e2-standard": (4, (2, 4, 8, 16, 32)),
    "e2-highmem": (8, (2, 4, 8, 16)),
    "n1-highcpu": (0.9, (2, 4, 8, 16, 32, 64, 96)),
    "n1-standard": (3.75, (1, 2, 4, 8, 16, 32, 64, 96)),
    "n1-highmem": (6.5, (2, 4, 8, 16, 32, 64, 96)),
    "n2-highcpu": (1, (2, 4, 8, 16, 32, 48, 64, 80, 96)),
    "n2-standard": (4, (2, 4, 8, 16, 32, 48, 64, 80, 96, 128)),
    "n2-highmem": (8, (2, 4, 8, 16, 32, 48, 64, 80, 96, 128)),
    "n2d-standard": (4, (2, 4, 8, 16, 32, 48, 64, 80, 96, 128, 224)),
    "n4-standard": (4, (2, 4, 8, 16, 32, 48, 64, 80)),
}
#: What a Vertex AI Pipelines step with limits may run on, in the order tried: the E2 types
#: (the default's series) smallest first, then N1 for what E2 cannot hold.
VERTEX_PIPELINE_MACHINES = tuple(
    machine for group in (("e2-highcpu", "e2-standard", "e2-highmem"),
                          ("n1-standard", "n1-highmem"))
    for machine in sorted(((f"{series}-{n}", n, n * SERIES[series][0]) for series in group
                           for n in SERIES[series][1]), key=lambda m: (m[1], m[2])))


@dataclass(frozen=True)
class Cluster:
    """How a GKE cluster bills a CPU step: node pools of ``family`` (Standard) or Autopilot."""

    family: str = DEFAULT_FAMILY
    autopilot: bool = False


def shape_of(machine: str) -> tuple[int, float] | None:
    """(vCPUs, GiB) of a predefined general-purpose machine type; None for others."""
    series, _, size = machine.rpartition("-")
    if series in SERIES and size.isdigit() and int(size) in SERIES[series][1]:
        return int(size), int(size) * SERIES[series][0]
    return None


def _combine(parts: list[tuple[float, Price]], derived: str, today: date | None) -> Rate:
    return rate_of(sum(amount for amount, _row in parts), [row for _amount, row in parts],
                   today, derived)


def requests_rate(kinds: tuple[str, str], item: str, cpus: float, gib: float, capacity: str,
                  region: str, derived: str, prices: tuple[Price, ...] | None,
                  today: date | None = None) -> Rate:
    """``cpus`` x the vCPU row plus ``gib`` x the memory row of ``item``."""
    return _sum_rows([(kinds[0], item, cpus), (kinds[1], item, gib)], capacity, region,
                     derived, prices, today)


def _sum_rows(parts: list[tuple[str, str, float]], capacity: str, region: str, derived: str,
              prices: tuple[Price, ...] | None, today: date | None) -> Rate:
    """The sum of ``amount`` x the row of each (kind, item, amount); missing with the reason
    of the first row that has no price."""
    found = []
    for kind, item, amount in parts:
        row = find_price(kind, item, capacity, region, prices)
        if row is None or row.usd_per_hour is None:
            why = row.note if row is not None and row.note else "not in the catalogue"
            return Rate(None, reason=f"no {capacity} {kind} rate of {item} in {region}: {why}")
        found.append((amount * row.usd_per_hour, row))
    return _combine(found, derived, today)


def gke_cpu_rate(cpus: float, gib: float, cluster: Cluster, capacity: str, region: str,
                 prices: tuple[Price, ...] | None = None, today: date | None = None) -> Rate:
    """What a CPU-only pod requesting ``cpus`` and ``gib`` costs per hour on ``cluster``."""
    if cluster.autopilot:
        return requests_rate(("autopilot-vcpu", "autopilot-ram-gib"), "pod", cpus, gib,
                             capacity, region, f"GKE Autopilot: {cpus:g} vCPU and {gib:.3g} "
                             "GiB requested x its per-pod rates", prices, today)
    return requests_rate(("vcpu", "ram-gib"), cluster.family, cpus, gib, capacity, region,
                         f"estimate: {cpus:g} vCPU and {gib:.3g} GiB requested x the "
                         f"{cluster.family} node pool's per-vCPU and per-GiB rates", prices,
                         today)


def autopilot_accelerator_rate(accelerator: str, capacity: str, region: str,
                               prices: tuple[Price, ...] | None = None) -> Rate:
    """A GPU or TPU pod on GKE Autopilot: billed by Autopilot's own accelerator rules, never
    as a Standard node. No such rate is in the catalogue yet: missing, with the reason its
    ``autopilot-gpu`` / ``autopilot-tpu`` row gives."""
    kind = "autopilot-tpu" if accelerator.startswith("tpu") else "autopilot-gpu"
    row = find_price(kind, accelerator, capacity, region, prices)
    why = row.note if row is not None and row.note else "not in the catalogue"
    return Rate(None, reason=f"no GKE Autopilot {capacity} rate for a {accelerator} pod in "
                             f"{region} (not priced as a Standard node): {why}")


def compute_engine_rate(machine: str, accelerator: str | None, count: int, capacity: str,
                        region: str, prices: tuple[Price, ...] | None = None,
                        today: date | None = None) -> Rate:
    """Compute Engine's rate of one machine; a predefined machine with no row of its own is
    its vCPUs and memory at its family's rates (the GPUs, if any, added)."""
    rate = hourly_rate("gke", machine, accelerator, count, capacity, region, today=today,
                       prices=prices)
    shape = shape_of(machine)
    if not rate.missing or shape is None:
        return rate
    family = machine.split("-")[0]
    derived = (f"estimate: {machine} as {shape[0]} vCPU and {shape[1]:g} GiB at the {family} "
               "per-vCPU and per-GiB rates")
    parts = [("vcpu", family, shape[0]), ("ram-gib", family, shape[1])]
    if accelerator and count:
        parts.append(("gpu", accelerator, count))
    return _sum_rows(parts, capacity, region, derived, prices, today)


def vertex_markup(machine: str, accelerator: str | None, count: int, region: str,
                  prices: tuple[Price, ...] | None = None) -> tuple[float | None, str]:
    """Vertex AI's on-demand training rate over Compute Engine's, for this machine where both
    are read, else for :data:`MARKUP_REFERENCE`; (None, why) when neither is."""
    own_vertex = hourly_rate("vertex", machine, accelerator, count, "standard", region,
                             prices=prices)
    own_engine = compute_engine_rate(machine, accelerator, count, "standard", region, prices)
    if machine and not own_vertex.missing and not own_engine.missing and own_engine.derived == "":
        return (own_vertex.usd_per_hour / own_engine.usd_per_hour,
                f"{machine}'s Vertex AI / Compute Engine on-demand rates in {region}")
    name, where = MARKUP_REFERENCE
    vertex = hourly_rate("vertex", name, None, 0, "standard", where, prices=prices)
    engine = hourly_rate("gke", name, None, 0, "standard", where, prices=prices)
    if vertex.missing or engine.missing:
        return None, f"no Vertex AI markup: {vertex.reason or engine.reason}"
    return (vertex.usd_per_hour / engine.usd_per_hour,
            f"{name}'s Vertex AI / Compute Engine on-demand rates in {where}")


def management_fee(machine: str, accelerator: str | None, count: int, region: str,
                   prices: tuple[Price, ...] | None = None,
                   today: date | None = None) -> Rate:
    """Vertex AI's management fee per hour on one machine: :data:`MANAGEMENT_FEE_SHARE` of
    Compute Engine's on-demand rate of the same machine (see :data:`MANAGEMENT_FEE_RULE`)."""
    engine = compute_engine_rate(machine, accelerator, count, "standard", region, prices, today)
    if engine.missing:
        return Rate(None, reason=f"no Vertex AI management fee: no Compute Engine on-demand "
                                 f"rate to take it from ({engine.reason})")
    return replace(engine, usd_per_hour=round(engine.usd_per_hour * MANAGEMENT_FEE_SHARE, 5))


def vertex_rate(machine: str, accelerator: str | None, count: int, capacity: str,
                region: str, prices: tuple[Price, ...] | None = None,
                today: date | None = None) -> Rate:
    """Vertex AI's rate of one machine: its own rows where read; else, on demand, Compute
    Engine's rate x Vertex AI's markup, and under Spot, flex-start or a reservation,
    Compute Engine's rate of that capacity (nothing for a reservation: it is paid for) plus
    Vertex AI's management fee (derived, with the rule)."""
    rate = hourly_rate("vertex", machine, accelerator, count, capacity, region, today=today,
                       prices=prices)
    if not rate.missing:
        return rate
    if capacity in FEE_CAPACITIES:
        return _with_fee(machine, accelerator, count, capacity, region, prices, today)
    engine = compute_engine_rate(machine, accelerator, count, capacity, region, prices, today)
    if engine.missing:
        return Rate(None, reason=f"{rate.reason}; no Compute Engine rate to derive it from "
                                 f"({engine.reason})")
    markup, rule = vertex_markup(machine, accelerator, count, region, prices)
    if markup is None:
        return Rate(None, reason=f"{rate.reason}; {rule}")
    derived = (f"estimate: Compute Engine's on-demand rate x {markup:.4g} (Vertex AI's markup, "
               f"from {rule})")
    if engine.derived:
        derived += f"; {engine.derived}"
    return replace(engine, usd_per_hour=round(engine.usd_per_hour * markup, 5), derived=derived,
                   basis="derived")


def _with_fee(machine: str, accelerator: str | None, count: int, capacity: str, region: str,
              prices: tuple[Price, ...] | None, today: date | None) -> Rate:
    fee = management_fee(machine, accelerator, count, region, prices, today)
    if fee.missing:
        return fee
    if capacity == "reservation":
        engine = Rate(0.0, basis="published")
        what = "nothing for the reserved machine (the reservation pays for it)"
    else:
        engine = compute_engine_rate(machine, accelerator, count, capacity, region, prices,
                                     today)
        if engine.missing:
            return Rate(None, reason=f"no Vertex AI {capacity} rate: Vertex AI bills it as "
                                     f"Compute Engine's {capacity} SKUs plus its management "
                                     f"fee, and {engine.reason}")
        what = f"Compute Engine's {capacity} rate"
    derived = (f"Vertex AI {capacity}: {what} + management fee "
               f"{format(fee.usd_per_hour, '.4g')}/h ({MANAGEMENT_FEE_RULE})")
    if engine.derived:
        derived += f"; {engine.derived}"
    parts = [r for r in (engine, fee) if r.sources]
    return Rate(round(engine.usd_per_hour + fee.usd_per_hour, 5),
                " + ".join(dict.fromkeys(p for r in parts for p in r.source.split(" + "))),
                min(r.date_read for r in parts), any(r.stale for r in parts),
                currency=fee.currency, derived=derived, basis="derived",
                sources=tuple(sorted({s for r in parts for s in r.sources})),
                read_on=min(r.read_on for r in parts if r.read_on),
                data_dated=all(r.data_dated for r in parts))


def vertex_pipeline_machine(cpus: float | None, gib: float | None) -> str:
    """The machine Vertex AI Pipelines runs a step with these limits on (as priced here)."""
    if cpus is None and gib is None:
        return VERTEX_DEFAULT_MACHINE
    for name, vcpus, memory in VERTEX_PIPELINE_MACHINES:
        if vcpus >= (cpus or 0) and memory >= (gib or 0):
            return name
    return ""
