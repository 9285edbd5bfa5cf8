"""prepare on damaged files: broken quoting recovered line by line, every malformed row
rejected verbatim (never a crash), header and value hygiene, label problems, column roles."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gkeflow.components.prepare.logic import DataError, prepare
from gkeflow.components.prepare.reader import load_split
from gkeflow.components.prepare.rejects import original_bytes


def _rows(n: int, start: int = 0) -> list[str]:
    kinds = ("red", "green", "blue")
    return [f"id{i},{(i * 37) % 101 / 10:.1f},{kinds[i % 3]},{'yes' if i % 2 else 'no'}"
            for i in range(start, start + n)]


HEADER = "id,x,kind,y"


def _jsonl(out: Path) -> list[dict]:
    return [json.loads(line, parse_constant=_no_constants)
            for line in (out / "rejected.jsonl").read_text().splitlines()]


def _no_constants(token):
    raise ValueError(f"non-standard JSON constant {token}")


def _kept(out: Path, schema) -> pd.DataFrame:
    return pd.concat([load_split(out, s, schema) for s in ("train", "eval", "test")],
                     ignore_index=True)


def _accounted(result, out: Path) -> None:
    assert result.rows_read == sum(result.split_rows.values()) + result.rejected_rows
    assert len(_jsonl(out)) == result.rejected_rows
    with (out / "rejected.csv").open(newline="", encoding="utf-8") as handle:
        assert len(list(csv.DictReader(handle))) == result.rejected_rows


def test_one_stray_quote_in_200k_rows_costs_one_row(write_csv, tmp_path):
    lines = [HEADER, *_rows(200_000)]
    lines[1001] = 'id1000,"0.5,a,yes'
    result = prepare(str(write_csv("\n".join(lines) + "\n")), tmp_path / "out", "y",
                     key_column="id")
    assert result.rows_read == 200_000 and result.rejected_rows == 1
    assert sum(result.split_rows.values()) == 199_999
    [reject] = _jsonl(tmp_path / "out")
    assert reject["line"] == 1002 and reject["row"] == 'id1000,"0.5,a,yes'
    assert reject["reason"].startswith("unclosed quote")


def test_small_file_stray_quote_at_the_end_and_quote_limits(write_csv, tmp_path):
    lines = [HEADER, *_rows(400)]
    lines[50] = 'id49,"0.5,a,yes'
    lines.append('id400,1.0,"red,no')  # open until the end of the file
    path = write_csv("\n".join(lines) + "\n")
    result = prepare(str(path), tmp_path / "out", "y")
    assert result.rejected_rows == 2 and sum(result.split_rows.values()) == 399
    assert {r["line"] for r in _jsonl(tmp_path / "out")} == {51, 402}
    _accounted(result, tmp_path / "out")
    # a quoted value longer than max_quoted_lines: its opening line alone is rejected
    text = HEADER + '\nq1,1.0,"a\nb\nc\nd",yes\n' + "\n".join(_rows(60)) + "\n"
    limited = prepare(str(write_csv(text, "limited.csv")), tmp_path / "limited", "y",
                      max_quoted_lines=3, max_rejected_fraction=0.5)
    rejects = sorted(_jsonl(tmp_path / "limited"), key=lambda r: r["line"])
    assert [r["line"] for r in rejects] == [2, 3, 4, 5]  # then b, c, d",yes: ragged rows
    assert rejects[0]["reason"].startswith("unclosed quote: not closed within 3 lines")
    assert limited.rows_read == 64 and limited.rejected_rows == 4
    roomy = prepare(str(write_csv(text, "roomy.csv")), tmp_path / "roomy", "y",
                    max_quoted_lines=4)
    assert roomy.rejected_rows == 0 and roomy.rows_read == 61


def test_legitimate_quoting_keeps_working(write_csv, tmp_path):
    special = ['r1,1.5,"multi\nline, with comma",yes', 'r2,2.5,"say ""hi""",no',
               'r3,3.5,"",yes', 'r4,4.5,"a\r\nb",no', 'r5,5.5,12" pipe,yes']
    lines = [HEADER, *_rows(60), *special, *_rows(20, start=60)]
    result = prepare(str(write_csv("\r\n".join(lines) + "\r\n")), tmp_path / "out", "y",
                     feature_columns="x,kind")
    assert result.rejected_rows == 0 and result.rows_read == 85
    kinds = set(_kept(tmp_path / "out", result.schema)["kind"].dropna())
    assert {"multi\nline, with comma", 'say "hi"', "a\r\nb", '12" pipe'} <= kinds


