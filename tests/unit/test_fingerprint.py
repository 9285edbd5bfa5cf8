"""The data fingerprint follows content, not names: unchanged data keeps it, any change to
the bytes (even with size and mtime restored) changes it."""

from __future__ import annotations

import os

import pytest

from gkeflow.components.fingerprint.logic import fingerprint
from gkeflow.components.prepare.logic import EMBEDDED_PENGUINS
from gkeflow.components.prepare.sources import DataError


def test_local_file_same_bytes_same_fingerprint_changed_bytes_new_one(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text("a,b\n1,x\n2,y\n")
    first = fingerprint(str(path))
    assert first.value.startswith("sha256:") and first.kind == "local"
    assert fingerprint(str(path)).value == first.value
    (item,) = first.items
    assert item["size"] == path.stat().st_size and len(item["blake2b"]) == 64

    stat = path.stat()
    path.write_text("a,b\n1,x\n2,z\n")  # same size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same mtime
    assert fingerprint(str(path)).value != first.value


def test_globs_and_directories_cover_every_file(tmp_path):
    data = tmp_path / "parts"
    data.mkdir()
    for index in range(3):
        (data / f"part-{index}.csv").write_text(f"a\n{index}\n")
    by_dir = fingerprint(str(data))
    by_glob = fingerprint(str(data / "*.csv"))
    assert len(by_dir.items) == len(by_glob.items) == 3
    before = by_glob.value
    (data / "part-3.csv").write_text("a\n3\n")  # a new file under the same glob
    assert fingerprint(str(data / "*.csv")).value != before
    with pytest.raises(DataError, match="no files match"):
        fingerprint(str(tmp_path / "nothing-*.csv"))


def test_embedded_data_has_a_stable_fingerprint():
    assert fingerprint(EMBEDDED_PENGUINS).value == fingerprint(EMBEDDED_PENGUINS).value


def test_user_module_fingerprint_follows_its_source(tmp_path):
    from gkeflow.components.fingerprint.logic import code_fingerprint

    assert code_fingerprint("") == ""
    module = tmp_path / "my_model.py"
    module.write_text("def build_model(schema, hparams):\n    return None\n")
    first = code_fingerprint(str(module))
    assert first.startswith("sha256:") and code_fingerprint(str(module)) == first
    module.write_text("def build_model(schema, hparams):\n    return 1\n")
    assert code_fingerprint(str(module)) != first
    # An importable module is found without importing it; an unknown one still gets a value.
    assert code_fingerprint("json") != code_fingerprint("no_such_module_xyz")
