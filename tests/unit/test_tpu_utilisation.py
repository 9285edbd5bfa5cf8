"""The TPU chips' duty cycle during training: libtpu's monitoring SDK read on the sampler's
thread (a stand-in module with libtpu's interface: ``list_supported_metrics()``,
``get_metric(name).data()`` giving one string per chip), summarised like the GPU figures,
and logged as MLflow system metrics, in the model card and in `runs cost`'s duty cycle. No
TPU is reachable here: what libtpu itself answers on a chip is not exercised."""

from __future__ import annotations

import sys
import types

import pytest

from gkeflow.components.train.tpu_utilisation import TpuSampler
from gkeflow.components.train.utilisation import MIB


def fake_libtpu(duty: list[list[float]], used_mib=(1024,), total_mib=(16384,),
                metrics=("duty_cycle_pct", "hbm_capacity_usage", "hbm_capacity_total",
                         "tensorcore_util"), fail_at_read: int | None = None):
    """``libtpu.sdk.tpumonitoring`` as the sampler uses it: each read of duty_cycle_pct
    after the first (the sampler's start, counting the chips) gives the next row of ``duty``
    (one value per chip) as strings."""
    state = {"reads": 0}

    class Metric:
        def __init__(self, name):
            self.name = name

        def description(self):
            return f"{self.name} per accelerator"

        def data(self):
            if self.name == "duty_cycle_pct":
                state["reads"] += 1
                if fail_at_read is not None and state["reads"] >= fail_at_read:
                    raise RuntimeError("TPU runtime is not initialised")
                row = duty[max(0, min(state["reads"] - 2, len(duty) - 1))]
                return [f"{v:.2f}" for v in row]
            chips = len(duty[0])
            if self.name == "hbm_capacity_usage":
                return [str(int(used_mib[i % len(used_mib)] * MIB)) for i in range(chips)]
            if self.name == "hbm_capacity_total":
                return [str(int(total_mib[i % len(total_mib)] * MIB)) for i in range(chips)]
            return ["0.00"] * chips

    module = types.SimpleNamespace(list_supported_metrics=lambda: list(metrics),
                                   get_metric=Metric)
    module.state = state
    return module


def reads(count: int):
    """A ``wait`` ending the sampler's thread after ``count`` reads."""
    calls = {"n": 0}

    def wait(_seconds: float) -> bool:
        calls["n"] += 1
        return calls["n"] >= count

    return wait


def test_duty_cycles_of_every_chip_make_the_run_and_epoch_figures():
    monitor = fake_libtpu([[80, 90, 70, 60], [10, 20, 30, 40], [50, 50, 50, 50]],
                          used_mib=(2048, 4096), total_mib=(16384,))
    sampler = None

    def wait(_seconds: float) -> bool:
        wait.calls += 1
        if wait.calls == 1:
            sampler.begin_epoch(1)  # the first read counts for the run only
        return wait.calls == 3
    wait.calls = 0

    lines: list[str] = []
    sampler = TpuSampler(monitor=monitor, log=lines.append, wait=wait)
    sampler.start()
    sampler.stop()
    report = sampler.report(40)
    assert lines[0] == "tpu duty cycle: sampling 4 TPU chip(s) every 5s"
    assert report.kind == "tpu" and report.devices == 4 and report.samples == 3
    assert report.run.utilisation_mean_pct == pytest.approx(50.0)
    assert report.run.utilisation_peak_pct == 90
    assert report.epochs[1].utilisation_mean_pct == pytest.approx(37.5)
    assert report.run.memory_used_peak_mib == 4096 and report.run.memory_total_mib == 16384
    metrics = report.metrics()
    assert metrics["tpu_utilisation_missing"] == 0.0 and metrics["tpu_count"] == 4.0
    assert metrics["tpu_utilisation_mean_pct"] == pytest.approx(50.0)
    assert not any(name.startswith("gpu_") for name in metrics)
    assert report.epoch_metrics()["epoch_1_tpu_utilisation_mean_pct"] == pytest.approx(37.5)
    assert report.summary_line().startswith("tpu duty cycle over 4 TPU chip(s), 3 samples:")
    assert report.warning == ""
    assert report.to_dict()["kind"] == "tpu"


