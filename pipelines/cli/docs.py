"""`gkeflow docs`: docs/components.md, the component reference, from the component specs."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gkeflow.pipelines.cli.params import NonEmptyPath


@click.command("docs", hidden=True)  # a developer command (make docs)
@click.option("--output", type=NonEmptyPath(dir_okay=False, path_type=Path), default=None,
              help="Where to write the reference. Default: docs/components.md in the current "
                   "directory.")
@click.option("--check", is_flag=True,
              help="Write nothing; exit 1 when the reference differs from the component specs.")
def docs_command(output: Path | None, check: bool) -> None:
    """Generate docs/components.md (in the current directory, or --output), the component
    reference, from the component specs."""
    from gkeflow.pipelines.cli.reference import main as reference_main

    sys.exit(reference_main([*(["--check"] if check else []), *([str(output)] if output else [])]))
