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


def _split_counts(data, key: str = "", ratios=(0.7, 0.15, 0.15)) -> dict:
    """The rows per split the prepare step itself makes of ``data``."""
    import tempfile
    from pathlib import Path

    from gkeflow.components.prepare.logic import SplitRatios, prepare

    with tempfile.TemporaryDirectory() as folder:
        return prepare(str(data), Path(folder) / "d", "y", SplitRatios(*ratios),
                       key_column=key).split_rows


def test_a_file_too_small_for_its_splits_is_refused_before_any_step(tmp_path, write_csv):
    # rows sharing a key share a split: with few keys a split can come out empty, past the
    # row minimum; the file is found by the prepare step's own split rather than assumed
    rows = 40
    for keys in range(2, 40):
        data = write_csv("k,a,b,y\n" + "".join(f"k{i % keys},{i},{i * 7 % 5},{'xy'[i % 2]}\n"
                                               for i in range(rows)), name=f"keys{keys}.csv")
        counts = _split_counts(data, key="k")
        if not counts["test"] and counts["train"]:
            break
    else:
        raise AssertionError("no file of few keys left its test split empty")
    output = tmp_path / "out"
    result = CliRunner().invoke(main, ["run", "--data", str(data), "--label", "y",
                                       "--key", "k", "--output", str(output)])
    assert result.exit_code == 1, result.output
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"Error: data has {rows} rows, too few for its splits")
    assert "test 0 rows" in line and "the test split is empty" in line
    assert "--test-ratio" in line
    assert not output.exists() and "prepare-data" not in result.output


def test_a_small_file_whose_splits_all_hold_rows_is_not_refused(tmp_path, write_csv):
    from gkeflow.pipelines.settings.parameters import validate_run_arguments

    for rows in range(20, 60):
        data = write_csv("a,b,y\n" + "".join(f"{i},{i * 7 % 5},{'xy'[i % 2]}\n"
                                             for i in range(rows)), name=f"ok{rows}.csv")
        if all(_split_counts(data).values()):
            break
    validate_run_arguments({"data_uri": str(data), "label_column": "y"})
