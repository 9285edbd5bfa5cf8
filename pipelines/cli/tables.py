"""Tables the CLI prints (`gkeflow plan`, `gkeflow models list`): sized to the terminal.

A table shows a few columns by default and all of them with ``--wide``; cells wrap at
spaces instead of being cut, and the width is ``COLUMNS`` when set (piped output too), the
terminal's width on a terminal, else a width that keeps one line per row. ``--output json``
(or ``--format json``) prints every column as JSON for scripts instead.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence

import click
from rich.console import Console
from rich.table import Table

FORMATS = ("table", "json")
#: Width of piped output when COLUMNS is not set: one line per row of the default columns
#: (with --wide: of every column).
PIPED_WIDTH, PIPED_WIDE_WIDTH = 160, 320


def table_width(wide: bool = False) -> int | None:
    """The width to render at: ``COLUMNS`` when set, the terminal's (None) on a terminal,
    else one that keeps rows on one line."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if sys.stdout.isatty():
        return None
    return PIPED_WIDE_WIDTH if wide else PIPED_WIDTH


def format_options(*names: str):
    """``--wide`` and a table/json format option spelt ``names`` (default ``--format``)."""

    def decorate(func):
        func = click.option("--wide", is_flag=True,
                            help="Show every column (default: the essential ones).")(func)
        return click.option(*(names or ("--format",)), "output_format",
                            type=click.Choice(FORMATS), default="table", show_default=True,
                            help="table for people; json (every column) for scripts.")(func)

    return decorate


def print_json(records: object) -> None:
    """``records`` as indented JSON on stdout."""
    click.echo(json.dumps(records, indent=2, default=str))


def print_table(records: Sequence[Mapping[str, str]], columns: Sequence[str],
                wide_columns: Sequence[str], wide: bool, *, title: str | None = None,
                caption: str | None = None, no_wrap: Sequence[str] = ()) -> Console:
    """Render ``records`` with ``columns`` (``wide_columns`` when ``wide``); cells wrap at
    spaces, and only a word longer than its column is folded. Returns the console used."""
    console = Console(file=sys.stdout, highlight=False, width=table_width(wide))
    table = Table(title=title, title_justify="left", caption=caption, caption_justify="left")
    for column in (wide_columns if wide else columns):
        table.add_column(column, overflow="fold", no_wrap=column in no_wrap)
    for record in records:
        table.add_row(*(str(record.get(column, "")) for column in
                        (wide_columns if wide else columns)))
    console.print(table)
    return console


# -- what each listing shows ----------------------------------------------------------------------

#: `gkeflow plan`: the essential columns, then every field of a PlanRow.
PLAN_COLUMNS = ("step", "cpu", "memory", "accelerator", "gpus", "capacity", "timeout",
                "machine")  # the cost columns are in --wide; the run's cost is printed below
PLAN_WIDE_COLUMNS = ("step", "image", "cpu", "memory", "accelerator", "count", "capacity",
                     "nodes", "gpus", "queue", "disk", "retries", "caching", "timeout", "shm",
                     "machine", "cost/h", "ceiling")


def plan_records(rows: Sequence, wide: bool) -> list[dict[str, str]]:
    """Plan rows as table cells; without ``wide``, a GKE accelerator is shown by its node
    label alone (``nvidia-l4`` for ``nvidia.com/gpu (nvidia-l4)``)."""
    from dataclasses import asdict

    records = [asdict(row) for row in rows]
    if not wide:
        for record in records:
            accelerator = record["accelerator"]
            if accelerator.startswith("nvidia.com/gpu (") and accelerator.endswith(")"):
                record["accelerator"] = accelerator[len("nvidia.com/gpu ("):-1]
    return records


def plan_json(pipeline: str, target: str, rows: Sequence, images: Mapping[str, str],
              notes: Sequence[str]) -> dict:
    """`gkeflow plan --output json`: every field of every step, the images and the notes."""
    from dataclasses import asdict

    return {"pipeline": pipeline, "target": target, "steps": [asdict(row) for row in rows],
            "images": dict(sorted(images.items())), "notes": list(notes)}


#: `gkeflow models list`.
MODEL_COLUMNS = ("model", "version", "aliases", "test metric", "serving", "created", "uri")
MODEL_WIDE_COLUMNS = ("model", "version", "aliases", "test metric", "serving", "run id",
                      "created", "uri", "labels", "resource")


def headline_metric(metrics: Mapping[str, float]) -> str:
    """A version's headline test metric for its task: a classifier's accuracy, a regressor's
    RMSE (with R² when recorded); "" when the registry holds neither."""
    if metrics.get("accuracy") is not None:
        return f"accuracy {metrics['accuracy']:.4f}"
    if metrics.get("rmse") is not None:
        r2 = f", r2 {metrics['r2']:.3f}" if metrics.get("r2") is not None else ""
        return f"rmse {metrics['rmse']:.4g}{r2}"
    return ""


def version_row(version) -> dict[str, str]:
    """A registered version as table cells."""
    import datetime

    return {
        "model": version.name, "version": str(version.version),
        "aliases": ",".join(version.aliases),
        "test metric": headline_metric(version.metrics),
        "run id": version.run_id,
        "created": datetime.datetime.fromtimestamp(version.created_at).strftime(
            "%Y-%m-%d %H:%M:%S"),
        "uri": version.uri,
        "labels": ",".join(f"{k}={v}" for k, v in sorted(version.labels.items())),
        "resource": version.resource_name,
    }


def version_record(version) -> dict:
    """A registered version as JSON: every field."""
    return {"model": version.name, "version": version.version, "aliases": list(version.aliases),
            "metrics": version.metrics, "run_id": version.run_id,
            "created_at": version.created_at, "uri": version.uri, "labels": version.labels,
            "resource_name": version.resource_name, "lineage": version.lineage}
