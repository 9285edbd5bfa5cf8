"""Rewrite the machine rows of prices.csv from a ``pricing.yml`` of
Cyclenerd/google-cloud-pricing-cost-calculator (generated from the Cloud Billing Catalog API).

``compute.instance.<machine type>`` lists a machine type's vCPUs (``cpu``), memory (``ram``),
the GPUs it comes with (``a100: 1``, ``h100-80gb: 8``, ...) and per region ``cost.<region>``
``hour`` (on demand) and ``hour_spot``: the whole machine, GPUs included. The file has no
per-GPU rates, so N1 machine types (GPUs attached at will) become ``machine`` rows and the
accelerator-optimised types (A2, A3, G2, G4) ``instance`` rows (whole machine, GPUs
included); each general-purpose family's per-vCPU and per-GiB rates are solved from its
predefined types (:mod:`gkeflow.pipelines.compute.price_family`: ``vcpu`` and ``ram-gib``
rows, what a CPU step on a node pool of that family is priced at); ``gpu``, ``tpu``,
``vertex-*`` and flex-start rows are kept as they are.

    python -m gkeflow.pipelines.compute.price_import PATH/pricing.yml --commit SHA
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from datetime import date, datetime
from pathlib import Path

from gkeflow.pipelines.compute.gpu_catalogue import FAMILIES, MachineShape
from gkeflow.pipelines.compute.price_family import family_rows
from gkeflow.pipelines.compute.prices import PRICES_CSV, Price, load_prices, write_prices

REPOSITORY = "https://github.com/Cyclenerd/google-cloud-pricing-cost-calculator"
NOTE = ("whole machine{gpus}; generated from the Cloud Billing Catalog API by "
        "Cyclenerd/google-cloud-pricing-cost-calculator")
#: GPU keys of ``compute.instance.<type>`` -> GKE accelerator labels.
GPU_KEYS = {"a100": "nvidia-tesla-a100", "a100-80gb": "nvidia-a100-80gb",
            "h100-80gb": "nvidia-h100-80gb", "h100-80gb-mega": "nvidia-h100-mega-80gb",
            "l4": "nvidia-l4", "rtx6000": "nvidia-rtx-pro-6000"}
#: Capacity -> key of ``cost.<region>``.
COST_KEYS = {"standard": "hour", "spot": "hour_spot"}
HEADER = "Hourly list prices in USD; see pipelines/compute/prices.py for the sources."


class PricingFileError(ValueError):
    """The pricing file cannot be imported (one line, what to fix)."""


def generated_date(data: dict) -> date:
    """The day ``about.generated`` (``Thu Jul 30 06:13:17 2026``) names."""
    text = str((data.get("about") or {}).get("generated", ""))
    try:
        return datetime.strptime(text, "%a %b %d %H:%M:%S %Y").date()
    except ValueError:
        raise PricingFileError(f"about.generated {text!r} is not a date like "
                           "'Thu Jul 30 06:13:17 2026'") from None


def shapes() -> dict[str, tuple[MachineShape, bool]]:
    """Machine type -> (shape, whether its GPUs are attached at will, as on N1)."""
    return {shape.name: (shape, family.name == "N1")
            for family in FAMILIES for shape in family.shapes}


def _offers(shape: MachineShape, capacity: str) -> bool:
    family = next(f for f in FAMILIES if shape in f.shapes)
    return capacity in (shape.consumption or family.consumption)


def _gpus(name: str, spec: dict, shape: MachineShape) -> str:
    """`` with 8 x nvidia-h100-80gb``, checked against the GPU catalogue's shape."""
    gpus = {GPU_KEYS.get(key, key): count for key, count in spec.items() if key in GPU_KEYS}
    if gpus != {shape.accelerator: shape.accelerator_count}:
        raise PricingFileError(f"{name}: pricing.yml gives GPUs {gpus or 'none'}, the GPU "
                           f"catalogue {shape.accelerator_count} x {shape.accelerator}")
    return f" with {shape.accelerator_count} x {shape.accelerator}"