def test_every_kind_of_damage_is_rejected_verbatim_never_a_crash(write_csv, tmp_path):
    good = [line.encode() for line in _rows(200)]
    damaged = {
        3: b"A99,\xff\xfe,1",  # ragged and not UTF-8
        10: b'R1,"1,5",red',  # ragged, with a quoted comma
        20: b"id19,1.0,re\x00d,yes",  # NUL byte
        30: b"id29,1.0," + b"z" * 5000 + b",yes",  # over-long (limit below)
        40: b"id39,1.0,\xe9,no",  # not UTF-8
        50: b"id49,NA,red",  # ragged, with a null spelling
        60: b'id59,2.0,"open,yes',  # unclosed quote
        70: b"id69,abc,red,yes",  # not a number
        80: b"id79,1.0,red,",  # missing label
    }
    lines = [HEADER.encode(), *good]
    for index, raw in damaged.items():
        lines[index] = raw
    result = prepare(str(write_csv(b"\n".join(lines) + b"\n")), tmp_path / "out", "y",
                     max_row_bytes=4096, max_rejected_fraction=0.2)
    out = tmp_path / "out"
    _accounted(result, out)
    assert result.rows_read == 200 and result.rejected_rows == len(damaged)
    records = {r["line"]: r for r in _jsonl(out)}
    assert set(records) == {index + 1 for index in damaged}
    for index, raw in damaged.items():
        assert original_bytes(records[index + 1]) == raw
    assert "expected 4 columns, got 3" == records[4]["reason"]
    assert records[41]["row_base64"] and records[41]["row"] == "id39,1.0,\\xe9,no"
    # the CSV form at default settings: pandas and the csv module
    frame = pd.read_csv(out / "rejected.csv")
    assert len(frame) == len(damaged) and list(frame.columns) == [
        "source", "line", "reason", "row", "row_base64", "truncated"]
    with (out / "rejected.csv").open(newline="", encoding="utf-8") as handle:
        by_line = {int(r["line"]): r for r in csv.DictReader(handle)}
    assert by_line[11]["row"] == 'R1,"1,5",red' and by_line[51]["row"] == "id49,NA,red"
    assert original_bytes(by_line[4]) == damaged[3]


def test_huge_rejected_rows_are_truncated_in_the_csv_and_whole_in_the_jsonl(write_csv,
                                                                            tmp_path):
    huge = "id0,1.0," + "w" * 300_000  # ragged and huge
    text = "\n".join([HEADER, huge, *_rows(50, start=1)]) + "\n"
    result = prepare(str(write_csv(text)), tmp_path / "out", "y", max_rejected_fraction=0.5)
    assert result.rejected_rows == 1
    with (tmp_path / "out" / "rejected.csv").open(newline="", encoding="utf-8") as handle:
        [row] = list(csv.DictReader(handle))  # within the csv module's default field limit
    assert row["truncated"] == "true" and huge.startswith(row["row"])
    assert _jsonl(tmp_path / "out")[0]["row"] == huge


