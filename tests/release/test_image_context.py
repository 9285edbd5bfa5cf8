"""Images build from an installed gkeflow, not only from a clone: the release wheel carries
the Dockerfiles and hashed locks (gkeflow.images), and image_build assembles a context from
the installed package whose repacked wheel holds exactly the release wheel's files, without
writing anything into site-packages."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from gkeflow.components.images import VERSION
from tests.release.test_wheel import _env, _run, dist, fresh_venv  # noqa: F401

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
IMAGE_FILES = ("cpu.Dockerfile", "gpu.Dockerfile", "requirements-cpu.lock",
               "requirements-gpu.lock")


def _modules(wheel: Path) -> set[str]:
    return {n for n in zipfile.ZipFile(wheel).namelist()
            if not n.startswith(f"gkeflow-{VERSION}.dist-info/")}


def _tree(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.rglob("*") if p.is_file()}


def test_the_release_wheel_carries_the_image_recipes(dist):  # noqa: F811
    wheel = zipfile.ZipFile(dist["wheel"])
    for name in IMAGE_FILES:
        assert wheel.read(f"gkeflow/images/{name}") == (REPO / "images" / name).read_bytes()


def test_an_installed_gkeflow_assembles_a_context_and_writes_nothing_into_site_packages(
        dist, fresh_venv, tmp_path):  # noqa: F811
    python = fresh_venv / "bin" / "python"
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     tmp_path).stdout.strip())
    before = _tree(site)
    module = tmp_path / "my_model.py"
    module.write_text("def build_model(schema, hparams):\n    return None\n")
    probe = ("import json, sys; from pathlib import Path\n"
             "from gkeflow.pipelines.targets.image_build import assemble_context, images_dir\n"
             "dockerfile = assemble_context(Path(sys.argv[1]), 'cpu', None, [Path(sys.argv[2])])\n"
             "print(json.dumps({'dockerfile': str(dockerfile), 'images': str(images_dir())}))")
    found = json.loads(_run([python, "-c", probe, tmp_path / "ctx", module], tmp_path,
                            env=_env()).stdout)
    assert Path(found["images"]).is_relative_to(site)
    context = Path(found["dockerfile"]).parent
    assert context == tmp_path / "ctx"
    shipped = (REPO / "images" / "cpu.Dockerfile").read_bytes()
    assert (context / "Dockerfile").read_bytes() == shipped
    assert (context / "user" / "include" / "my_model.py").exists()
    (repacked,) = (context / "dist").glob("*.whl")
    assert _modules(repacked) == _modules(dist["wheel"])
    assert _tree(site) == before
