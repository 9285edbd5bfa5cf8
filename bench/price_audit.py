"""A price audit: for a fixed list of configurations, the hourly rate gkeflow gives, the
label it carries (published / billed / derived), its sources and the date its data dates
from, on the vendored catalogue (or the refreshed cache of the current folder).

    python bench/price_audit.py [--region us-central1] [--markdown]

No cloud call: it reads the same catalogue `gkeflow plan` prices with. A rate the catalogue
cannot give is printed as ``missing`` with the reason.
"""

from __future__ import annotations

import argparse
from datetime import date

from gkeflow.pipelines.compute.costing import run_cost, step_cost
from gkeflow.pipelines.compute.prices import current_prices
from gkeflow.pipelines.compute.profiles import ComputeProfile
from gkeflow.pipelines.definitions.training import resolve_compute


def gpu(accelerator: str, count: int, scheduling: str = "standard") -> ComputeProfile:
    return ComputeProfile(accelerator=accelerator, accelerator_count=count,
                          scheduling=scheduling, timeout_s=3600, auto_size=True)


def tpu(generation: str, topology: str, scheduling: str = "standard") -> ComputeProfile:
    return ComputeProfile(accelerator=generation, topology=topology, scheduling=scheduling,
                          timeout_s=3600, auto_size=True)


#: (what, target, profile); None: the default training pipeline, summed over its steps.
CONFIGURATIONS = [
    ("default training pipeline (sum of steps)", "gke", None),
    ("default training pipeline (sum of steps)", "vertex", None),
    *[(f"8 x H100 {what}", target, gpu("nvidia-h100-80gb", 8, scheduling))
      for scheduling, what in (("standard", "on demand"), ("spot", "Spot"))
      for target in ("gke", "vertex")],
    ("8 x H100 flex-start", "gke", gpu("nvidia-h100-80gb", 8, "flex-start")),
    ("8 x H100 flex-start", "vertex", gpu("nvidia-h100-80gb", 8, "flex-start")),
    ("8 x H100 reservation", "gke", gpu("nvidia-h100-80gb", 8, "reservation")),
    ("8 x H100 reservation", "vertex", gpu("nvidia-h100-80gb", 8, "reservation")),
    ("1 x A100 80GB on demand", "gke", gpu("nvidia-a100-80gb", 1)),
    ("1 x A100 80GB on demand", "vertex", gpu("nvidia-a100-80gb", 1)),
    ("1 x L4 Spot", "gke", gpu("nvidia-l4", 1, "spot")),
    ("1 x L4 Spot", "vertex", gpu("nvidia-l4", 1, "spot")),
    ("1 x T4 on demand", "gke", gpu("nvidia-tesla-t4", 1)),
    ("1 x T4 on demand", "vertex", gpu("nvidia-tesla-t4", 1)),
    *[(f"TPU {generation} {topology} {what}", target, tpu(generation, topology, scheduling))
      for generation, topology in (("tpu-v5e", "2x2"), ("tpu-v6e", "2x2"))
      for scheduling, what in (("standard", "on demand"), ("spot", "Spot"))
      for target in ("gke", "vertex")],
]


def audit(region: str, today: date) -> list[dict]:
    prices = current_prices()
    rows = []
    for what, target, profile in CONFIGURATIONS:
        if profile is None:
            run = run_cost(resolve_compute(target), target, region, today=today, prices=prices)
            priced = [s for s in run.steps if s.usd_per_hour is not None]
            missing = [s.step for s in run.steps if s.usd_per_hour is None and not s.reserved]
            rate = None if missing else sum(s.usd_per_hour for s in priced)
            labels = sorted({s.basis for s in priced})
            dates = sorted({s.data_date for s in priced if s.data_date})
            unknown = any(not s.data_date for s in priced)
            sources = sorted({part for s in priced for part in s.source.split(" + ")})
            rows.append({"configuration": what, "target": target, "usd_per_hour": rate,
                         "label": " / ".join(labels),
                         "data_date": (f"{dates[0]} to {dates[-1]}" if dates else "")
                         + (" (some unknown)" if unknown else ""),
                         "source": " + ".join(sources),
                         "why": f"missing for {', '.join(missing)}" if missing else ""})
            continue
        cost = step_cost("train-model", profile, target, region, today=today, prices=prices)
        rows.append({"configuration": what, "target": target,
                     "usd_per_hour": cost.usd_per_hour,
                     "label": cost.basis if cost.usd_per_hour is not None else "",
                     "data_date": cost.data_date or (
                         f"unknown (read {cost.date_read})" if cost.date_read else ""),
                     "source": cost.source,
                     "why": "reserved: paid by the reservation" if cost.reserved
                     and cost.usd_per_hour is None else cost.reason})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--region", default="us-central1")
    parser.add_argument("--markdown", action="store_true", help="a table for RESULTS.md")
    args = parser.parse_args()
    rows = audit(args.region, date.today())
    if args.markdown:
        print("| configuration | target | $/h | label | data date | source |")
        print("|---|---|---|---|---|---|")
    for row in rows:
        rate = (f"{row['usd_per_hour']:.2f}" if row["usd_per_hour"] is not None
                else f"missing ({row['why'][:90]})")
        if args.markdown:
            print(f"| {row['configuration']} | {row['target']} | {rate} | {row['label']} | "
                  f"{row['data_date']} | {row['source']} |")
        else:
            print(f"{row['configuration']:<42} {row['target']:<7} {rate:>10}  {row['label']:<22}"
                  f" {row['data_date']:<25} {row['source']}")


if __name__ == "__main__":
    main()
