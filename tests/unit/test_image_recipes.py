"""The pieces the images' build runs: prune.sh on an installed environment, and
gkeflow.images.warm, which imports what the steps import and fails the build otherwise."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gkeflow.images import warm
from tests.conftest import REPO_ROOT

PRUNE = REPO_ROOT / "images" / "prune.sh"

REMOVED = ["tensorflow/include/tensorflow/core/framework/op.h", "pandas/tests/test_x.py",
           "pyarrow/tests/test_x.py", "pyarrow/include/arrow/api.h",
           "numpy/core/tests/test_x.py", "numpy/linalg/tests/test_y.py",
           "pyarrow/_flight.cpython-311-x86_64-linux-gnu.so", "pyarrow/libarrow_flight.so.2600",
           "pyarrow/libarrow_python_flight.so.2600", "pyarrow/_s3fs.so",
           "pyarrow/libarrow_s3.so.2600", "pyarrow/_pyarrow_cpp_tests.so",
           "tensorboard_data_server/bin/server"]
#: Native libraries that stay: stripped, except auditwheel's *.libs/ and the paths passed.
STRIPPED = ["pyarrow/_csv.so", "pyarrow/libarrow.so.2600", "tensorflow/libtensorflow_cc.so.2"]
AS_PUBLISHED = ["numpy.libs/libopenblas.so", "nvidia/cudnn/lib/libcudnn.so.9"]


@pytest.mark.skipif(shutil.which("strip") is None, reason="needs binutils' strip")
def test_prune_removes_what_no_step_runs_and_strips_the_rest(tmp_path):
    site = tmp_path / "site-packages"
    library = next((Path(sys.base_prefix) / "lib").rglob("_json*.so"))  # any real ELF object
    for name in REMOVED + ["tensorflow/__init__.py", "numpy/core/multiarray.py"]:
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_bytes(b"text\n")
    for name in STRIPPED + AS_PUBLISHED:
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(library, site / name)
    done = subprocess.run(["sh", str(PRUNE), str(site), str(site / "nvidia")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert [name for name in REMOVED if (site / name).exists()] == []
    assert (site / "tensorflow/__init__.py").exists()
    assert (site / "numpy/core/multiarray.py").exists()
    size = library.stat().st_size
    assert [(site / n).stat().st_size < size for n in STRIPPED] == [True] * len(STRIPPED)
    assert [(site / n).stat().st_size for n in AS_PUBLISHED] == [size] * len(AS_PUBLISHED)


def _warm_with(tmp_path, monkeypatch, module: str, source: str) -> int:
    """warm.main with one user module ``module`` holding ``source``."""
    (tmp_path / f"{module}.py").write_text(source)
    (tmp_path / "modules.txt").write_text(f"{module}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return warm.main([str(tmp_path / "modules.txt")])


def test_warm_imports_the_suite_and_the_users_modules(tmp_path, monkeypatch, capsys):
    assert _warm_with(tmp_path, monkeypatch, "team_features", "SCALE = 2\n") == 0
    out = capsys.readouterr().out
    assert out.startswith(f"imported {len(warm.suite_modules()) + len(warm.LAZY) + 1} ")
    assert "gkeflow.components.train.logic" in warm.suite_modules()
    assert "team_features" in sys.modules


def test_warm_fails_the_build_naming_the_module_that_cannot_be_imported(tmp_path, monkeypatch,
                                                                        capsys):
    source = "import not_installed_anywhere\n"
    assert _warm_with(tmp_path, monkeypatch, "broken_features", source) == 1
    err = capsys.readouterr().err
    assert err.startswith("cannot import broken_features: ModuleNotFoundError")
