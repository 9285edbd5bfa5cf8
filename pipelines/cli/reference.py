"""The component reference, ``docs/components.md``, generated from the component specs.

Every input and output of every component in ``gkeflow.components.__all__`` is listed with
its type, default and description exactly as the compiled spec carries them, which is what
the Kubeflow Pipelines and Vertex AI UIs show: parameter types as ``STRING``,
``NUMBER_INTEGER``, ... and artifact types as their schema title (``system.Dataset``).
Nothing here names a parameter: a parameter added to a component's signature and
docstring appears in the reference the next time it is generated.

Regenerate with ``gkeflow docs`` (or ``python -m gkeflow.pipelines.cli.reference``, or
``make docs``); ``--check`` exits 1 when the file is out of date, as CI does.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

#: docs/components.md of the current directory (run from the repository root, as `make docs`
#: does); never a path inside the installed package or the checkout it came from.
DEFAULT_PATH = Path("docs") / "components.md"
_HEADER = (
    "<!-- Generated from the component specs by `gkeflow docs` "
    "(python -m gkeflow.pipelines.cli.reference); do not edit. -->\n"
)


def component_ir(name: str) -> dict:
    """The compiled spec of component ``name``'s own interface (what the UIs read)."""
    from google.protobuf import json_format

    from gkeflow.pipelines.targets.component_yaml import versioned_component

    spec = json_format.MessageToDict(versioned_component(name).pipeline_spec)
    (interface,) = spec["components"].values()
    return interface


def _cell(text: str) -> str:
    text = re.sub(r"\s+", " ", text or "").strip()
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _default(parameter: dict) -> str:
    if "defaultValue" not in parameter:
        return "*optional*" if parameter.get("isOptional") else "*required*"
    value = parameter["defaultValue"]
    if parameter.get("parameterType") == "NUMBER_INTEGER" and isinstance(value, float):
        value = int(value)
    return f"`{json.dumps(value)}`"


def _artifact_type(artifact: dict) -> str:
    kind = artifact["artifactType"]["schemaTitle"]
    return f"`List[{kind}]`" if artifact.get("isArtifactList") else f"`{kind}`"


def _in_order(definitions: dict, order: list[str]) -> list[tuple[str, dict]]:
    """``definitions`` items in signature order (the spec's maps are unordered)."""
    rank = {name: i for i, name in enumerate(order)}
    return sorted(definitions.items(), key=lambda item: (rank.get(item[0], len(rank)), item[0]))


def _inputs(interface: dict, order: list[str]) -> list[str]:
    definitions = interface.get("inputDefinitions", {})
    rows = [
        f"| `{name}` | {_artifact_type(a)} | "
        f"{'*optional*' if a.get('isOptional') else '*required*'} | "
        f"{_cell(a.get('description', ''))} |"
        for name, a in _in_order(definitions.get("artifacts", {}), order)
    ] + [
        f"| `{name}` | `{p['parameterType']}` | {_default(p)} | "
        f"{_cell(p.get('description', ''))} |"
        for name, p in _in_order(definitions.get("parameters", {}), order)
    ]
    return ["| input | type | default | description |", "|---|---|---|---|", *rows] \
        if rows else ["No inputs."]


def _outputs(interface: dict, order: list[str]) -> list[str]:
    definitions = interface.get("outputDefinitions", {})
    rows = [
        f"| `{name}` | {_artifact_type(a)} | {_cell(a.get('description', ''))} |"
        for name, a in _in_order(definitions.get("artifacts", {}), order)
    ] + [
        f"| `{name}` | `{p['parameterType']}` | {_cell(p.get('description', ''))} |"
        for name, p in _in_order(definitions.get("parameters", {}), order)
    ]
    return ["| output | type | description |", "|---|---|---|", *rows] \
        if rows else ["No outputs."]


def render() -> str:
    """The whole reference as Markdown."""
    from gkeflow.components.images import VERSION
    from gkeflow.pipelines.targets.component_yaml import (
        component_names,
        load_suite_component,
        version_line,
    )

    names = component_names()
    lines = [
        _HEADER.rstrip("\n"),
        "",
        f"# gkeflow {VERSION} component reference",
        "",
        "Each component is also shipped as `compiled/components/<component>.yaml` (written by "
        "`gkeflow compile`), which any Kubeflow Pipelines v2 pipeline loads without "
        "installing gkeflow:",
        "",
        "```python",
        "from kfp import components",
        "",
        'train_model = components.load_component_from_file("compiled/components/train_model.yaml")',
        "```",
        "",
        "Each file's header names the suite's version (first line, and "
        f"`{version_line()}` at the end of the description). Types and defaults are those "
        "of the compiled spec, as the Kubeflow Pipelines and Vertex AI UIs show them.",
        "",
        *[f"- [`{name}`](#{name})" for name in names],
    ]
    for name in names:
        component = load_suite_component(name)
        interface = component_ir(name)
        image = component.component_spec.implementation.container.image
        lines += [
            "",
            f"## {name}",
            "",
            (component.component_spec.description or "").strip(),
            "",
            f"YAML: `compiled/components/{name}.yaml` · image: `{image}`",
            "",
            "### Inputs",
            "",
            *_inputs(interface, list(component.component_spec.inputs or {})),
            "",
            "### Outputs",
            "",
            *_outputs(interface, list(component.component_spec.outputs or {})),
        ]
    return "\n".join(lines) + "\n"


def write(path: Path = DEFAULT_PATH) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(render(), encoding="utf-8")
    tmp.replace(path)
    return path


def is_fresh(path: Path = DEFAULT_PATH) -> bool:
    path = Path(path)
    return path.exists() and path.read_text(encoding="utf-8") == render()


def main(argv: list[str] | None = None) -> int:
    """``python -m gkeflow.pipelines.cli.reference [--check] [PATH]``."""
    args = list(sys.argv[1:] if argv is None else argv)
    check = "--check" in args
    rest = [a for a in args if a != "--check"]
    if len(rest) > 1 or any(a.startswith("-") for a in rest):
        print("usage: python -m gkeflow.pipelines.cli.reference [--check] [PATH]", file=sys.stderr)
        return 2
    path = Path(rest[0]) if rest else DEFAULT_PATH
    if check:
        if is_fresh(path):
            print(f"{path} is up to date")
            return 0
        print(f"stale: {path}\nRun `gkeflow docs` and commit the result.", file=sys.stderr)
        return 1
    print(f"wrote {write(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
