"""GPU utilisation during training: NVML sampled on a daemon thread, summarised per epoch
and for the whole run (TPU chips: :mod:`tpu_utilisation`, the same figures from libtpu).

:class:`GpuSampler` reads every visible GPU's utilisation and memory through NVML
(``nvidia-ml-py``, module ``pynvml``; injected as ``nvml`` so tests pass a fake) every
``interval_s`` seconds, off the training thread. Each read takes every utilisation sample
the driver kept since the last one (``nvmlDeviceGetSamples``; one per 200 ms on an H200), so
the figures cover all of the time, and epoch marks file the samples before them under the
epoch that ends: the instantaneous rate alone read a GPU busy half the time as 36-82% on an
H200 (see bench/RESULTS.md). A read keeps its samples as one tuple of small integers (about
8 bytes a sample), so a days-long run stays small. Where the driver keeps no samples, the
instantaneous rate is read at each interval.

It never fails training: without NVML, a driver or a GPU it records nothing and says so in
one line; an NVML error mid-run stops sampling with one line and keeps what was read.
:meth:`GpuSampler.report` gives the mean, p10 (nearest rank) and peak per epoch and for the
run, and a one-line warning when the run's mean utilisation is below a threshold.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_INTERVAL_S = 5.0
MIN_INTERVAL_S = 1.0
MAX_INTERVAL_S = 60.0
DEFAULT_WARN_BELOW_PCT = 40.0
MIB = 2**20
#: nvml.h: nvmlSamplingType_t NVML_GPU_UTILIZATION_SAMPLES, and nvmlValueType_t -> the
#: field of nvmlValue_t that holds the value.
GPU_UTILIZATION_SAMPLES = 1
_VALUE_FIELDS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")

#: NVML errors at start-up, by class name, as a person reads them.
_START_ERRORS = {
    "NVMLError_LibraryNotFound": "the NVML library (libnvidia-ml) is not in this container",
    "NVMLError_DriverNotLoaded": "the NVIDIA driver is not loaded",
    "NVMLError_NoPermission": "no permission to read the GPUs through NVML",
}


def clamp_interval(seconds: float) -> float:
    """The sampling interval, kept within [MIN_INTERVAL_S, MAX_INTERVAL_S]."""
    return min(max(float(seconds), MIN_INTERVAL_S), MAX_INTERVAL_S)


def percentile(values: Sequence[int], pct: int) -> int:
    """The nearest-rank percentile: the smallest value with at least ``pct``% of values at
    or below it (exact on integers, no interpolation)."""
    if not values:
        raise ValueError("no values")
    if not 0 < pct <= 100:
        raise ValueError(f"pct must be in (0, 100]; got {pct}")
    ordered = sorted(values)
    return ordered[(pct * len(ordered) + 99) // 100 - 1]


@dataclass(frozen=True)
class Reading:
    """One GPU at one read: the utilisation of each driver sample since the last read (or
    the instantaneous rate where the driver keeps none), and the memory in use."""

    device: int
    utilisation_pct: tuple[int, ...]
    memory_used_bytes: int
    memory_total_bytes: int


@dataclass(frozen=True)
class Figures:
    """Mean, p10 and peak: of utilisation over every driver sample (or instantaneous rate)
    of every GPU, of memory over every read of every GPU."""

    readings: int
    utilisation_mean_pct: float
    utilisation_p10_pct: int
    utilisation_peak_pct: int
    memory_used_mean_mib: float
    memory_used_p10_mib: float
    memory_used_peak_mib: float
    memory_total_mib: float

    @classmethod
    def of(cls, readings: Sequence[Reading]) -> Figures | None:
        if not readings:
            return None
        used = [r.memory_used_bytes for r in readings]
        busy = [pct for r in readings for pct in r.utilisation_pct]
        if not busy:
            return None
        return cls(
            readings=len(busy),
            utilisation_mean_pct=sum(busy) / len(busy),
            utilisation_p10_pct=percentile(busy, 10),
            utilisation_peak_pct=max(busy),
            memory_used_mean_mib=sum(used) / len(used) / MIB,
            memory_used_p10_mib=percentile(used, 10) / MIB,
            memory_used_peak_mib=max(used) / MIB,
            memory_total_mib=max(r.memory_total_bytes for r in readings) / MIB,
        )

    def metrics(self, prefix: str = "", kind: str = "gpu") -> dict[str, float]:
        """Scalar metrics named ``<prefix><kind>_utilisation_mean_pct`` and so on."""
        return {f"{prefix}{kind}_{name}": float(value) for name, value in asdict(self).items()
                if name != "readings"}


#: How the one-line findings name each kind of accelerator and its busy figure.
DEVICE_WORDS = {"gpu": ("GPU", "GPU(s)", "utilisation"),
                "tpu": ("TPU", "TPU chip(s)", "duty cycle")}


def low_utilisation_warning(mean_pct: float, devices: int, threshold_pct: float,
                            kind: str = "gpu") -> str:
    """The one line said when a run's accelerators were mostly idle."""
    name, units, figure = DEVICE_WORDS[kind]
    return (f"{name} {figure} averaged {mean_pct:.0f}% over {devices} {units}, below "
            f"{threshold_pct:g}%: the {name}s mostly waited for work; the input pipeline is the "
            f"likely bottleneck (reading or preprocessing; try cache_dataset=on) or the batch "
            f"size is too small to keep them busy (raise batch_size)")


