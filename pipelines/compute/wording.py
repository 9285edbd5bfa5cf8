"""Counted nouns for plan and compile messages: ``1 GPU``, ``2 GPUs``, ``1 replica``."""

from __future__ import annotations


def plural(count: int, noun: str, many: str = "") -> str:
    """``noun`` for ``count`` things: the noun itself for exactly one, else its plural
    (``many``, or the noun + "s")."""
    if count == 1:
        return noun
    return many or f"{noun}s"


def counted(count: int, noun: str, many: str = "") -> str:
    """``count`` with its noun: ``counted(1, "GPU")`` -> ``"1 GPU"``, ``counted(0, "GPU")``
    -> ``"0 GPUs"``."""
    return f"{count} {plural(count, noun, many)}"
