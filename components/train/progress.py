"""Training's progress at the default verbosity (:mod:`gkeflow.components.progress`): the
Keras callback saying epochs, their figures and the time left."""

from __future__ import annotations

import time


def epoch_progress(epochs: int):
    """A Keras callback saying, at most every 10 s and at the last epoch, the epoch, its
    figures and the time left (:mod:`gkeflow.components.progress`)."""
    import keras

    from gkeflow.components.progress import Throttle, say

    class EpochProgress(keras.callbacks.Callback):
        # not on_train_begin: the multi-worker loop (train/multi_worker.py) calls epoch
        # hooks only
        def __init__(self):
            super().__init__()
            self.started, self.first, self.throttle = None, 0, Throttle()

        def on_epoch_begin(self, epoch, logs=None):
            if self.started is None:
                self.started, self.first = time.perf_counter(), epoch

        def on_epoch_end(self, epoch, logs=None):
            done = epoch + 1
            if self.started is None or not self.throttle.due(final=done >= epochs):
                return
            spent = time.perf_counter() - self.started
            per_epoch = spent / max(done - self.first, 1)
            shown = ", ".join(f"{k} {float(v):.4g}" for k, v in (logs or {}).items()
                              if k in ("loss", "val_loss", "accuracy", "val_accuracy", "rmse",
                                       "val_rmse"))
            say(f"epoch {done}/{epochs}: {shown}; {spent:.0f} s, at most "
                f"{per_epoch * (epochs - done):.0f} s left")

    return EpochProgress()
