"""Preemption-safe training state: atomic checkpoints, resume, early stopping, SIGTERM.

One commit covers everything a retry needs: the model with its optimizer state
(``model-<epoch>-<step>-<nonce>.keras``), the best epoch's weights
(``best-<epoch>-<nonce>.weights.npz``, only when a better epoch was seen since the last
commit) and ``state.json`` (epochs completed, history, early-stopping state and the names
of those two objects), written last: it is the commit point (see
:mod:`gkeflow.components.train.store`). Between commits the best weights are held in
memory, so they never run ahead of the committed state: a kill at any instant leaves the
previous checkpoint or the new one, whole.

A checkpoint taken mid-epoch (every N steps, or on SIGTERM) records the epoch as not
completed; the resumed run restarts that epoch from its first batch with the saved
weights, so no completed epoch is repeated and at most the work since the last checkpoint
is lost.

On SIGTERM (Spot preemption, node shutdown) training stops after the current batch,
skips the validation pass, commits, and raises :class:`Preempted`; :func:`exit_on_preemption`
turns that into a one-line message and exit code 143, which KFP and Vertex AI retry.
"""

from __future__ import annotations

import math
import shutil
import signal
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

import keras
import numpy as np

from gkeflow.components.train.preemption import (
    PREEMPTED_EXIT_CODE,
    Preempted,
    exit_on_preemption,
)
from gkeflow.components.train.store import STATE_FILE, LocalStore, fetched, open_store


@dataclass
class CheckpointState:
    epochs_completed: int = 0
    steps_in_epoch: int = 0
    model_file: str = ""
    best_file: str = ""
    history: dict[str, list[float]] = field(default_factory=dict)
    best_value: float = math.inf
    best_epoch: int = 0
    wait: int = 0
    stopped_early: bool = False


def read_checkpoint(store) -> tuple[CheckpointState, object] | None:
    """The last committed checkpoint in ``store`` and its commit token, or None."""
    found = store.read_state()
    if found is None:
        return None
    payload, token = found
    known = set(CheckpointState.__dataclass_fields__)
    state = CheckpointState(**{k: v for k, v in payload.items() if k in known})
    if not state.model_file or not store.exists(state.model_file):
        print(f"checkpoint state in {store.uri} names a missing model {state.model_file!r}; "
              "starting from scratch")
        return None
    return state, token


def load_state(location: Path | str) -> CheckpointState | None:
    """The last committed checkpoint at ``location`` (a directory or ``gs://`` URI), or None."""
    found = read_checkpoint(open_store(location))
    return found[0] if found else None


def save_weights(weights: list[np.ndarray], path: Path) -> None:
    with open(path, "wb") as handle:
        np.savez(handle, *weights)


def load_weights(path: Path) -> list[np.ndarray]:
    with np.load(path) as data:
        return [data[f"arr_{i}"] for i in range(len(data.files))]


