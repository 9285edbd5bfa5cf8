"""prepare at scale: bad inputs, quarantine accounting, validation, determinism, the reader."""

from __future__ import annotations

import gzip
import json
import random

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gkeflow.components.prepare import records
from gkeflow.components.prepare.logic import (
    DataError,
    Schema,
    SplitRatios,
    prepare,
)
from gkeflow.components.prepare.reader import load_split, make_tf_dataset


def _lines(n=200, seed=1, start=0):
    rng = random.Random(seed)
    out = []
    for i in range(start, start + n):
        x = round(rng.uniform(-5, 5), 3)
        out.append(f"{i},{x},{rng.choice('uvw')},{'pos' if x > 0 else 'neg'}")
    return out


HEADER = "id,x,kind,y"


def _all_rows(dataset_dir, schema):
    return pd.concat([load_split(dataset_dir, s, schema).assign(_split=s)
                      for s in ("train", "eval", "test")], ignore_index=True)


def _rejected(dataset_dir):
    return pd.read_csv(dataset_dir / "rejected.csv", keep_default_na=False)


def _check_accounting(result, dataset_dir):
    assert result.rows_read == sum(result.split_rows.values()) + result.rejected_rows
    assert len(_rejected(dataset_dir)) == result.rejected_rows
    stats = json.loads((dataset_dir / "stats.json").read_text())
    assert stats["rows_read"] == result.rows_read
    for split, count in result.split_rows.items():
        assert stats["splits"][split]["count"] == count
        assert sum(1 for _ in _rows_in(dataset_dir, split, result.schema)) == count


def _rows_in(dataset_dir, split, schema):
    frame = load_split(dataset_dir, split, schema)
    return frame.itertuples()


def test_malformed_quoting_rejects_only_the_opening_line(write_csv, tmp_path):
    lines = [HEADER, *_lines(100), '100,1.5,"u,pos', *_lines(20, start=101)]
    result = prepare(str(write_csv("\n".join(lines) + "\n")), tmp_path / "out", "y",
                     max_rejected_fraction=0.5)
    _check_accounting(result, tmp_path / "out")
    rejected = _rejected(tmp_path / "out")
    # the unclosed quote costs its own line only; the 20 lines after it are kept
    assert result.rejected_rows == 1 and result.rows_read == 121
    assert rejected["reason"][0].startswith("unclosed quote")
    assert rejected["row"][0] == '100,1.5,"u,pos' and rejected["line"][0] == 102


def test_wrong_types_are_rejected_row_by_row(write_csv, tmp_path):
    lines = [HEADER, *_lines(150)]
    lines[10] = "9,abc,u,pos"
    lines[20] = "19,1e999x,v,neg"
    result = prepare(str(write_csv("\n".join(lines) + "\n")), tmp_path / "out", "y")
    assert result.schema.column("x").type == "numeric"
    assert result.rejected_reasons == {"column 'x': not a number": 2}
    rejected = _rejected(tmp_path / "out")
    assert set(rejected["row"]) == {"9,abc,u,pos", "19,1e999x,v,neg"}
    _check_accounting(result, tmp_path / "out")


def test_non_utf8_bytes_are_rejected_not_a_crash(write_csv, tmp_path):
    lines = [HEADER.encode(), *(line.encode() for line in _lines(100))]
    lines[5] = b"4,1.0,\xff\xfe,pos"
    lines[6] = b"5,\xe9,u,neg"
    result = prepare(str(write_csv(b"\n".join(lines) + b"\n")), tmp_path / "out", "y")
    assert result.rejected_reasons == {
        "column 'kind': not valid UTF-8": 1, "column 'x': not valid UTF-8": 1}
    assert "\\xff\\xfe" in " ".join(_rejected(tmp_path / "out")["row"])
    _check_accounting(result, tmp_path / "out")


