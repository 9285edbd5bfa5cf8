"""`gkeflow run` refusals before any step: one line, exit 1, and no output folder left."""

from __future__ import annotations

from click.testing import CliRunner

from gkeflow.pipelines.cli.main import main


def test_a_one_class_label_is_refused_before_any_step_leaving_nothing(tmp_path, write_csv):
    data = write_csv("a,b,y\n" + "".join(f"{i},{i % 3},same\n" for i in range(40)))
    output = tmp_path / "out"
    result = CliRunner().invoke(main, ["run", "--data", str(data), "--label", "y",
                                       "--output", str(output)])
    assert result.exit_code == 1, result.output
    assert result.stderr.strip().splitlines() == [
        "Error: label column 'y' has one class, 'same'; a classifier needs at least 2 "
        "classes: check --label, or add rows of another class"]
    assert not output.exists() and "prepare-data" not in result.output
