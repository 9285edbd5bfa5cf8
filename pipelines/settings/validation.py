"""Pydantic validation errors as one line a person can act on: per problem the key path,
what is wrong and the fix (for an unknown key, the closest valid one); no pydantic URL."""

from __future__ import annotations

import re
import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from gkeflow.components.did_you_mean import did_you_mean


def keys_at(model: Any, loc: tuple) -> list[str]:
    """The keys a mapping at ``loc`` under pydantic ``model`` takes (empty when unknown):
    fields (and their aliases) of the model found by following ``loc`` through fields,
    ``dict`` values, ``list`` items and optional or union members."""
    def models_in(annotation: Any) -> list:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return [annotation]
        origin, args = typing.get_origin(annotation), typing.get_args(annotation)
        if origin is typing.Annotated:
            return models_in(args[0])
        if origin in (dict, list, tuple, typing.Union, types.UnionType):
            return [m for arg in args for m in models_in(arg)]
        return []

    current = [model]
    for part in loc:
        following = []
        for item in current:
            field = item.model_fields.get(str(part)) or next(
                (f for f in item.model_fields.values() if f.alias == part), None)
            if field is not None:
                following.extend(models_in(field.annotation))
        current = following or current  # not a field: a mapping's key or a list's index
    return sorted({field.alias or name for item in current
                   for name, field in item.model_fields.items()})


def validation_message(exc: ValidationError, model: Any = None, prefix: str = "",
                       root: str = "", skip: tuple = ()) -> str:
    """One line for a pydantic error: per problem the key path, what is wrong and the fix
    (for an unknown key, the closest valid one), joined with "; "; no pydantic URL, and
    never the value given (it may be a secret).

    ``model``: the validated model (to name the valid keys); ``prefix``: put before the
    line (e.g. the file); ``root``: the path of ``model`` in the file (e.g. ``sweep``);
    ``skip``: parts of error locations that are not keys (e.g. union tags)."""
    problems = []
    for error in exc.errors():
        loc = tuple(part for part in error["loc"] if part not in skip)
        key = ".".join(str(p) for p in (root, *loc) if p != "") or "(top level)"
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            valid = keys_at(model, loc[:-1]) if model is not None else []
            hint = did_you_mean(str(loc[-1]), valid) if valid else ""
            message = ("unknown key" + hint + "; remove or rename it"
                       + (f" (keys here: {', '.join(valid)})" if valid and not hint else ""))
        elif error["type"] == "missing":
            message = "required but missing; add it"
        if not loc and error["type"] == "value_error":
            if root and re.match(r"^[a-z_.]+: ", message):
                message = f"{root}.{message}"
            problems.append(message)  # the message names its own key
            continue
        problems.append(f"{key}: {message}")
    return prefix + "; ".join(" ".join(p.split()) for p in problems)
