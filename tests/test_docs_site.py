"""The README stays a front door and the reference in docs/ builds into a site without
broken links (`make check-site` runs the same strict build in CI)."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gkeflow.components import yamlio

REPO = Path(__file__).resolve().parents[1]
README_MAX_LINES = 300
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _nav_pages(nav) -> list[str]:
    pages = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages.extend(_nav_pages(value) if isinstance(value, list) else [value])
    return pages


def _mkdocs_config() -> dict:
    # mkdocs.yml holds no custom tags; the safe loader is enough.
    return yamlio.load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))


def _build(project: Path, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=project, capture_output=True, text=True, env=env, timeout=300, check=False)


def test_readme_is_at_most_300_lines():
    lines = (REPO / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines; keep it <= {README_MAX_LINES} and move reference "
        "text to a page in docs/")


def test_every_relative_link_in_the_readme_names_an_existing_file():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    targets = [t.split("#", 1)[0] for t in LINK.findall(text)
               if not re.match(r"[a-z]+:", t) and not t.startswith("#")]
    assert targets, "the README links to the reference pages"
    missing = sorted({t for t in targets if not (REPO / t).exists()})
    assert not missing, f"README.md links to missing files: {missing}"


def test_every_docs_page_is_in_the_site_navigation_and_every_entry_exists():
    nav = _nav_pages(_mkdocs_config()["nav"])
    pages = {p.relative_to(REPO / "docs").as_posix() for p in (REPO / "docs").rglob("*.md")}
    assert sorted(pages - set(nav)) == [], "add these pages to the nav of mkdocs.yml"
    assert sorted(set(nav) - pages) == [], "the nav of mkdocs.yml names missing pages"


def test_the_reference_topics_each_have_a_page():
    nav = set(_nav_pages(_mkdocs_config()["nav"]))
    topics = {"data.md", "training.md", "evaluation.md", "registries.md", "prediction.md",
              "sweeps.md", "compute-and-gpus.md", "scale-out.md", "shipping.md",
              "components.md"}
    assert topics <= nav


def test_the_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs", reason="the dev extra installs mkdocs")
    result = _build(REPO, tmp_path / "site")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "index.html").exists()
    assert (tmp_path / "site" / "components.html").exists()


def test_a_broken_link_fails_the_strict_build(tmp_path):
    pytest.importorskip("mkdocs", reason="the dev extra installs mkdocs")
    project = tmp_path / "project"
    shutil.copytree(REPO / "docs", project / "docs")
    shutil.copy(REPO / "mkdocs.yml", project / "mkdocs.yml")
    page = project / "docs" / "data.md"
    page.write_text(page.read_text(encoding="utf-8") + "\nSee [gone](no-such-page.md).\n",
                    encoding="utf-8")
    result = _build(project, tmp_path / "site")
    assert result.returncode != 0
    assert "no-such-page.md" in result.stdout + result.stderr


def test_every_make_target_the_docs_name_exists():
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z][a-z-]*):", makefile, flags=re.M))
    texts = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    named = {name for path in texts
             for name in re.findall(r"`make ([a-z][a-z-]*)", path.read_text(encoding="utf-8"))}
    assert named, "the README names make targets"
    assert sorted(named - targets) == [], "the docs name make targets the Makefile lacks"
