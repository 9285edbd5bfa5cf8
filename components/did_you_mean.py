"""A "did you mean" hint for a mistyped name (a key, column, step, field or environment)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(word: str, choices: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The choice ``word`` most likely misspells (case differences first), or None;
    ``cutoff``: the least similarity (difflib's ratio) a suggestion needs."""
    choices = [str(c) for c in choices]
    folded = [c for c in choices if c.casefold() == str(word).casefold()]
    if folded:
        return folded[0]
    by_fold = {c.casefold(): c for c in choices}
    found = difflib.get_close_matches(str(word).casefold(), list(by_fold), n=1,
                                      cutoff=cutoff)
    return by_fold[found[0]] if found else None


def did_you_mean(word: str, choices: Iterable[str], cutoff: float = 0.6) -> str:
    """``" (did you mean 'x'?)"`` for the closest choice, or "" when none is close."""
    match = closest(word, choices, cutoff)
    return f" (did you mean {match!r}?)" if match is not None and match != word else ""
