"""The deterministic split: each row lands in train, eval or test by a stable 64-bit hash
of its key column (or of the whole row), the same on every run and machine."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

SPLITS = ("train", "eval", "test")


@dataclass(frozen=True)
class SplitRatios:
    """Fractions of rows for the train, eval and test splits; each > 0, summing to 1."""

    train: float = 0.7
    eval: float = 0.15
    test: float = 0.15

    def __post_init__(self) -> None:
        values = {"train": self.train, "eval": self.eval, "test": self.test}
        bad = {name: v for name, v in values.items() if not (0.0 < v < 1.0)}
        if bad:
            raise ValueError(
                f"split ratios must each be between 0 and 1 (exclusive); got {bad}"
            )
        total = self.train + self.eval + self.test
        if not math.isclose(total, 1.0, abs_tol=1e-6):
            raise ValueError(
                f"split ratios must sum to 1; got train={self.train} + eval={self.eval} "
                f"+ test={self.test} = {total:g}"
            )


_M1, _M2, _GOLDEN = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB), np.uint64(
    0x9E3779B97F4A7C15)
_NULL_HASH = np.uint64(0x6A09E667F3BCC909)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijective, well-spread 64-bit mix (of a copy of ``x``)."""
    x = np.array(x, dtype=np.uint64, copy=True)
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(30)
        x *= _M1
        x ^= x >> np.uint64(27)
        x *= _M2
        x ^= x >> np.uint64(31)
    return x


def hash_text(values: list) -> np.ndarray:
    return np.array(
        [int.from_bytes(hashlib.blake2b(v.encode("utf-8", "surrogateescape"),
                                        digest_size=8).digest(), "little")
         if v is not None else int(_NULL_HASH) for v in values],
        dtype=np.uint64,
    )


def hash_numeric(values: np.ndarray) -> np.ndarray:
    """Stable hash inputs for float64 values: their bits (NaN and -0.0 canonicalised)."""
    values = np.asarray(values, dtype=np.float64) + 0.0
    bits = values.view(np.uint64)
    return np.where(np.isnan(values), _NULL_HASH, bits)  # mixed in combine_hashes


def hash_categorical(indices: np.ndarray, dictionary: list) -> np.ndarray:
    """Stable hashes of text values given as dictionary indices (the last index = null)."""
    return hash_text(list(dictionary) + [None])[indices]


def _mix_in_place(x: np.ndarray, scratch: np.ndarray) -> None:
    """:func:`_mix` of ``x`` in place (``scratch``: a buffer of the same shape)."""
    with np.errstate(over="ignore"):
        np.right_shift(x, np.uint64(30), out=scratch)
        x ^= scratch
        x *= _M1
        np.right_shift(x, np.uint64(27), out=scratch)
        x ^= scratch
        x *= _M2
        np.right_shift(x, np.uint64(31), out=scratch)
        x ^= scratch


def combine_hashes(column_hashes: list[np.ndarray]) -> np.ndarray:
    n = len(column_hashes[0]) if column_hashes else 0
    row = np.zeros(n, dtype=np.uint64)
    scratch = np.empty(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for i, h in enumerate(column_hashes):
            np.add(h, np.uint64(i + 1) * _GOLDEN, out=scratch)
            row ^= scratch
            _mix_in_place(row, scratch)
    return row


def splits_from_hashes(hashes: np.ndarray, ratios: SplitRatios) -> np.ndarray:
    """0 = train, 1 = eval, 2 = test, by where the hash falls in [0, 2**64)."""
    position = (hashes >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    return (position >= ratios.train).astype(np.int8) + (
        position >= ratios.train + ratios.eval).astype(np.int8)


def assign_splits(frame: pd.DataFrame, ratios: SplitRatios) -> pd.Series:
    """Split a frame's rows by a stable hash of each whole row, independent of row order.

    Numeric (float) columns hash by value, other columns by their text; the same row
    lands in the same split on every run and machine.
    """
    hashes = []
    for name in frame.columns:
        values = frame[name]
        if pd.api.types.is_float_dtype(values):
            hashes.append(hash_numeric(values.to_numpy("float64")))
        else:
            text = [None if pd.isna(v) else str(v) for v in values]
            hashes.append(hash_text(text))
    codes = splits_from_hashes(combine_hashes(hashes), ratios)
    return pd.Series(np.array(SPLITS)[codes], index=frame.index)
