"""The CSV reader: rows cut from the raw bytes, broken rows set aside, the rest parsed by Arrow.

Reading a CSV file happens in two passes over each block of about 2 MiB:

1. **Cutting rows** (:func:`split_rows`, numpy over the block's bytes). Every physical
   line ends a row unless a quoted value holds the line end. A quote opens a quoted value
   only at the start of a field (as Arrow reads it; a quote inside an unquoted value is a
   literal character), ``""`` inside a quoted value is one quote character. Lines without
   any quote are the fast path; lines whose quotes pair up on the line are checked in
   vectorised passes; only lines that leave a quote open are walked one quote at a time.

   **Recovery from broken quoting**: a quoted value that does not close within
   :attr:`RowLimits.max_quoted_lines` lines and :attr:`RowLimits.max_row_bytes` bytes (and
   always at the end of the file), or closes into a row with the wrong number of columns,
   rejects only the line where the quote opened; reading resumes at the next line. So one
   stray quote costs one row, never the rest of the file.

   A quoted value spanning lines is accepted only when it reads strictly (RFC 4180: its
   closing quote followed by a comma or the line end, no quote inside an unquoted value)
   and the lines after its opening line do not read as a row of their own; otherwise the
   opening line is taken for a stray quote. Input that reads both ways stays ambiguous:
   a value ending with a line end (``"a\n"``), followed by a row holding a quoted
   ``",,,"``, can be read as one stray quote and other rows.

   Rows with the wrong number of columns, NUL bytes, a carriage return outside quotes or
   more than ``max_row_bytes`` bytes are rejected here too, with their original bytes and
   line number. Blank lines are not rows (skipped, as Arrow skips them).

2. **Parsing values** (Arrow's CSV reader over the rows that passed): numbers as float64,
   text dictionary-encoded. Every row Arrow returns has a known origin (:class:`RowOrigin`):
   its line number in the file and its original bytes, which is what the rejects keep.

Longer than most modules on purpose: one streaming CSV reader whose recovery rules
(quotes, ragged rows, encodings) must be read together to be trusted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

NULL_VALUES = ["", "NA", "N/A", "NaN", "nan", "null", "NULL", "None", "?"]
CSV_BLOCK_BYTES = 2 << 20
UTF8_BOM = b"\xef\xbb\xbf"

_NL, _CR, _QUOTE, _COMMA, _NUL = 10, 13, 34, 44, 0


@dataclass(frozen=True)
class RowLimits:
    """Bounds on one CSV row.

    Attributes:
        max_quoted_lines: Lines a quoted value may span before its opening line is
            rejected as an unclosed quote.
        max_row_bytes: Bytes a row may take (a quoted value spanning lines included);
            longer rows are rejected.
    """

    max_quoted_lines: int = 100
    max_row_bytes: int = 1 << 20

    def __post_init__(self) -> None:
        if self.max_quoted_lines < 1:
            raise ValueError(f"max_quoted_lines must be >= 1; got {self.max_quoted_lines}")
        if self.max_row_bytes < 1:
            raise ValueError(f"max_row_bytes must be >= 1; got {self.max_row_bytes}")


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
            starts, ends = _line_bounds(np.frombuffer(cut.data, dtype=np.uint8), True)
            content = ends - ((ends > starts) & _ends_with_cr(cut.data, ends))
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


def _ends_with_cr(data: bytes, ends: np.ndarray) -> np.ndarray:
    arr = np.frombuffer(data, dtype=np.uint8)
    return arr[np.maximum(ends - 1, 0)] == _CR if arr.size else np.zeros(ends.size, bool)


@dataclass
class Cut:
    """One block cut into rows: good rows (offsets into ``data``) and rejected ones."""

    data: bytes
    first_line: int  # line number of data[0]
    starts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    ends: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    lines: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    rejects: list[tuple[int, bytes, str]] = field(default_factory=list)  # line, bytes, reason
    consumed: int = 0  # bytes of data consumed; the rest is an open row to read on
    consumed_lines: int = 0
    clean: bool = True  # every line of data[:consumed] is a good row or blank
    checked: bool = True  # False: a block without quotes, its rows not yet counted
    columns: int = 0
    limits: RowLimits | None = None

    def arrow_input(self) -> pa.Buffer:
        """The good rows, one per line, as Arrow reads them."""
        if self.clean:
            return pa.py_buffer(self.data)[:self.consumed]
        if self.starts.size == 0:
            return pa.py_buffer(b"")
        # each row with its own line end; rows that follow each other copied in one piece
        arr = np.frombuffer(self.data, dtype=np.uint8)
        ends = self.ends.copy()
        for byte in (_CR, _NL):
            ends += (ends < arr.size) & (arr[np.minimum(ends, arr.size - 1)] == byte)
        breaks = np.flatnonzero(ends[:-1] != self.starts[1:])
        run_starts = np.concatenate([self.starts[:1], self.starts[breaks + 1]]).tolist()
        run_ends = np.concatenate([ends[breaks], ends[-1:]]).tolist()
        view = memoryview(self.data)
        parts = []
        for start, end in zip(run_starts, run_ends, strict=True):
            parts.append(view[start:end])
            if self.data[end - 1:end] != b"\n":
                parts.append(b"\n")
        return pa.py_buffer(b"".join(parts))


def _line_bounds(arr: np.ndarray, final: bool) -> tuple[np.ndarray, np.ndarray]:
    """Starts and ends (excluding the line end) of the complete lines of a block."""
    newlines = np.flatnonzero(arr == _NL)
    starts = np.empty(newlines.size + 1, dtype=np.int64)
    starts[0] = 0
    starts[1:] = newlines + 1
    if final and (arr.size == 0 or arr[-1] != _NL) and arr.size > 0:
        ends = np.append(newlines, arr.size).astype(np.int64)
    else:
        starts = starts[:-1]
        ends = newlines.astype(np.int64)
    return starts, ends


def _per_line_counts(positions: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    return np.searchsorted(positions, ends) - np.searchsorted(positions, starts)


def _lines_with(positions: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Index of the line holding each position."""
    return np.searchsorted(starts, positions, side="right") - 1


