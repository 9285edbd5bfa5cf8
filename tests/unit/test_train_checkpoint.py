"""Checkpoint commits: a kill between any two writes leaves a whole checkpoint; SIGTERM
stops after the current batch, skips validation and commits; locations per run and task."""

from __future__ import annotations

import os
import signal

import keras
import numpy as np
import pytest

from gkeflow.components.train.checkpoint import (
    CheckpointState,
    Preempted,
    TrainingCheckpoint,
    exit_on_preemption,
    load_weights,
    read_checkpoint,
)
from gkeflow.components.train.store import LocalStore, resolve_checkpoint_location

#: val_loss per epoch: better at epochs 1, 2 and 4, worse at 3 and 5.
VAL_LOSSES = [1.0, 0.5, 0.7, 0.4, 0.6]


class Killed(BaseException):
    """The process dies here (raised instead of the next write)."""


class KillingStore:
    """Wraps a store and dies before its ``kill_at``-th write (put, commit or delete)."""

    def __init__(self, store, kill_at: int | None = None):
        self.store, self.kill_at, self.writes = store, kill_at, 0
        self.uri = store.uri

    def _write(self):
        self.writes += 1
        if self.kill_at is not None and self.writes >= self.kill_at:
            raise Killed(f"killed before write {self.writes}")

    def put(self, source, name):
        self._write()
        return self.store.put(source, name)

    def commit(self, state, token):
        self._write()
        return self.store.commit(state, token)

    def delete(self, name):
        self._write()
        return self.store.delete(name)

    def __getattr__(self, name):
        return getattr(self.store, name)


def tiny_model() -> keras.Model:
    inputs = keras.Input(shape=(3,))
    model = keras.Model(inputs, keras.layers.Dense(2, activation="softmax")(inputs))
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy")
    model.optimizer.build(model.trainable_variables)
    return model


def set_epoch_weights(model, value: float) -> None:
    model.set_weights([np.full_like(w, value) for w in model.get_weights()])


def run_epochs(store, every_epochs: int, start: CheckpointState | None = None, token=None,
               epochs: int = len(VAL_LOSSES)) -> TrainingCheckpoint:
    """Drive the callback as Keras does; the weights after epoch e are all e + 1."""
    model = tiny_model()
    checkpoint = TrainingCheckpoint(store, start, token, every_epochs=every_epochs,
                                    patience=0, monitor="val_loss")
    checkpoint.set_model(model)
    first = start.epochs_completed if start else 0
    for epoch in range(first, epochs):
        checkpoint.on_epoch_begin(epoch)
        set_epoch_weights(model, epoch + 1)
        checkpoint.on_epoch_end(epoch, {"loss": 10.0 - epoch, "val_loss": VAL_LOSSES[epoch]})
    return checkpoint


def check_consistent(store) -> CheckpointState | None:
    """The committed checkpoint is whole: model, best weights and state agree."""
    found = read_checkpoint(store)
    if found is None:
        return None
    state, _ = found
    done = state.epochs_completed
    model = keras.models.load_model(store.fetch(state.model_file,
                                                store.staging() / state.model_file))
    assert all(np.all(w == done) for w in model.get_weights()), "model is not the commit's"
    assert state.history["val_loss"] == VAL_LOSSES[:done]
    best = int(np.argmin(VAL_LOSSES[:done])) + 1
    assert (state.best_epoch, state.best_value) == (best, VAL_LOSSES[best - 1])
    weights = load_weights(store.fetch(state.best_file, store.staging() / "best.npz"))
    assert all(np.all(w == best) for w in weights), "best weights ran ahead of the state"
    return state