def test_glob_with_one_bad_file(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.csv").write_text("\n".join([HEADER, *_lines(100)]) + "\n")
    (data / "b.csv.gz").write_bytes(
        gzip.compress(("\n".join([HEADER, *_lines(100, start=100)]) + "\n").encode()))
    (data / "c.csv").write_text("\n".join([HEADER, *_lines(50, start=200), "x", "1,2"]) + "\n")
    (data / "d.csv").write_text("")
    result = prepare(str(data / "*.csv*"), tmp_path / "out", "y", max_rejected_fraction=0.05)
    assert result.rows_read == 252 and result.rejected_rows == 2
    assert set(_rejected(tmp_path / "out")["source"]) == {str(data / "c.csv")}
    assert any("d.csv: empty file" in p for p in result.problems)
    _check_accounting(result, tmp_path / "out")

    (data / "e.csv").write_text("id,x,other,y\n1,2,u,pos\n")
    with pytest.raises(DataError, match=r"e\.csv has columns"):
        prepare(str(data / "*.csv*"), tmp_path / "out2", "y")
    (data / "e.csv").unlink()
    (data / "f.csv.gz").write_bytes(gzip.compress(b"id,x,kind,y\n" * 1000)[:60])
    with pytest.raises(DataError, match=r"f\.csv\.gz"):
        prepare(str(data / "*.csv*"), tmp_path / "out3", "y")
    assert not (tmp_path / "out2").exists() and not (tmp_path / "out3").exists()
    assert not list(tmp_path.glob(".partial-*"))


def test_only_unparseable_rows_is_a_clear_error(write_csv, tmp_path):
    with pytest.raises(DataError, match="all 2 rows were rejected"):
        prepare(str(write_csv("a,b,y\n1\n2\n")), tmp_path / "out", "y")


def test_rejected_fraction_limit_names_columns_and_samples(write_csv, tmp_path):
    lines = [HEADER, *_lines(60)] + [f"{i},oops,u,pos" for i in range(60, 62)]
    with pytest.raises(DataError) as err:
        prepare(str(write_csv("\n".join(lines))), tmp_path / "out", "y",
                max_rejected_fraction=0.01)
    message = str(err.value)
    assert "2 of 62 rows rejected" in message and "columns: x (2)" in message
    assert "60,oops,u,pos" in message
    assert not (tmp_path / "out").exists()


def test_too_many_missing_values_fail_naming_the_column(write_csv, tmp_path):
    lines = [HEADER, *_lines(100)]
    lines[1:61] = [",".join([*line.split(",")[:2], "", line.split(",")[3]])
                   for line in lines[1:61]]
    path = write_csv("\n".join(lines))
    with pytest.raises(DataError, match=r"kind \(60\.0% missing\)"):
        prepare(str(path), tmp_path / "out", "y", max_missing_fraction=0.5)
    assert prepare(str(path), tmp_path / "ok", "y").rows_read == 100


def test_split_is_deterministic_across_runs_files_and_order(tmp_path):
    lines = _lines(3000)
    one = tmp_path / "one.csv"
    one.write_text("\n".join([HEADER, *lines]) + "\n")
    shuffled = lines[:]
    random.Random(5).shuffle(shuffled)
    parts = tmp_path / "parts"
    parts.mkdir()
    for k in range(3):
        (parts / f"p{k}.csv").write_text("\n".join([HEADER, *shuffled[k::3]]) + "\n")
    a = prepare(str(one), tmp_path / "a", "y", workers=1, rows_per_shard=500)
    b = prepare(str(parts), tmp_path / "b", "y", workers=2)
    assert a.split_rows == b.split_rows
    assert a.shards["train"] > 1
    rows_a = _all_rows(tmp_path / "a", a.schema).set_index("id")["_split"]
    rows_b = _all_rows(tmp_path / "b", b.schema).set_index("id")["_split"]
    assert rows_a.sort_index().equals(rows_b.sort_index())
    fractions = rows_a.value_counts(normalize=True)
    assert abs(fractions["train"] - 0.7) < 0.04 and abs(fractions["eval"] - 0.15) < 0.03


def test_key_column_keeps_a_key_in_one_split(tmp_path):
    rng = random.Random(3)
    lines = [f"user{rng.randint(0, 80)},{rng.uniform(-1, 1):.3f},u,{rng.choice(['a', 'b'])}"
             for _ in range(2000)]
    path = tmp_path / "events.csv"
    path.write_text("\n".join(["user,x,kind,y", *lines, ",0.5,u,a"]) + "\n")
    result = prepare(str(path), tmp_path / "out", "y", key_column="user",
                     ratios=SplitRatios(0.6, 0.2, 0.2))
    frame = _all_rows(tmp_path / "out", result.schema)
    assert frame.groupby("user")["_split"].nunique().max() == 1
    assert result.rejected_reasons == {"missing key 'user'": 1}
    with pytest.raises(DataError, match="key_column: unknown column.*'nope'.*available "
                                        "columns: user, x, kind, y"):
        prepare(str(path), tmp_path / "out2", "y", key_column="nope")


def test_validation_against_a_previous_schema(tmp_path):
    first_csv = tmp_path / "first.csv"
    first_csv.write_text("\n".join([HEADER, *_lines(300)]) + "\n")
    first = prepare(str(first_csv), tmp_path / "first", "y")
    assert first.schema.column("kind").vocabulary == ["u", "v", "w"]

    lines = [HEADER + ",extra", *(f"{line},e" for line in _lines(300, seed=2))]
    lines[1] = "1000,2.0,z,pos,e"        # unseen category
    lines[2] = "1001,2.0,u,maybe,e"      # label outside the known set
    lines[3] = "1002,twelve,u,pos,e"     # wrong type
    second_csv = tmp_path / "second.csv"
    second_csv.write_text("\n".join(lines) + "\n")
    result = prepare(str(second_csv), tmp_path / "second", "y",
                     expected_schema=tmp_path / "first")
    assert result.rejected_reasons == {
        "label 'y' value not in the expected set ['neg', 'pos']": 1,
        "column 'x': not a number": 1,
    }
    assert result.schema.column("extra").role == "ignored"
    assert result.schema.label_vocabulary == ["neg", "pos"]
    assert any("extra column 'extra'" in p for p in result.problems)
    assert any("'kind': 1 values not in the expected vocabulary" in p for p in result.problems)
    report = (tmp_path / "second" / "report.md").read_text()
    assert "extra column 'extra'" in report and "not a number" in report

    strict = prepare(str(second_csv), tmp_path / "strict", "y",
                     expected_schema=first.schema, reject_unseen_categories=True)
    assert strict.rejected_reasons["column 'kind': unseen category"] == 1

    missing = tmp_path / "missing.csv"
    missing.write_text("id,kind,y\n1,u,pos\n")
    with pytest.raises(DataError, match="columns missing from the data .*: x"):
        prepare(str(missing), tmp_path / "m", "y", expected_schema=first.schema)


def test_yaml_expected_schema(tmp_path, write_csv):
    (tmp_path / "schema.yaml").write_text(
        "label: y\nlabel_vocabulary: [neg, pos]\ncolumns:\n"
        "  - {name: id, type: numeric, role: ignored}\n"
        "  - {name: x, type: numeric}\n"
        "  - {name: kind, type: categorical, vocabulary: [u, v]}\n"
        "  - {name: y, type: categorical}\n"
    )
    result = prepare(str(write_csv("\n".join([HEADER, *_lines(100)]))), tmp_path / "out", "y",
                     expected_schema=tmp_path / "schema.yaml")
    assert result.schema.column("kind").vocabulary == ["u", "v"]
    assert any("'kind'" in p and "not in the expected vocabulary" in p for p in result.problems)
    (tmp_path / "bad.yaml").write_text("columns: []\n")
    with pytest.raises(DataError, match="needs 'label' and 'columns'"):
        prepare(str(write_csv("a,y\n1,b\n")), tmp_path / "o2", "y",
                expected_schema=tmp_path / "bad.yaml")


def test_stats_and_report(prepared_penguins):
    dataset_dir, result = prepared_penguins
    stats = json.loads((dataset_dir / "stats.json").read_text())
    train = load_split(dataset_dir, "train", result.schema)
    mass = stats["splits"]["train"]["columns"]["body_mass_g"]
    assert mass["count"] == len(train)
    assert mass["missing"] == int(train["body_mass_g"].isna().sum())
    assert mass["mean"] == pytest.approx(train["body_mass_g"].mean())
    assert mass["std"] == pytest.approx(train["body_mass_g"].std(ddof=0))
    assert mass["min"] == train["body_mass_g"].min() and mass["max"] == train["body_mass_g"].max()
    island = stats["splits"]["train"]["columns"]["island"]
    assert dict(island["top"]) == train["island"].value_counts().to_dict()
    report = (dataset_dir / "report.md").read_text()
    assert "| 344 |" in report and "body_mass_g" in report


def test_parquet_and_gzip_local_sources(tmp_path):
    table = pa.table({"x": np.arange(300, dtype="float64"),
                      "c": pa.array([None if i % 10 == 0 else f"c{i % 4}" for i in range(300)]),
                      "y": ["a" if i % 2 else "b" for i in range(300)]})
    pq.write_table(table, tmp_path / "d.parquet", row_group_size=64)
    result = prepare(str(tmp_path / "d.parquet"), tmp_path / "out", "y")
    assert result.rows_read == 300
    frame = _all_rows(tmp_path / "out", result.schema)
    assert sorted(frame["x"]) == list(range(300)) and frame["c"].isna().sum() == 30

    csv = "\n".join([HEADER, *_lines(100)]) + "\n"
    (tmp_path / "d.csv.gz").write_bytes(gzip.compress(csv.encode()))
    (tmp_path / "d.csv").write_text(csv)
    zipped = prepare(str(tmp_path / "d.csv.gz"), tmp_path / "gz", "y")
    plain = prepare(str(tmp_path / "d.csv"), tmp_path / "plain", "y")
    assert zipped.split_rows == plain.split_rows


def test_records_are_plain_tf_examples(prepared_penguins):
    import tensorflow as tf

    dataset_dir, _ = prepared_penguins
    files = records.split_files(dataset_dir, "train")
    raw = next(iter(tf.data.TFRecordDataset(files, compression_type="GZIP")))
    example = tf.train.Example.FromString(raw.numpy())
    features = example.features.feature
    rows = features[records.ROWS_FEATURE].int64_list.value[0]
    assert len(features["v:body_mass_g"].float_list.value) == rows
    islands = features["d:island"].bytes_list.value
    assert {islands[i] for i in features["v:island"].int64_list.value} <= {
        b"Biscoe", b"Dream", b"Torgersen"}


def test_tf_dataset_batches_shuffles_and_keeps_every_row(prepared_penguins):
    dataset_dir, result = prepared_penguins
    schema = result.schema
    n = result.split_rows["train"]
    ordered = list(make_tf_dataset(dataset_dir, "train", schema, batch_size=64))
    assert [int(b["species"].shape[0]) for b in ordered[:-1]] == [64] * (len(ordered) - 1)
    assert sum(int(b["species"].shape[0]) for b in ordered) == n
    first = np.concatenate([b["body_mass_g"].numpy() for b in ordered])
    shuffled = make_tf_dataset(dataset_dir, "train", schema, batch_size=64, shuffle_seed=7)
    again = make_tf_dataset(dataset_dir, "train", schema, batch_size=64, shuffle_seed=7)
    one = np.concatenate([b["body_mass_g"].numpy() for b in shuffled])
    two = np.concatenate([b["body_mass_g"].numpy() for b in again])
    np.testing.assert_array_equal(one, two)
    np.testing.assert_array_equal(np.sort(np.nan_to_num(one)), np.sort(np.nan_to_num(first)))
    only = next(iter(make_tf_dataset(dataset_dir, "test", schema, 8, columns=["island"])))
    assert set(only) == {"island"}
    with pytest.raises(ValueError, match="not in the schema"):
        make_tf_dataset(dataset_dir, "test", schema, 8, columns=["nope"])


def test_load_split_types_match_the_old_csv_semantics(prepared_penguins):
    dataset_dir, result = prepared_penguins
    frame = load_split(dataset_dir, "eval", result.schema)
    assert list(frame.columns) == [c.name for c in result.schema.columns]
    assert frame["bill_length_mm"].dtype == np.float64
    assert frame["island"].dtype == object
    raw = pd.read_csv(__import__("palmerpenguins").load_penguins.__globals__["__file__"]
                      .replace("penguins.py", "data/penguins.csv"))
    assert set(frame["bill_length_mm"].dropna()) <= set(raw["bill_length_mm"].dropna())
    with pytest.raises(FileNotFoundError, match="no 'nope' split"):
        load_split(dataset_dir, "nope", result.schema)


def test_schema_from_bad_file_is_a_clear_error(tmp_path, write_csv):
    (tmp_path / "schema.json").write_text('{"label": "y"}')
    with pytest.raises(DataError, match="invalid schema file"):
        Schema.load(tmp_path / "schema.json")


def test_wide_dictionaries_roundtrip(tmp_path):
    """Blocks with hundreds of distinct values (multi-byte varint indices) read back intact."""
    rows = [f"{i},{i * 0.5},city{(i * 7) % 500},{'ab'[i % 2]}" for i in range(2000)]
    path = tmp_path / "wide.csv"
    path.write_text("\n".join(["id,x,city,y", *rows]) + "\n")
    result = prepare(str(path), tmp_path / "out", "y", max_vocabulary=2000)
    assert len(result.schema.column("city").vocabulary) == 500
    frame = _all_rows(tmp_path / "out", result.schema).sort_values("id")
    expected = [f"city{(i * 7) % 500}" for i in range(2000)]
    assert frame["city"].tolist() == expected
    assert frame["x"].tolist() == [i * 0.5 for i in range(2000)]


def test_varints_match_protobuf():
    from google.protobuf.internal import encoder

    values = np.array([0, 1, 127, 128, 300, 16383, 16384, 2**21, 2**35, 2**62], dtype=np.int64)
    expected = b"".join(encoder._VarintBytes(int(v)) for v in values)
    assert records._varints(values) == expected


def test_row_hash_is_pinned():
    """The split hash is a format: changing it would move rows between splits of datasets
    prepared before and after the change. -0.0 and 0.0 hash alike; so do NaN and missing."""
    from gkeflow.components.prepare.logic import combine_hashes, hash_numeric, hash_text

    hashes = combine_hashes([hash_numeric(np.array([1.5, np.nan, -0.0, 0.0])),
                             hash_text(["a", None, "b", "b"])])
    assert [hex(int(h)) for h in hashes] == [
        "0xbd32e17058db8cd4", "0x27824ae515b3b8e1", "0xbd71289a1c0f715b", "0xbd71289a1c0f715b"]


def test_blocks_end_at_row_ends_and_keep_line_numbers(monkeypatch):
    from gkeflow.components.prepare import csv_reader

    text = (b"a,b\r\n1,2\r\n3,4\n" + b"5," + b"6" * 5000 + b'\n"7\n7",8\n9,"x\n' + b"y" * 40
            + b'"\n10,10')
    monkeypatch.setattr(csv_reader, "CSV_BLOCK_BYTES", 7)
    rows = []
    for cut in csv_reader.cut_blocks(pa.BufferReader(text), 2, csv_reader.RowLimits()):
        cut = cut()
        if not cut.checked:
            cut = csv_reader.split_rows(cut.data, cut.first_line, 2, cut.limits, True)
        assert not cut.rejects
        rows += [(int(line), cut.data[s:e]) for line, s, e in zip(cut.lines, cut.starts,
                                                                   cut.ends, strict=True)]
    assert rows == [(2, b"1,2"), (3, b"3,4"), (4, b"5," + b"6" * 5000), (5, b'"7\n7",8'),
                    (7, b'9,"x\n' + b"y" * 40 + b'"'), (9, b"10,10")]
    assert list(csv_reader.cut_blocks(pa.BufferReader(b"a,b"), 2, csv_reader.RowLimits())) == []


def test_numeric_blocks_parsed_as_numbers_or_as_text_give_the_same_result(
        write_csv, tmp_path, monkeypatch):
    """Numeric columns are parsed as numbers per CSV block; a block holding a non-number
    is read as text instead. With small blocks (some typed, some not) the outcome equals
    that of one block: same rejects with their original text, same rows in each split."""
    from gkeflow.components.prepare import sources

    lines = [HEADER, *_lines(3000)]
    lines[100] = "99,abc,u,pos"  # not a number: its block is read as text
    lines[1500] = "1499,1.50,u,"  # missing label in a typed block: the text stays "1.50"
    lines[2000] = "1999,2.0,\xff,neg"  # invalid UTF-8 in a dictionary-encoded column
    lines[2500] = "2499,3.0"  # ragged
    data = write_csv("\n".join(lines).encode("utf-8").replace(b"\xc3\xbf", b"\xff") + b"\n")
    whole = prepare(str(data), tmp_path / "whole", "y")
    monkeypatch.setattr(sources, "CSV_BLOCK_BYTES", 4096)
    blocks = prepare(str(data), tmp_path / "blocks", "y")
    for result, out in ((whole, tmp_path / "whole"), (blocks, tmp_path / "blocks")):
        _check_accounting(result, out)
        assert result.rejected_reasons == {
            "column 'x': not a number": 1, "missing label 'y'": 1,
            "column 'kind': not valid UTF-8": 1, "expected 4 columns, got 2": 1}
        rows = set(_rejected(out)["row"])
        assert {"99,abc,u,pos", "1499,1.50,u,", "2499,3.0"} <= rows
        assert "1999,2.0,\\xff,neg" in rows
    assert whole.split_rows == blocks.split_rows
    for split in ("train", "eval", "test"):
        a = load_split(tmp_path / "whole", split, whole.schema).sort_values("id")
        b = load_split(tmp_path / "blocks", split, blocks.schema).sort_values("id")
        pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True))
    assert json.loads((tmp_path / "whole" / "stats.json").read_text())["splits"]["train"][
        "columns"]["kind"] == json.loads((tmp_path / "blocks" / "stats.json").read_text())[
        "splits"]["train"]["columns"]["kind"]


