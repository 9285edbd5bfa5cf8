"""The model families ``train`` knows, and the candidates ``model_type: auto`` tries."""

from __future__ import annotations

#: The Keras families :func:`~gkeflow.components.train.models.build_builtin` builds.
KERAS_MODEL_TYPES = ("mlp", "wide_deep")
#: Every ``model_type``: the Keras ones, gradient-boosted trees (train/gbdt.py), the linear
#: model (train/linear.py), and ``auto``, the best of the candidates on the eval split
#: (train/candidates.py).
MODEL_TYPES = ("auto", *KERAS_MODEL_TYPES, "gbdt", "linear")
#: The families ``auto`` tries when ``candidates`` names none (and the user's module, when
#: one is given).
DEFAULT_CANDIDATES = ("gbdt", "mlp", "linear")
#: What ``candidates`` may name: the built-in families and ``user`` (the user's module).
CANDIDATE_FAMILIES = ("gbdt", "mlp", "wide_deep", "linear", "user")


def parse_candidates(text: str) -> tuple[str, ...]:
    """``"gbdt,mlp"`` -> the families, checked; empty -> :data:`DEFAULT_CANDIDATES`."""
    names = tuple(dict.fromkeys(n.strip() for n in str(text).split(",") if n.strip()))
    unknown = [n for n in names if n not in CANDIDATE_FAMILIES]
    if unknown:
        raise ValueError(f"candidates: unknown model family {unknown[0]!r}; choose from "
                         f"{', '.join(CANDIDATE_FAMILIES)} (comma-separated)")
    return names or DEFAULT_CANDIDATES
