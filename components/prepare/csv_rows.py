"""Cutting a CSV block into rows (the CSV reader's first pass, numpy over the block's
bytes), broken rows set aside with their line number, bytes and reason.

Every physical line ends a row unless a quoted value holds the line end. A quote opens a
quoted value only at the start of a field (as Arrow reads it; a quote inside an unquoted
value is a literal character), ``""`` inside a quoted value is one quote character. Lines
without any quote are the fast path; lines whose quotes pair up on the line are checked in
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

The second pass, Arrow's parse of the rows that passed, is in
:mod:`gkeflow.components.prepare.csv_reader`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

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


def ends_with_cr(data: bytes, ends: np.ndarray) -> np.ndarray:
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


def line_bounds(arr: np.ndarray, final: bool) -> tuple[np.ndarray, np.ndarray]:
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


def quotes_pair_up(data: bytes) -> bool:
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
    """A block whose line ends all end rows (see :func:`quotes_pair_up`): when it holds
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
    starts, ends = line_bounds(arr, final)
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
