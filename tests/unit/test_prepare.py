"""prepare logic: schema inference, deterministic splits, quarantine, clear errors."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from gkeflow.components.prepare.logic import (
    EMBEDDED_PENGUINS,
    DataError,
    Schema,
    SplitRatios,
    assign_splits,
    prepare,
)
from gkeflow.components.prepare.reader import load_split


def test_penguins_schema_and_counts(prepared_penguins):
    dataset_dir, result = prepared_penguins
    schema = result.schema
    assert schema.label == "species"
    assert schema.label_vocabulary == ["Adelie", "Chinstrap", "Gentoo"]
    types = {c.name: (c.type, c.role) for c in schema.columns}
    assert types["island"] == ("categorical", "feature")
    assert types["bill_length_mm"] == ("numeric", "feature")
    assert types["species"] == ("categorical", "label")
    assert result.rows_read == 344
    assert sum(result.split_rows.values()) + result.rejected_rows == result.rows_read
    for split in ("train", "eval", "test"):
        assert list((dataset_dir / split).glob("part-*.tfrecord.gz"))
    assert Schema.load(dataset_dir) == schema


def test_missing_values_survive_as_missing(prepared_penguins):
    dataset_dir, result = prepared_penguins
    frames = [load_split(dataset_dir, s, result.schema) for s in ("train", "eval", "test")]
    both = pd.concat(frames)
    assert both["bill_length_mm"].isna().sum() == 2
    assert both["sex"].isna().sum() == 11


def test_split_is_deterministic_and_order_independent():
    frame = pd.DataFrame({"a": [str(i) for i in range(1000)], "b": ["x"] * 1000})
    ratios = SplitRatios(0.6, 0.2, 0.2)
    first = assign_splits(frame, ratios)
    shuffled = frame.sample(frac=1.0, random_state=3)
    second = assign_splits(shuffled, ratios)
    assert (first.loc[shuffled.index] == second).all()
    counts = first.value_counts(normalize=True)
    assert abs(counts["train"] - 0.6) < 0.06 and abs(counts["test"] - 0.2) < 0.05


@pytest.mark.parametrize(
    "ratios, message",
    [((0.8, 0.1, 0.2), "sum to 1"), ((1.0, 0.0, 0.0), "between 0 and 1"),
     ((0.5, -0.1, 0.6), "between")],
)
def test_bad_ratios_are_rejected(ratios, message):
    with pytest.raises(ValueError, match=message):
        SplitRatios(*ratios)


def test_unknown_label_names_it_and_the_columns(write_csv, tmp_path):
    path = write_csv("a,b,c\n1,x,y\n2,z,w\n")
    with pytest.raises(DataError) as err:
        prepare(str(path), tmp_path / "out", "target")
    assert "'target'" in str(err.value) and "a, b, c" in str(err.value)
    assert not (tmp_path / "out").exists()


def test_empty_file_is_a_clear_error(write_csv, tmp_path):
    with pytest.raises(DataError, match="empty"):
        prepare(str(write_csv("")), tmp_path / "out", "y")


def test_header_only_file_is_a_clear_error(write_csv, tmp_path):
    with pytest.raises(DataError, match="header but no data rows"):
        prepare(str(write_csv("x,y\n")), tmp_path / "out", "y")


def test_missing_file_and_unknown_scheme(tmp_path):
    with pytest.raises(DataError, match="not found"):
        prepare(str(tmp_path / "nope.csv"), tmp_path / "out", "y")
    with pytest.raises(DataError, match="unsupported data URI scheme"):
        prepare("ftp://host/x.csv", tmp_path / "out", "y")


def test_ragged_rows_and_missing_labels_are_quarantined(write_csv, tmp_path):
    rows = ["x,kind,y"] + [f"{i},{'ab'[i % 2]},{'pq'[i % 2]}" for i in range(40)]
    rows += ["1,a,p,EXTRA", "2", "3,b,"]
    result = prepare(str(write_csv("\n".join(rows) + "\n")), tmp_path / "out", "y",
                     max_rejected_fraction=0.5)
    assert result.rows_read == 43
    assert result.rejected_rows == 3
    assert sum(result.split_rows.values()) == 40
    rejected = pd.read_csv(tmp_path / "out" / "rejected.csv")
    assert len(rejected) == 3
    assert set(rejected["reason"]) == {
        "expected 3 columns, got 4", "expected 3 columns, got 1", "missing label 'y'"
    }


def test_too_many_rejected_rows_fails_with_samples(write_csv, tmp_path):
    rows = ["x,y", "1,a", "2,b", "3", "4", "5,a,b"]
    with pytest.raises(DataError) as err:
        prepare(str(write_csv("\n".join(rows))), tmp_path / "out", "y")
    assert "3 of 5 rows rejected" in str(err.value) and "sample rows" in str(err.value)
    assert not (tmp_path / "out").exists()


def test_all_null_column_is_ignored_not_a_crash(write_csv, tmp_path):
    rows = ["x,empty,y"] + [f"{i},,{'ab'[i % 2]}" for i in range(20)]
    result = prepare(str(write_csv("\n".join(rows))), tmp_path / "out", "y")
    roles = {c.name: c.role for c in result.schema.columns}
    assert roles["empty"] == "ignored"


def test_single_class_label_is_a_clear_error(write_csv, tmp_path):
    with pytest.raises(DataError, match="at least 2 distinct"):
        prepare(str(write_csv("x,y\n1,a\n2,a\n")), tmp_path / "out", "y")


def test_failed_prepare_leaves_no_published_output(write_csv, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(DataError):
        prepare(str(write_csv("x,y\n1,a\n")), out, "y")
    assert list(tmp_path.glob("out*")) == [] and list(tmp_path.glob(".partial-*")) == []


def test_embedded_source_resolves():
    from gkeflow.components.prepare.logic import resolve_source

    assert resolve_source(EMBEDDED_PENGUINS).name == "penguins.csv"


def test_schema_json_roundtrip(prepared_penguins):
    dataset_dir, result = prepared_penguins
    raw = json.loads((dataset_dir / "schema.json").read_text())
    assert raw["label_vocabulary"] == result.schema.label_vocabulary


def test_numbers_with_thousands_separators_or_a_currency_sign_are_numbers(write_csv,
                                                                          tmp_path):
    """Spreadsheet exports quote "3,071.89", "$1,234.50" and "12.5%": numbers (a percentage
    as written), read as such in training and in scoring; a comma that does not separate
    thousands ("1,5", "12,34"), two signs or non-Latin digits are no number."""
    import numpy as np
    import pyarrow as pa

    from gkeflow.components.predict.rows import to_float as scoring_float
    from gkeflow.components.prepare.values import to_float

    texts = ["3,071.89", "-1,250,000", "+12,345.", "999", "$1,234.50", "-$12", "$-7.5",
             "1,234.50 €", "£ 3", ".5¥", "12.5%", "-3 %",
             "1,5", "%12", "12%%", "$12%", "12,34", "1,2345", ",123", "1,234,56", "$$12",
             "12 $ €", "$", "-",
             "1_000", "\u0661\u0662", "1,5 €",
             None, "N/A"]
    values, bad = to_float(pa.array(texts))
    expected = [3071.89, -1250000.0, 12345.0, 999.0, 1234.5, -12.0, -7.5, 1234.5, 3.0, 0.5,
                12.5, -3.0]
    numbers = len(expected)
    assert values[:numbers].tolist() == expected and not bad[:numbers].any()
    assert bad[numbers:-2].all() and np.isnan(values[numbers:]).all()
    assert not bad[-2:].any()  # missing, not wrong
    assert scoring_float(pa.array(texts))[0][:numbers].tolist() == expected

    rng = np.random.default_rng(0)
    amounts = rng.uniform(100, 90_000, 60)
    lines = ["amount,y"] + [f'"${a:,.2f}",{"ab"[int(a) % 2]}' for a in amounts]
    result = prepare(str(write_csv("\n".join(lines))), tmp_path / "out", "y")
    column = result.schema.column("amount")
    assert (column.type, column.role) == ("numeric", "feature")
    assert result.rejected_rows == 0
    read = pd.concat([load_split(tmp_path / "out", split, result.schema)
                      for split in ("train", "eval", "test")])
    np.testing.assert_allclose(np.sort(read["amount"].to_numpy()),
                               np.sort(np.round(amounts, 2)), rtol=1e-6)


def test_an_ignored_column_of_dates_says_what_to_derive(write_csv, tmp_path):
    lines = ["day,code,x,y"] + [
        f"2024-{1 + i // 28:02d}-{1 + i % 28:02d},id{i},{i * 7 % 11},{'ab'[i % 2]}"
        for i in range(80)]
    result = prepare(str(write_csv("\n".join(lines))), tmp_path / "out", "y")
    day, code = result.schema.column("day"), result.schema.column("code")
    assert day.role == code.role == "ignored"
    assert "dates, such as '2024-01-01'" in day.note and "year, month and weekday" in day.note
    assert "dates" not in code.note
    assert any(p.startswith("column 'day' ignored: identifier-like") and "calendar" in p
               for p in result.problems)


def test_an_expected_numeric_column_written_as_spreadsheets_write_it_is_no_type_change(
        write_csv, tmp_path):
    """Validating against a schema: "$1,234.50" in a numeric column is a number, as the rows
    are read; a word there is a type change whose rows are rejected."""
    first = prepare(str(write_csv("price,y\n" + "".join(
        f"{i * 3 % 17}.5,{'ab'[i % 2]}\n" for i in range(60)), name="first.csv")),
        tmp_path / "first", "y")
    written = prepare(str(write_csv("price,y\n" + "".join(
        f'"${1000 + i * 37:,}.50",{"ab"[i % 2]}\n' for i in range(60)), name="written.csv")),
        tmp_path / "written", "y", expected_schema=first.schema)
    assert not any("type change" in p for p in written.problems)
    assert written.rejected_rows == 0
    worded = prepare(str(write_csv("price,y\n" + "".join(
        f"{'cheap' if i % 10 == 0 else i},{'ab'[i % 2]}\n" for i in range(60)),
        name="worded.csv")), tmp_path / "worded", "y", expected_schema=first.schema,
        max_rejected_fraction=0.5)
    assert any("type change: column 'price'" in p for p in worded.problems)
    assert worded.rejected_rows == 6
