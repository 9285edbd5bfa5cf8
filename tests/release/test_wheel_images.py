"""From the installed wheel to a user's own images: in a fresh directory, `gkeflow init`, an
``images.registry`` of the user's and `gkeflow images build --builder podman --no-push` (a
fake podman on PATH, tests/cli/fake_builder.py) give digests that `gkeflow compile` names in
both targets' pipelines, and site-packages is exactly as pip left it."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.cli import fake_builder
from tests.release.test_wheel import _env, dist, fresh_venv  # noqa: F401 (fixtures)

pytestmark = pytest.mark.slow

REGISTRY = "europe-west4-docker.pkg.dev/my-project/ml"


def _tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_init_build_no_push_compile_from_the_wheel(fresh_venv, tmp_path):  # noqa: F811
    gkeflow = fresh_venv / "bin" / "gkeflow"
    site = Path(subprocess.run(
        [fresh_venv / "bin" / "python", "-c",
         "import gkeflow.pipelines, pathlib; print(pathlib.Path(gkeflow.pipelines.__path__[0])"
         ".parent)"], capture_output=True, text=True, check=True, env=_env()).stdout.strip())
    assert site.is_relative_to(fresh_venv), site
    before = _tree(site)
    project = tmp_path / "project"
    project.mkdir()
    (project / "my_features.py").write_text("SCALE = 2\n")
    env = {**_env(), "FAKE_BUILDER_LOG": str(tmp_path / "builder.log"),
           "PYTHONDONTWRITEBYTECODE": "1",
           "PATH": f"{fake_builder.install(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}"}

    def run(*args: str) -> subprocess.CompletedProcess:
        result = subprocess.run([str(gkeflow), *args], cwd=project, capture_output=True,
                                text=True, timeout=600, check=False, env=env)
        assert result.returncode == 0, f"{args}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
        return result

    run("init")
    text = (project / "gkeflow.yaml").read_text()
    text = text.replace("# images:\n#   registry: europe-west4-docker.pkg.dev/my-project/ml",
                        f"images:\n  include: [my_features.py]\n  registry: {REGISTRY}")
    (project / "gkeflow.yaml").write_text(text)
    run("images", "build", "--builder", "podman", "--no-push")
    lock = json.loads((project / "gkeflow.lock").read_text())["images"]
    digests = {ref: entry["digest"] for ref, entry in lock.items()}
    assert set(digests) == {f"{REGISTRY}/{name}:0.1.0" for name in (
        "gkeflow", "gkeflow-cpu", "gkeflow-gpu", "gkeflow-serving")}
    builds = [json.loads(line) for line in (tmp_path / "builder.log").read_text().splitlines()
              if json.loads(line)["args"][0] == "build"]
    # the serving image (TensorFlow Serving) takes none of the user's code
    suite_builds = [b for b in builds if "serving-entrypoint.sh" not in b["context"]]
    assert len(suite_builds) == 3
    assert all("user/include/my_features.py" in b["context"] for b in suite_builds)

    run("compile")
    for target in ("gke", "vertex"):
        compiled = (project / "compiled" / f"training.{target}.yaml").read_text()
        for reference, digest in digests.items():
            if target == "gke" and "gkeflow-serving" in reference:
                continue  # TensorFlow Serving serves Vertex AI registrations only
            assert f"{reference.rsplit(':', 1)[0]}@{digest}" in compiled
        assert "us-docker.pkg.dev/gkeflow" not in compiled
    assert _tree(site) == before, "gkeflow wrote into site-packages"