@pytest.mark.parametrize("every_epochs", [1, 2])
def test_a_kill_between_any_two_writes_leaves_a_whole_checkpoint(tmp_path, every_epochs):
    counting = KillingStore(LocalStore(tmp_path / "dry"))
    run_epochs(counting, every_epochs)
    total = counting.writes
    assert total >= 3 * (len(VAL_LOSSES) // every_epochs)
    committed = []
    for kill_at in range(1, total + 1):
        directory = tmp_path / f"kill-{kill_at}"
        with pytest.raises(Killed):
            run_epochs(KillingStore(LocalStore(directory), kill_at), every_epochs)
        state = check_consistent(LocalStore(directory))
        committed.append(state.epochs_completed if state else 0)
        # the retry resumes from what was committed and finishes with a whole checkpoint
        found = read_checkpoint(LocalStore(directory))
        resumed = run_epochs(LocalStore(directory), every_epochs, *(found or (None, None)))
        final = check_consistent(LocalStore(directory))
        assert final.epochs_completed == len(VAL_LOSSES) // every_epochs * every_epochs
        assert final.history["loss"] == [10.0 - e for e in range(final.epochs_completed)]
        # a commit by the retry deletes what the killed attempt left uncommitted
        if state is None or state.epochs_completed < final.epochs_completed:
            assert sorted(LocalStore(directory).names()) == sorted(
            {"state.json", resumed.state.model_file, resumed.state.best_file})
    assert committed == sorted(committed), "a later kill never leaves an older checkpoint"
    assert committed[0] == 0 and committed[-1] > 0


def test_best_weights_are_restored_from_the_commit_after_a_resume(tmp_path):
    store = LocalStore(tmp_path / "ckpt")
    run_epochs(store, 1, epochs=4)  # best so far: epoch 4
    state, token = read_checkpoint(store)
    checkpoint = run_epochs(store, 1, state, token)  # epoch 5 is worse
    assert checkpoint.state.best_epoch == 4
    fresh = TrainingCheckpoint(store, read_checkpoint(store)[0])
    fresh.set_model(tiny_model())
    assert fresh.restore_best()
    assert all(np.all(w == 4) for w in fresh.model.get_weights())


class SigtermAt(keras.callbacks.Callback):
    """Sends this process SIGTERM after a given training batch; counts validation batches."""

    def __init__(self, batch: int):
        super().__init__()
        self.batch, self.train_batches, self.test_batches = batch, 0, 0

    def on_train_batch_end(self, batch, logs=None):
        self.train_batches += 1
        if self.train_batches == self.batch:
            os.kill(os.getpid(), signal.SIGTERM)

    def on_test_batch_begin(self, batch, logs=None):
        self.test_batches += 1


def test_sigterm_stops_after_the_batch_skips_validation_and_commits(tmp_path, capsys):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(2000, 3)).astype("float32"), rng.integers(0, 2, 2000)
    model = tiny_model()
    store = LocalStore(tmp_path / "ckpt")
    checkpoint = TrainingCheckpoint(store, every_epochs=1, monitor="val_loss")
    probe = SigtermAt(batch=1 * 20 + 7)  # batch 8 of the second epoch (20 batches/epoch)
    previous = checkpoint.install_sigterm_handler()
    try:
        with pytest.raises(SystemExit) as exit_info, exit_on_preemption():
            model.fit(x, y, batch_size=100, epochs=5, validation_data=(x, y),
                      callbacks=[checkpoint, probe], verbose=0)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert exit_info.value.code == 143
    message = capsys.readouterr().err.strip()
    assert "\n" not in message and message.startswith("gkeflow: training stopped by SIGTERM")
    assert "a retry resumes from it" in message
    assert probe.train_batches == 27, "training went on after the batch in progress"
    assert probe.test_batches == 20, "validation ran after the signal (only epoch 1's ran)"
    state, _ = read_checkpoint(store)
    assert (state.epochs_completed, len(state.history["loss"])) == (1, 1)
    assert checkpoint.commit_after_signal_s is not None and checkpoint.commit_after_signal_s < 5
    resumed = keras.models.load_model(store.fetch(state.model_file, tmp_path / "m.keras"))
    for ours, theirs in zip(resumed.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_array_equal(ours, theirs)  # the weights after batch 27


def test_preempted_is_raised_by_train_function_callers():
    with pytest.raises(SystemExit) as exit_info, exit_on_preemption():
        raise Preempted("stopped")
    assert exit_info.value.code == 143


def test_checkpoint_location_per_run_task_and_key(tmp_path):
    mount = tmp_path / "mount"
    gs = resolve_checkpoint_location("", "gs://bucket/root/", "run-42", "train-model",
                                     mount=str(mount))
    assert gs == "gs://bucket/root/checkpoints/run-42/train-model"
    assert resolve_checkpoint_location("", "gs://bucket/root", "run-43", "train-model",
                                       mount=str(mount)) != gs
    # open-source KFP's default MinIO root: the run's volume when mounted, else none
    assert resolve_checkpoint_location("", "minio://mlpipeline/v2/artifacts", "run-1", "t",
                                       mount=str(mount)) == ""
    mount.mkdir()
    assert resolve_checkpoint_location("", "minio://mlpipeline/v2/artifacts", "run-1", "t",
                                       mount=str(mount)) == f"{mount}/run-1/t"
    # checkpoint_uri overrides every root; the key keeps trials apart
    for root in ("gs://bucket/root", "minio://mlpipeline/v2/artifacts", str(tmp_path)):
        assert resolve_checkpoint_location("gs://ckpt/x/", root, "run-1", "t",
                                           mount=str(mount)) == "gs://ckpt/x/run-1/t"
    trials = {resolve_checkpoint_location("gs://ckpt/x", "", "run-1", "t", key=f"trial {i}")
              for i in range(3)}
    assert trials == {f"gs://ckpt/x/run-1/t/trial-{i}" for i in range(3)}
    assert resolve_checkpoint_location("", str(tmp_path), "run/../1", "t", mount="") == (
        f"{tmp_path}/checkpoints/run-..-1/t")
    # no run id (or an unresolved placeholder): no stable location
    assert resolve_checkpoint_location("gs://ckpt/x", "", "", "t") == ""
    assert resolve_checkpoint_location("", "gs://b", "{{$.pipeline_job_uuid}}", "t") == ""
    for bad in ("s3://bucket/x", "relative/dir", "gs://"):
        with pytest.raises(ValueError, match="checkpoint_uri"):
            resolve_checkpoint_location(bad, "", "run", "t")


class CommitLog:
    """Wraps a store and records the ``steps_in_epoch`` of every commit."""

    def __init__(self, store):
        self.store, self.steps = store, []
        self.uri = store.uri

    def commit(self, state, token):
        self.steps.append((state["epochs_completed"], state["steps_in_epoch"]))
        return self.store.commit(state, token)

    def __getattr__(self, name):
        return getattr(self.store, name)


def test_step_checkpoints_count_steps_when_keras_runs_several_per_call(tmp_path):
    """With steps_per_execution=4 Keras reports every fourth step: checkpoints every 5 steps
    still land on the first report past each multiple of 5."""
    from gkeflow.components.train.checkpoint import make_checkpoint

    model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(2,
                                                                           activation="softmax")])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
                  steps_per_execution=4)
    store = CommitLog(LocalStore(tmp_path / "ckpt"))
    checkpoint = make_checkpoint(store, every_epochs=1, every_steps=5, monitor="loss")
    x, y = np.zeros((20, 3), "float32"), np.zeros((20,), "int32")
    model.fit(x, y, batch_size=1, epochs=1, callbacks=[checkpoint], verbose=0, shuffle=False)
    assert store.steps == [(0, 8), (0, 12), (0, 16), (0, 20), (1, 0)]
