"""The prepare-data step says the data's problems as progress lines (shown by `gkeflow run`
at its default verbosity and in the step's log), at most five, pointing at the report for
the rest."""

from __future__ import annotations

from kfp import dsl

from gkeflow.components.prepare.component import prepare_data
from gkeflow.components.progress import progress_text


def _run(data, tmp_path, capsys) -> list[str]:
    outputs = {name: kind(uri=str(tmp_path / name)) for name, kind in (
        ("dataset", dsl.Dataset), ("schema", dsl.Artifact), ("report", dsl.Markdown),
        ("rejected", dsl.Dataset))}
    prepare_data.python_func(data_uri=str(data), label_column="y", **outputs)
    lines = capsys.readouterr().out.splitlines()
    return [text for text in map(progress_text, lines) if text is not None]


def test_problems_are_said_at_the_default_verbosity(write_csv, tmp_path, capsys):
    rows = [f"{i * 7 % 13},{'Yes' if i % 4 == 0 else 'yes' if i % 4 == 1 else 'no'},id{i}"
            for i in range(80)]
    data = write_csv("x,y,code\n" + "\n".join(rows) + "\n")
    said = _run(data, tmp_path, capsys)
    assert "problem: label 'y': values that differ only by case: 'Yes' (20 rows), 'yes' " \
           "(20 rows); set merge_label_case to merge them" in said
    assert "problem: column 'code' ignored: identifier-like: every value is unique" in said


def test_at_most_five_problems_then_the_report(write_csv, tmp_path, capsys):
    header = ",".join(["x", "y"] + [f"id{k}" for k in range(7)])
    rows = [",".join([str(i * 7 % 13), "ab"[i % 2]] + [f"v{k}_{i}" for k in range(7)])
            for i in range(80)]
    said = _run(write_csv(header + "\n" + "\n".join(rows) + "\n"), tmp_path, capsys)
    problems = [line for line in said if line.startswith("problem: ")]
    assert len(problems) == 5
    assert "... and 2 more problems in the data report" in said
