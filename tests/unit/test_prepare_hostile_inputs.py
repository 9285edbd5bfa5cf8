"""Data preparation on inputs that are legal but awkward, or broken: mixed Parquet types,
corrupt and duplicate-named files, old Mac line ends, NaN labels, lenient numbers, and the
reasons and file names the report and the errors give for them."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gkeflow.components._atomic import publish_dir
from gkeflow.components.prepare.logic import prepare
from gkeflow.components.prepare.sources import DataError
from gkeflow.pipelines.settings.parameters import ParameterError, validate_run_arguments

HEADER = "a,b,c,y"


def _rows(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.random():.3f},{rng.choice('uvw')},{rng.randint(0, 9)},{rng.choice('pq')}"
            for _ in range(n)]


def _csv(path: Path, rows: list[str], header: str = HEADER, end: str = "\n") -> Path:
    path.write_bytes((end.join([header, *rows]) + end).encode())
    return path


def _table(n: int, seed: int, a_type: pa.DataType) -> pa.Table:
    rng = random.Random(seed)
    a = [rng.randint(0, 100) for _ in range(n)]
    return pa.table({"a": pa.array(a).cast(a_type),
                     "b": [rng.choice("uvw") for _ in range(n)],
                     "c": [rng.randint(0, 9) for _ in range(n)],
                     "y": [rng.choice("pq") for _ in range(n)]})


def _accounted(result) -> None:
    assert result.rows_read == sum(result.split_rows.values()) + result.rejected_rows


def _stats(out: Path) -> dict:
    return json.loads((out / "stats.json").read_text())


def test_parquet_files_that_type_a_column_differently_are_read_together(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    pq.write_table(_table(50, 1, pa.float64()), data / "a.parquet")
    pq.write_table(_table(50, 2, pa.int64()), data / "b.parquet")
    _csv(data / "c.csv", _rows(50, 3))  # text beside typed numbers
    result = prepare(str(data), tmp_path / "out", "y")
    assert result.rows_read == 150 and result.rejected_rows == 0
    _accounted(result)
    assert result.schema.column("a").type == "numeric"


def test_a_column_nested_in_one_file_and_plain_in_another_is_named(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    pq.write_table(_table(50, 1, pa.int64()), data / "a.parquet")
    nested = _table(50, 2, pa.int64()).set_column(
        0, "a", pa.array([[i] for i in range(50)]))
    pq.write_table(nested, data / "b.parquet")
    with pytest.raises(DataError, match=r"column 'a' of .*b\.parquet is list<.*cannot be "
                                        r"read as text"):
        prepare(str(data), tmp_path / "out", "y")


def test_a_corrupt_or_duplicate_named_parquet_file_is_a_data_error(tmp_path):
    (tmp_path / "bad.parquet").write_bytes(b"PAR1junk")
    with pytest.raises(DataError, match=r"cannot read Parquet file .*bad\.parquet"):
        prepare(str(tmp_path / "bad.parquet"), tmp_path / "out", "y")
    twice = pa.Table.from_arrays([pa.array([1.0, 2.0]), pa.array([3.0, 4.0]),
                                  pa.array(["p", "q"])], names=["a", "a", "y"])
    pq.write_table(twice, tmp_path / "twice.parquet")
    with pytest.raises(DataError, match=r"duplicate column names in .*twice\.parquet: 'a'"):
        prepare(str(tmp_path / "twice.parquet"), tmp_path / "out", "y")


def test_old_mac_line_ends_are_named_with_the_fix(tmp_path):
    path = _csv(tmp_path / "mac.csv", _rows(60), end="\r")
    with pytest.raises(DataError, match=r"mac\.csv ends its lines with a carriage return "
                                        r"alone.*convert the line ends to LF or CRLF"):
        prepare(str(path), tmp_path / "out", "y")


def test_rejected_non_numbers_are_not_counted_as_non_finite(tmp_path):
    path = _csv(tmp_path / "d.csv", [*_rows(60), "abc,u,4,q", "inf,v,5,p"])
    result = prepare(str(path), tmp_path / "out", "y")
    assert result.rejected_reasons == {"column 'a': not a number": 1}
    _accounted(result)
    assert _stats(tmp_path / "out")["nonfinite_values"] == {"a": 1}  # the inf alone


def test_python_only_spellings_of_numbers_are_not_numbers(tmp_path):
    path = _csv(tmp_path / "d.csv", [*_rows(60), "1_000,u,4,q", "\u0661\u0662\u0663,v,5,p",
                                     "xyz,w,6,q"])
    result = prepare(str(path), tmp_path / "out", "y", max_rejected_fraction=0.5)
    assert result.rejected_reasons == {"column 'a': not a number": 3}
    splits = _stats(tmp_path / "out")["splits"].values()
    assert max(split["columns"]["a"]["max"] for split in splits) < 1.0  # no 1000, no 123


def test_a_nan_label_in_parquet_is_a_missing_label(tmp_path):
    table = _table(60, 1, pa.int64()).set_column(
        3, "y", pa.array([float("nan") if i % 10 == 0 else float(i % 2) for i in range(60)]))
    pq.write_table(table, tmp_path / "d.parquet")
    result = prepare(str(tmp_path / "d.parquet"), tmp_path / "out", "y",
                     max_rejected_fraction=0.2)
    assert result.rejected_reasons == {"missing label 'y'": 6}
    assert "nan" not in result.schema.label_vocabulary
    assert len(result.schema.label_vocabulary) == 2
    _accounted(result)


def test_a_column_without_a_name_is_not_the_key_when_no_key_is_named(tmp_path):
    rows = [f"{i},{row}" for i, row in enumerate(_rows(60))]
    path = _csv(tmp_path / "d.csv", rows, header="," + HEADER)  # pandas' unnamed index
    result = prepare(str(path), tmp_path / "out", "y")
    assert result.schema.column("").role != "key"


def test_stray_quotes_give_one_reason_however_many_lines(tmp_path):
    rows = _rows(400)
    for i in range(0, 400, 20):
        rows[i] = rows[i].replace(",", ',"', 1)
    result = prepare(str(_csv(tmp_path / "d.csv", rows)), tmp_path / "out", "y")
    reasons = list(result.rejected_reasons)
    assert all(r.startswith("unclosed quote") and not any(c.isdigit() for c in r)
               for r in reasons) and len(reasons) <= 2  # one per kind, not one per line
    assert result.rejected_rows == 20
    lines = [json.loads(line)["line"]
             for line in (tmp_path / "out" / "rejected.jsonl").read_text().splitlines()]
    assert sorted(lines) == list(range(2, 402, 20))


def test_a_header_mismatch_names_the_file_the_header_came_from(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "a_empty.csv").write_bytes(b"")
    _csv(data / "b.csv", _rows(30))
    _csv(data / "c.csv", [r + ",1" for r in _rows(30)], header=HEADER + ",z")
    with pytest.raises(DataError, match=r"c\.csv has columns .* unlike .*b\.csv's"):
        prepare(str(data), tmp_path / "out", "y")


def test_columns_without_names_are_named_in_the_duplicate_error(tmp_path):
    path = _csv(tmp_path / "d.csv", [r.replace(",", ",,", 1) for r in _rows(30)],
                header="a,,,y")
    with pytest.raises(DataError, match=r"duplicate column names in .*d\.csv: ''; give "):
        prepare(str(path), tmp_path / "out", "y")


def test_a_directory_skips_the_files_kept_beside_the_data(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    _csv(data / "part-0.csv", _rows(40, 1))
    _csv(data / "part-1.csv", _rows(40, 2))
    (data / "_SUCCESS").write_bytes(b"")
    (data / "_committed_123").write_text('{"added": ["part-0.csv"]}')
    (data / ".part-0.csv.crc").write_bytes(b"\x00\x01crc")
    (data / "README.md").write_text("# Exported nightly\nColumns: a, b, c, y\n")
    (data / "schema.json").write_text('{"fields": ["a", "b", "c", "y"]}')
    result = prepare(str(data), tmp_path / "out", "y")
    assert result.rows_read == 80
    _accounted(result)


def test_the_run_precheck_reads_the_header_the_step_reads(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "a_empty.csv").write_bytes(b"")
    _csv(data / "b.csv", _rows(30))
    validate_run_arguments({"data_uri": str(data), "label_column": "y"})
    with pytest.raises(ParameterError, match=r"label_column: unknown column\(s\) 'nope'.*"
                                             r"\(the header of .*b\.csv\)"):
        validate_run_arguments({"data_uri": str(data), "label_column": "nope"})


def test_republishing_never_leaves_a_mix_of_old_and_new(tmp_path, monkeypatch):
    target = tmp_path / "out"
    for version in ("old", "new"):
        with publish_dir(target) as scratch:
            (scratch / "part").write_text(version)
            (scratch / version).write_text(version)
    assert sorted(p.name for p in target.iterdir()) == ["new", "part"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # nothing left aside
    # killed between moving the old output aside and moving the new one in
    real_replace, calls = os.replace, []

    def replace_then_die(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise KeyboardInterrupt
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace_then_die)
    with pytest.raises(KeyboardInterrupt), publish_dir(target) as scratch:
        (scratch / "part").write_text("newer")
    assert not target.exists()  # neither old nor half of new at the published path
    [aside] = tmp_path.glob(".replaced-out-*")
    assert (aside / "out" / "new").read_text() == "new"


@pytest.mark.parametrize("separator, name", [(";", "semicolons"), ("\t", "tabs")])
def test_a_file_separated_otherwise_is_named_with_the_fix(separator, name, tmp_path):
    path = _csv(tmp_path / "d.csv", [r.replace(",", separator) for r in _rows(30)],
                header=HEADER.replace(",", separator))
    with pytest.raises(DataError, match=f"seems separated by {name}; gkeflow reads "
                                        "comma-separated values"):
        prepare(str(path), tmp_path / "out", "y")


def test_label_numbers_written_differently_are_reported(tmp_path):
    rng = random.Random(3)
    rows = [f"{rng.random():.3f},u,{i % 10},{'1' if i % 2 else '0'}" for i in range(200)]
    rows += [f"{rng.random():.3f},v,1,1.0" for _ in range(12)]
    result = prepare(str(_csv(tmp_path / "d.csv", rows)), tmp_path / "out", "y")
    assert any("one number written differently: '1' (100 rows), '1.0' (12 rows)" in p
               for p in result.problems), result.problems


def test_a_class_without_test_rows_is_reported():
    from collections import Counter
    from types import SimpleNamespace

    from gkeflow.components.prepare.finish import label_problems

    schema = SimpleNamespace(label="y")
    stats = {"train": {"y": SimpleNamespace(values=Counter({"a": 50, "b": 40, "c": 30}))},
             "eval": {"y": SimpleNamespace(values=Counter({"a": 9, "c": 6}))},
             "test": {"y": SimpleNamespace(values=Counter({"a": 10, "b": 0}))}}
    [problem] = label_problems(schema, stats)
    assert problem == ("label 'y': no row of class(es) 'b', 'c' in the test split: their "
                       "precision and recall are not measured")
    stats["test"]["y"].values.update({"b": 5, "c": 5})
    assert label_problems(schema, stats) == []
