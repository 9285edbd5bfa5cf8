"""Preemption-safe training state: atomic checkpoints, resume, early stopping, SIGTERM.

A checkpoint directory holds ``model-<n>.keras`` (weights and optimizer state) and
``state.json`` (epochs completed, history, early-stopping state), which is written last and
atomically: it is the commit point, so a kill at any moment leaves either the previous
checkpoint or the new one, never a torn one. ``best.weights.h5`` holds the weights of the
best epoch for early stopping.

A checkpoint taken mid-epoch (every N steps, or on SIGTERM, which stops training after the
current batch) records the epoch as not completed; the resumed run restarts that epoch from
its first batch with the saved weights, so no completed epoch is repeated and at most the
work since the last checkpoint is lost.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import keras

STATE_FILE = "state.json"
BEST_WEIGHTS = "best.weights.h5"


class Preempted(RuntimeError):
    """Training stopped on SIGTERM after writing a checkpoint; a retry resumes from it."""


@dataclass
class CheckpointState:
    epochs_completed: int = 0
    steps_in_epoch: int = 0
    model_file: str = ""
    history: dict[str, list[float]] = field(default_factory=dict)
    best_value: float = math.inf
    best_epoch: int = 0
    wait: int = 0
    stopped_early: bool = False


def _write_json_atomic(path: Path, payload: dict) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".state-", dir=path.parent)
    with os.fdopen(fd, "w") as handle:
        json.dump(payload, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def load_state(directory: Path) -> CheckpointState | None:
    """The last committed checkpoint in ``directory``, or None."""
    path = Path(directory) / STATE_FILE
    if not path.exists():
        return None
    state = CheckpointState(**json.loads(path.read_text()))
    if not (Path(directory) / state.model_file).exists():
        return None
    return state


class TrainingCheckpoint(keras.callbacks.Callback):
    """Saves resumable checkpoints and applies early stopping on ``monitor``."""

    def __init__(self, directory: Path, state: CheckpointState | None = None,
                 every_epochs: int = 1, every_steps: int = 0, patience: int = 0,
                 monitor: str = "val_loss"):
        super().__init__()
        if every_epochs < 0 or every_steps < 0:
            raise ValueError("checkpoint frequencies must be >= 0")
        self.directory = Path(directory)
        self.state = state or CheckpointState()
        self.every_epochs = every_epochs
        self.every_steps = every_steps
        self.patience = patience
        self.monitor = monitor
        self.preempted = False
        self._epoch = self.state.epochs_completed
        self._step = 0

    # -- signals ------------------------------------------------------------------------------
    def install_sigterm_handler(self):
        """On SIGTERM (Spot preemption), checkpoint after the current batch and stop."""

        def handler(signum, frame):
            self.preempted = True
            if self.model is not None:
                self.model.stop_training = True  # Keras stops after the current batch

        return signal.signal(signal.SIGTERM, handler)

    # -- saving -------------------------------------------------------------------------------
    def save(self, epochs_completed: int, steps_in_epoch: int = 0) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        generation = f"model-{epochs_completed:05d}-{steps_in_epoch:07d}.keras"
        fd, tmp = tempfile.mkstemp(prefix=".model-", suffix=".keras", dir=self.directory)
        os.close(fd)
        self.model.save(tmp)
        os.replace(tmp, self.directory / generation)
        previous = self.state.model_file
        self.state.epochs_completed = epochs_completed
        self.state.steps_in_epoch = steps_in_epoch
        self.state.model_file = generation
        _write_json_atomic(self.directory / STATE_FILE, asdict(self.state))
        if previous and previous != generation:
            (self.directory / previous).unlink(missing_ok=True)

    def _save_best(self) -> None:
        fd, tmp = tempfile.mkstemp(prefix=".best-", suffix=".weights.h5", dir=self.directory)
        os.close(fd)
        self.model.save_weights(tmp)
        os.replace(tmp, self.directory / BEST_WEIGHTS)

    # -- callbacks ----------------------------------------------------------------------------
    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self._step = 0

    def on_epoch_end(self, epoch, logs=None):
        if self.preempted:
            self.save(epoch, self._step)  # epoch not completed: a retry restarts it
            return
        for name, value in (logs or {}).items():
            self.state.history.setdefault(name, []).append(float(value))
        value = (logs or {}).get(self.monitor)
        if value is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            if value < self.state.best_value:
                self.state.best_value = float(value)
                self.state.best_epoch = epoch + 1
                self.state.wait = 0
                self._save_best()
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
        path = self.directory / BEST_WEIGHTS
        if self.state.best_epoch and path.exists():
            self.model.load_weights(path)
            return True
        return False

    def remove(self) -> None:
        """Delete the checkpoints after a successful run."""
        shutil.rmtree(self.directory, ignore_errors=True)


class StepCheckpoint(TrainingCheckpoint):
    """Also checkpoints every ``every_steps`` batches.

    A separate class because a batch-level hook makes Keras hand every batch's logs to
    Python, which costs throughput when no step checkpoints are wanted.
    """

    def on_train_batch_end(self, batch, logs=None):
        self._step += 1
        if self.every_steps and self._step % self.every_steps == 0 and not self.preempted:
            self.save(self._epoch, self._step)


def make_checkpoint(directory: Path, state: CheckpointState | None = None, every_epochs: int = 1,
                    every_steps: int = 0, patience: int = 0,
                    monitor: str = "val_loss") -> TrainingCheckpoint:
    cls = StepCheckpoint if every_steps else TrainingCheckpoint
    return cls(directory, state, every_epochs=every_epochs, every_steps=every_steps,
               patience=patience, monitor=monitor)
