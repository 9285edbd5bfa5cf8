"""``--param KEY=VALUE`` options of ``gkeflow run`` as typed arguments of a pipeline."""

from __future__ import annotations

import json
from typing import Any

import click

_CASTS = {
    "Integer": int, "Float": float, "String": str, "List": json.loads, "Dict": json.loads,
    "Boolean": lambda v: {"true": True, "false": False}[v.lower()],
}


def pipeline_params(pipeline, options: tuple[str, ...]) -> dict[str, Any]:
    """``KEY=VALUE`` options as typed arguments of ``pipeline`` (lists and dicts as JSON).

    Raises:
        click.BadParameter: naming the option, and the valid keys or the expected type.
    """
    inputs = pipeline.component_spec.inputs
    values = {}
    for option in options:
        key, sep, raw = option.partition("=")
        key = key.strip()
        if not sep or key not in inputs:
            from gkeflow.components.did_you_mean import did_you_mean

            hint = did_you_mean(key, inputs) if sep else ""
            raise click.BadParameter(
                f"{option!r}{hint}: expected KEY=VALUE with KEY one of {', '.join(inputs)}",
                param_hint="--param")
        try:
            values[key] = _CASTS.get(inputs[key].type, str)(raw.strip())
        except (ValueError, KeyError) as exc:
            raise click.BadParameter(f"{key} must be of type {inputs[key].type}; got {raw!r}",
                                     param_hint="--param") from exc
    return values


class NonEmptyPath(click.Path):
    """``click.Path`` refusing an empty value: ``--output ""`` would quietly mean the
    current directory."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value.strip():
            self.fail("must not be empty; give a path", param, ctx)
        return super().convert(value, param, ctx)


class SuggestingChoice(click.Choice):
    """``click.Choice`` whose refusal names the closest choice ("did you mean")."""

    def get_invalid_choice_message(self, value, ctx) -> str:
        from gkeflow.components.did_you_mean import did_you_mean

        return (f"{value!r} is not one of {', '.join(map(repr, self.choices))}"
                f"{did_you_mean(str(value), self.choices)}.")