def _quotes_pair_up(data: bytes) -> bool:
    """Whether every other quote of a block of whole lines opens a quoted value at the
    start of a field and the next one closes it on the same line (``""`` inside a value
    reads as a close and a reopen): then every line end of the block ends a row, as in a
    block without quotes."""
    arr = np.frombuffer(data, dtype=np.uint8)
    quotes = np.flatnonzero(arr == _QUOTE)
    if quotes.size % 2:
        return False
    opens = quotes[0::2]
    prev = arr[opens - 1] if opens[0] > 0 else np.append(_NL, arr[opens[1:] - 1])
    if not np.all((prev == _COMMA) | (prev == _NL) | (prev == _QUOTE)):
        return False
    # a line end inside a pair has an odd number of quotes before it
    before = np.searchsorted(quotes, np.flatnonzero(arr == _NL))
    return not np.any(before & 1)


def quick_cut(data: bytes, first_line: int, columns: int, limits: RowLimits,
              final: bool) -> Cut:
    """A block whose line ends all end rows (see :func:`_quotes_pair_up`): when it holds
    no NUL byte, no lone carriage return and no over-long line, Arrow reads it as is (its
    column counts are checked as it parses); otherwise it is cut by :func:`split_rows`."""
    if b"\x00" in data or _has_long_line(data, limits.max_row_bytes):
        return split_rows(data, first_line, columns, limits, True)
    if b"\r" in data and data.count(b"\r") != data.count(b"\r\n"):
        return split_rows(data, first_line, columns, limits, True)
    return Cut(data, first_line, consumed=len(data), checked=False, columns=columns,
               limits=limits)


def _has_long_line(data: bytes, limit: int) -> bool:
    pos, size = 0, len(data)
    while size - pos > limit:
        last = data.rfind(b"\n", pos, pos + limit + 1)
        if last < 0:
            return True
        pos = last + 1
    return False


