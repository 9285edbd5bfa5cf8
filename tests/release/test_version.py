"""One version number: the package, the images, the component YAMLs and the changelog."""

import re
import tomllib
from importlib import metadata
from pathlib import Path

from click.testing import CliRunner

from gkeflow.components.images import CPU_IMAGE, GPU_IMAGE, IMAGES, VERSION
from gkeflow.pipelines.cli.main import main
from gkeflow.pipelines.targets.component_yaml import component_names

REPO = Path(__file__).resolve().parents[2]


def test_version_is_a_release_number():
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION)


def test_the_package_takes_its_version_from_images_py_only():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "gkeflow.components.images.VERSION"}
    assert metadata.version("gkeflow") == VERSION


def test_cli_reports_the_version():
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and VERSION in result.output


def test_images_are_tagged_with_the_version():
    assert CPU_IMAGE.endswith(f":{VERSION}") and GPU_IMAGE.endswith(f":{VERSION}")
    assert all(image.endswith(f":{VERSION}") for image in IMAGES)


def test_each_committed_component_yaml_names_the_version():
    folder = REPO / "compiled" / "components"
    for name in component_names():
        first = (folder / f"{name}.yaml").read_text().splitlines()[0]
        assert first.startswith(f"# gkeflow {VERSION}: component {name}."), first


def test_changelog_has_an_entry_for_the_version():
    text = (REPO / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\]", text, flags=re.MULTILINE)
    assert releases and releases[0] == VERSION, "add a CHANGELOG.md section for the version"
    assert len(releases) == len(set(releases))
