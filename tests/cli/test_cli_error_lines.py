"""Mistakes a user makes at the command line, each one line naming the problem and the fix:
a gkeflow.yaml that repeats a key, is not UTF-8 or is a folder; a registry file that is not
one; an empty path; commands that need a target when none is configured."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from gkeflow.pipelines.cli.main import main


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def _one_error_line(result) -> str:
    assert result.exit_code != 0, result.output
    assert "Traceback" not in result.output
    [line] = [line for line in result.output.splitlines() if line.startswith("Error")]
    return line


@pytest.mark.parametrize("content, message", [
    (b"targets:\n  gke:\n    host: http://a\n    host: http://b\n",
     "not valid YAML at line 4, column 5: the key 'host' is given twice"),
    (b"targets:\n  gke: [\n", "not valid YAML at line 3, column 1: expected the node content"),
    (b"compute: {}\n# caf\xe9\n", "not UTF-8 text (byte 17); save it as UTF-8"),
])
def test_a_gkeflow_yaml_that_cannot_be_read_is_named_with_the_place(content, message,
                                                                    tmp_path):
    path = tmp_path / "gkeflow.yaml"
    path.write_bytes(content)
    assert f"{path}: {message}" in _one_error_line(run("plan", "--config", str(path)))


def test_a_registry_that_is_not_one_is_named(tmp_path):
    (tmp_path / "notes.json").write_text('{"a": 1}')
    line = _one_error_line(run("models", "list", "--registry",
                               f"sqlite:///{tmp_path / 'notes.json'}"))
    assert "cannot open the registry" in line and "file is not a database" in line
    line = _one_error_line(run("models", "list", "--registry", f"sqlite:///{tmp_path}"))
    assert "is a directory; name a .db file" in line


@pytest.mark.parametrize("command", [["init", "--path", ""], ["docs", "--output", ""],
                                     ["compile", "--output", ""], ["run", "--output", " "]])
def test_an_empty_path_is_refused_rather_than_read_as_the_current_folder(command, tmp_path,
                                                                         monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run(*command)
    assert result.exit_code == 2 and "must not be empty; give a path" in result.output
    assert list(tmp_path.iterdir()) == []


def test_schedule_commands_without_any_target_say_so(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gkeflow.yaml").write_text("compute: {}\n")
    line = _one_error_line(run("schedule", "pause", "nightly"))
    assert "no target is configured in gkeflow.yaml" in line and "gkeflow init" in line


def test_images_requirements_naming_a_folder_says_it_is_one(tmp_path):
    (tmp_path / "reqs").mkdir()
    (tmp_path / "gkeflow.yaml").write_text(
        "images:\n  registry: europe-west4-docker.pkg.dev/p/ml\n  requirements: reqs\n")
    line = _one_error_line(run("plan", "--config", str(tmp_path / "gkeflow.yaml")))
    assert "requirements:" in line and "reqs is a directory; name a pip requirements" in line


@pytest.mark.parametrize("command", ["compile", "plan"])
def test_compute_help_lists_every_field_the_parser_takes(command):
    from gkeflow.pipelines.compute.profiles import FIELD_NAMES

    text = " ".join(run(command, "--help").output.split())
    fields = text[text.index("Fields: "):].split("(docs/")[0]
    for name in FIELD_NAMES:
        assert name in fields, name
