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
    from gkeflow.components.prepare.sources import EmptySplit

    with tempfile.TemporaryDirectory() as folder:
        try:
            return prepare(str(data), Path(folder) / "d", "y", SplitRatios(*ratios),
                           key_column=key).split_rows
        except EmptySplit as exc:  # the step refuses it, saying the same counts
            return exc.split_rows


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
    assert line.startswith(f"Error: data has {rows} rows of which {keys} distinct keys "
                           "(identical keys share a split), too few for its splits")
    assert "test 0 rows" in line and "the test split is empty" in line
    assert "--test-ratio" in line and "add distinct rows" in line
    assert not output.exists() and "prepare-data" not in result.output


def test_a_small_file_whose_splits_all_hold_rows_is_not_refused(tmp_path, write_csv):
    from gkeflow.pipelines.settings.parameters import validate_run_arguments

    for rows in range(20, 60):
        data = write_csv("a,b,y\n" + "".join(f"{i},{i * 7 % 5},{'xy'[i % 2]}\n"
                                             for i in range(rows)), name=f"ok{rows}.csv")
        if all(_split_counts(data).values()):
            break
    validate_run_arguments({"data_uri": str(data), "label_column": "y"})


def test_a_file_of_many_rows_but_few_distinct_ones_is_refused_before_any_step(tmp_path,
                                                                          write_csv):
    # identical rows share a split: hundreds of rows repeating a few leave a split empty,
    # however many rows there are
    for distinct in range(3, 40):
        lines = [f"{i % 3},{'pq'[i % 2]},{'xy'[(i // 2) % 2]}\n" for i in range(distinct)]
        data = write_csv("a,b,y\n" + "".join(lines * (400 // distinct + 1)),
                         name=f"repeat{distinct}.csv")
        counts = _split_counts(data)
        if not counts["test"] and counts["train"]:
            break
    else:
        raise AssertionError("no file of few distinct rows left its test split empty")
    rows = sum(counts.values())
    distinct_rows = len(set(data.read_text().splitlines()[1:]))
    assert rows >= 400 and distinct_rows < 40
    output = tmp_path / "out"
    result = CliRunner().invoke(main, ["run", "--data", str(data), "--label", "y",
                                       "--output", str(output)])
    assert result.exit_code == 1, result.output
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"Error: data has {rows} rows of which {distinct_rows} distinct "
                           "rows (identical rows share a split), too few for its splits")
    assert "the test split is empty; add distinct rows (or name a column that tells them " \
           "apart with --key)" in line
    assert not output.exists() and "prepare-data" not in result.output


def test_the_prepare_step_refuses_an_empty_test_split_itself(tmp_path, write_csv):
    """Where no pre-flight check reads the data (a bucket), the step refuses it before
    training, with the rows per split."""
    import pytest

    from gkeflow.components.prepare.logic import prepare
    from gkeflow.components.prepare.sources import DataError, EmptySplit

    data = write_csv("a,y\n" + "1,x\n2,y\n" * 100)
    with pytest.raises(EmptySplit) as raised:
        prepare(str(data), tmp_path / "d", "y")
    assert isinstance(raised.value, DataError)
    counts = raised.value.split_rows
    assert sum(counts.values()) == 200 and (not counts["test"] or not counts["train"])
    assert "split is empty" in str(raised.value) and "identical rows share a split" in str(
        raised.value)
    assert not (tmp_path / "d").exists()
