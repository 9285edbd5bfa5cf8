"""The CSV reader: rows cut from the raw bytes, broken rows set aside, the rest parsed by Arrow.

Reading a CSV file happens in two passes over each block of about 2 MiB:

1. **Cutting rows** (:func:`~gkeflow.components.prepare.csv_rows.split_rows`, numpy over
   the block's bytes): every line end ends a row unless a quoted value holds it; broken
   quoting costs the line where the quote opened, never the rest of the file; rows with the
   wrong number of columns, NUL bytes, a lone carriage return or too many bytes are
   rejected with their original bytes and line number
   (:mod:`gkeflow.components.prepare.csv_rows` has the rules).

2. **Parsing values** (Arrow's CSV reader over the rows that passed): numbers as float64,
   text dictionary-encoded. Every row Arrow returns has a known origin (:class:`RowOrigin`):
   its line number in the file and its original bytes, which is what the rejects keep.

This module reads a file in blocks and runs both passes over each.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from gkeflow.components.prepare.csv_rows import (
    Cut,
    RowLimits,
    ends_with_cr,
    line_bounds,
    quick_cut,
    quotes_pair_up,
    split_rows,
)

NULL_VALUES = ["", "NA", "N/A", "NaN", "nan", "null", "NULL", "None", "?"]
CSV_BLOCK_BYTES = 2 << 20
UTF8_BOM = b"\xef\xbb\xbf"


class RowOrigin:
    """Where each row of a parsed batch came from: its first line in the source file
    (1 = the header) and its original bytes (``data[starts[i]:ends[i]]``).

    Built lazily for CSV blocks that parsed cleanly (the bounds are only needed when a
    row is rejected later), eagerly elsewhere.
    """

    def __init__(self, lines=None, data: bytes | None = None, starts=None, ends=None,
                 cut: Cut | None = None):
        self._lines, self.data, self._starts, self._ends = lines, data, starts, ends
        self._cut = cut
        if cut is not None:
            self.data = cut.data

    def _resolve(self) -> None:
        if self._cut is not None and self._lines is None:
            cut = self._cut
            starts, ends = line_bounds(np.frombuffer(cut.data, dtype=np.uint8), True)
            content = ends - ((ends > starts) & ends_with_cr(cut.data, ends))
            keep = content > starts
            self._lines = cut.first_line + np.flatnonzero(keep)
            self._starts, self._ends = starts[keep], content[keep]

    @property
    def lines(self) -> np.ndarray:
        self._resolve()
        return self._lines

    def raw(self, rows: Sequence[int]) -> list[bytes] | None:
        """The original bytes of these rows (None when the source has no text form)."""
        if self.data is None:
            return None
        self._resolve()
        return [bytes(self.data[self._starts[i]:self._ends[i]]) for i in rows]


#: (line number, original bytes, reason) of a row set aside while reading.
RejectRow = Callable[[int, bytes, str], None]
#: A parsed block: the record batch and where its rows came from.
TypedBatch = tuple[pa.RecordBatch, RowOrigin]


def cut_blocks(stream, columns: int, limits: RowLimits) -> Iterator[Callable[[], Cut]]:
    """A CSV stream's data rows (after the header line) as blocks of about
    ``CSV_BLOCK_BYTES``, each a function returning its :class:`Cut`.

    Blocks without a quote end at their last line end and are cut where the function is
    called (in parallel lanes); a block holding quotes is cut here, since where it ends
    depends on its quotes (an open quoted value is carried into the next block).
    """
    carry = b""
    header_pending = True
    line = 2  # the header is line 1
    while True:
        chunk = stream.read(CSV_BLOCK_BYTES)
        final = not chunk
        data = carry + chunk if carry else chunk
        if header_pending:
            end = data.find(b"\n")
            if end < 0:
                if final:
                    return
                carry = data
                continue
            data = data[end + 1:]
            header_pending = False
        if final:
            block, rest = data, b""
            if not block:
                return
        else:
            end = data.rfind(b"\n") + 1
            if end == 0:
                carry = data
                continue
            block, rest = data[:end], data[end:]
        if b'"' not in block or quotes_pair_up(block):
            lines = block.count(b"\n") + (1 if final and not block.endswith(b"\n") else 0)
            yield lambda block=block, line=line, final=final: quick_cut(
                block, line, columns, limits, final)
            line += lines
            carry = rest
        else:
            cut = split_rows(block, line, columns, limits, final)
            yield lambda cut=cut: cut
            line += cut.consumed_lines
            carry = block[cut.consumed:] + rest if cut.consumed < len(block) else rest
        if final:
            if carry:
                continue
            return


def parse_cut(cut: Cut, names: list[str], float_columns: Sequence[str] | None,
              reject: RejectRow) -> TypedBatch | None:
    """Arrow's parse of a cut block's good rows: ``float_columns`` as float64 when they all
    hold numbers (else every column as text, the bad values found later row by row), the
    other columns dictionary-encoded text (``float_columns=None``: every column as plain
    text); None when the block has no rows."""
    if not cut.checked:
        buffer = pa.py_buffer(cut.data)
        try:
            batch = _arrow_parse(buffer, names, _types(names, float_columns))
        except pa.ArrowInvalid:  # a value that is not a number, or a ragged row
            try:
                batch = _arrow_parse(buffer, names, dict.fromkeys(names, pa.string()))
            except pa.ArrowInvalid:
                batch = None
        if batch is not None:  # one row per non-blank line (Arrow skips blank lines too)
            return batch, RowOrigin(cut=cut)
        cut = split_rows(cut.data, cut.first_line, cut.columns, cut.limits, True)
    for line, raw, reason in cut.rejects:
        reject(line, raw, reason)
    if cut.starts.size == 0:
        return None
    buffer = cut.arrow_input()
    origin = RowOrigin(cut.lines, cut.data, cut.starts, cut.ends)
    try:
        batch = _arrow_parse(buffer, names, _types(names, float_columns))
    except pa.ArrowInvalid:  # a value that is not a number: read the block as text
        batch = None
    if batch is None:
        try:
            batch = _arrow_parse(buffer, names, dict.fromkeys(names, pa.string()))
        except pa.ArrowInvalid:
            batch = None
    if batch is None or batch.num_rows != cut.starts.size:
        return _parse_row_by_row(cut, names, reject)
    return batch, origin


def _types(names: list[str], float_columns: Sequence[str] | None) -> dict:
    if float_columns is None:
        return dict.fromkeys(names, pa.string())
    typed = dict.fromkeys(names, pa.dictionary(pa.int32(), pa.string()))
    typed.update(dict.fromkeys(float_columns, pa.float64()))
    return typed


def _arrow_parse(buffer: pa.Buffer, names: list[str], types: dict) -> pa.RecordBatch | None:
    """Arrow's parse of whole rows; ArrowInvalid on a value of the wrong type or a row
    with the wrong number of columns."""
    table = pacsv.read_csv(
        pa.BufferReader(buffer),
        read_options=pacsv.ReadOptions(column_names=names, use_threads=False,
                                       block_size=max(buffer.size + 1, 1 << 20)),
        parse_options=pacsv.ParseOptions(newlines_in_values=True),
        convert_options=pacsv.ConvertOptions(
            column_types=types, null_values=NULL_VALUES, strings_can_be_null=True,
            check_utf8=False),  # checked per column, bad rows quarantined
    )
    batches = table.combine_chunks().to_batches()
    return batches[0] if batches else None


def _parse_row_by_row(cut: Cut, names: list[str], reject: RejectRow) -> TypedBatch | None:
    """The safety net when Arrow and the cut disagree on a block: each row on its own,
    as text; a row Arrow does not read as exactly one row is rejected."""
    types = dict.fromkeys(names, pa.string())
    batches, keep = [], []
    for k, (start, end) in enumerate(zip(cut.starts.tolist(), cut.ends.tolist(),
                                         strict=True)):
        raw = cut.data[start:end]
        try:
            batch = _arrow_parse(pa.py_buffer(raw + b"\n"), names, types)
        except pa.ArrowInvalid:
            batch = None
        if batch is None or batch.num_rows != 1:
            reject(int(cut.lines[k]), raw, "row not readable as CSV")
            continue
        batches.append(batch)
        keep.append(k)
    if not batches:
        return None
    keep_index = np.array(keep, dtype=np.int64)
    table = pa.Table.from_batches(batches).combine_chunks()
    return table.to_batches()[0], RowOrigin(cut.lines[keep_index], cut.data,
                                            cut.starts[keep_index], cut.ends[keep_index])
