"""`gkeflow deploy` at a terminal: the model check loads TensorFlow without its native
start-up lines on standard error; --debug keeps them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path


def _gkeflow(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    executable = shutil.which("gkeflow", path=str(Path(sys.executable).parent))
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL",
                                                              "GKEFLOW_DEBUG")}
    return subprocess.run([executable, *args], cwd=cwd, capture_output=True, text=True,
                          check=False, timeout=300, env=env)


def test_the_model_check_prints_no_tensorflow_start_up_lines(trained_penguins, tmp_path):
    from gkeflow.components.register.logic import register

    model_dir, _ = trained_penguins
    register(model_dir, str(model_dir), "penguins", {"accuracy": 0.97}, "run-1",
             f"sqlite:///{tmp_path / 'registry.db'}")
    quiet = _gkeflow("deploy", "penguins@1", "--dry-run", "--output", str(tmp_path),
                     cwd=tmp_path)
    assert quiet.returncode == 0, quiet.stderr
    assert "would serve penguins@1 locally" in quiet.stdout
    assert "servable: serving_default takes" in quiet.stderr  # the command's own lines stay
    for native in ("absl", "oneDNN", "cuda", "I0000", "E0000"):
        assert native not in quiet.stderr, quiet.stderr
    loud = _gkeflow("--debug", "deploy", "penguins@1", "--dry-run", "--output", str(tmp_path),
                    cwd=tmp_path)
    assert loud.returncode == 0 and "servable" in loud.stderr
    assert "absl::InitializeLog" in loud.stderr or "oneDNN" in loud.stderr