class TrainingCheckpoint(keras.callbacks.Callback):
    """Commits resumable checkpoints and applies early stopping on ``monitor``."""

    def __init__(self, store, state: CheckpointState | None = None, token: object = None,
                 every_epochs: int = 1, every_steps: int = 0, patience: int = 0,
                 monitor: str = "val_loss"):
        super().__init__()
        if every_epochs < 0 or every_steps < 0:
            raise ValueError("checkpoint frequencies must be >= 0")
        self.store = store if not isinstance(store, (str, Path)) else open_store(store)
        self.state = state or CheckpointState()
        self.token = token
        self.every_epochs = every_epochs
        self.every_steps = every_steps
        self.patience = patience
        self.monitor = monitor
        self.preempted = False
        self.signal_at: float | None = None
        self.commit_after_signal_s: float | None = None
        self._epoch = self.state.epochs_completed
        self._step = 0
        self._best_pending: list[np.ndarray] | None = None  # better weights not yet committed
        self._best_seen: list[np.ndarray] | None = None
        self._last_commit_started = -math.inf

    # -- signals ------------------------------------------------------------------------------
    def install_sigterm_handler(self):
        """On SIGTERM: finish the current batch, skip validation, commit and stop.

        Only Python's main thread can handle signals; in any other (a Ray Tune trial)
        nothing is installed (None): the trial resumes from its last committed epoch."""
        import threading

        if threading.current_thread() is not threading.main_thread():
            return None

        def handler(signum, frame):
            if self.preempted:
                return
            self.preempted = True
            self.signal_at = time.perf_counter()
            # Not ``self.model``: on Keras' JAX backend reading it syncs the training state
            # into the model, which from a signal handler (between any two statements of
            # the fit loop) can install buffers already donated to the next step.
            model = getattr(self, "_model", None)
            if model is not None:
                model.stop_training = True  # Keras stops after the current batch
                model.stop_evaluating = True  # ...and a running validation pass

        return signal.signal(signal.SIGTERM, handler)

    # -- saving -------------------------------------------------------------------------------
    def save(self, epochs_completed: int, steps_in_epoch: int = 0) -> None:
        """Commit the model, optimizer state, pending best weights and ``state.json``."""
        self._last_commit_started = time.perf_counter()
        staging = self.store.staging()
        try:
            nonce = uuid.uuid4().hex[:8]
            model_file = f"model-{epochs_completed:05d}-{steps_in_epoch:07d}-{nonce}.keras"
            self.model.save(staging / "model.keras")
            self.store.put(staging / "model.keras", model_file)
            best_file = self.state.best_file
            if self._best_pending is not None:
                best_file = f"best-{self.state.best_epoch:05d}-{nonce}.weights.npz"
                save_weights(self._best_pending, staging / "best.npz")
                self.store.put(staging / "best.npz", best_file)
            committed = {**asdict(self.state), "epochs_completed": epochs_completed,
                         "steps_in_epoch": steps_in_epoch, "model_file": model_file,
                         "best_file": best_file}
            self.token = self.store.commit(committed, self.token)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        self.state.epochs_completed = epochs_completed
        self.state.steps_in_epoch = steps_in_epoch
        self.state.model_file = model_file
        self.state.best_file = best_file
        self._best_pending = None
        keep = {STATE_FILE, model_file, best_file}
        for name in self.store.names():  # older checkpoints, uncommitted objects of kills
            if name not in keep:
                self.store.delete(name)
        if self.signal_at is not None and self.commit_after_signal_s is None:
            self.commit_after_signal_s = time.perf_counter() - self.signal_at

    def _stop_preempted(self, epoch: int, steps: int) -> None:
        if self._last_commit_started < (self.signal_at or 0.0):  # nothing committed since
            self.save(epoch, steps)
        raise Preempted(
            f"training stopped by SIGTERM in epoch {epoch + 1}; checkpoint "
            f"({self.state.epochs_completed} epochs completed) committed to {self.store.uri} "
            f"{self.commit_after_signal_s or 0.0:.2f} s after the signal; a retry resumes "
            "from it"
        )

    def stop_if_preempted(self) -> None:
        """After ``fit``: a signal that came during a commit stops training here."""
        if self.preempted:
            self._stop_preempted(self.state.epochs_completed, 0)

    # -- callbacks ----------------------------------------------------------------------------
    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self._step = 0

    def on_test_begin(self, logs=None):
        if self.preempted:  # the validation pass after a stopped epoch: skip it
            self._stop_preempted(self._epoch, self._step)

    def on_epoch_end(self, epoch, logs=None):
        if self.preempted:
            self._stop_preempted(epoch, self._step)
        for name, value in (logs or {}).items():
            self.state.history.setdefault(name, []).append(float(value))
        value = (logs or {}).get(self.monitor)
        if value is not None:
            if value < self.state.best_value:
                self.state.best_value = float(value)
                self.state.best_epoch = epoch + 1
                self.state.wait = 0
                self._best_pending = [np.array(w) for w in self.model.get_weights()]
                self._best_seen = self._best_pending
            else:
                self.state.wait += 1
                if self.patience and self.state.wait >= self.patience:
                    self.state.stopped_early = True
                    self.model.stop_training = True
        done = epoch + 1
        if self.state.stopped_early or (self.every_epochs and done % self.every_epochs == 0):
            self.save(done)
        else:
            self.state.epochs_completed = done  # kept in memory; committed at the next save

    def restore_best(self) -> bool:
        """Load the best epoch's weights into the model, when early stopping tracked one."""
        if not self.state.best_epoch:
            return False
        weights = self._best_seen
        if weights is None and self.state.best_file:
            with fetched(self.store, self.state.best_file) as path:
                weights = load_weights(path)
        if weights is None:
            return False
        if self.model is None:
            raise RuntimeError("restore_best() needs the model: call set_model() first")
        self.model.set_weights(weights)
        return True

    def remove(self) -> None:
        """Delete the checkpoints after a successful run."""
        self.store.remove_all()


class StepCheckpoint(TrainingCheckpoint):
    """Also checkpoints every ``every_steps`` batches.

    A separate class because a batch-level hook makes Keras hand every batch's logs to
    Python, which costs throughput when no step checkpoints are wanted.
    """

    def on_train_batch_end(self, batch, logs=None):
        # With steps_per_execution > 1 Keras calls this once per execution, with the index
        # of its last step: count steps from that index, and save on crossing a multiple.
        before = self._step
        self._step = batch + 1 if isinstance(batch, int) and batch >= before else before + 1
        crossed = self._step // self.every_steps > before // self.every_steps \
            if self.every_steps else False
        if crossed and not self.preempted:
            self.save(self._epoch, self._step)


def make_checkpoint(store, state: CheckpointState | None = None, token: object = None,
                    every_epochs: int = 1, every_steps: int = 0, patience: int = 0,
                    monitor: str = "val_loss") -> TrainingCheckpoint:
    cls = StepCheckpoint if every_steps else TrainingCheckpoint
    return cls(store, state, token, every_epochs=every_epochs, every_steps=every_steps,
               patience=patience, monitor=monitor)


__all__ = ["PREEMPTED_EXIT_CODE", "CheckpointState", "LocalStore", "Preempted",
           "TrainingCheckpoint",
           "exit_on_preemption", "load_state", "make_checkpoint", "read_checkpoint"]
