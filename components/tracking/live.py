"""train-model's curves in MLflow while it trains: a Keras callback that logs each epoch's
metrics (and the learning rate) into the step's run as the epoch ends, with the epoch as
``step`` and the time it ended, and system metrics under MLflow's own names: the GPU
sampler's figures for that epoch (``system/gpu_utilisation_percentage``,
``system/gpu_memory_usage_megabytes``; on a TPU host the chips' duty cycle and HBM,
``system/tpu_duty_cycle_percentage``, ``system/tpu_hbm_usage_megabytes``) and the host's
CPU and
memory (``system/cpu_utilization_percentage``, ``system/system_memory_usage_megabytes``,
read from ``/proc``).

Only the replica that publishes the step's outputs (the chief) logs; the others get no
callback. A failed call turns tracking off for the rest of the step (the Tracker's rule):
training never waits on, or fails because of, the tracking server.
"""

from __future__ import annotations

import math
from typing import Any

from gkeflow.components.tracking.client import Tracker

#: MLflow's own names for the system metrics it samples (``mlflow.system_metrics``).
SYSTEM_GPU_UTILISATION = "system/gpu_utilisation_percentage"
SYSTEM_GPU_MEMORY = "system/gpu_memory_usage_megabytes"
#: A TPU host's chips (libtpu's duty cycle and HBM in use), beside MLflow's GPU names.
SYSTEM_TPU_DUTY_CYCLE = "system/tpu_duty_cycle_percentage"
SYSTEM_TPU_MEMORY = "system/tpu_hbm_usage_megabytes"
SYSTEM_ACCELERATOR = {"gpu": (SYSTEM_GPU_UTILISATION, SYSTEM_GPU_MEMORY),
                      "tpu": (SYSTEM_TPU_DUTY_CYCLE, SYSTEM_TPU_MEMORY)}
SYSTEM_CPU = "system/cpu_utilization_percentage"
SYSTEM_MEMORY = "system/system_memory_usage_megabytes"


class HostFigures:
    """The host's CPU use between two calls and its memory in use, from ``/proc`` (Linux);
    empty elsewhere."""

    def __init__(self, proc: str = "/proc") -> None:
        self.proc = proc
        self._last: tuple[int, int] | None = None

    def _cpu(self) -> tuple[int, int] | None:
        try:
            with open(f"{self.proc}/stat", encoding="ascii") as handle:
                fields = [int(v) for v in handle.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields), idle

    def __call__(self) -> dict[str, float]:
        values: dict[str, float] = {}
        now = self._cpu()
        if now is not None and self._last is not None and now[0] > self._last[0]:
            total, idle = now[0] - self._last[0], now[1] - self._last[1]
            values[SYSTEM_CPU] = round(100.0 * (total - idle) / total, 2)
        self._last = now
        try:
            with open(f"{self.proc}/meminfo", encoding="ascii") as handle:
                info = {line.split(":")[0]: int(line.split()[1]) for line in handle
                        if line.split(":")[0] in ("MemTotal", "MemAvailable")}
            values[SYSTEM_MEMORY] = (info["MemTotal"] - info["MemAvailable"]) / 1024
        except (OSError, ValueError, KeyError, IndexError):
            pass
        return values


def learning_rate(model: Any) -> float | None:
    """The optimizer's learning rate now (a schedule evaluated at its step); None if unknown."""
    optimizer = getattr(model, "optimizer", None)
    rate = getattr(optimizer, "learning_rate", None)
    if rate is None:
        return None
    try:
        if callable(rate):
            rate = rate(optimizer.iterations)
        value = float(rate.numpy() if hasattr(rate, "numpy") else rate)
    except (TypeError, ValueError, AttributeError):
        return None
    return value if math.isfinite(value) else None


def epoch_values(logs: dict[str, Any] | None, model: Any = None) -> dict[str, float]:
    """An epoch's logged metrics (finite numbers only) and the learning rate."""
    values = {}
    for name, value in (logs or {}).items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        if math.isfinite(number):
            values[name] = number
    rate = learning_rate(model) if model is not None else None
    if rate is not None:
        values["learning_rate"] = rate
    return values


def live_curves(tracker: Tracker, sampler: Any = None):
    """A Keras callback logging each epoch into ``tracker``'s run as it ends; None when
    tracking is off."""
    if not tracker.enabled:
        return None
    import keras

    host = HostFigures()

    class LiveCurves(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            host()  # the CPU use is measured over the epoch

        def on_epoch_end(self, epoch, logs=None):
            values = {**epoch_values(logs, self.model), **host()}
            active = sampler is not None and getattr(sampler, "active", False)
            figures = sampler.report(0).epochs.get(epoch + 1) if active else None
            if figures is not None:
                busy, memory = SYSTEM_ACCELERATOR[getattr(sampler, "kind", "gpu")]
                values[busy] = figures.utilisation_mean_pct
                values[memory] = figures.memory_used_peak_mib
            tracker.log_metrics(values, step=epoch + 1)

    return LiveCurves()
