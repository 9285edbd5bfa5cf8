"""The images install the suite from exactly what their Dockerfiles copy: built from that
alone, the package must be the same gkeflow.* wheel as a release (setup.py's mapping
included), or component bodies importing gkeflow.* would fail in the image."""

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILES = sorted((REPO / "images").glob("*.Dockerfile"))


def _copied_sources(dockerfile: Path) -> list[str]:
    """Sources of the COPY instructions that take files from the build context."""
    sources = []
    for line in dockerfile.read_text().splitlines():
        match = re.match(r"^COPY\s+(?!--from)(.+)$", line.strip())
        if match:
            *found, _destination = match.group(1).split()
            sources += found
    return sources


def _allowed_by_dockerignore(source: str) -> bool:
    rules = [r.strip() for r in (REPO / ".dockerignore").read_text().splitlines()
             if r.strip() and not r.startswith("#")]
    return rules[0] == "*" and f"!{source.rstrip('/')}" in {r.rstrip("/") for r in rules}


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_the_image_build_context_makes_the_namespaced_package(dockerfile, tmp_path):
    sources = _copied_sources(dockerfile)
    assert {"pyproject.toml", "setup.py", "components", "pipelines"} <= set(sources)
    context = tmp_path / "context"
    context.mkdir()
    for source in sources:
        assert _allowed_by_dockerignore(source), f"{source} is excluded by .dockerignore"
        path = REPO / source
        if path.is_dir():
            shutil.copytree(path, context / source,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, context / source)
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out),
         str(context)], capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    (wheel,) = out.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "gkeflow/components/train/component.py" in names
    assert "gkeflow/pipelines/cli.py" in names
    assert not any(n.startswith(("components/", "pipelines/")) for n in names)
