"""TPU duty cycle during training: libtpu's monitoring SDK (``libtpu.sdk.tpumonitoring``,
the TPU Monitoring Library that ships in the libtpu wheel JAX pins) read on the sampler's
daemon thread, summarised per epoch and for the run exactly as the GPU figures are
(:mod:`utilisation`).

Each read asks libtpu for ``duty_cycle_pct`` (the share of the last few seconds each chip
of this host spent executing, one string per chip) and, where this libtpu reports them,
``hbm_capacity_usage`` and ``hbm_capacity_total`` (bytes per chip). libtpu keeps no
history to collect at an epoch mark, so the figures are the readings taken at the
interval. Never fails training: without libtpu's SDK, or a libtpu that reports no duty
cycle, it records nothing and says why in one line.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from gkeflow.components.train.utilisation import (
    DEFAULT_INTERVAL_S,
    GpuSampler,
    Reading,
    describe_error,
)

#: libtpu's metric names (``tpumonitoring.list_supported_metrics()``).
DUTY_CYCLE = "duty_cycle_pct"
HBM_USED = "hbm_capacity_usage"
HBM_TOTAL = "hbm_capacity_total"


class TpuSampler(GpuSampler):
    """Samples this host's TPU chips between :meth:`start` and :meth:`stop`.

    ``monitor``: libtpu's ``tpumonitoring`` module (default: imported from
    ``libtpu.sdk``); ``wait`` and ``log`` as for :class:`GpuSampler`.
    """

    kind = "tpu"
    _figure = "duty cycle"

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S, monitor: Any = None,
                 log: Callable[[str], None] | None = None,
                 wait: Callable[[float], bool] | None = None):
        super().__init__(interval_s, log=log, wait=wait, environ={})
        self._monitor = monitor
        self._memory = False

    def start(self) -> TpuSampler:
        """Find libtpu's monitoring SDK and start sampling; without it, say why and do
        nothing."""
        monitor = self._monitor
        if monitor is None:
            try:
                from libtpu.sdk import tpumonitoring as monitor
            except ImportError:
                return self._missing("this libtpu has no monitoring SDK "
                                     "(libtpu.sdk.tpumonitoring); a newer libtpu has")
            self._monitor = monitor
        try:
            supported = {str(name) for name in monitor.list_supported_metrics() or ()}
            if DUTY_CYCLE not in supported:
                return self._missing(f"this libtpu does not report {DUTY_CYCLE}")
            chips = len(self._values(DUTY_CYCLE))
        except Exception as exc:  # noqa: BLE001 - libtpu's errors have no public classes
            return self._missing(describe_error(exc))
        if not chips:
            return self._missing("libtpu reports no TPU chip on this host")
        self._memory = {HBM_USED, HBM_TOTAL} <= supported
        self._handles = [(index, None) for index in range(chips)]
        self._log(f"tpu duty cycle: sampling {chips} TPU chip(s) every {self.interval_s:g}s")
        self._thread = threading.Thread(target=self._run, name="gkeflow-tpu-sampler",
                                        daemon=True)
        self._thread.start()
        return self

    def sample_once(self, boundary: bool = False) -> None:
        """Read every chip's duty cycle (and HBM in use) now; nothing at an epoch
        ``boundary``, where libtpu has no samples to hand over."""
        if boundary:
            return
        duty = self._values(DUTY_CYCLE)
        used = self._values(HBM_USED) if self._memory else []
        total = self._values(HBM_TOTAL) if self._memory else []
        with self._read_lock:
            epoch = self._epoch
            readings = [Reading(index, (round(duty[index]),),
                                int(used[index]) if index < len(used) else 0,
                                int(total[index]) if index < len(total) else 0)
                        for index, _ in self._handles if index < len(duty)]
            with self._lock:
                self._readings.extend((epoch, r) for r in readings)
                self._samples += 1

    def _values(self, name: str) -> list[float]:
        """libtpu's per-chip values of metric ``name`` as numbers."""
        data = self._monitor.get_metric(name).data()
        return [float(value) for value in (data or [])]

    def _shutdown(self) -> None:
        """Nothing to close: libtpu's SDK holds no session."""