def test_idle_chips_warn_in_the_tpu_s_own_words():
    sampler = TpuSampler(monitor=fake_libtpu([[12, 14]]), log=lambda _: None, wait=reads(2))
    sampler.start()
    sampler.stop()
    warning = sampler.report(40).warning
    assert warning.startswith("TPU duty cycle averaged 13% over 2 TPU chip(s), below 40%")


def test_a_libtpu_without_memory_figures_still_gives_the_duty_cycle():
    monitor = fake_libtpu([[70]], metrics=("duty_cycle_pct",))
    sampler = TpuSampler(monitor=monitor, log=lambda _: None, wait=reads(1)).start()
    sampler.stop()
    report = sampler.report()
    assert report.run.utilisation_mean_pct == 70 and report.run.memory_total_mib == 0


@pytest.mark.parametrize("monitor, says", [
    (fake_libtpu([[50]], metrics=("tensorcore_util",)), "does not report duty_cycle_pct"),
    (fake_libtpu([[]]), "reports no TPU chip"),
])
def test_a_libtpu_that_cannot_say_is_missing_in_one_line(monitor, says):
    lines: list[str] = []
    sampler = TpuSampler(monitor=monitor, log=lines.append).start()
    report = sampler.report()
    assert not sampler.active and report.status == "missing" and says in report.reason
    assert report.metrics() == {"tpu_utilisation_missing": 1.0}
    assert len(lines) == 1 and lines[0].startswith("tpu duty cycle: not sampled")


def test_without_libtpu_s_sdk_it_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "libtpu", None)  # import libtpu.sdk fails
    lines: list[str] = []
    report = TpuSampler(log=lines.append).start().report()
    assert report.status == "missing" and "libtpu.sdk.tpumonitoring" in report.reason
    assert len(lines) == 1


def test_an_error_mid_run_stops_sampling_with_one_line_and_keeps_the_figures():
    lines: list[str] = []
    monitor = fake_libtpu([[40, 60]], fail_at_read=4)  # read 1 counts the chips
    sampler = TpuSampler(monitor=monitor, log=lines.append, wait=reads(10))
    sampler.start()
    sampler.stop()
    report = sampler.report()
    assert report.samples == 2 and report.run.utilisation_mean_pct == 50.0
    assert "sampling stopped after 2 samples" in report.reason
    assert lines[-1].startswith("tpu duty cycle: sampling stopped")


class Recorder:
    """What live_curves hands its tracker."""

    enabled = True

    def __init__(self):
        self.logged: list[tuple[dict, int]] = []

    def log_metrics(self, values, step=None):
        self.logged.append((values, step))


def test_live_curves_log_the_chips_duty_cycle_as_system_metrics():
    from gkeflow.components.tracking.live import (
        SYSTEM_GPU_UTILISATION,
        SYSTEM_TPU_DUTY_CYCLE,
        SYSTEM_TPU_MEMORY,
        live_curves,
    )

    sampler = None

    def wait(_seconds: float) -> bool:
        wait.calls += 1
        if wait.calls == 1:
            sampler.begin_epoch(1)
        return wait.calls == 2
    wait.calls = 0
    sampler = TpuSampler(monitor=fake_libtpu([[0, 0], [30, 50]], used_mib=(512,)),
                         log=lambda _: None, wait=wait)
    sampler.start()
    sampler._thread.join(5)  # both reads taken; the sampler still counts as started
    sampler._thread = types.SimpleNamespace(is_alive=lambda: True, join=lambda timeout: None)
    tracker = Recorder()
    callback = live_curves(tracker, sampler)
    callback.on_epoch_begin(0)
    callback.on_epoch_end(0, {"loss": 0.5})
    ((values, step),) = tracker.logged
    assert step == 1 and values["loss"] == 0.5
    assert values[SYSTEM_TPU_DUTY_CYCLE] == pytest.approx(40.0)
    assert values[SYSTEM_TPU_MEMORY] == 512
    assert SYSTEM_GPU_UTILISATION not in values


def test_the_model_card_and_the_run_s_duty_cycle_name_the_tpu(tmp_path):
    from gkeflow.pipelines.cli.actual_costs import duty_cycle
    from tests.unit.test_train_utilisation import sampled_card

    report, card = sampled_card(
        TpuSampler(monitor=fake_libtpu([[20, 40]]), log=lambda _: None, wait=reads(1)),
        tmp_path)
    assert "## TPU duty cycle during training" in card
    assert "of 2 TPU chip(s): duty cycle mean 30.0%" in card
    assert duty_cycle(report.epoch_metrics()) == 30.0
