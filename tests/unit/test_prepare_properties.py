"""Property-based tests of the CSV reader and prepare: generated files mixing valid rows
(quoted commas, quotes and newlines included) with every kind of damage. For each file:
rows in the file = kept + rejected, each rejected row's stored text is its original bytes
(with its line number), and no valid row is rejected."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gkeflow.components.prepare import csv_reader
from gkeflow.components.prepare.logic import SplitRatios, prepare
from gkeflow.components.prepare.rejects import original_bytes
from gkeflow.components.prepare.sources import EmptySplit

HEADER = b"id,x,text,y"
COLUMNS = 4
MAX_ROW_BYTES = 2000
#: Examples per property (bounded for CI; raise it locally to search harder).
EXAMPLES = int(os.environ.get("GKEFLOW_PROPERTY_EXAMPLES", "100"))

_plain = st.text(alphabet="abcé xyz-_.", min_size=1, max_size=6)
# text with the characters that need quoting. A value spanning lines has no commas and
# does not end with a line end: the reader rejects the opening line of a quote whose
# following lines read as rows of their own, and a value such as "a\n" followed by a row
# holding ",,," reads both ways (deliberately ambiguous input; see csv_reader)
_quoted = st.text(alphabet='ab,"\n é', min_size=0, max_size=8).filter(
    lambda t: t.strip() not in ("", "NA", "?")
    and not ("\n" in t and ("," in t or t.endswith("\n"))))


def _quote(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


@st.composite
def good_row(draw, index: int, one_line: bool = False) -> bytes:
    x = draw(st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False))
    if draw(st.booleans()):
        text = _quote(draw(_quoted.filter(lambda t: "\n" not in t) if one_line else _quoted))
    else:
        text = draw(_plain)
    label = "abc"[index % 3]
    return f"id{index},{x!r},{text},{label}".encode()


DAMAGE = ("ragged", "bad_utf8", "ragged_bad_utf8", "nul", "over_long", "unclosed_quote",
          "not_a_number")


@st.composite
def damaged_row(draw, index: int, kinds=DAMAGE) -> bytes:
    kind = draw(st.sampled_from(kinds))
    if kind == "ragged":
        n = draw(st.sampled_from([1, 2, 3, 5, 6]))
        return ",".join([f"id{index}"] + ["v"] * (n - 1)).encode()
    if kind == "bad_utf8":
        return f"id{index},1.5,".encode() + draw(st.sampled_from([b"\xff\xfe", b"\xe9t\xe9"])) \
            + b",a"
    if kind == "ragged_bad_utf8":
        return f"A{index},".encode() + b"\xff\xfe,1"
    if kind == "nul":
        return f"id{index},2.5,a\x00b,b".encode()
    if kind == "over_long":
        return f"id{index},3.5,".encode() + b"w" * (MAX_ROW_BYTES + 10) + b",c"
    if kind == "unclosed_quote":
        fields = draw(st.sampled_from([1, 2, 3]))
        head = [f"id{index}", "0.5", "t"][:fields]
        return (",".join(head) + ',"' + draw(_plain)).encode()
    return f"id{index},abc,t,a".encode()  # not a number in a numeric column


@st.composite
def damaged_file(draw, max_damaged: int = 12, kinds=DAMAGE):
    """(file bytes, [(line, row bytes, is_valid)], CRLF line ends?): 20 to 30 valid rows
    (enough for the column types to be inferred) and up to ``max_damaged`` damaged ones,
    in a random order."""
    valid = [True] * draw(st.integers(20, 30)) + [False] * draw(st.integers(0, max_damaged))
    valid = draw(st.permutations(valid))
    rows, line, opened = [], 2, False
    for index, good in enumerate(valid):
        # An unclosed quote reads on up to the next quote; when that quote opens a later
        # valid value spanning lines, the file reads both ways (the same deliberate
        # ambiguity as above), so valid values after one stay on their line.
        row = draw(good_row(index, one_line=opened) if good else damaged_row(index, kinds))
        opened = opened or (not good and row.count(b'"') % 2 == 1)
        rows.append((line, row, good))
        line += row.count(b"\n") + 1
    end = draw(st.sampled_from([b"\n", b""]))
    crlf = draw(st.booleans())
    sep = b"\r\n" if crlf else b"\n"
    if crlf:  # a CRLF file: line ends are CRLF, values keep their own newlines
        end = b"\r\n" if end else b""
    data = HEADER + sep + sep.join(row for _, row, _ in rows) + end
    return data, rows, crlf


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damaged_file(), st.integers(1, 64))
def test_reader_accounts_for_every_row(case, block_bytes):
    """The reader alone, in tiny blocks (rows cross block ends): every row is either
    returned by Arrow or rejected with its original bytes and line; valid rows all kept."""
    data, rows, crlf = case
    original = csv_reader.CSV_BLOCK_BYTES
    csv_reader.CSV_BLOCK_BYTES = block_bytes
    kept, rejected = [], []
    try:
        limits = csv_reader.RowLimits(max_quoted_lines=100, max_row_bytes=MAX_ROW_BYTES)
        for cut in csv_reader.cut_blocks(pa.BufferReader(data), COLUMNS, limits):
            parsed = csv_reader.parse_cut(cut(), ["id", "x", "text", "y"], None,
                                          lambda *r: rejected.append(r))
            if parsed is not None:
                batch, origin = parsed
                kept += list(zip(origin.lines.tolist(),
                                 origin.raw(range(batch.num_rows)), strict=True))
    finally:
        csv_reader.CSV_BLOCK_BYTES = original
    good = {(line, row) for line, row, ok in rows if ok}
    assert good <= set(kept), "a valid row was rejected or lost"
    assert len(kept) + len(rejected) == len(rows)
    by_line = {line: row for line, row, _ in rows}
    for line, raw, _reason in rejected:
        assert raw == by_line[line]


# without "not a number": a few of them among 20 rows make the column text, rightly
# (leaving one kind out makes the strategy discard more drawn files: under load Hypothesis
# may count that as too much filtering, which says nothing of the property)
@settings(max_examples=max(EXAMPLES // 5, 1), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(damaged_file(kinds=tuple(k for k in DAMAGE if k != "not_a_number")))
def test_prepare_keeps_valid_rows_and_rejects_the_rest_verbatim(case):
    data, rows, _ = case
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "data.csv"
        path.write_bytes(data)
        try:  # wide train and test shares: an empty split (refused whole) stays rare
            result = prepare(str(path), Path(tmp) / "out", "y", SplitRatios(0.4, 0.2, 0.4),
                             feature_columns="x,text", max_rejected_fraction=1.0,
                             max_row_bytes=MAX_ROW_BYTES, workers=1)
        except EmptySplit as refused:  # every valid row counted, nothing published
            assert sum(refused.split_rows.values()) == sum(ok for _, _, ok in rows)
            assert not (Path(tmp) / "out").exists()
            return
        records = [json.loads(line) for line in
                   (Path(tmp) / "out" / "rejected.jsonl").read_text().splitlines()]
    assert result.rows_read == len(rows)
    assert result.rows_read == sum(result.split_rows.values()) + result.rejected_rows
    assert sum(result.split_rows.values()) == sum(ok for _, _, ok in rows)
    by_line = {line: row for line, row, _ in rows}
    assert sorted(r["line"] for r in records) == [line for line, _, ok in rows if not ok]
    for record in records:
        assert original_bytes(record) == by_line[record["line"]]
