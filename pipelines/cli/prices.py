"""``gkeflow prices``: show the price catalogue, refresh it from the Cloud Billing Catalog API."""

from __future__ import annotations

import sys
from datetime import date
from pathlib import Path

import click

from gkeflow.pipelines.cli.tables import format_options, print_json, print_table
from gkeflow.pipelines.compute.prices import KINDS

COLUMNS = ("kind", "item", "capacity", "region", "per hour", "date", "stale", "source")
WIDE_COLUMNS = (*COLUMNS, "source page", "note")
CONFIG_OPTION = click.option(
    "--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
    default=Path("gkeflow.yaml"), show_default=True,
    help="gkeflow.yaml of the project; the cache is .gkeflow/prices.csv beside it.")


@click.group("prices")
def prices_group() -> None:
    """Hourly list prices of GPUs, TPUs and machines: where they come from, how old they are.

    \b
      gkeflow prices list              the catalogue in use, with source, date and STALE
      gkeflow prices refresh           read current prices from the Cloud Billing Catalog API
    """



@prices_group.command("list")
@CONFIG_OPTION
@click.option("--kind", type=click.Choice(list(KINDS)),
              help="Only this kind: GPUs, TPU chips, machines, whole accelerator machines, "
                   "per-vCPU and per-GiB rates of a family (vcpu, ram-gib), GKE Autopilot's "
                   "per-pod rates, Vertex AI's training rates and its pipeline run fee.")
@click.option("--region", metavar="REGION", help="Only this region (and rows for every region).")
@format_options("--format")
def prices_list(config_path: Path, kind: str | None, region: str | None, wide: bool = False,
                output_format: str = "table") -> None:
    """List the price catalogue: the refreshed cache beside gkeflow.yaml over the vendored
    prices. A price read more than 90 days ago is marked STALE: refresh it."""
    from gkeflow.pipelines.compute import prices

    today = date.today()
    rows = [row for row in prices.current_prices(config_path.parent)
            if (kind is None or row.kind == kind)
            and (region is None or row.region in (region, "*"))]
    rows.sort(key=lambda row: row.key)
    records = [{
        "kind": row.kind, "item": row.item, "capacity": row.capacity, "region": row.region,
        "per hour": "missing" if row.usd_per_hour is None
        else f"{row.usd_per_hour:g} {row.currency}",
        "date": row.date_read.isoformat(),
        "stale": "STALE" if row.usd_per_hour is not None
        and prices.is_stale(row.date_read, today) else "",
        "source": row.source, "source page": prices.source_url(row.source),
        "note": row.note,
    } for row in rows]
    if output_format == "json":
        print_json(records)
        return
    stale = sum(1 for record in records if record["stale"])
    caption = (f"{stale} stale price(s): run `gkeflow prices refresh`" if stale else None)
    print_table(records, COLUMNS, WIDE_COLUMNS, wide, caption=caption,
                no_wrap=("per hour", "date"))


@prices_group.command("refresh")
@CONFIG_OPTION
@click.option("--currency", default="USD", show_default=True, metavar="CODE",
              help="ISO 4217 currency the API prices in (e.g. EUR).")
@click.option("--api-endpoint", default="", metavar="URL",
              help="Cloud Billing API endpoint other than cloudbilling.googleapis.com.")
def prices_refresh(config_path: Path, currency: str, api_endpoint: str) -> None:
    """Read current list prices from the Cloud Billing Catalog API into .gkeflow/prices.csv.

    Lists every Compute Engine SKU (service 6F81-5844-456A) and maps GPU, TPU chip and
    machine-series vCPU / memory SKUs onto the catalogue's rows for each region it names
    (on demand, Spot, flex-start). Lists every Vertex AI SKU (service C7E2-9256-1C43) and
    maps its custom-training and management-fee SKUs onto vertex-machine and vertex-gpu rows
    (flex-start and Spot: Compute Engine SKUs plus the fee); it prints how many it read,
    mapped and skipped. Each refreshed price records its SKUs and today's date; rows no SKU
    matched keep their vendored price, source and date, and are counted in the summary.
    Needs Application Default Credentials (`gcloud auth application-default login`) and the
    Cloud Billing API enabled in the credentials' project. Progress goes to stderr.
    """
    from gkeflow.pipelines.targets.prices_refresh import (
        PricesRefreshError,
        make_client,
        refresh,
    )

    currency = currency.strip().upper()
    if len(currency) != 3 or not currency.isalpha():
        raise click.BadParameter(f"{currency!r} is not a three-letter currency code",
                                 param_hint="--currency")

    def progress(line: str) -> None:
        click.echo(line, err=True)

    try:
        result = refresh(make_client(api_endpoint), config_path.parent, currency,
                         progress=progress)
    except PricesRefreshError as exc:
        raise click.ClickException(str(exc)) from None
    from gkeflow.pipelines.compute.prices import cache_path

    path = cache_path(config_path.parent)
    examples = ", ".join(" ".join(row.key) for row in result.unmatched[:3])
    priced = sum(1 for row in result.rows if row.usd_per_hour is not None)
    line = f"refreshed {priced} prices into {path}"
    if result.unmatched:
        line += (f"; {len(result.unmatched)} catalogue rows matched no SKU and keep their "
                 f"vendored price and date (e.g. {examples})")
    if result.ambiguous:
        line += f"; {len(result.ambiguous)} left as they were: SKUs disagree"
    click.echo(line)
    if result.vertex is not None:
        click.echo(vertex_line(result.vertex))
    if result.autopilot is not None and (result.autopilot.rows or result.autopilot.skipped):
        click.echo(autopilot_line(result.autopilot))
    sys.stdout.flush()


def autopilot_line(read) -> str:
    """What the Kubernetes Engine SKUs gave (GKE Autopilot's pod rates), in one line."""
    regions = sorted({row.region for row in read.rows})
    line = (f"GKE Autopilot: general-purpose pod rates for {len(regions)} "
            f"region{'' if len(regions) == 1 else 's'}")
    if regions:
        line += f" ({', '.join(regions[:4])}{', ...' if len(regions) > 4 else ''})"
    if read.skipped:
        line += f"; {len(read.skipped)} SKUs skipped, e.g. {read.skipped[0]}"
    return line


def vertex_line(summary) -> str:
    """What the Vertex AI SKUs gave, in one line."""
    rows = ", ".join(f"{count} {kind}" for kind, count in sorted(summary.rows.items()))
    line = (f"Vertex AI: {summary.read} SKUs read, {summary.mapped} mapped, "
            f"{summary.skipped} skipped (descriptions not mapped); rows written: "
            f"{rows or 'none'}")
    if summary.spot_missing:
        line += (f"; {summary.spot_missing} Spot rows left missing: no Vertex AI management "
                 "fee that applies to Spot was found for them")
    return line
