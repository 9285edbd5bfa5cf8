"""`gkeflow run` checks before the first step, and the short message of a failed step."""

from __future__ import annotations

import pytest

from gkeflow.pipelines.cli.run_checks import user_error
from gkeflow.pipelines.settings.parameters import ParameterError, validate_run_arguments


def _arguments(path, **changes) -> dict:
    return {"data_uri": str(path), "label_column": "y", "train_ratio": 0.7,
            "eval_ratio": 0.15, "test_ratio": 0.15, "min_accuracy": 0.8, **changes}


@pytest.mark.parametrize("changes, message", [
    ({"train_ratio": 0.9}, "train_ratio/eval_ratio/test_ratio: split ratios must sum to 1"),
    ({"thresholds": "f1_macro=>0.8"}, "invalid threshold 'f1_macro=>0.8'"),
    ({"thresholds": "speed>=1"}, "unknown metric 'speed'"),
    ({"comparison_metric": "speed"}, "unknown comparison_metric 'speed'"),
    ({"label_column": "Y"}, "label_column: unknown column(s) 'Y' (did you mean 'y'?); "
                            "available columns: id, x, y"),
    ({"label_column": "xx"}, "label_column: unknown column(s) 'xx' (did you mean 'x'?)"),
    ({"label_column": "zzz"}, "label_column: unknown column(s) 'zzz'; available columns"),
    ({"key_column": "ID"}, "key_column: unknown column(s) 'ID'"),
    ({"exclude_columns": "x,z"}, "exclude_columns: unknown column(s) 'z'"),
    ({"feature_columns": "y"}, "feature_columns names the label column 'y'"),
    ({"model_name": "My_Model"}, "model_name: invalid model name 'My_Model'"),
    ({"epochs": 0}, "epochs must be >= 1; got 0"),
    ({"learning_rate": -1.0}, "learning_rate must be in (0, 10); got -1.0"),
    ({"model_type": "cnn"},
     "model_type must be one of auto, mlp, wide_deep, gbdt, linear; got 'cnn'"),
    ({"model_type": "gbdt", "gbdt_max_depth": 0}, "gbdt_max_depth must be in [1, 20]; got 0"),
    ({"model_type": "gbdt", "gbdt_learning_rate": 2.0}, "gbdt_learning_rate must be in (0, 1]"),
    ({"candidates": "gbdt,svm"}, "candidates: unknown model family 'svm'"),
    ({"baseline_margin": 1.5}, "baseline_margin must be in [0, 1)"),
])
def test_bad_arguments_are_named_before_any_step(write_csv, changes, message):
    path = write_csv(b"\xef\xbb\xbfid,x,y\n1,2,a\n")
    with pytest.raises(ParameterError) as err:
        validate_run_arguments(_arguments(path, **changes))
    assert message in str(err.value)


@pytest.mark.parametrize("text", ["id,x,y\n", "id,x,y", "id,x,y\r\n\r\n\n"])
def test_a_header_without_rows_is_refused_before_any_step(write_csv, text):
    path = write_csv(text)
    with pytest.raises(ParameterError) as err:
        validate_run_arguments(_arguments(path))
    assert str(err.value) == (f"data has a header but no data rows: {path}; add rows or point "
                              "--data at another file")


def _rows(n: int = 400) -> str:
    """Enough rows that no split comes out empty (a few rows may leave one empty, which
    is refused: test_run_refusals.py)."""
    return "".join(f"{i},{i * 3 % 7},{'ab'[i % 2]}\n" for i in range(n))


def test_rows_in_any_file_of_a_glob_pass(tmp_path):
    (tmp_path / "a.csv").write_text("id,x,y\n")
    (tmp_path / "b.csv").write_text("id,x,y\n" + _rows())
    validate_run_arguments(_arguments(tmp_path / "*.csv"))
    (tmp_path / "b.csv").write_text("id,x,y\n")
    with pytest.raises(ParameterError, match="data has a header but no data rows: .*a.csv"):
        validate_run_arguments(_arguments(tmp_path / "*.csv"))


