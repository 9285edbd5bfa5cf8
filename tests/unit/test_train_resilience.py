"""Training as teams run it: real strategies, fail-fast GPU check, kill/SIGTERM and resume,
bring-your-own model, early stopping."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gkeflow.components.prepare.logic import prepare
from gkeflow.components.train.checkpoint import load_state
from gkeflow.components.train.exported import ExportedModel
from gkeflow.components.train.logic import TrainParams, train
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.slow

def run_training(data: Path, model: Path, ckpt: Path | None, params: dict, setup: str = "",
                 wait: bool = True, **environ: str):
    """Train in a process of its own (tests/unit/training_runner.py): its exit code and
    output, or (``wait=False``) the process."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **environ}
    if params.get("backend") == "jax":  # a Keras backend is chosen before Keras is imported
        env["KERAS_BACKEND"] = "jax"
    command = [sys.executable, "-m", "tests.unit.training_runner", str(data), str(model),
               str(ckpt or ""), json.dumps(params), setup]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env=env, cwd=REPO_ROOT)
    if not wait:
        return process
    out, _ = process.communicate(timeout=600)
    return process.returncode, out


def parse_result(out: str) -> dict:
    line = next(line for line in out.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


@pytest.fixture(scope="module")
def big_dataset(tmp_path_factory) -> Path:
    """~40k churn rows: epochs long enough (seconds) to kill training in the middle."""
    from tests.conftest import make_churn_csv

    root = tmp_path_factory.mktemp("big")
    csv = make_churn_csv(root / "churn.csv", rows=40000, seed=11)
    prepare(str(csv), root / "dataset", "status")
    return root / "dataset"


def test_mirrored_strategy_over_two_virtual_cpus(prepared_penguins, tmp_path):
    dataset_dir, _ = prepared_penguins
    setup = ("import tensorflow as tf; cpu = tf.config.list_physical_devices('CPU')[0]; "
             "tf.config.set_logical_device_configuration(cpu, "
             "[tf.config.LogicalDeviceConfiguration()] * 2)")
    code, out = run_training(dataset_dir, tmp_path / "model", None,
                             {"epochs": 2, "early_stopping_patience": 0}, setup)
    assert code == 0, out[-3000:]
    result = parse_result(out)
    assert result["strategy"].startswith("MirroredStrategy over 2 devices")
    assert ExportedModel(tmp_path / "model").predict_rows([{"island": "Biscoe"}])


def test_fails_fast_when_a_gpu_was_requested_but_none_is_visible(prepared_penguins, tmp_path):
    import tensorflow as tf

    if tf.config.list_physical_devices("GPU"):
        pytest.skip("a GPU is visible here: the fail-fast path cannot be exercised")
    dataset_dir, prepared = prepared_penguins
    started = time.perf_counter()
    with pytest.raises(RuntimeError) as err:
        train(dataset_dir, prepared.schema, tmp_path / "model", TrainParams(require_gpu=True))
    message = str(err.value)
    assert "asked for a GPU but TensorFlow sees none" in message
    assert "LD_LIBRARY_PATH=" in message and "nvidia-smi" in message
    assert time.perf_counter() - started < 30
    assert not (tmp_path / "model").exists()


def _wait_for_checkpoint(ckpt: Path, process, epochs: int, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        state = load_state(ckpt)
        if state and state.epochs_completed >= epochs:
            return
        if process.poll() is not None:
            raise AssertionError("training ended before it could be killed:\n"
                                 + process.stdout.read()[-3000:])
        time.sleep(0.05)
    raise AssertionError("no checkpoint appeared in time")


PARAMS = {"epochs": 5, "batch_size": 64, "early_stopping_patience": 0, "hidden_units": [32]}


def sigterm_after(process, marker: str, pause_s: float = 0.5) -> str:
    """SIGTERM ``process`` shortly after it prints ``marker`` (inside that epoch, as Spot
    preemption comes); its whole output once it ended."""
    deadline = time.time() + 300
    out_lines = []
    for line in process.stdout:
        out_lines.append(line)
        if marker in line or time.time() > deadline:
            break
    time.sleep(pause_s)
    process.send_signal(signal.SIGTERM)
    rest, _ = process.communicate(timeout=120)
    return "".join(out_lines) + rest


def test_killed_training_resumes_without_repeating_epochs(big_dataset, tmp_path):
    ckpt = tmp_path / "ckpt"
    process = run_training(big_dataset, tmp_path / "model", ckpt, PARAMS, wait=False)
    _wait_for_checkpoint(ckpt, process, 2)
    process.kill()
    process.wait()
    committed = load_state(ckpt).epochs_completed
    assert 2 <= committed < PARAMS["epochs"]
    assert not (tmp_path / "model").exists()

    code, out = run_training(big_dataset, tmp_path / "model", ckpt, PARAMS)
    assert code == 0, out[-3000:]
    resumed = parse_result(out)
    assert resumed["resumed_from_epoch"] == committed
    assert f"Epoch {committed + 1}/5" in out and f"Epoch {committed}/5" not in out
    assert len(resumed["history"]["loss"]) == PARAMS["epochs"]
    assert not ckpt.exists(), "checkpoints are removed after success"

    code, out = run_training(big_dataset, tmp_path / "reference", None, PARAMS)
    reference = parse_result(out)
    assert abs(resumed["metrics"]["eval_accuracy"] - reference["metrics"]["eval_accuracy"]) < 0.03
    assert ExportedModel(tmp_path / "model").predict_rows([{"plan": "basic"}])


def test_sigterm_writes_a_checkpoint_and_a_retry_resumes(big_dataset, tmp_path):
    ckpt = tmp_path / "ckpt"
    params = {**PARAMS, "checkpoint_every_epochs": 0}
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    process = run_training(big_dataset, tmp_path / "model", ckpt, params, wait=False,
                           TMPDIR=str(scratch))
    output = sigterm_after(process, "Epoch 2/5")
    assert process.returncode == 143, output[-3000:]
    leftovers = [p.name for p in scratch.iterdir() if p.name.startswith("gkeflow-")]
    assert leftovers == [], "the stopped training left its scratch folders"
    assert "Traceback" not in output
    [line] = [line for line in output.splitlines() if "stopped by SIGTERM" in line]
    assert line.startswith("gkeflow: training stopped by SIGTERM in epoch ")
    assert line.endswith("a retry resumes from it")
    state = load_state(ckpt)
    assert state is not None and state.epochs_completed >= 1

    code, out = run_training(big_dataset, tmp_path / "model", ckpt, params)
    assert code == 0, out[-3000:]
    assert parse_result(out)["resumed_from_epoch"] == state.epochs_completed


def test_bring_your_own_model(prepared_penguins, tmp_path):
    module = tmp_path / "my_model.py"
    module.write_text(textwrap.dedent("""
        import keras

        def build_model(schema, hparams):
            inputs = keras.Input(shape=(hparams["input_dim"],))
            x = keras.layers.Dense(16, activation="tanh", name="team_layer")(inputs)
            outputs = keras.layers.Dense(hparams["num_classes"], activation="softmax")(x)
            return keras.Model(inputs, outputs, name="team_model")
    """))
    dataset_dir, prepared = prepared_penguins
    result = train(dataset_dir, prepared.schema, tmp_path / "model",
                   TrainParams(epochs=6, user_module=str(module)))
    assert result.metrics["eval_accuracy"] > 0.7
    exported = ExportedModel(tmp_path / "model")
    assert exported.metadata["model"] == str(module)
    assert exported.predict_rows([{"island": "Dream", "bill_length_mm": None}])


def test_bring_your_own_model_with_wrong_output_is_a_clear_error(prepared_penguins, tmp_path):
    module = tmp_path / "bad_model.py"
    module.write_text(textwrap.dedent("""
        import keras

        def build_model(schema, hparams):
            inputs = keras.Input(shape=(hparams["input_dim"],))
            return keras.Model(inputs, keras.layers.Dense(1)(inputs))
    """))
    dataset_dir, prepared = prepared_penguins
    with pytest.raises(ValueError, match="must output 3 class probabilities"):
        train(dataset_dir, prepared.schema, tmp_path / "model",
              TrainParams(epochs=1, user_module=str(module)))
    with pytest.raises(AttributeError, match="no build_model"):
        (tmp_path / "empty.py").write_text("x = 1\n")
        train(dataset_dir, prepared.schema, tmp_path / "model",
              TrainParams(epochs=1, user_module=str(tmp_path / "empty.py")))


def test_early_stopping_keeps_the_best_epoch(prepared_penguins, tmp_path):
    dataset_dir, prepared = prepared_penguins
    result = train(dataset_dir, prepared.schema, tmp_path / "model",
                   TrainParams(epochs=60, learning_rate=0.05, early_stopping_patience=2),
                   checkpoint_dir=tmp_path / "ckpt")
    assert result.epochs_run < 60
    assert result.best_epoch == result.epochs_run - 2
    assert ExportedModel(tmp_path / "model").metadata["best_epoch"] == result.best_epoch


def test_wide_and_deep_trains(prepared_penguins, tmp_path):
    dataset_dir, prepared = prepared_penguins
    result = train(dataset_dir, prepared.schema, tmp_path / "model",
                   TrainParams(epochs=6, model_type="wide_deep"))
    assert result.metrics["eval_accuracy"] > 0.85


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_multi_worker_training_over_two_local_workers(prepared_penguins, tmp_path):
    """Two processes on loopback, as a Vertex AI worker pool would run them with TF_CONFIG."""
    dataset_dir, _ = prepared_penguins
    cluster = {"worker": [f"127.0.0.1:{_free_port()}", f"127.0.0.1:{_free_port()}"]}
    workers = []
    for index in range(2):
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        setup = f"import os; os.environ['TF_CONFIG'] = {tf_config!r}"
        workers.append(run_training(
            dataset_dir, tmp_path / f"model-{index}", tmp_path / "ckpt",
            {"epochs": 2, "early_stopping_patience": 0, "batch_size": 16}, setup, wait=False))
    outputs = [w.communicate(timeout=600)[0] for w in workers]
    for worker, out in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, out[-3000:]
    assert parse_result(outputs[0])["strategy"] == "MultiWorkerMirroredStrategy over 2 workers"
    assert ExportedModel(tmp_path / "model-0").predict_rows([{"island": "Biscoe"}])
    assert not (tmp_path / "model-1").exists(), "only the chief exports the model"
    assert not (tmp_path / "ckpt").exists(), "the chief removes its checkpoints after success"
