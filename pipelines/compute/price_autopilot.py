"""GKE Autopilot's per-pod rates from the Kubernetes Engine SKUs of the Cloud Billing Catalog
(no network here): the rows a general-purpose Autopilot pod is billed by, in every region a
SKU names.

The SKUs read are ``Autopilot Pod mCPU Requests (<region>)``, ``Autopilot Pod Memory Requests
(<region>)`` and their ``Autopilot Spot Pod ...`` twins: the general-purpose compute class,
billed per requested mCPU-hour and GiB-hour (cloud.google.com/kubernetes-engine/pricing).
Balanced, Scale-Out, Arm, Performance and Accelerator class SKUs are other compute classes
and are left out; so is anything that is not an hourly list price (commitments). A CPU SKU is
priced per mCPU-hour and written per vCPU-hour; a result outside a plausible range (a unit
the rule does not expect) is skipped and counted, never written.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date

from gkeflow.pipelines.compute.prices import Price
from gkeflow.pipelines.compute.sku_prices import SOURCE, Sku

#: The Kubernetes Engine service of the Cloud Billing Catalog.
KUBERNETES_ENGINE = "CCD8-9BF1-090E"
_POD_SKU = re.compile(r"^Autopilot (Spot )?Pod (mCPU|Memory) Requests(?: \(([a-z0-9-]+)\))?$")
#: Per vCPU-hour or GiB-hour, what an Autopilot rate can be (USD); outside: a unit misread.
PLAUSIBLE = (0.0001, 1.0)


@dataclass
class AutopilotRows:
    """The rows read, and the SKUs that matched but could not be priced, with why."""

    rows: list[Price] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def map_autopilot(skus: Iterable[Sku], today: date, currency: str = "USD") -> AutopilotRows:
    """``autopilot-vcpu`` / ``autopilot-ram-gib`` rows (item ``pod``) from ``skus``."""
    result = AutopilotRows()
    seen: dict[tuple[str, str, str, str], Price] = {}
    disagree: set[tuple[str, str, str, str]] = set()  # two SKUs, two prices: left as it was
    for sku in skus:
        match = _POD_SKU.match(sku.description.strip())
        if match is None:
            continue
        spot, resource, named_region = match.groups()
        kind = "autopilot-vcpu" if resource == "mCPU" else "autopilot-ram-gib"
        amount = sku.price * 1000 if resource == "mCPU" else sku.price
        if resource == "Memory" and sku.usage_unit not in ("GiBy.h", "GiBy/h"):
            result.skipped.append(f"SKU {sku.sku_id} ({sku.description}): unit "
                                  f"{sku.usage_unit!r}, not GiB-hours")
            continue
        if not PLAUSIBLE[0] <= amount <= PLAUSIBLE[1]:
            result.skipped.append(f"SKU {sku.sku_id} ({sku.description}): {amount:g} {currency} "
                                  "per unit-hour is not a plausible Autopilot rate")
            continue
        capacity = "spot" if spot else "standard"
        unit = "vCPU" if kind == "autopilot-vcpu" else "GiB"
        for region in sku.regions or ((named_region,) if named_region else ()):
            key = (kind, "pod", capacity, region)
            row = Price(kind, "pod", capacity, region, round(amount, 7),
                        f"{SOURCE}, SKU {sku.sku_id}", today,
                        f"general-purpose Autopilot pod, per {unit}-hour requested "
                        f"({sku.description})", currency=currency,
                        data_date=today)
            if key in seen and seen[key].usd_per_hour != row.usd_per_hour \
                    and key not in disagree:
                disagree.add(key)
                result.skipped.append(f"{' '.join(key)}: two SKUs price it differently; left "
                                      "as it was")
            seen.setdefault(key, row)
    result.rows = [row for key, row in seen.items() if key not in disagree]
    return result