def test_good_arguments_pass(write_csv):
    path = write_csv("id,x,z,y\n" + "".join(f"{i},{i % 5},{i % 3},{'ab'[i % 2]}\n"
                                             for i in range(400)))
    validate_run_arguments(_arguments(path, key_column="id", exclude_columns="x",
                                      thresholds="f1_macro>=0.5", comparison_metric="f1_macro"))


@pytest.mark.parametrize("text, found", [
    ("x,y\n1,a\n2,a\n3, a \n", "one class, 'a'"),
    ("x,y\n1,\n2,\n", "no values"),
])
def test_a_label_with_fewer_than_two_classes_is_refused_before_any_step(write_csv, text,
                                                                         found):
    path = write_csv(text)
    with pytest.raises(ParameterError) as err:
        validate_run_arguments(_arguments(path))
    assert str(err.value) == (f"label column 'y' has {found}; a classifier needs at least 2 "
                              "classes: check --label, or add rows of another class")


def test_a_second_class_after_the_sample_rows_passes(tmp_path):
    """The step's vocabulary comes from every row: a class first seen after the sampled
    rows counts (Parquet, the label read to the end)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from gkeflow.components.prepare.logic import SAMPLE_ROWS

    rows = SAMPLE_ROWS + 5
    labels = ["no"] * rows
    path = tmp_path / "late.parquet"
    pq.write_table(pa.table({"x": [float(i % 7) for i in range(rows)], "y": labels}), path,
                   row_group_size=1000)
    with pytest.raises(ParameterError, match="has one class, 'no'"):
        validate_run_arguments(_arguments(path))
    labels[-1] = "yes"
    pq.write_table(pa.table({"x": [float(i % 7) for i in range(rows)], "y": labels}), path,
                   row_group_size=1000)
    validate_run_arguments(_arguments(path))


def test_no_usable_feature_is_refused_before_any_step(write_csv):
    """What the prepare step refuses from its sample is refused here with its words."""
    path = write_csv("id,x,y\n1,2,a\n2,2,b\n3,2,a\n")
    with pytest.raises(ParameterError, match="no usable feature columns besides the label"):
        validate_run_arguments(_arguments(path, exclude_columns="id,x"))


def test_user_error_is_the_exception_message_without_traceback():
    log = ["Traceback (most recent call last):", '  File "x.py", line 1, in <module>',
           "    prepare()",
           "gkeflow.components.prepare.sources.DataError: 9 of 10 rows rejected (90.0%)",
           "sample rows:", "  expected 4 columns, got 3: a,b,c", "",
           "ERROR: task failed"]
    assert user_error(log) == ("9 of 10 rows rejected (90.0%)\nsample rows:\n"
                               "  expected 4 columns, got 3: a,b,c")
    assert user_error(["Traceback (most recent call last):", "KeyError: 'x'"]) is None


_FRAMES = ["    Traceback (most recent call last):",
           '      File "/x/google/auth/_default.py", line 750, in default',
           "        raise exceptions.DefaultCredentialsError(MISSING)",
           "    google.auth.exceptions.DefaultCredentialsError: Your default credentials were "
           "not found.", ""]


def test_a_failed_step_shows_its_exception_line_not_its_frames():
    from gkeflow.pipelines.cli.run_checks import failure_message

    message, shortened = failure_message(["starting", *_FRAMES], debug=False)
    assert message == ("google.auth.exceptions.DefaultCredentialsError: Your default "
                       "credentials were not found.") and shortened
    # with --debug: the whole traceback
    message, shortened = failure_message(["starting", *_FRAMES], debug=True)
    assert message.splitlines()[0].strip().startswith("Traceback") and not shortened
    assert "raise exceptions.DefaultCredentialsError" in message
    # a data error keeps its message lines
    data = ["Traceback (most recent call last):", '  File "x.py", line 1, in f',
            "DataError: no usable rows", "sample rows:", "  a,b"]
    assert failure_message(data, debug=False) == ("no usable rows\nsample rows:\n  a,b", True)
    # no traceback at all (the process was killed): the end of the output as it was
    tail = [f"line {i}" for i in range(20)]
    assert failure_message(tail, debug=False) == ("\n".join(tail[-8:]), False)


@pytest.mark.parametrize(("rows", "label", "message"), [
    # a price table's first five rows: five distinct whole numbers, one row each
    ("a,Price (EUR)\n1,10\n2,12\n3,15\n4,19\n5,22\n", "Price (EUR)",
     "each of its 5 values occurs once, so they are no classes to learn"),
    ("a,b\n" + "".join(f"{i},{i % 2}\n" for i in range(12)), "b",
     "data has 12 rows, too few to train, stop early and evaluate: the splits need at "
     "least 20 rows"),
    ("a,b\n" + "".join(f"{i},{i * 1.37:.2f}\n" for i in range(12)), "b",
     "data has 12 rows, too few"),
    ("a,b\n" + "".join(f"{i},id-{i}\n" for i in range(40)), "b",
     "label column 'b': each of its 40 values occurs once"),
])
def test_tiny_files_and_labels_that_are_no_classes_are_refused_before_any_step(
        write_csv, rows, label, message):
    path = write_csv(rows)
    with pytest.raises(ParameterError) as err:
        validate_run_arguments(_arguments(path, label_column=label))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_row_minimum_follows_the_split_ratios():
    from gkeflow.pipelines.settings.parameters import minimum_rows

    assert minimum_rows({}) == 20
    assert minimum_rows({"train_ratio": 0.8, "eval_ratio": 0.1, "test_ratio": 0.1}) == 30
    assert minimum_rows({"train_ratio": 0.5, "eval_ratio": 0.0, "test_ratio": 0.5}) == 6


def test_a_file_in_a_legacy_encoding_is_refused_before_any_step_with_the_fix(write_csv):
    rows = "name,city,price\n" + "".join(f"n{i},Zürich {i % 3},{i * 7 % 11}\n"
                                         for i in range(60))
    path = write_csv(rows.encode("latin-1"))
    with pytest.raises(ParameterError) as err:
        validate_run_arguments(_arguments(path, label_column="price"))
    assert "60 of the first 60 rows hold text that is not UTF-8" in str(err.value)
    assert "Windows-1252 (Latin-1): 'Zürich'" in str(err.value)
    assert "re-save the file as UTF-8" in str(err.value)
    # a stray byte or two is left to the step, which rejects those rows and counts them
    mixed = rows.encode("utf-8").replace(b"n7,", b"n\xe97,", 1)
    validate_run_arguments(_arguments(write_csv(mixed, name="mixed.csv"),
                                      label_column="price"))


@pytest.mark.parametrize(("start", "kind"), [
    (b"PK\x03\x04\x14\x00\x06\x00", "is a ZIP file (an Excel .xlsx"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1\x00", "is an old Excel .xls spreadsheet"),
    (b"\x1f\x8b\x08\x00", "is gzip-compressed (name it .csv.gz)"),
])
def test_a_spreadsheet_named_csv_is_named_for_what_it_is(write_csv, start, kind):
    path = write_csv(start + b"\x00\x01binary\xff\xfe\n" * 3, name="prices.csv")
    with pytest.raises(ParameterError) as err:
        validate_run_arguments(_arguments(path))
    assert kind in str(err.value) and "not CSV text" in str(err.value)


def test_a_latin1_header_says_how_it_reads(write_csv):
    path = write_csv("Straße,y\n1,a\n2,b\n".encode("latin-1"))
    with pytest.raises(ParameterError) as err:
        validate_run_arguments(_arguments(path))
    assert ("is not valid UTF-8 (byte 4); it reads as Windows-1252 (Latin-1): 'Straße'; "
            "re-save the file as UTF-8") in str(err.value)
