"""train-model on Keras' JAX backend, run here on the CPU as it runs on TPU hosts: one process
end to end through the pipeline, two processes joined by jax.distributed training one model,
SIGTERM and resume, and the same SavedModel contract as the TensorFlow backend."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from gkeflow.components.evaluate.logic import evaluate
from gkeflow.components.prepare.logic import Schema
from gkeflow.components.train.checkpoint import load_state
from gkeflow.components.train.exported import MODEL_METADATA_FILE, ExportedModel
from tests.unit.test_train_resilience import parse_result, run_training, sigterm_after

pytestmark = pytest.mark.slow

#: What a step does first (train_model, the worker): the backend before Keras is imported.
SELECT = ("from gkeflow.components.train.backend import select_backend; "
          "select_backend(json.loads(sys.argv[4]).get('backend', 'auto'))")

#: Test accuracy the two backends may differ by on the same data, seed and epochs (their
#: initialisers draw different numbers, so the weights differ; the models must not).
ACCURACY_TOLERANCE = 0.05


def test_the_jax_backend_exports_the_same_saved_model_contract(prepared_penguins, tmp_path):
    data, _ = prepared_penguins
    params = {"epochs": 12, "early_stopping_patience": 0}
    accuracy = {}
    for backend in ("jax", "tensorflow"):
        code, out = run_training(data, tmp_path / backend, None, {**params, "backend": backend},
                                 setup=SELECT)
        assert code == 0, out[-3000:]
        assert f"backend: {backend};" in out
        report = evaluate(data, Schema.load(data), tmp_path / backend)
        accuracy[backend] = report.metrics.accuracy
    assert abs(accuracy["jax"] - accuracy["tensorflow"]) <= ACCURACY_TOLERANCE, accuracy
    assert accuracy["jax"] >= 0.9

    metadata = json.loads((tmp_path / "jax" / MODEL_METADATA_FILE).read_text())
    assert metadata["training_backend"] == "jax" and metadata["framework"] == "tensorflow"
    served = ExportedModel(tmp_path / "jax")
    # raw rows with missing and unseen values, as serving gets them
    labels = served.predict_rows([{"island": "Atlantis", "bill_length_mm": None},
                                  {"island": "Biscoe", "bill_length_mm": 47.0,
                                   "flipper_length_mm": 220.0, "body_mass_g": 5200.0}])
    assert set(labels) <= set(served.label_vocabulary)
    import tensorflow as tf

    loaded = tf.saved_model.load(str(tmp_path / "jax"))
    assert {"serve", "serving_default"} <= set(loaded.signatures)


def test_two_processes_joined_by_jax_distributed_train_one_model(prepared_penguins, tmp_path,
                                                                  monkeypatch):
    """Two hosts of two devices each: one mesh of four, one model, exported by the chief."""
    from gkeflow.components.scaleout.local_workers import run_local_workers

    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    data, _ = prepared_penguins
    lines: list[str] = []
    summary, published = run_local_workers(
        str(data), str(data), {"epochs": 4, "batch_size": 8, "backend": "jax",
                               "hidden_units": [16], "early_stopping_patience": 0},
        2, str(tmp_path / "root"), "run-1", "train-model", echo=lines.append,
        log_dir=tmp_path / "logs")
    assert summary["strategy"] == "JAX data parallel over 4 cpu device(s), 2 processes"
    assert summary["workers"] == 2 and summary["epochs_run"] == 4
    worker_log = (tmp_path / "logs" / "worker-1.log").read_text()
    assert "JAX data parallel over 4 cpu device(s), 2 processes" in worker_log
    assert "GKEFLOW_RESULT" not in worker_log, "only the chief publishes"
    model = ExportedModel(published)
    assert model.metadata["replicas"] == 4
    assert model.metadata["training_backend"] == "jax"
    from gkeflow.components.prepare.reader import load_split
    from gkeflow.components.train.inputs import to_model_inputs

    frame = load_split(data, "test", Schema.load(data))
    probabilities = model.predict_proba(to_model_inputs(frame, Schema.load(data)))
    assert probabilities.shape == (len(frame), 3)
    assert np.allclose(probabilities.sum(axis=1), 1.0, atol=1e-4)


@pytest.fixture(scope="module")
def churn_dataset(tmp_path_factory):
    """20k churn rows: epochs long enough to be interrupted in the middle on JAX too."""
    from gkeflow.components.prepare.logic import prepare
    from tests.conftest import make_churn_csv

    root = tmp_path_factory.mktemp("churn")
    prepare(str(make_churn_csv(root / "churn.csv", rows=20000, seed=11)), root / "dataset",
            "status")
    return root / "dataset"


def test_sigterm_on_jax_commits_a_checkpoint_and_a_retry_resumes(churn_dataset, tmp_path):
    big_dataset = churn_dataset
    ckpt = tmp_path / "ckpt"
    # an epoch on JAX takes a tenth of a second once compiled: enough epochs that the signal
    # lands while training, whatever the machine's load
    params = {"epochs": 30, "batch_size": 64, "early_stopping_patience": 0,
              "hidden_units": [32], "checkpoint_every_epochs": 0, "backend": "jax"}
    process = run_training(big_dataset, tmp_path / "model", ckpt, params, SELECT, wait=False)
    output = sigterm_after(process, "Epoch 2/30", pause_s=0.05)
    assert process.returncode == 143, output[-3000:]
    assert "Traceback" not in output
    assert "gkeflow: training stopped by SIGTERM in epoch " in output
    state = load_state(ckpt)
    assert state is not None and state.epochs_completed >= 1
    assert not (tmp_path / "model").exists()

    code, out = run_training(big_dataset, tmp_path / "model", ckpt, params, SELECT)
    assert code == 0, out[-3000:]
    resumed = parse_result(out)
    assert resumed["resumed_from_epoch"] == state.epochs_completed
    assert len(resumed["history"]["loss"]) == params["epochs"]
    assert "backend: jax;" in out
    assert ExportedModel(tmp_path / "model").predict_rows([{"plan": "basic"}])


def test_gkeflow_run_with_the_jax_backend_trains_evaluates_and_registers(tmp_path):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, "-m", "gkeflow.pipelines.cli.main", "run", "--param", "backend=jax",
         "--model-type", "mlp", "--epochs", "6", "--output", str(tmp_path / "out")],
        check=False, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "Training:  JAX on one cpu device" in done.stdout
    assert "Registered: penguins-classifier version 1" in done.stdout
    [model] = (tmp_path / "out").glob("runs/*/train-model/model")
    assert json.loads((model / MODEL_METADATA_FILE).read_text())["training_backend"] == "jax"