def test_a_sorted_file_comes_out_shuffled_and_seeds_reorder_blocks(tmp_path):
    """Rows are stored in hash order within blocks; a seed shuffles shards and blocks."""
    rows = 3 * 16384 + 500
    lines = ["x,label"] + [f"{i},{'low' if i < rows // 2 else 'high'}" for i in range(rows)]
    (tmp_path / "sorted.csv").write_text("\n".join(lines) + "\n")
    result = prepare(str(tmp_path / "sorted.csv"), tmp_path / "out", "label",
                     ratios=SplitRatios(0.9, 0.05, 0.05), feature_columns="x")
    schema = result.schema

    def values(seed):
        batches = make_tf_dataset(tmp_path / "out", "train", schema, 1024, shuffle_seed=seed)
        return [b["x"].numpy() for b in batches]

    plain = values(None)
    first_batch = plain[0]
    assert len(set(first_batch < rows // 2)) == 2, "a batch mixes both halves of the file"
    assert abs(np.corrcoef(np.arange(first_batch.size), first_batch)[0, 1]) < 0.2
    everything = np.sort(np.concatenate(plain))
    assert everything.size == result.split_rows["train"]
    assert np.array_equal(np.sort(np.concatenate(values(1))), everything)
    assert [v.tolist() for v in values(1)] == [v.tolist() for v in values(1)]
    assert [v.tolist() for v in values(1)] != [v.tolist() for v in values(2)]
