"""The suite imports as gkeflow.components / gkeflow.pipelines and leaves the names
components and pipelines to the project it is installed in (this checkout's install)."""

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env=env, check=False)


def test_a_projects_own_components_and_pipelines_win_and_gkeflow_stays_namespaced(tmp_path):
    for folder in ("components", "pipelines"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text(f"OWNER = 'project {folder}'\n")
    probe = ("import json, components, pipelines, gkeflow.components, "
             "gkeflow.pipelines.targets.compile\n"
             "print(json.dumps([components.OWNER, pipelines.OWNER, gkeflow.components.__file__,"
             " gkeflow.pipelines.targets.compile.__file__, sorted(gkeflow.components.__all__)]))")
    result = _python(probe, tmp_path)
    assert result.returncode == 0, result.stderr
    own_components, own_pipelines, suite, compile_module, exported = json.loads(result.stdout)
    assert (own_components, own_pipelines) == ("project components", "project pipelines")
    assert Path(suite) == REPO / "components" / "__init__.py"
    assert Path(compile_module) == REPO / "pipelines" / "targets" / "compile.py"
    assert {"prepare_data", "train_model", "evaluate_model", "register_model"} <= set(exported)


def test_components_and_pipelines_do_not_resolve_to_gkeflow(tmp_path):
    for name in ("components", "pipelines"):
        result = _python(f"import {name}", tmp_path)
        assert result.returncode == 1 and f"No module named '{name}'" in result.stderr


def test_component_bodies_import_the_suite_by_its_namespaced_name():
    import gkeflow.components as suite

    for name in suite.__all__:
        component = getattr(suite, name)
        command = " ".join(component.component_spec.implementation.container.command)
        assert "from gkeflow." in command, name
        assert "from components" not in command and "from pipelines" not in command, name