def import_rows(data: dict, commit: str, regions: Iterable[str],
                today: date | None = None) -> list[Price]:
    """Rows for every machine type of the GPU catalogue that ``data`` lists, in ``regions``,
    on demand and Spot (where the GPU catalogue offers them); a region or capacity the file
    does not price is a row with no price and that reason."""
    if len(commit) != 40 or any(c not in "0123456789abcdef" for c in commit.lower()):
        raise PricingFileError(f"--commit must be the full 40-hex commit of pricing.yml, not "
                           f"{commit!r}")
    url = str((data.get("about") or {}).get("url", "")).rstrip("/")
    if url != REPOSITORY:
        raise PricingFileError(f"about.url is {url!r}, not {REPOSITORY}")
    generated = generated_date(data)  # the data's date; ``read``: the day it was imported
    read = today or date.today()
    source = f"{REPOSITORY} pricing.yml@{commit.lower()}"
    instances = (data.get("compute") or {}).get("instance") or {}
    rows = []
    for name, (shape, attached) in sorted(shapes().items()):
        spec = instances.get(name)
        if spec is None:
            continue
        kind, note = ("machine", NOTE.format(gpus=", no GPUs")) if attached else (
            "instance", NOTE.format(gpus=_gpus(name, spec, shape)))
        costs = spec.get("cost") or {}
        for region in regions:
            for capacity, key in COST_KEYS.items():
                if not attached and not _offers(shape, capacity):
                    continue
                value = (costs.get(region) or {}).get(key)
                if isinstance(value, (int, float)) and value > 0:
                    rows.append(Price(kind, name, capacity, region, round(float(value), 6),
                                      source, read, note, data_date=generated))
                else:
                    rows.append(Price(kind, name, capacity, region, None, source, read,
                                      f"pricing.yml gives no {key} for {name} in {region}",
                                      data_date=generated))
    return rows + family_rows(instances, regions, source, read, data_date=generated)


def rewrite(existing: Iterable[Price], imported: list[Price]) -> list[Price]:
    """``existing`` without the ``machine``, ``instance``, ``vcpu`` and ``ram-gib`` rows of
    the imported items, then ``imported``: rows of other items and kinds stay as they were."""
    items = {row.item for row in imported}
    kept = [row for row in existing
            if not (row.kind in ("machine", "instance", "vcpu", "ram-gib")
                    and row.item in items)]
    return kept + imported


def catalogue_regions(rows: Iterable[Price]) -> list[str]:
    """The regions the catalogue names (patterns left out)."""
    return sorted({row.region for row in rows if "*" not in row.region})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gkeflow.pipelines.compute.price_import", description=__doc__.split(
            "\n\n")[0])
    parser.add_argument("pricing", type=Path, help="pricing.yml of the calculator")
    parser.add_argument("--commit", required=True,
                        help="full commit of the repository that pricing.yml was taken from")
    parser.add_argument("--output", type=Path, default=PRICES_CSV,
                        help="price file to rewrite (default: the vendored prices.csv)")
    args = parser.parse_args(argv)
    import yaml

    try:
        with open(args.pricing, encoding="utf-8") as handle:
            data = yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        existing = load_prices(args.output.resolve())
        imported = import_rows(data if isinstance(data, dict) else {}, args.commit,
                               catalogue_regions(existing))
    except (OSError, yaml.YAMLError, PricingFileError) as error:
        print(f"error: {error}".splitlines()[0], file=sys.stderr)
        return 1
    write_prices(args.output, rewrite(existing, imported), HEADER)
    priced = sum(1 for row in imported if row.usd_per_hour is not None)
    print(f"{args.output}: {len(imported)} machine rows from {args.pricing.name} "
          f"({priced} priced, {len(imported) - priced} missing)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
