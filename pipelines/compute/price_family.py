"""Per-vCPU and per-GiB hourly rates of a general-purpose machine family (E2, N1, N2, N2D,
N4), solved from the whole-machine rates of its predefined machine types in a Cyclenerd
``pricing.yml`` (generated from the Cloud Billing Catalog API).

Compute Engine bills a predefined general-purpose machine as vCPUs x the family's vCPU rate
plus GiB x its memory rate, so two or more machine types of different memory per vCPU
(standard, highmem, highcpu) fix both rates; a least-squares fit over all of them, checked
to reproduce every machine's rate within :data:`TOLERANCE`, gives ``vcpu`` and ``ram-gib``
rows. They are derived figures, and their note says so and gives the rule.
Shared-core types (e2-micro, e2-small, e2-medium) and custom shapes are left out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import date

from gkeflow.pipelines.compute.prices import Price

#: Families whose predefined types are priced as vCPUs + memory.
FAMILIES = ("e2", "n1", "n2", "n2d", "n4")
#: Largest relative error of a fitted rate against one machine's own rate.
TOLERANCE = 0.005
COST_KEYS = {"standard": "hour", "spot": "hour_spot"}
_PREDEFINED = re.compile(r"^(?P<family>[a-z0-9]+)-(standard|highmem|highcpu)-\d+$")


class FitError(ValueError):
    """The machine rates do not follow vCPUs x rate + GiB x rate."""


def fit(points: list[tuple[float, float, float]]) -> tuple[float, float]:
    """(per-vCPU, per-GiB) rates minimising the squared error over (vcpus, gib, usd) points."""
    svv = sum(v * v for v, _g, _u in points)
    sgg = sum(g * g for _v, g, _u in points)
    svg = sum(v * g for v, g, _u in points)
    svu = sum(v * u for v, _g, u in points)
    sgu = sum(g * u for _v, g, u in points)
    determinant = svv * sgg - svg * svg
    if len(points) < 2 or abs(determinant) < 1e-9:
        raise FitError("needs two machine types with different memory per vCPU")
    return (svu * sgg - sgu * svg) / determinant, (sgu * svv - svu * svg) / determinant


def family_points(instances: dict, family: str, region: str, key: str) -> list[
        tuple[float, float, float]]:
    """(vcpus, GiB, usd per hour) of each predefined ``family`` type priced in ``region``."""
    points = []
    for name, spec in instances.items():
        match = _PREDEFINED.match(name)
        if not match or match["family"] != family or not isinstance(spec, dict):
            continue
        value = ((spec.get("cost") or {}).get(region) or {}).get(key)
        cpu, ram = spec.get("cpu"), spec.get("ram")
        if isinstance(value, (int, float)) and value > 0 and cpu and ram:
            points.append((float(cpu), float(ram), float(value)))
    return points


def family_rows(instances: dict, regions: Iterable[str], source: str, read: date,
                families: Iterable[str] = FAMILIES, data_date: date | None = None) -> list[Price]:
    """``vcpu`` and ``ram-gib`` rows of each family, region and capacity (a row with no price
    and the reason where the file prices too few of the family's types)."""
    rows = []
    for family in families:
        for region in regions:
            for capacity, key in COST_KEYS.items():
                points = family_points(instances, family, region, key)
                try:
                    vcpu, gib = fit(points)
                    worst = max(abs(vcpu * v + gib * g - u) / u for v, g, u in points)
                    if worst > TOLERANCE or vcpu <= 0 or gib <= 0:
                        raise FitError(f"the fit misses a machine's rate by {worst:.1%}")
                except FitError as error:
                    note = f"no {family} rate derived in {region}: {error}"
                    rows += [Price(kind, family, capacity, region, None, source, read, note,
                                   data_date=data_date) for kind in ("vcpu", "ram-gib")]
                    continue
                note = (f"derived (estimate): least-squares fit of the {key} rates of "
                        f"{len(points)} predefined {family} machine types = vCPUs x rate + "
                        f"GiB x rate, each within {worst:.2%}")
                rows.append(Price("vcpu", family, capacity, region, round(vcpu, 7), source,
                                  read, note, data_date=data_date))
                rows.append(Price("ram-gib", family, capacity, region, round(gib, 7), source,
                                  read, note, data_date=data_date))
    return rows
