"""The release artifacts: `python -m build` makes a wheel and an sdist; the wheel installed
into a fresh virtual environment imports as gkeflow.* and runs `gkeflow run` from a project
that has its own components/ and pipelines/ packages.

The fresh environment has no system site-packages and installs only the wheel (no
dependencies, no index); the dependencies come from this environment's site-packages
through a plain path in a .pth file (no .pth processing there, so this checkout's
editable install stays out of it), which keeps the test fast and offline.
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

from gkeflow.components.images import VERSION

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def _run(args, cwd, timeout=120, env=None) -> subprocess.CompletedProcess:
    result = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True,
                            timeout=timeout, check=False, env=env)
    assert result.returncode == 0, f"{args}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def _sources(folder: str) -> set[str]:
    return {f"gkeflow/{p.relative_to(REPO).as_posix()}"
            for p in (REPO / folder).rglob("*")
            if p.suffix in (".py", ".yaml", ".csv") and "__pycache__" not in p.parts}


#: Not part of a source checkout: environments, caches and earlier build output.
_NOT_SOURCE = shutil.ignore_patterns(".venv", ".git", "build", "dist", "*.egg-info",
                                     "__pycache__", ".pytest_cache", ".ruff_cache",
                                     "gkeflow-output", "*.db")


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> dict[str, Path]:
    """Built from a clean copy of the checkout, so nothing stale in it can leak in."""
    source = tmp_path_factory.mktemp("source") / "gkeflow"
    shutil.copytree(REPO, source, ignore=_NOT_SOURCE, symlinks=True)
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", out, source], source,
         timeout=300)
    wheels, sdists = list(out.glob("*.whl")), list(out.glob("*.tar.gz"))
    assert [w.name for w in wheels] == [f"gkeflow-{VERSION}-py3-none-any.whl"]
    assert [s.name for s in sdists] == [f"gkeflow-{VERSION}.tar.gz"]
    return {"wheel": wheels[0], "sdist": sdists[0]}


@pytest.fixture(scope="module")
def fresh_venv(dist, tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", "--without-pip", venv], venv)
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps",
          "--no-index", "--no-cache-dir", dist["wheel"]], venv, timeout=300)
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     venv).stdout.strip())
    (site / "_gkeflow_test_dependencies.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n")
    return venv


@pytest.fixture
def project(tmp_path) -> Path:
    """An unrelated project with packages of its own named components and pipelines."""
    for folder in ("components", "pipelines"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text(f"OWNER = 'project {folder}'\n")
    return tmp_path


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    return env


def test_wheel_and_sdist_hold_every_module_and_no_test_or_top_level_package(dist):
    names = set(zipfile.ZipFile(dist["wheel"]).namelist())
    modules = {n for n in names if not n.startswith(f"gkeflow-{VERSION}.dist-info/")}
    recipe_suffixes = (".py", ".Dockerfile", ".lock", ".yaml", ".json", ".sh")
    recipes = {f"gkeflow/images/{p.name}" for p in (REPO / "images").iterdir()
               if p.is_file() and p.suffix in recipe_suffixes}
    assert modules == _sources("components") | _sources("pipelines") | recipes
    assert {n.split("/")[0] for n in modules} == {"gkeflow"}
    metadata = zipfile.ZipFile(dist["wheel"]).read(
        f"gkeflow-{VERSION}.dist-info/METADATA").decode()
    assert f"\nVersion: {VERSION}\n" in metadata
    entry_points = zipfile.ZipFile(dist["wheel"]).read(
        f"gkeflow-{VERSION}.dist-info/entry_points.txt").decode()
    assert "gkeflow = gkeflow.pipelines.cli.main:main" in entry_points
    with tarfile.open(dist["sdist"]) as sdist:
        members = {Path(m).relative_to(f"gkeflow-{VERSION}").as_posix()
                   for m in sdist.getnames() if "/" in m}
    assert {"pyproject.toml", "setup.py", "README.md", "CHANGELOG.md", "docs/components.md",
            "components/images.py", "pipelines/cli/main.py", "images/cpu.Dockerfile",
            "images/requirements-cpu.lock", "images/requirements-gpu.lock"} <= members


def test_fresh_venv_imports_gkeflow_next_to_a_projects_own_packages(fresh_venv, project):
    python = fresh_venv / "bin" / "python"
    probe = ("import json, components, pipelines, gkeflow.components, gkeflow.pipelines.cli.main\n"
             "from gkeflow.components import train_model\n"
             "print(json.dumps({'components': components.OWNER, 'pipelines': pipelines.OWNER,"
             " 'gkeflow': gkeflow.components.__file__, 'cli': gkeflow.pipelines.cli.main.__file__,"
             " 'train_model': train_model.name}))")
    found = json.loads(_run([python, "-c", probe], project, env=_env()).stdout)
    assert found["components"] == "project components"
    assert found["pipelines"] == "project pipelines"
    assert found["train_model"] == "train-model"
    for key in ("gkeflow", "cli"):
        assert Path(found[key]).is_relative_to(fresh_venv), found[key]
        assert not Path(found[key]).is_relative_to(REPO), found[key]
    # Without a project of its own, `import components` finds nothing of gkeflow's.
    elsewhere = project / "elsewhere"
    elsewhere.mkdir()
    result = subprocess.run([str(python), "-c", "import components"], cwd=elsewhere,
                            capture_output=True, text=True, timeout=60, env=_env(), check=False)
    assert result.returncode == 1 and "No module named 'components'" in result.stderr


def test_fresh_venv_runs_the_cli_and_the_pipeline(fresh_venv, project):
    gkeflow = fresh_venv / "bin" / "gkeflow"
    assert "Usage: gkeflow" in _run([gkeflow, "--help"], project, env=_env()).stdout
    assert VERSION in _run([gkeflow, "--version"], project, env=_env()).stdout
    result = _run([gkeflow, "run", "--epochs", "2", "--output", project / "out",
                   "--min-accuracy", "0"], project, timeout=600, env=_env())
    assert "train-model" in result.stdout
    runs = list((project / "out" / "runs").glob("gkeflow-training-*"))
    assert len(runs) == 1 and (runs[0] / "train-model" / "model").is_dir()
