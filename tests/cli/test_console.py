"""What the CLI prints: tables fit the width, lines of text are never broken."""

from __future__ import annotations

from rich.table import Table

from gkeflow.pipelines.cli.common import stdout_console


def test_a_long_path_stays_on_one_line_and_a_table_fits_columns(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "60")
    path = "/tmp/" + "/".join(f"folder with spaces {i}" for i in range(12)) + "/predictions.parquet"
    console = stdout_console()
    console.print(f"Predictions: {path}", markup=False)
    table = Table("step", "status")
    table.add_row("prepare-data " * 8, "SUCCEEDED")
    console.print(table)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"Predictions: {path}"
    assert all(len(line) <= 60 for line in lines[1:])
    assert len(lines) > 6  # the table's long cell wrapped instead of widening it
