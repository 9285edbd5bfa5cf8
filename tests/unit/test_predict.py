"""Batch prediction over a really trained model: counts, rejects, drift, sinks, model lookup."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from gkeflow.components.predict.logic import DriftError, predict
from gkeflow.components.predict.resolve import (
    ModelRef,
    PredictError,
    parse_model_ref,
    resolve_version,
)
from gkeflow.components.predict.sinks import output_format, probability_columns
from gkeflow.components.prepare.logic import DataError
from gkeflow.components.register.local_registry import LocalRegistry

PENGUIN_HEADER = ("species,island,bill_length_mm,bill_depth_mm,flipper_length_mm,"
                  "body_mass_g,sex,year")


# --- model references (no TensorFlow) -------------------------------------------------------

@pytest.mark.parametrize("text,expected", [
    ("penguins", ModelRef("penguins", 0, "champion")),
    ("penguins@3", ModelRef("penguins", 3, "")),
    ("penguins@staging", ModelRef("penguins", 0, "staging")),
])
def test_model_references_parse(text, expected):
    assert parse_model_ref(text) == expected


@pytest.mark.parametrize("text", ["Penguins", "penguins@", "penguins@0", "a b", "x@1@2"])
def test_malformed_model_references_are_refused(text):
    with pytest.raises(PredictError):
        parse_model_ref(text)


def test_version_and_alias_together_are_refused():
    with pytest.raises(PredictError, match="not both"):
        parse_model_ref("m", version=2, alias="champion")
    with pytest.raises(PredictError, match="already names"):
        parse_model_ref("m@2", alias="champion")


def test_registry_lookup_by_alias_version_and_fallback(tmp_path):
    uri = f"sqlite:///{tmp_path / 'r.db'}"
    registry = LocalRegistry(uri)
    registry.register("m", "/models/1", {}, run_id="r1")
    registry.register("m", "/models/2", {}, run_id="r2")
    version, note = resolve_version(uri, parse_model_ref("m"))
    assert version.version == 2 and "newest version 2" in note
    registry.set_alias("m", 1, "champion")
    assert resolve_version(uri, parse_model_ref("m"))[0].uri == "/models/1"
    assert resolve_version(uri, parse_model_ref("m@2"))[0].uri == "/models/2"
    with pytest.raises(PredictError, match="no version 7|version 7 is not"):
        resolve_version(uri, parse_model_ref("m@7"))
    with pytest.raises(PredictError, match="no alias 'staging'"):
        resolve_version(uri, parse_model_ref("m@staging"))
    with pytest.raises(PredictError, match="no model named 'other'"):
        resolve_version(uri, parse_model_ref("other"))


def test_output_formats_and_column_names():
    assert output_format("gs://b/p.parquet") == "parquet"
    assert output_format("/x/p.CSV") == "csv"
    assert output_format("bq://p.d.t") == "bigquery"
    assert output_format("/x/p", "csv") == "csv"
    with pytest.raises(PredictError):
        output_format("bq://nodots")
    assert probability_columns(["Adelie", "a b", "a-b"]) == [
        "probability_Adelie", "probability_a_b", "probability_a_b_2"]


# --- scoring with a trained model ------------------------------------------------------------

def _penguins_csv(path, rows: int = 60) -> pd.DataFrame:
    import palmerpenguins

    frame = palmerpenguins.load_penguins().head(rows).copy()
    frame.insert(0, "id", [f"p{i:04d}" for i in range(len(frame))])
    frame.to_csv(path, index=False)
    return frame


def _run(tmp_path, data, registry_uri, out_name="predictions.parquet", **kwargs):
    return predict(data_uri=str(data), output_uri=str(tmp_path / out_name),
                   model="penguins-classifier", registry_uri=registry_uri,
                   rejects_path=tmp_path / "rejected.csv", report_path=tmp_path / "report.md",
                   workdir=tmp_path / "work", **kwargs)


@pytest.mark.slow
def test_predictions_equal_the_exported_models_own_outputs(tmp_path, registered):
    from gkeflow.components.train.exported import ExportedModel

    uri, model_dir = registered
    frame = _penguins_csv(tmp_path / "new.csv")
    result = _run(tmp_path, tmp_path / "new.csv", uri, key_column="id", batch_rows=7)
    assert (result.rows_read, result.rows_scored, result.rows_rejected) == (60, 60, 0)
    assert result.model_version == 1 and result.model_name == "penguins-classifier"
    out = pq.read_table(tmp_path / "predictions.parquet").to_pandas()
    model = ExportedModel(model_dir)
    features = [f["name"] for f in model.metadata["features"]]
    rows = [{k: (None if pd.isna(v) else v) for k, v in r.items()}
            for r in frame[features].to_dict("records")]
    assert out["id"].tolist() == frame["id"].tolist()
    assert out["predicted_class"].tolist() == model.predict_rows(rows)
    probs = out[[c for c in out.columns if c.startswith("probability_")]].to_numpy()
    assert probs.shape == (60, 3)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=0, atol=1e-5)
    assert set(out["model_version"]) == {1} and set(out["model_name"]) == {"penguins-classifier"}
    assert result.metadata()["rows_read"] == 60
    assert (tmp_path / "predictions.parquet").stat().st_mode & 0o044  # not private
    assert "**OK**" in (tmp_path / "report.md").read_text()


@pytest.mark.slow
def test_damaged_rows_are_rejected_with_reasons_and_drift_is_reported(tmp_path, registered):
    uri, _ = registered
    lines = [
        "id," + PENGUIN_HEADER,
        "a1,Adelie,Torgersen,39.1,18.7,181,3750,male,2007",
        "a2,Adelie,Torgersen,not-a-number,18.7,181,3750,male,2007",   # not a number
        "a3,Adelie,Torgersen,39.1,18.7",                                # ragged
        ",Adelie,Torgersen,39.1,18.7,181,3750,male,2007",               # missing key
        "a5,Gentoo,Atlantis,39.1,18.7,181,3750,male,2007",              # new category
        "a6,Gentoo,Biscoe,390.0,18.7,181,3750,female,2009",             # out of range
        "a7,,Dream,,,,,,",                                              # all missing: scored
    ] + [f"b{i},Adelie,Dream,40.{i},18.0,190,3800,female,2008" for i in range(13)]
    data = tmp_path / "damaged.csv"
    data.write_bytes(("\n".join(lines) + "\n").encode() + b"a8,Adelie,Dr\xffeam,39,18,181,"
                     b"3750,male,2007\n")
    result = _run(tmp_path, data, uri, key_column="id", max_rejected_fraction=0.5,
                  out_name="p.csv")
    assert result.rows_read == 21
    assert result.rows_scored + result.rows_rejected == result.rows_read
    assert result.rows_rejected == 4
    with open(tmp_path / "rejected.csv", newline="") as handle:
        rejected = list(csv.DictReader(handle))
    reasons = {r["reason"] for r in rejected}
    assert reasons == {"column 'bill_length_mm': not a number", "expected 9 columns, got 5",
                       "missing key 'id'", "column 'island': not valid UTF-8"}
    assert any(r["row"].startswith("a2,Adelie") for r in rejected)
    out = pd.read_csv(tmp_path / "p.csv")
    assert len(out) == 17 and "a7" in set(out["id"]) and "a2" not in set(out["id"])
    report = (tmp_path / "report.md").read_text()
    assert "`Atlantis` (1)" in report and "Rows read: 21, scored: 17, rejected: 4" in report
    assert result.drift["drift_unseen_values"] == 1
    assert result.drift["drift_out_of_range_values"] == 1


@pytest.mark.slow
def test_drift_above_the_threshold_fails_and_publishes_nothing(tmp_path, registered):
    uri, _ = registered
    data = tmp_path / "drifted.csv"
    frame = _penguins_csv(data, rows=20).drop(columns=["island"])
    frame.to_csv(data, index=False)
    with pytest.raises(DriftError, match="'island' \\(100.0%, column missing\\)"):
        _run(tmp_path, data, uri, max_drift=0.3)
    assert not (tmp_path / "predictions.parquet").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".partial")]
    assert "**column missing**" in (tmp_path / "report.md").read_text()
    # the same input with the check disabled scores every row (island as missing)
    result = _run(tmp_path, data, uri, max_drift=1.0)
    assert result.rows_scored == 20


@pytest.mark.slow
def test_too_many_rejects_fail_and_errors_name_the_fix(tmp_path, registered):
    uri, _ = registered
    data = tmp_path / "bad.csv"
    data.write_text("id," + PENGUIN_HEADER + "\n" + "\n".join(
        f"x{i},Adelie,Dream,oops,18,190,3800,male,2008" for i in range(10)) + "\n")
    with pytest.raises(DataError, match="10 of 10 rows rejected"):
        _run(tmp_path, data, uri)
    with pytest.raises(PredictError, match="no local model registry"):
        _run(tmp_path, data, f"sqlite:///{tmp_path / 'none.db'}")
    with pytest.raises(DataError, match="key column 'nope' not found"):
        _run(tmp_path, data, uri, key_column="nope")


@pytest.mark.slow
def test_parquet_input_and_a_glob_score_like_csv(tmp_path, registered):
    uri, _ = registered
    frame = _penguins_csv(tmp_path / "a.csv", rows=30)
    (tmp_path / "parts").mkdir()
    frame.iloc[:10].to_parquet(tmp_path / "parts" / "p1.parquet")
    frame.iloc[10:].to_parquet(tmp_path / "parts" / "p2.parquet")
    from_csv = _run(tmp_path, tmp_path / "a.csv", uri, key_column="id", out_name="c.parquet")
    from_parquet = _run(tmp_path, tmp_path / "parts" / "*.parquet", uri, key_column="id",
                        out_name="q.parquet")
    assert from_csv.rows_scored == from_parquet.rows_scored == 30
    a = pq.read_table(tmp_path / "c.parquet").to_pandas()
    b = pq.read_table(tmp_path / "q.parquet").to_pandas()
    assert a["predicted_class"].tolist() == b["predicted_class"].tolist()
    np.testing.assert_allclose(a["probability_Adelie"], b["probability_Adelie"], rtol=0,
                               atol=1e-6)
    assert json.loads(json.dumps(from_parquet.metadata()))["rows_scored"] == 30


@pytest.mark.slow
def test_a_key_declared_in_the_schema_or_a_feature_as_key(tmp_path, registered):
    import shutil

    from gkeflow.components.prepare.logic import ColumnSchema, Schema

    _, model_dir = registered
    copy = tmp_path / "model"
    shutil.copytree(model_dir, copy)
    meta = json.loads((copy / "gkeflow_model.json").read_text())
    schema = Schema.load(Path(meta["training_data_uri"]))
    schema.columns.insert(0, ColumnSchema("id", "categorical", "key", False))
    (copy / "schema.json").write_text(schema.to_json())  # found before the dataset's
    uri = f"sqlite:///{tmp_path / 'keyed.db'}"
    LocalRegistry(uri).register("penguins-classifier", str(copy), {}, run_id="k")
    frame = _penguins_csv(tmp_path / "new.csv", rows=12)
    _run(tmp_path, tmp_path / "new.csv", uri)
    out = pq.read_table(tmp_path / "predictions.parquet").to_pandas()
    assert out.columns[0] == "id" and out["id"].tolist() == frame["id"].tolist()
    # a feature may be the key too: it stays a feature for the model
    by_island = _run(tmp_path, tmp_path / "new.csv", uri, key_column="island",
                     out_name="i.parquet")
    island = pq.read_table(tmp_path / "i.parquet").to_pandas()
    assert island["island"].tolist() == frame["island"].tolist()
    assert island["predicted_class"].tolist() == out["predicted_class"].tolist()
    assert by_island.rows_scored == 12


@pytest.mark.slow
def test_the_identifier_column_preparation_left_out_keys_the_predictions(tmp_path, registered):
    import shutil

    from gkeflow.components.prepare.logic import ColumnSchema, Schema

    _, model_dir = registered
    copy = tmp_path / "model"
    shutil.copytree(model_dir, copy)
    meta = json.loads((copy / "gkeflow_model.json").read_text())
    schema = Schema.load(Path(meta["training_data_uri"]))
    schema.columns.insert(0, ColumnSchema("id", "categorical", "ignored", False,
                                          note="identifier-like: every value is unique"))
    (copy / "schema.json").write_text(schema.to_json())
    uri = f"sqlite:///{tmp_path / 'ided.db'}"
    LocalRegistry(uri).register("penguins-classifier", str(copy), {}, run_id="i")
    frame = _penguins_csv(tmp_path / "new.csv", rows=12)
    _run(tmp_path, tmp_path / "new.csv", uri)
    out = pq.read_table(tmp_path / "predictions.parquet").to_pandas()
    assert out.columns[0] == "id" and out["id"].tolist() == frame["id"].tolist()
    assert "row_number" not in out.columns


def test_the_implied_key_is_the_declared_key_else_the_one_identifier_column():
    from gkeflow.components.predict.logic import implied_key
    from gkeflow.components.prepare.logic import ColumnSchema, Schema

    def schema(*columns):
        return Schema("y", ["a", "b"], [ColumnSchema("x", "numeric", "feature", False),
                                         *columns])

    ident = ColumnSchema("id", "categorical", "ignored", False, note="identifier-like: x")
    email = ColumnSchema("email", "categorical", "ignored", False, note="identifier-like: y")
    const = ColumnSchema("c", "categorical", "ignored", False, note="constant: every value")
    key = ColumnSchema("k", "categorical", "key", False)
    assert implied_key(schema(ident, const), ["x", "id", "c"]) == "id"
    assert implied_key(schema(ident, key), ["x", "id", "k"]) == "k"
    assert implied_key(schema(ident, email), ["x", "id", "email"]) == ""  # which one?
    assert implied_key(schema(ident), ["x"]) == ""  # not in the data scored
    assert implied_key(schema(const), ["x", "c"]) == ""


@pytest.mark.slow
def test_every_row_is_counted_once_whatever_the_damage(tmp_path_factory, registered):
    """On CSVs damaged at random (seeded), rows read = scored + rejected = data lines,
    and the predictions hold exactly the ids of the rows not rejected, in order."""
    import random

    uri, _ = registered
    good = ["Biscoe", "41.1", "18.2", "192", "4050", "male", "2008"]
    damage = ["ok", "ok", "ok", "text", "empty", "short", "long", "utf8", "nokey", "unseen",
              "huge"]

    def check(kinds):
        work = tmp_path_factory.mktemp("prop")
        lines, expected_kept = [], []
        for i, kind in enumerate(kinds):
            cells = [f"k{i}", "Adelie", *good]
            if kind == "text":
                cells[3] = "abc"
            elif kind == "empty":
                cells[2:] = [""] * 7
            elif kind == "short":
                cells = cells[:4]
            elif kind == "long":
                cells.append("extra")
            elif kind == "nokey":
                cells[0] = ""
            elif kind == "unseen":
                cells[2] = "Nowhere"
            elif kind == "huge":
                cells[3] = "1e9"
            line = ",".join(cells).encode()
            if kind == "utf8":
                line = line.replace(b"Biscoe", b"Bis\xffcoe")
            lines.append(line)
            if kind in ("ok", "empty", "unseen", "huge"):
                expected_kept.append(f"k{i}")
        data = work / "d.csv"
        data.write_bytes(b"\n".join([("id," + PENGUIN_HEADER).encode(), *lines]) + b"\n")
        result = _run(work, data, uri, key_column="id", max_rejected_fraction=1.0,
                      max_drift=1.0)
        assert result.rows_read == len(kinds)
        assert result.rows_scored + result.rows_rejected == result.rows_read
        assert result.rows_scored == len(expected_kept)
        if expected_kept:
            out = pq.read_table(work / "predictions.parquet").to_pandas()
            assert out["id"].tolist() == expected_kept
        with open(work / "rejected.csv", newline="") as handle:
            rejected = list(csv.DictReader(handle))
        assert len(rejected) == result.rows_rejected and all(r["reason"] for r in rejected)

    rng = random.Random(19)  # fixed cases: reproducible, bounded time
    for size in (1, 2, 5, 17, 40, 40):
        check([rng.choice(damage) for _ in range(size)])
    check(["utf8"] * 3 + ["ok"])
