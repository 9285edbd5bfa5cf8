"""bench/image_sizes.py: bytes attributed to distributions, and the requirement closure."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "image_sizes", Path(__file__).resolve().parents[2] / "bench" / "image_sizes.py")
image_sizes = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(image_sizes)


def _dist(site: Path, name: str, files: dict[str, int], requires: list[str]) -> None:
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    headers = [f"Name: {name}", *(f"Requires-Dist: {r}" for r in requires)]
    # a description line that looks like a header must not count
    (info / "METADATA").write_text("\n".join([*headers, "", "Requires-Dist: ghost"]) + "\n")
    rows = []
    for path, size in files.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_bytes(b"x" * size)
        rows.append(f"{path},sha256=abc,{size}")
    rows += [f"{info.name}/METADATA,,", f"{info.name}/RECORD,,", "../../bin/tool,,"]
    (info / "RECORD").write_text("\n".join(rows) + "\n")


@pytest.fixture
def site(tmp_path):
    site = tmp_path / "site-packages"
    _dist(site, "Big_Lib", {"big/__init__.py": 100, "big/_native.so": 5000},
          ["small-dep>=1", "win-only; sys_platform == 'win32'", "extra-dep; extra == 'dev'",
           "not-installed"])
    _dist(site, "small-dep", {"small/__init__.py": 10}, [])
    _dist(site, "win-only", {"win/__init__.py": 20}, [])
    _dist(site, "extra-dep", {"extra/__init__.py": 30}, [])
    _dist(site, "other", {"other/__init__.py": 40}, ["small-dep"])
    (site / "big/__pycache__").mkdir()
    (site / "big/__pycache__/__init__.cpython-311.pyc").write_bytes(b"c" * 70)
    (site / "stray.pth").write_bytes(b"p" * 7)
    return site


def test_every_file_is_attributed_to_the_distribution_that_installed_it(site):
    sizes, bytecode, unowned = image_sizes.distribution_sizes(site)
    def metadata(directory):
        return sum(f.stat().st_size for f in (site / directory).iterdir())

    assert sizes["big-lib"] - metadata("Big_Lib-1.0.dist-info") == 100 + 5000 + 70
    assert bytecode == {"big-lib": 70}
    assert sizes["small-dep"] - metadata("small_dep-1.0.dist-info") == 10
    assert unowned == 7


def test_the_closure_follows_requirements_for_linux_and_no_extras(site):
    assert image_sizes.requirement_closure(site, ["big_lib"]) == {"big-lib", "small-dep"}
    assert image_sizes.requirement_closure(site, ["other", "Big-Lib"]) == {
        "other", "big-lib", "small-dep"}


def test_a_root_that_is_not_installed_is_named(site):
    with pytest.raises(SystemExit, match="tensorflow-cpu is not installed"):
        image_sizes.requirement_closure(site, ["tensorflow-cpu"])


def test_the_share_line_names_both_images_and_the_verdict():
    line = image_sizes.share_line("s", 600_000_000, 200_000_000, "c", 1_500_000_000,
                                  500_000_000)
    assert line == ("slim s: 0.60 GB, a node pulls 0.20 GB; CPU c: 1.50 GB, a node pulls "
                    "0.50 GB; slim_to_cpu=0.400 (pulled 0.400), meets the goal of <= 0.45")
    assert image_sizes.share_line("s", 700, 1, "c", 1000, 1).endswith(
        "misses the goal of <= 0.45")
