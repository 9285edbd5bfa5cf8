"""train_model's body on a multi-node job: only the chief publishes the step's outputs.

On Vertex AI every CustomJob replica runs the same step, whose KFP executor writes the
step's outputs once the function returns; a worker replica must leave before that, or it
would write its outputs over the chief's.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

SCRIPT = """
import json, os, sys
from pathlib import Path
from kfp.dsl import Artifact, Dataset, Metrics, Model
from gkeflow.components.train.component import train_model

dataset_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
train_model.python_func(
    dataset=Dataset(uri=str(dataset_dir)), schema=Artifact(uri=str(dataset_dir / "schema.json")),
    model=Model(uri=str(out / "model")), metrics=Metrics(uri=str(out / "metrics")),
    tensorboard=Artifact(uri=str(out / "tb")), epochs=1, batch_size=16)
(out / "returned").write_text("the executor would now write this replica's outputs")
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_only_the_chief_returns_to_the_executor(prepared_penguins, tmp_path, monkeypatch):
    dataset_dir, _ = prepared_penguins
    cluster = {"chief": [f"127.0.0.1:{_free_port()}"], "worker": [f"127.0.0.1:{_free_port()}"]}
    replicas = []
    for kind in ("chief", "worker"):
        monkeypatch.setenv("TF_CONFIG", json.dumps(
            {"cluster": cluster, "task": {"type": kind, "index": 0}}))
        monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
        replicas.append(subprocess.Popen(
            [sys.executable, "-c", SCRIPT, str(dataset_dir), str(tmp_path / kind)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    logs = [r.communicate(timeout=600)[0] for r in replicas]
    for replica, log in zip(replicas, logs, strict=True):
        assert replica.returncode == 0, log[-3000:]
    assert (tmp_path / "chief" / "returned").exists()
    assert (tmp_path / "chief" / "model" / "saved_model.pb").exists()
    assert not (tmp_path / "worker" / "returned").exists(), logs[1][-2000:]
    assert not (tmp_path / "worker" / "model").exists()
    assert "the chief publishes the step's outputs" in logs[1]