def test_multi_file_rejects_name_their_file(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.csv").write_text("\n".join([HEADER, *_rows(40)]) + "\n")
    (data / "b.csv").write_text("\n".join([HEADER, *_rows(40, 40), "id80,1.0,red"]) + "\n")
    result = prepare(str(data / "*.csv"), tmp_path / "out", "y")
    [reject] = _jsonl(tmp_path / "out")
    assert reject["source"] == str(data / "b.csv") and reject["line"] == 42
    assert result.rows_read == 81


def test_bom_and_non_finite_numbers(write_csv, tmp_path):
    lines = [HEADER, *_rows(100)]
    lines[5] = "id4,inf,red,no"
    lines[6] = "id5,-Infinity,red,yes"
    lines[7] = "id6,-inf,blue,no"
    path = write_csv(b"\xef\xbb\xbf" + ("\n".join(lines) + "\n").encode())
    result = prepare(str(path), tmp_path / "out", "y")
    assert [c.name for c in result.schema.columns] == ["id", "x", "kind", "y"]
    assert result.stats["nonfinite_values"] == {"x": 3}
    assert any("'x': 3 non-finite values" in p for p in result.problems)
    stats = json.loads((tmp_path / "out" / "stats.json").read_text(),
                       parse_constant=_no_constants)
    x = stats["splits"]["train"]["columns"]["x"]
    assert x["max"] <= 10.0 and x["min"] >= 0.0
    missing = sum(stats["splits"][s]["columns"]["x"]["missing"] for s in stats["splits"])
    assert missing == 3
    json.loads((tmp_path / "out" / "schema.json").read_text(), parse_constant=_no_constants)


def test_label_whitespace_case_variants_and_tiny_classes(write_csv, tmp_path):
    labels = ["yes", "yes ", " yes", "YES", "no", "No", "maybe"]
    lines = [HEADER] + [f"id{i},{i % 7}.5,red,{labels[i % len(labels)]}" for i in range(70)]
    lines[1] = "id0,0.5,red,rare"
    path = write_csv("\n".join(lines) + "\n")
    result = prepare(str(path), tmp_path / "out", "y")
    assert result.schema.label_vocabulary == ["No", "YES", "maybe", "no", "rare", "yes"]
    problems = " | ".join(result.problems)
    assert "differ only by case: 'YES' (10 rows), 'yes' (29 rows)" in problems
    assert "differ only by case: 'No' (10 rows), 'no' (10 rows)" in problems
    assert "class 'rare' has only 1 rows" in problems
    merged = prepare(str(path), tmp_path / "merged", "y", merge_label_case=True)
    assert merged.schema.label_vocabulary == ["maybe", "no", "rare", "yes"]
    assert not any("differ only by case" in p for p in merged.problems)


def test_penguins_raw_identifier_and_constant_columns_are_ignored(tmp_path):
    import palmerpenguins

    raw = Path(palmerpenguins.__file__).parent / "data" / "penguins-raw.csv"
    result = prepare(str(raw), tmp_path / "out", "Species")
    roles = {c.name: (c.role, c.note) for c in result.schema.columns}
    assert roles["Individual ID"][0] == "ignored" and "identifier" in roles["Individual ID"][1]
    assert roles["Region"][0] == "ignored" and roles["Region"][1].startswith("constant")
    assert roles["Stage"][0] == "ignored" and roles["Stage"][1].startswith("constant")
    assert roles["Culmen Length (mm)"][0] == "feature"
    report = (tmp_path / "out" / "report.md").read_text()
    problems = report.split("## Problems")[1].split("##")[0]
    for name in ("Individual ID", "Region", "Stage"):
        assert f"column '{name}' ignored" in problems
    schema = json.loads((tmp_path / "out" / "schema.json").read_text())
    assert any(c["name"] == "Region" and c["note"].startswith("constant")
               for c in schema["columns"])


def test_key_exclude_and_feature_columns(write_csv, tmp_path):
    path = write_csv("\n".join([HEADER, *_rows(120)]) + "\n")
    result = prepare(str(path), tmp_path / "a", "y", key_column="id", exclude_columns="kind")
    roles = {c.name: c.role for c in result.schema.columns}
    assert roles == {"id": "key", "x": "feature", "kind": "ignored", "y": "label"}
    assert not any("'id'" in p or "'kind'" in p for p in result.problems)
    only = prepare(str(path), tmp_path / "b", "y", feature_columns=["kind"])
    assert [c.name for c in only.schema.features] == ["kind"]
    for kwargs, parameter in (({"exclude_columns": "kind,nope"}, "exclude_columns"),
                              ({"feature_columns": "x, zz"}, "feature_columns"),
                              ({"key_column": "idd"}, "key_column")):
        with pytest.raises(DataError, match=f"{parameter}: unknown column.*available "
                                            "columns: id, x, kind, y"):
            prepare(str(path), tmp_path / "c", "y", **kwargs)
    with pytest.raises(DataError, match="exclude_columns names the label column"):
        prepare(str(path), tmp_path / "c", "y", exclude_columns="y")


def test_parquet_nested_and_binary_columns_are_ignored_not_a_crash(tmp_path):
    n = 60
    table = pa.table({
        "x": [float(i % 9) for i in range(n)],
        "tags": [[i, i + 1] for i in range(n)],
        "blob": [bytes([i % 256, 0xff]) for i in range(n)],
        "y": ["a" if i % 2 else "b" for i in range(n)],
    })
    pq.write_table(table, tmp_path / "data.parquet")
    result = prepare(str(tmp_path / "data.parquet"), tmp_path / "out", "y")
    roles = {c.name: (c.role, c.note) for c in result.schema.columns}
    assert roles["tags"][0] == "ignored" and roles["tags"][1].startswith("nested")
    assert roles["blob"][0] == "ignored" and roles["blob"][1].startswith("binary")
    assert result.rows_read == n and result.rejected_rows == 0
    assert any("'tags' ignored: nested" in p for p in result.problems)


def test_blank_lines_are_not_rows_and_do_not_shift_line_numbers(write_csv, tmp_path):
    body = "".join(line + ("\n\n" if i % 10 == 0 else "\n") for i, line in
                   enumerate(_rows(60)))
    path = write_csv(HEADER + "\n" + body + "id60,abc,red,no\n\r\nid61,1.0,red,yes\n")
    result = prepare(str(path), tmp_path / "out", "y", max_rejected_fraction=0.5)
    assert result.rows_read == 62 and result.rejected_rows == 1
    [reject] = _jsonl(tmp_path / "out")
    assert reject["line"] == 68 and reject["row"] == "id60,abc,red,no"


def test_source_batches_hand_set_aside_rows_to_a_three_argument_callback(write_csv):
    """Source.batches (used by prediction) keeps its (source, text, reason) callback."""
    from gkeflow.components.prepare.sources import resolve_sources

    path = write_csv(b"\n".join([HEADER.encode(), b"A1,\xff\xfe,1", b'a,1.0,"open,no',
                                 *(r.encode() for r in _rows(5))]) + b"\n")
    [source] = resolve_sources(str(path))
    seen = []
    rows = sum(b.num_rows for b in source.batches(lambda *r: seen.append(r), prefetch=False))
    assert rows == 5
    assert [(name, text) for name, text, _ in seen] == [
        (str(path), "A1,\\xff\\xfe,1"), (str(path), 'a,1.0,"open,no')]
