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


def trained_families(model_type: str = "auto", candidates: str = "",
                     user_module: str = "") -> tuple[str, ...]:
    """The families a run with these settings trains: ``model_type`` alone when it names
    one, the user's module alone when it is given without ``candidates``, else the
    candidates (``user`` only with a module). A pipeline gives each of them a task."""
    if model_type != "auto":
        return (model_type,)
    if user_module and not str(candidates).strip():
        return ("user",)
    return tuple(n for n in parse_candidates(candidates) if n != "user" or user_module)


def candidate_step(family: str) -> str:
    """The pipeline step that trains ``family`` as a candidate: ``train-gbdt``,
    ``train-wide-deep``."""
    return "train-" + family.replace("_", "-")