@dataclass
class UtilisationReport:
    """What the sampler found. ``status`` is ``sampled`` or ``missing`` (never 0%)."""

    status: str
    reason: str = ""
    devices: int = 0
    interval_s: float = DEFAULT_INTERVAL_S
    samples: int = 0
    run: Figures | None = None
    epochs: dict[int, Figures] = field(default_factory=dict)
    threshold_pct: float = DEFAULT_WARN_BELOW_PCT
    warning: str = ""
    kind: str = "gpu"  # or tpu: utilisation is then each chip's duty cycle

    def metrics(self) -> dict[str, float]:
        """Whole-run figures as scalar metrics; only ``<kind>_utilisation_missing`` = 1 when
        nothing was sampled."""
        k = self.kind
        if self.run is None:
            return {f"{k}_utilisation_missing": 1.0}
        return {f"{k}_utilisation_missing": 0.0, f"{k}_count": float(self.devices),
                f"{k}_utilisation_samples": float(self.samples), **self.run.metrics(kind=k)}

    def epoch_metrics(self) -> dict[str, float]:
        """Per-epoch figures as ``epoch_<n>_<kind>_...`` scalar metrics (epochs from 1)."""
        values: dict[str, float] = {}
        for epoch, figures in sorted(self.epochs.items()):
            values.update(figures.metrics(f"epoch_{epoch}_", self.kind))
        return values

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: status, reason, run and per-epoch figures, warning."""
        data = asdict(self)
        data["epochs"] = {str(k): asdict(v) for k, v in sorted(self.epochs.items())}
        return data

    def summary_line(self) -> str:
        """One line for the log: the run's figures, or why there are none."""
        _, units, figure = DEVICE_WORDS[self.kind]
        if self.run is None:
            return f"{self.kind} {figure}: missing ({self.reason})"
        r = self.run
        line = (f"{self.kind} {figure} over {self.devices} {units}, {self.samples} samples: "
                f"mean "
                f"{r.utilisation_mean_pct:.1f}%, p10 {r.utilisation_p10_pct}%, peak "
                f"{r.utilisation_peak_pct}%; memory used peak {r.memory_used_peak_mib:.0f} of "
                f"{r.memory_total_mib:.0f} MiB")
        return line + (f" ({self.reason})" if self.reason else "")


def visible_indices(count: int, cuda_visible_devices: str | None,
                    uuid_of: Callable[[int], str] | None = None) -> list[int]:
    """NVML indices of the GPUs CUDA may use: all of them unless ``CUDA_VISIBLE_DEVICES``
    lists some (indices, or UUIDs when ``uuid_of`` can read them); CUDA stops at the first
    entry it cannot use, and so does this."""
    if cuda_visible_devices is None:
        return list(range(count))
    chosen: list[int] = []
    for token in (t.strip() for t in cuda_visible_devices.split(",")):
        if token.isdigit() and int(token) < count:
            index = int(token)
        elif token.startswith("GPU-") and uuid_of is not None:
            matches = [i for i in range(count) if uuid_of(i).startswith(token)]
            if len(matches) != 1:
                break
            index = matches[0]
        else:
            break
        if index in chosen:
            break
        chosen.append(index)
    return chosen


def describe_error(exc: BaseException) -> str:
    return _START_ERRORS.get(type(exc).__name__, f"{type(exc).__name__}: {exc}")


