"""Column values as Arrow hands them over: text checks (UTF-8), numbers, dictionary codes."""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gkeflow.components.prepare.sources import NULL_VALUES


def as_strings(array: pa.Array) -> pa.Array:
    """The values as text; a floating-point NaN is missing (null), as in a CSV file."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_dictionary(array.type):
        array = array.cast(array.type.value_type)
    if pa.types.is_floating(array.type):
        array = pc.if_else(pc.is_nan(array), pa.scalar(None, array.type), array)
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        return array
    if pa.types.is_binary(array.type):
        return array.view(pa.string())
    return pc.cast(array, pa.string())


#: A text column is numeric when at least this fraction of its sampled values are
#: numbers; the rest are then rejected row by row as "not a number".
NUMERIC_MIN_FRACTION = 0.95


def parses_as_numbers(array: pa.Array, min_fraction: float = 1.0) -> bool:
    """Whether the (non-null) values are numbers; ``min_fraction`` of them at least."""
    if pa.types.is_integer(array.type) or pa.types.is_floating(array.type):
        return True
    if pa.types.is_boolean(array.type) or pa.types.is_temporal(array.type):
        return False
    _, bad = to_float(array)  # what a number is, as the rows are read ("$1,234.50")
    return not len(bad) or 1.0 - bad.mean() >= min_fraction


def _invalid_utf8(array: pa.Array) -> np.ndarray | None:
    """Row mask of values that are not valid UTF-8, or None when all are valid."""
    if not (pa.types.is_string(array.type) or pa.types.is_large_string(array.type)):
        return None
    try:
        array.validate(full=True)
        return None
    except pa.ArrowInvalid:
        raw = array.view(pa.binary()).to_pylist()
        bad = np.zeros(len(raw), dtype=bool)
        for i, value in enumerate(raw):
            if value is not None:
                try:
                    value.decode("utf-8")
                except UnicodeDecodeError:
                    bad[i] = True
        return bad


def null_invalid_utf8(array: pa.Array) -> tuple[pa.Array, np.ndarray | None]:
    """The array with invalid UTF-8 values nulled, and their mask (None when all valid)."""
    bad = _invalid_utf8(array)
    if bad is None:
        return array, None
    cleaned = pc.if_else(pa.array(bad), pa.scalar(None, pa.binary()), array.view(pa.binary()))
    return cleaned.view(array.type), bad


def label_values(array: pa.Array, lower: bool = False) -> set[str]:
    """The distinct classes in a label column's values, as preparation counts them: text
    without surrounding whitespace (lower-cased when ``lower``); missing, empty and
    invalid UTF-8 values left out."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if is_text_dictionary(array.type):
        array = array.cast(array.type.value_type)
    if pa.types.is_binary(array.type):
        array = array.view(pa.string())
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        array, _ = null_invalid_utf8(array)
    values = pc.unique(as_strings(array).drop_null()).to_pylist()
    cleaned = {v.strip().lower() if lower else v.strip() for v in values}
    cleaned.discard("")
    return cleaned


def is_text_dictionary(type_: pa.DataType) -> bool:
    return pa.types.is_dictionary(type_) and (
        pa.types.is_string(type_.value_type) or pa.types.is_large_string(type_.value_type))


def dictionary_codes(array: pa.DictionaryArray) -> tuple[np.ndarray, list, np.ndarray | None]:
    """Per-row indices into a dictionary of text values (``len(dictionary)`` = missing),
    the values, and the mask of rows whose value is not valid UTF-8 (None when all are).

    Works on the array's own dictionary: each distinct value is checked and decoded once.
    Empty and invalid values count as missing, as :class:`Batch` treats plain text.
    """
    raw = array.dictionary.view(pa.binary()).to_pylist()
    values: list[str] = []
    remap = np.empty(len(raw) + 1, dtype=np.int64)
    invalid = np.zeros(len(raw) + 1, dtype=bool)
    for i, value in enumerate(raw):
        try:
            text = value.decode("utf-8") if value else None
        except UnicodeDecodeError:
            text = None
            invalid[i] = True
        if text is None:
            remap[i] = -1
        else:
            remap[i] = len(values)
            values.append(text)
    remap[remap < 0] = len(values)
    remap[-1] = len(values)
    indices = array.indices.fill_null(len(raw)).to_numpy(zero_copy_only=False)
    codes = remap[indices]
    return codes, values, (invalid[indices] if invalid.any() else None)


def fast_float(array: pa.Array) -> np.ndarray | None:
    """float64 values when every value converts (NaN = missing), else None."""
    if pa.types.is_float64(array.type):
        return array.to_numpy(zero_copy_only=False)
    try:
        if pa.types.is_integer(array.type) or pa.types.is_floating(array.type):
            values = pc.cast(array, pa.float64())
        else:
            values = pc.cast(as_strings(array), pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return values.to_numpy(zero_copy_only=False)


#: A number as spreadsheets export it, once a currency sign is taken off: thousands
#: separators ("3,071.89", "-1,250,000": commas between groups of exactly three digits, a
#: point for decimals) or plain digits; ASCII digits only.
GROUPED_NUMBER = re.compile(r"(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]*)?|\.[0-9]+")
#: Currency signs a number may carry in front or behind ("$1,234.50", "-$12", "12 €").
CURRENCY_SIGNS = "$€£¥"
#: Signs a number may carry behind only: a percentage is the number as written ("12.5%"
#: is 12.5, in training and in scoring alike).
TRAILING_SIGNS = CURRENCY_SIGNS + "%"


def written_number(text: str) -> float | None:
    """The value of a number written with thousands separators and/or one currency or
    percent sign (:data:`GROUPED_NUMBER`, :data:`CURRENCY_SIGNS`, :data:`TRAILING_SIGNS`);
    None for any other text (a decimal comma, "1,5", is no number: it cannot be told from
    a thousands separator)."""
    rest, sign = text.strip(), ""
    if rest[:1] in ("+", "-"):
        sign, rest = rest[0], rest[1:].lstrip()
    if rest[:1] and rest[:1] in CURRENCY_SIGNS:
        rest = rest[1:].lstrip()
    elif rest[-1:] and rest[-1:] in TRAILING_SIGNS:
        rest = rest[:-1].rstrip()
    if not sign and rest[:1] in ("+", "-"):
        sign, rest = rest[0], rest[1:]
    if not GROUPED_NUMBER.fullmatch(rest):
        return None
    return float(sign + rest.replace(",", ""))


def to_float(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """float64 values (NaN = missing) and a mask of values that are not numbers; a number
    with thousands separators or a currency sign (:func:`written_number`) is a number."""
    n = len(array)
    if pa.types.is_integer(array.type) or pa.types.is_floating(array.type):
        return pc.cast(array, pa.float64()).to_numpy(zero_copy_only=False).astype(
            np.float64, copy=False), np.zeros(n, dtype=bool)
    strings = as_strings(array)
    try:
        values = pc.cast(strings, pa.float64())
        return values.to_numpy(zero_copy_only=False), np.zeros(n, dtype=bool)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    out = np.full(n, np.nan)
    bad = np.zeros(n, dtype=bool)
    for i, text in enumerate(strings.to_pylist()):
        if text is None or text.strip() in NULL_VALUES:
            continue
        if text.isascii() and "_" not in text:  # float() reads "1_000", non-Latin digits
            try:
                out[i] = float(text)
                continue
            except ValueError:
                pass
        written = written_number(text)
        if written is None:
            bad[i] = True
        else:
            out[i] = written
    return out, bad
