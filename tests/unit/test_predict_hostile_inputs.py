"""Batch scoring on awkward inputs: numbers a float32 cannot hold, Python-only spellings,
NaN keys in Parquet, row numbers after rows that could not be parsed, key columns named
like outputs, outputs that name a folder or another format, a column present but empty."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gkeflow.components.predict.drift import ColumnDrift
from gkeflow.components.predict.resolve import PredictError
from gkeflow.components.predict.rows import type_rows
from gkeflow.components.predict.sinks import check_output_uri
from gkeflow.components.prepare.logic import ColumnSchema, Schema
from tests.unit.test_predict import _penguins_csv, _run

SCHEMA = Schema("y", ["p", "q"], [ColumnSchema("x", "numeric", "feature", True),
                                  ColumnSchema("c", "categorical", "feature", True),
                                  ColumnSchema("y", "categorical", "label", False)])


def test_numbers_beyond_float32_are_missing_and_python_only_spellings_are_refused():
    batch = pa.record_batch({"x": ["1.5", "inf", "1e39", "2_007", "\uff13\uff17", "NA"],
                             "c": ["a"] * 6})
    rows = type_rows(batch, SCHEMA)
    x = rows.numeric["x"]
    assert x[0] == 1.5 and np.isnan(x[1:3]).all() and np.isnan(x[5])
    assert [rows.reasons[r] if r >= 0 else "" for r in rows.reason] == [
        "", "", "", "column 'x': not a number", "column 'x': not a number", ""]


def test_nan_and_infinite_floats_are_missing_keys_and_categories():
    batch = pa.record_batch({"x": pa.array([1.0, 2.0, 3.0, 4.0]),
                             "c": pa.array([1.0, math.nan, math.inf, 2.0 ** 60]),
                             "id": pa.array([1.0, math.nan, 3.5, 2.0 ** 63])})
    rows = type_rows(batch, SCHEMA, key_column="id")
    assert rows.text["c"].to_pylist() == ["1", None, None, str(float(2 ** 60))]
    assert rows.key.to_pylist()[0] == "1" and rows.key.to_pylist()[2] == "3.5"
    assert rows.reasons[rows.reason[1]] == "missing key 'id'"
    assert rows.kept.tolist() == [True, False, True, True]


@pytest.mark.parametrize("uri, message", [
    ("{tmp}", "is a directory; name a file in it"),
    ("{tmp}/predictions.json", "ends in .json; name a .parquet or .csv file"),
    ("gs://bucket/out/predictions.txt", "ends in .txt"),
])
def test_outputs_that_cannot_be_written_are_refused_before_scoring(uri, message, tmp_path):
    with pytest.raises(PredictError, match=message):
        check_output_uri(uri.format(tmp=tmp_path))


def test_a_present_but_empty_column_drifts_by_its_excess_missing_values():
    column = ColumnDrift("x", "numeric", rows=1000, missing=1000, trained_missing=0.006)
    assert column.fraction == pytest.approx(0.994, abs=1e-12)
    usual = ColumnDrift("x", "numeric", rows=1000, missing=5, trained_missing=0.006)
    assert usual.fraction == 0.0
    unknown = ColumnDrift("x", "numeric", rows=1000, missing=1000)
    assert unknown.fraction == 0.0


@pytest.mark.slow
def test_row_numbers_count_rows_that_could_not_be_parsed(tmp_path, registered):
    uri, _ = registered
    _penguins_csv(tmp_path / "clean.csv", rows=8)
    lines = (tmp_path / "clean.csv").read_text().splitlines()
    header = lines[0].split(",", 1)[1]
    body = [line.split(",", 1)[1] for line in lines[1:]]
    body[2] = "Adelie,Torgersen,1"  # too few columns: cannot be parsed
    body[3] = body[3] + ",extra,cells"  # too many
    (tmp_path / "ragged.csv").write_text("\n".join([header, *body]) + "\n")
    result = _run(tmp_path, tmp_path / "ragged.csv", uri, max_rejected_fraction=0.5)
    assert (result.rows_read, result.rows_scored, result.rows_rejected) == (8, 6, 2)
    out = pq.read_table(tmp_path / "predictions.parquet").to_pandas()
    assert out["row_number"].tolist() == [0, 1, 4, 5, 6, 7]
    # each row keeps its own prediction: the same as scoring the clean file
    _run(tmp_path, tmp_path / "clean.csv", uri, out_name="clean.parquet")
    clean = pq.read_table(tmp_path / "clean.parquet").to_pandas().set_index("row_number")
    assert (out.set_index("row_number")["predicted_class"]
            == clean.loc[[0, 1, 4, 5, 6, 7], "predicted_class"]).all()


@pytest.mark.slow
def test_a_key_column_named_like_an_output_is_refused(tmp_path, registered):
    uri, _ = registered
    frame = _penguins_csv(tmp_path / "k.csv", rows=5).rename(columns={"id": "model_name"})
    frame.to_csv(tmp_path / "k.csv", index=False)
    with pytest.raises(PredictError, match="key_column 'model_name' has the name of a "
                                           "predictions column"):
        _run(tmp_path, tmp_path / "k.csv", uri, key_column="model_name")
    assert not (tmp_path / "predictions.parquet").exists()