def split_rows(data: bytes, first_line: int, columns: int, limits: RowLimits,
               final: bool) -> Cut:
    """Cut a block of whole lines into rows (see the module docstring).

    Args:
        data: The block's bytes, starting at a line start.
        first_line: The line number of ``data``'s first line.
        columns: The header's column count.
        limits: Bounds on a row.
        final: Whether the block ends the file (an open quote is then unclosed).

    Returns:
        The good rows and rejected lines of ``data[:cut.consumed]``; the rest of ``data``
        (a quoted value still open at the end of a non-final block) is for the next block.
    """
    arr = np.frombuffer(data, dtype=np.uint8)
    starts, ends = _line_bounds(arr, final)
    cut = Cut(data, first_line)
    n = starts.size
    if n == 0:
        return cut
    content_ends = ends.copy()  # without a trailing CR (of a CRLF line end)
    if b"\r" in data:
        has_cr = (ends > starts) & (arr[np.maximum(ends - 1, 0)] == _CR)
        content_ends[has_cr] -= 1
    blank = content_ends == starts
    quotes = np.flatnonzero(arr == _QUOTE) if b'"' in data else np.zeros(0, np.int64)
    commas = np.flatnonzero(arr == _COMMA)

    bad = np.zeros(n, dtype=bool)  # lines needing the slow path
    if quotes.size:
        qline = _lines_with(quotes, starts)
        first_q = np.searchsorted(quotes, starts)
        local = np.arange(quotes.size) - first_q[qline]
        prev = arr[np.maximum(quotes - 1, 0)]
        at_start = (quotes == starts[qline]) | (prev == _COMMA)
        escaped = (prev == _QUOTE) & (quotes > starts[qline])
        odd_count = np.bincount(qline, minlength=n) % 2 == 1
        anomaly = (local % 2 == 0) & ~at_start & ~escaped
        bad |= odd_count
        bad[qline[anomaly]] = True
        # commas inside quotes (on paired-up lines): an odd number of quotes before them
        cline = _lines_with(commas, starts)
        inside = (np.searchsorted(quotes, commas) - first_q[cline]) % 2 == 1
        outside_commas = commas[~inside]
    else:
        outside_commas = commas
    fields = _per_line_counts(outside_commas, starts, content_ends) + 1

    reasons: dict[int, str] = {}
    ragged = (fields != columns) & ~blank & ~bad
    for i in np.flatnonzero(ragged).tolist():
        reasons[i] = f"expected {columns} columns, got {int(fields[i])}"
    if b"\x00" in data:
        for i in np.unique(_lines_with(np.flatnonzero(arr == _NUL), starts)).tolist():
            if not bad[i]:
                reasons[i] = "NUL byte in the row"
    if b"\r" in data:
        crs = np.flatnonzero(arr == _CR)
        crline = _lines_with(crs, starts)
        lone = crs != content_ends[crline]
        if quotes.size:
            lone &= (np.searchsorted(quotes, crs) - first_q[crline]) % 2 == 0
        for i in np.unique(crline[lone]).tolist():
            if not bad[i]:
                reasons[i] = "carriage return outside quotes inside the row"
    long_lines = (ends - starts > limits.max_row_bytes) & ~bad
    for i in np.flatnonzero(long_lines).tolist():
        reasons[i] = f"row longer than {limits.max_row_bytes} bytes"

    if not bad.any():
        cut.consumed = int(ends[-1] + 1) if ends[-1] < arr.size else int(arr.size)
        cut.consumed_lines = n
        keep = ~blank
        if reasons:
            keep[list(reasons)] = False
            cut.clean = False
            for i in sorted(reasons):
                cut.rejects.append((first_line + i, data[starts[i]:content_ends[i]],
                                    reasons[i]))
        cut.starts, cut.ends = starts[keep], content_ends[keep]
        cut.lines = first_line + np.flatnonzero(keep)
        return cut
    _walk(cut, arr, starts, ends, content_ends, blank, bad, reasons, quotes, fields, columns,
          limits, final)
    return cut


