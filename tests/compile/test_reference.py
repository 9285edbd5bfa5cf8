"""docs/components.md: generated from the component specs, complete, and checked fresh."""

import re
from pathlib import Path

from click.testing import CliRunner

import gkeflow.components as suite
from gkeflow.components import yamlio
from gkeflow.pipelines.cli import reference
from gkeflow.pipelines.cli.main import main
from gkeflow.pipelines.targets.component_yaml import component_names

REPO = Path(__file__).resolve().parents[2]


def _rows(text: str, name: str) -> dict[str, list[str]]:
    """Table rows of one component's section: first cell -> cells."""
    section = text.split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if cells and cells[0].startswith("`"):
            rows.setdefault(cells[0].strip("`"), []).append(cells)
    return rows


def test_committed_reference_is_fresh():
    assert reference.is_fresh(REPO / "docs" / "components.md"), (
        "run `gkeflow docs` and commit docs/components.md")


def test_every_input_and_output_is_listed_with_the_compiled_type_and_description():
    text = reference.render()
    for name in component_names():
        interface = reference.component_ir(name)
        rows = _rows(text, name)
        python = getattr(suite, name).component_spec
        assert set(rows) == set(python.inputs) | set(python.outputs), name
        for kind in ("inputDefinitions", "outputDefinitions"):
            definitions = interface.get(kind, {})
            for key, spec in {**definitions.get("parameters", {}),
                              **definitions.get("artifacts", {})}.items():
                (cells,) = rows[key]
                kind_text = spec.get("parameterType") or spec["artifactType"]["schemaTitle"]
                if spec.get("isArtifactList"):  # a collected input: select_best_trial's models
                    kind_text = f"List[{kind_text}]"
                assert cells[1] == f"`{kind_text}`", (name, key)
                described = reference._cell(spec.get("description", ""))
                assert described and cells[-1] == described, (name, key)
        for key, spec in python.inputs.items():
            (cells,) = rows[key]
            if spec.default is not None:
                assert cells[2].strip("`") in (repr(spec.default).replace("'", '"'),
                                                str(spec.default).lower()), (name, key)
            elif not spec.optional:
                assert cells[2] == "*required*", (name, key)


def test_the_reference_reads_what_the_committed_component_yaml_holds():
    for name in component_names():
        path = REPO / "compiled" / "components" / f"{name}.yaml"
        (document,) = [d for d in yamlio.load_all(path.read_text()) if d]
        (interface,) = document["components"].values()
        assert reference.component_ir(name) == interface, name


def test_docs_command_writes_and_checks(tmp_path):
    path = tmp_path / "components.md"
    runner = CliRunner()
    result = runner.invoke(main, ["docs", "--output", str(path)])
    assert result.exit_code == 0, result.output
    assert path.read_text() == reference.render()
    assert runner.invoke(main, ["docs", "--check", "--output", str(path)]).exit_code == 0
    path.write_text(path.read_text().replace("| `epochs` |", "| `epoch` |"))
    result = runner.invoke(main, ["docs", "--check", "--output", str(path)])
    assert result.exit_code == 1
    assert reference.main(["--check", str(tmp_path / "missing.md")]) == 1
    assert reference.main(["--bogus"]) == 2
