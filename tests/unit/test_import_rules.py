"""Names used across modules are public: no module imports a ``_name`` from another one
(the layers and cycles themselves are import-linter's contracts in pyproject.toml)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("components", "pipelines", "tests", "bench", "examples")


def private_imports(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line imports NAME from MODULE`` for each private name ``path`` imports from
    gkeflow or a relative module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (
                node.level or (node.module or "").startswith("gkeflow")):
            found += [f"{path.relative_to(root)}:{node.lineno} imports {alias.name} from "
                      f"{'.' * node.level}{node.module or ''}"
                      for alias in node.names
                      if alias.name.startswith("_") and not alias.name.startswith("__")]
    return found


def test_no_module_imports_a_private_name_of_another():
    files = [p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py")]
    assert len(files) > 100
    assert [line for path in files for line in private_imports(path)] == []


def test_the_check_finds_private_imports_and_passes_public_ones(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import os\nfrom gkeflow.pipelines.cli.common import config_option\n"
                      "from gkeflow.pipelines.cli.common import _hidden, __version__\n"
                      "from .sibling import _helper\nfrom os import _exit\n")
    assert private_imports(module, tmp_path) == [
        "m.py:3 imports _hidden from gkeflow.pipelines.cli.common",
        "m.py:4 imports _helper from .sibling"]


#: A module is read in one sitting: at most this many lines (components/ and pipelines/).
MAX_MODULE_LINES = 450
#: The top of pipelines/ holds packages (its layers) and at most this many modules.
MAX_TOP_MODULES = 10


def long_modules(root: Path = ROOT, limit: int = MAX_MODULE_LINES) -> list[str]:
    """``path: N lines`` for each module of components/ and pipelines/ over ``limit``."""
    return [f"{p.relative_to(root)}: {n} lines" for folder in ("components", "pipelines")
            for p in sorted((root / folder).rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > limit]


def test_every_module_reads_in_one_sitting_and_pipelines_top_holds_packages():
    assert long_modules() == []
    top = sorted(p.name for p in (ROOT / "pipelines").glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, top
    packages = {p.name for p in (ROOT / "pipelines").iterdir() if (p / "__init__.py").is_file()}
    assert {"cli", "targets", "definitions", "compute", "settings"} <= packages


def test_the_length_check_finds_a_long_module(tmp_path):
    (tmp_path / "components").mkdir()
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "components" / "long.py").write_text("x = 1\n" * 12)
    (tmp_path / "pipelines" / "short.py").write_text("x = 1\n" * 3)
    assert long_modules(tmp_path, limit=10) == ["components/long.py: 12 lines"]