def _walk(cut: Cut, arr, starts, ends, content_ends, blank, bad, reasons, quotes, line_fields,
          columns, limits, final) -> None:
    """Rows of a block where some lines leave a quote open: line by line, the open ones
    followed quote by quote."""
    data = cut.data
    n = starts.size
    keep_starts: list[np.ndarray] = []
    keep_ends: list[np.ndarray] = []
    keep_lines: list[np.ndarray] = []
    rejects: list[tuple[int, tuple[int, bytes, str]]] = []
    has_reason = np.zeros(n, dtype=bool)
    has_reason[list(reasons)] = True
    first_line = cut.first_line
    cut.clean = False
    i = 0
    stop_at = n
    bad_lines = np.flatnonzero(bad).tolist()
    b = 0
    while i < n:
        # the run of plain lines before the next line that needs the walk
        while b < len(bad_lines) and bad_lines[b] < i:
            b += 1
        upto = bad_lines[b] if b < len(bad_lines) else n
        if upto > i:  # vectorised: the run's good lines, then its rejected ones
            run = np.arange(i, upto)
            good = run[~blank[i:upto] & ~has_reason[i:upto]]
            keep_starts.append(starts[good])
            keep_ends.append(content_ends[good])
            keep_lines.append(first_line + good)
            for j in run[has_reason[i:upto]].tolist():
                rejects.append((j, (first_line + j, data[starts[j]:content_ends[j]],
                                    reasons[j])))
        i = upto
        if i >= n:
            break
        end_line, fields, problem, strict = _follow_quotes(arr, starts, ends, content_ends,
                                                           quotes, i, limits)
        if end_line is None and not final and problem is None:
            stop_at = i  # still open at the end of the block: read on
            break
        start = int(starts[i])
        if problem is None and end_line is None:
            problem = "not closed by the end of the file"
        if problem is not None and problem.startswith("not closed"):
            problem = f"unclosed quote: {problem}"
        if problem is None and fields != columns and end_line == i:
            problem = f"expected {columns} columns, got {fields}"
        if problem is None and fields != columns:
            problem = (f"a quoted value spanning lines closes into {fields} columns, "
                       f"expected {columns}")
        if problem is None and end_line > i:
            # a value spanning lines: accepted when it reads strictly (RFC 4180) and the
            # lines after its opening line do not read as rows of their own
            inner = slice(i + 1, end_line + 1)
            if not strict or (~bad[inner] & ~blank[inner]
                              & (line_fields[inner] == columns)).any():
                problem = "unclosed quote"
            else:
                alt_end, alt_fields, alt_problem, alt_strict = _follow_quotes(
                    arr, starts, ends, content_ends, quotes, i + 1, limits)
                if alt_end is None and alt_problem is None and not final:
                    stop_at = i  # decided with the next block
                    break
                if alt_end is not None and alt_strict and alt_fields == columns:
                    problem = "unclosed quote"
            if problem is not None:
                problem += ": the lines after it read as rows of their own"
        if problem is None:
            text = data[start:int(content_ends[end_line])]
            if b"\x00" in text:
                problem = "NUL byte in the row"
        if problem is not None:  # reject the opening line only; resume at the next line
            rejects.append((i, (first_line + i, data[start:int(content_ends[i])], problem)))
            i += 1
            continue
        keep_starts.append(np.array([start]))
        keep_ends.append(np.array([int(content_ends[end_line])]))
        keep_lines.append(np.array([first_line + i]))
        i = end_line + 1
    else:
        stop_at = n
    if stop_at >= n:
        cut.consumed = int(ends[-1] + 1) if ends[-1] < arr.size else int(arr.size)
        cut.consumed_lines = n
    else:
        cut.consumed = int(starts[stop_at])
        cut.consumed_lines = stop_at
    def joined(parts: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)

    cut.starts, cut.ends, cut.lines = joined(keep_starts), joined(keep_ends), joined(keep_lines)
    cut.rejects.extend(item for _, item in sorted(rejects, key=lambda r: r[0]))


def _follow_quotes(arr: np.ndarray, starts, ends, content_ends, quotes: np.ndarray, line: int,
                   limits: RowLimits) -> tuple[int | None, int, str | None, bool]:
    """Follow a row starting at ``line`` quote by quote (Arrow's rules).

    Returns ``(last line, column count, None, strict)`` when the row ends within the
    limits, ``(None, 0, reason, False)`` when it does not (or holds a carriage return
    outside quotes), ``(None, 0, None, False)`` when the block ends first. ``strict``: no
    quote inside an unquoted value and every closing quote followed by a comma or the
    line end (RFC 4180).
    """
    start = int(starts[line])
    k = int(np.searchsorted(quotes, start))
    inside = False
    strict = True
    fields = 1
    lone_cr = False
    pos = start  # unquoted bytes counted up to here
    current = line

    def count(lo: int, hi: int) -> None:
        nonlocal fields, lone_cr
        segment = arr[lo:hi]
        fields += int(np.count_nonzero(segment == _COMMA))
        lone_cr = lone_cr or bool(np.count_nonzero(segment == _CR))

    while True:
        end = int(ends[current])
        while k < quotes.size and quotes[k] < end:
            q = int(quotes[k])
            if inside:
                if k + 1 < quotes.size and quotes[k + 1] == q + 1:
                    k += 2  # "" inside a quoted value
                    continue
                inside = False
                pos = q + 1
                if q + 1 < arr.size and arr[q + 1] not in (_COMMA, _CR, _NL):
                    strict = False
            elif q == int(starts[current]) or arr[q - 1] == _COMMA:
                count(pos, q)
                inside = True
            else:
                strict = False  # a literal quote inside an unquoted value
            k += 1
        if not inside:
            count(pos, int(content_ends[current]))
            if lone_cr:
                return None, 0, "carriage return outside quotes inside the row", False
            if end - start > limits.max_row_bytes:
                return None, 0, f"row longer than {limits.max_row_bytes} bytes", False
            return current, fields, None, strict
        if current - line + 1 >= limits.max_quoted_lines or end - start > limits.max_row_bytes:
            return None, 0, (f"not closed within {limits.max_quoted_lines} lines / "
                             f"{limits.max_row_bytes} bytes"), False
        current += 1
        if current >= starts.size:
            return None, 0, None, False


# --- blocks of a file ----------------------------------------------------------------------

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
        if b'"' not in block or _quotes_pair_up(block):
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