class GpuSampler:
    """Samples every visible GPU on a daemon thread between :meth:`start` and :meth:`stop`.

    ``nvml``: the NVML module (default: ``import pynvml``). ``wait(seconds)`` pauses between
    samples and returns True to stop (default: the stop event's wait). ``log``: one-line
    messages (default: print).
    """

    kind = "gpu"  # the accelerator's name in metrics and log lines
    _figure = "utilisation"

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S, nvml: Any = None,
                 log: Callable[[str], None] | None = None,
                 wait: Callable[[float], bool] | None = None,
                 environ: dict[str, str] | None = None):
        self.interval_s = clamp_interval(interval_s)
        self._nvml = nvml
        self._log = log or (lambda line: print(line, flush=True))
        self._stop = threading.Event()
        self._wait = wait or self._stop.wait
        self._environ = os.environ if environ is None else environ
        self._lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._readings: list[tuple[int | None, Reading]] = []
        self._samples = 0
        self._epoch: int | None = None
        self._handles: list[tuple[int, Any]] = []
        self._seen: dict[int, int] | None = None  # driver sample timestamps read up to
        self._reason = ""
        self._thread: threading.Thread | None = None
        if self.interval_s != float(interval_s):
            self._log(f"{self.kind} {self._figure}: sampling interval {interval_s:g}s "
                      f"clamped to "
                      f"{self.interval_s:g}s (allowed {MIN_INTERVAL_S:g}-{MAX_INTERVAL_S:g}s)")

    @property
    def active(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> GpuSampler:
        """Open NVML and start sampling; without NVML or a GPU, log why and do nothing."""
        nvml = self._nvml
        if nvml is None:
            try:
                import pynvml as nvml
            except ImportError:
                return self._missing("nvidia-ml-py (pynvml) is not installed")
            self._nvml = nvml
        try:
            nvml.nvmlInit()
        except Exception as exc:  # noqa: BLE001 - NVMLError, or a library that fails oddly
            return self._missing(describe_error(exc))
        try:
            count = nvml.nvmlDeviceGetCount()
            uuid_of = getattr(nvml, "nvmlDeviceGetUUID", None)
            indices = visible_indices(
                count, self._environ.get("CUDA_VISIBLE_DEVICES"),
                (lambda i: str(uuid_of(nvml.nvmlDeviceGetHandleByIndex(i)))) if uuid_of else None)
            self._handles = [(i, nvml.nvmlDeviceGetHandleByIndex(i)) for i in indices]
            self._seen = self._latest_samples()
        except Exception as exc:  # noqa: BLE001
            self._shutdown()
            return self._missing(describe_error(exc))
        if not self._handles:
            self._shutdown()
            return self._missing("NVML sees no GPU" if not count else
                                 "CUDA_VISIBLE_DEVICES hides every GPU")
        self._log(f"gpu utilisation: sampling {len(self._handles)} GPU(s) every "
                  f"{self.interval_s:g}s")
        self._thread = threading.Thread(target=self._run, name="gkeflow-gpu-sampler",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling and wait for the thread (bounded); safe to call more than once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 10)

    def begin_epoch(self, epoch: int) -> None:
        """Readings from now on belong to ``epoch`` (counted from 1); what the driver sampled
        before now still goes to the epoch before."""
        self._close_interval()
        self._epoch = epoch

    def end_epoch(self) -> None:
        self._close_interval()
        self._epoch = None

    def sample_once(self, boundary: bool = False) -> None:
        """Read every visible GPU now (NVML errors propagate): one reading per driver sample
        since the last read, else (not at an epoch ``boundary``) the instantaneous rate."""
        nvml = self._nvml
        with self._read_lock:
            epoch, readings = self._epoch, []
            for index, handle in self._handles:
                values = self._driver_values(index, handle)
                if not values and not boundary:
                    values = (int(nvml.nvmlDeviceGetUtilizationRates(handle).gpu),)
                if values:
                    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                    readings.append(Reading(index, values, int(memory.used),
                                            int(memory.total)))
            with self._lock:
                self._readings.extend((epoch, r) for r in readings)
                self._samples += 0 if boundary else 1

    def _close_interval(self) -> None:
        """At an epoch mark: file what the driver sampled so far under the epoch ending."""
        if not self.active or self._seen is None:
            return
        try:
            self.sample_once(boundary=True)
        except Exception:  # noqa: BLE001, S110 - the sampling thread meets and says the error
            pass

    def _samples_since(self, handle: Any, since: int) -> list[tuple[int, float]] | None:
        """The driver's utilisation samples after ``since`` (µs) as (timestamp, %); ``[]``
        when there is none yet, None when this driver or binding keeps none."""
        get = getattr(self._nvml, "nvmlDeviceGetSamples", None)
        if get is None:
            return None
        try:
            value_type, samples = get(handle, GPU_UTILIZATION_SAMPLES, since)
        except Exception as exc:  # noqa: BLE001 - pynvml's error classes, matched by name
            name = type(exc).__name__
            if name == "NVMLError_NotFound":
                return []
            if name == "NVMLError_NotSupported":
                return None
            raise
        field_name = _VALUE_FIELDS[value_type] if 0 <= value_type < len(_VALUE_FIELDS) else None
        if field_name is None:
            return None
        return [(int(s.timeStamp), float(getattr(s.sampleValue, field_name))) for s in samples
                if int(s.timeStamp) > since]

    def _latest_samples(self) -> dict[int, int] | None:
        """Each GPU's newest driver sample time, so readings count only what follows; None
        (the instantaneous rate from then on) when the driver keeps none or cannot say."""
        seen: dict[int, int] = {}
        for index, handle in self._handles:
            try:
                samples = self._samples_since(handle, 0)
            except Exception:  # noqa: BLE001 - an odd answer here costs only the averaging
                return None
            if samples is None:
                return None
            seen[index] = max((t for t, _ in samples), default=0)
        return seen

    def _driver_values(self, index: int, handle: Any) -> tuple[int, ...]:
        """The driver's utilisation samples since the last read (oldest first)."""
        if self._seen is None:
            return ()
        samples = self._samples_since(handle, self._seen[index])
        if samples is None:
            self._seen = None
            return ()
        if samples:
            self._seen[index] = max(t for t, _ in samples)
        return tuple(round(v) for _, v in sorted(samples))

    def _run(self) -> None:
        try:
            while True:  # a first sample always, then one per interval until told to stop
                self.sample_once()
                if self._wait(self.interval_s):
                    break
        except Exception as exc:  # noqa: BLE001 - never fail training over a metric
            self._reason = f"sampling stopped after {self._samples} samples: {describe_error(exc)}"
            self._log(f"{self.kind} {self._figure}: {self._reason}")
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001, S110 - closing is best effort
            pass

    def _missing(self, reason: str) -> GpuSampler:
        self._reason = reason
        self._log(f"{self.kind} {self._figure}: not sampled ({reason}); the metrics record "
                  "it as missing")
        return self

    def report(self, warn_below_pct: float = DEFAULT_WARN_BELOW_PCT) -> UtilisationReport:
        """Figures so far, with the low-utilisation warning (``warn_below_pct`` 0 = off)."""
        with self._lock:
            readings, samples = list(self._readings), self._samples
        run = Figures.of([r for _, r in readings])
        by_epoch: dict[int, list[Reading]] = {}
        for epoch, reading in readings:
            if epoch is not None:
                by_epoch.setdefault(epoch, []).append(reading)
        reason = self._reason or ("" if run else "no sample was taken")
        report = UtilisationReport(
            status="sampled" if run else "missing", reason=reason,
            devices=len(self._handles), interval_s=self.interval_s, samples=samples, run=run,
            epochs={e: Figures.of(rs) for e, rs in by_epoch.items()},
            threshold_pct=warn_below_pct, kind=self.kind)
        if run is not None and run.utilisation_mean_pct < warn_below_pct:
            report.warning = low_utilisation_warning(run.utilisation_mean_pct,
                                                     len(self._handles), warn_below_pct,
                                                     self.kind)
        return report

    def callback(self, log_dir: Path | None = None):
        """A Keras callback marking epochs (and, with ``log_dir``, writing each epoch's
        figures as TensorBoard scalars under ``<log_dir>/<kind>``)."""
        import keras

        sampler = self
        writer = None

        class EpochMarks(keras.callbacks.Callback):
            def on_epoch_begin(self, epoch, logs=None):
                sampler.begin_epoch(epoch + 1)

            def on_epoch_end(self, epoch, logs=None):
                sampler.end_epoch()
                if log_dir is None or not sampler.active:
                    return
                figures = sampler.report(0).epochs.get(epoch + 1)
                if figures is None:
                    return
                import tensorflow as tf

                nonlocal writer
                writer = writer or tf.summary.create_file_writer(str(log_dir / sampler.kind))
                with writer.as_default():
                    for name, value in figures.metrics(kind=sampler.kind).items():
                        tf.summary.scalar(name, value, step=epoch)
                writer.flush()

        return EpochMarks()
