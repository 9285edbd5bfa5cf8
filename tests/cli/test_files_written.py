"""What gkeflow writes: modes that honour the umask (atomic writes included), file-system
errors as one line naming the path, the reason and the option, `gkeflow docs` into the
current directory."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from gkeflow.components._atomic import current_umask, publish_dir, write_text_atomic
from gkeflow.pipelines.cli.fs_errors import describe_file_system_error
from gkeflow.pipelines.cli.main import main


@pytest.fixture
def umask():
    """Set the process umask for the test; restored after."""
    previous = os.umask(0o022)
    os.umask(previous)

    def _set(mask: int) -> int:
        os.umask(mask)
        return mask

    yield _set
    os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize(("mask", "file_mode", "dir_mode"),
                         [(0o022, 0o644, 0o755), (0o027, 0o640, 0o750)])
def test_atomic_writes_get_the_mode_a_plain_create_would(tmp_path, umask, mask, file_mode,
                                                         dir_mode):
    umask(mask)
    assert current_umask() == mask
    write_text_atomic(tmp_path / "a.json", "{}")
    with publish_dir(tmp_path / "model") as scratch:
        (scratch / "saved_model.pb").write_bytes(b"x")
    assert _mode(tmp_path / "a.json") == file_mode
    assert _mode(tmp_path / "model") == dir_mode
    assert _mode(tmp_path / "model" / "saved_model.pb") == file_mode


def test_compile_init_and_docs_write_readable_files(tmp_path, umask, monkeypatch):
    umask(0o022)
    runner = CliRunner()
    compiled = runner.invoke(main, ["compile", "--target", "gke", "--output",
                                    str(tmp_path / "compiled")])
    assert compiled.exit_code == 0, compiled.output
    init = runner.invoke(main, ["init", "--path", str(tmp_path / "gkeflow.yaml")])
    assert init.exit_code == 0, init.output
    monkeypatch.chdir(tmp_path)
    docs = runner.invoke(main, ["docs"])
    assert docs.exit_code == 0, docs.output
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {p.name for p in written} >= {"training.gke.yaml", "gkeflow.yaml", "components.md",
                                         "train_model.yaml"}
    assert {p.relative_to(tmp_path).as_posix(): _mode(p) for p in written} == {
        p.relative_to(tmp_path).as_posix(): 0o644 for p in written}
    # `gkeflow docs` wrote into the current directory, nowhere else.
    assert (tmp_path / "docs" / "components.md").is_file()
    assert "wrote docs/components.md" in docs.output


def test_file_system_errors_name_the_path_the_reason_and_the_option(tmp_path):
    read_only = OSError(errno.EROFS, os.strerror(errno.EROFS), "rofs/compiled")
    assert describe_file_system_error(read_only, "compile") == (
        "cannot write rofs/compiled: read-only file system; choose another folder with --output")
    wrapped = RuntimeError("compiling failed")
    wrapped.__cause__ = PermissionError(errno.EACCES, "Permission denied", "/srv/gkeflow.yaml")
    assert describe_file_system_error(wrapped, "init") == (
        "cannot write /srv/gkeflow.yaml: permission denied; choose another file with --path")
    assert describe_file_system_error(ConnectionResetError(104, "reset"), "run") is None

    (tmp_path / "a-file").write_text("x")
    runner = CliRunner()
    for args, expected in (
        (["compile", "--target", "gke", "--output", "/proc/gkeflow-x"],
         "cannot write /proc/gkeflow-x: no such file or directory (its folder cannot be "
         "created there); choose another folder with --output"),
        (["compile", "--target", "vertex", "--output", str(tmp_path / "a-file" / "compiled")],
         f"cannot write {tmp_path / 'a-file' / 'compiled'}: a file stands where a folder is "
         "needed; choose another folder with --output"),
        (["docs", "--output", str(tmp_path / "a-file" / "components.md")],
         "a file stands where a folder is needed; choose another file with --output"),
        (["init", "--path", str(tmp_path / "a-file" / "gkeflow.yaml")],
         "a file stands where a folder is needed; choose another file with --path"),
        (["run", "--output", str(tmp_path / "a-file" / "out")],
         "a file stands where a folder is needed; choose another folder with --output"),
    ):
        result = runner.invoke(main, args)
        assert result.exit_code == 1, (args, result.output)
        [line] = [line for line in result.output.splitlines() if line.startswith("Error:")]
        assert expected in line, (args, line)
        assert "Traceback" not in result.output and "Errno" not in result.output
