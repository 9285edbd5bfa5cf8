"""GPU utilisation during training: a fake NVML module at the library boundary drives the
sampler's thread, the per-epoch and whole-run figures, the low-utilisation warning, and
the runs without NVML, a driver or a GPU."""

from __future__ import annotations

import json
import threading
import types

import pytest

from gkeflow.components.train.utilisation import (
    MIB,
    Figures,
    GpuSampler,
    Reading,
    percentile,
    visible_indices,
)


class NVMLError(Exception):
    def __init__(self, value: int = 999):
        super().__init__(value)
        self.value = value


class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801 - pynvml's names
    pass


class NVMLError_DriverNotLoaded(NVMLError):  # noqa: N801
    pass


class NVMLError_Uninitialized(NVMLError):  # noqa: N801
    pass


class NVMLError_InvalidArgument(NVMLError):  # noqa: N801
    pass


class NVMLError_GpuIsLost(NVMLError):  # noqa: N801
    pass


class NVMLError_NotFound(NVMLError):  # noqa: N801
    pass


class NVMLError_NotSupported(NVMLError):  # noqa: N801
    pass


def fake_nvml(devices: list[dict], fail_init: type[NVMLError] | None = None,
              fail_at_call: int = 0) -> types.ModuleType:
    """A module with pynvml's functions over scripted devices.

    Each device: ``utilisation`` (a list of %, one per call, the last repeated), ``used``
    and ``total`` (bytes) and ``uuid``. Calls before nvmlInit or after nvmlShutdown, and
    handles it did not hand out, raise as NVML does. ``fail_at_call``: the n-th utilisation
    read (from 1) raises NVMLError_GpuIsLost. A device with ``driver`` (a list of
    (timestamp µs, %) the test may extend) also answers ``nvmlDeviceGetSamples`` as NVML does:
    the samples after the timestamp, NVMLError_NotFound when there is none; without
    ``driver`` (or with None) it answers NVMLError_NotSupported; ``value_type`` 0 gives doubles.
    """
    m = types.ModuleType("pynvml")
    state = {"initialised": False, "reads": 0, "shutdowns": 0, "init_calls": 0}
    handles = [object() for _ in devices]

    def need_init():
        if not state["initialised"]:
            raise NVMLError_Uninitialized(1)

    def device(handle):
        need_init()
        if not any(handle is h for h in handles):
            raise NVMLError_InvalidArgument(2)
        return devices[[i for i, h in enumerate(handles) if h is handle][0]]

    def nvmlInit():
        state["init_calls"] += 1
        if fail_init is not None:
            raise fail_init(12)
        state["initialised"] = True

    def nvmlShutdown():
        need_init()
        state["initialised"] = False
        state["shutdowns"] += 1

    def nvmlDeviceGetCount():
        need_init()
        return len(devices)

    def nvmlDeviceGetHandleByIndex(index):
        need_init()
        if not 0 <= index < len(devices):
            raise NVMLError_InvalidArgument(2)
        return handles[index]

    def nvmlDeviceGetUtilizationRates(handle):
        d = device(handle)
        state["reads"] += 1
        if fail_at_call and state["reads"] >= fail_at_call:
            raise NVMLError_GpuIsLost(15)
        script = d["utilisation"]
        taken = d.setdefault("taken", 0)
        d["taken"] = taken + 1
        return types.SimpleNamespace(gpu=script[min(taken, len(script) - 1)], memory=0)

    def nvmlDeviceGetMemoryInfo(handle):
        d = device(handle)
        return types.SimpleNamespace(total=d["total"], used=d["used"],
                                     free=d["total"] - d["used"])

    def nvmlDeviceGetUUID(handle):
        return device(handle)["uuid"]

    def nvmlDeviceGetSamples(handle, sampling_type, since):
        d = device(handle)
        if sampling_type != 1:
            raise NVMLError_InvalidArgument(2)
        state["sample_calls"] = state.get("sample_calls", 0) + 1
        if d.get("driver") is None:
            raise NVMLError_NotSupported(3)
        value_type = d.get("value_type", 1)
        field = "dVal" if value_type == 0 else "uiVal"
        found = [types.SimpleNamespace(timeStamp=t, sampleValue=types.SimpleNamespace(
            **{field: float(v) if value_type == 0 else int(v)})) for t, v in d["driver"]
            if t > since]
        if not found:
            raise NVMLError_NotFound(6)
        return value_type, found

    for name, value in list(locals().items()):
        if name.startswith("nvml"):
            setattr(m, name, value)
    for cls in (NVMLError, NVMLError_LibraryNotFound, NVMLError_DriverNotLoaded,
                NVMLError_Uninitialized, NVMLError_InvalidArgument, NVMLError_GpuIsLost,
                NVMLError_NotFound, NVMLError_NotSupported):
        setattr(m, cls.__name__, cls)
    m.state = state
    return m


def gpu(utilisation, used_mib=1024, total_mib=81559, uuid="GPU-0", **driver):
    return {"utilisation": list(utilisation), "used": used_mib * MIB, "total": total_mib * MIB,
            "uuid": uuid, **driver}


def busy(sampler) -> list[int]:
    """Every utilisation value the sampler kept, in order."""
    return [pct for _, reading in sampler._readings for pct in reading.utilisation_pct]


def stop_after(n: int, seen: list):
    """A ``wait`` that lets the sampler take ``n`` samples, then tells it to stop."""
    def wait(seconds: float) -> bool:
        seen.append(seconds)
        return len(seen) >= n
    return wait


# --- the maths, on exact integers


def test_nearest_rank_percentile_on_integers():
    assert percentile(list(range(1, 11)), 10) == 1
    assert percentile(list(range(1, 21)), 10) == 2
    assert percentile(list(range(1, 12)), 10) == 2  # rank ceil(1.1) = 2
    assert percentile([70, 5, 90, 40], 10) == 5
    assert percentile([30], 10) == 30
    assert percentile(list(range(100, 0, -1)), 50) == 50
    assert percentile(list(range(1, 8)), 100) == 7
    with pytest.raises(ValueError):
        percentile([], 10)


def test_figures_pool_every_gpu_at_every_sample():
    readings = [Reading(0, (10,), 1 * MIB, 8 * MIB), Reading(1, (30,), 3 * MIB, 8 * MIB),
                Reading(0, (20,), 2 * MIB, 8 * MIB), Reading(1, (40,), 6 * MIB, 8 * MIB)]
    f = Figures.of(readings)
    assert (f.readings, f.utilisation_mean_pct, f.utilisation_p10_pct,
            f.utilisation_peak_pct) == (4, 25.0, 10, 40)
    assert (f.memory_used_mean_mib, f.memory_used_p10_mib, f.memory_used_peak_mib,
            f.memory_total_mib) == (3.0, 1.0, 6.0, 8.0)
    assert Figures.of([]) is None


# --- the sampler against a fake NVML


def test_low_utilisation_yields_the_warning_and_the_metric():
    nvml = fake_nvml([gpu([10, 20, 15, 15]), gpu([20, 10, 15, 15], uuid="GPU-1")])
    lines, waits = [], []
    sampler = GpuSampler(5, nvml=nvml, log=lines.append, wait=stop_after(4, waits),
                         environ={})
    sampler.start()
    sampler.stop()
    report = sampler.report(40)
    assert waits == [5.0] * 4
    assert report.status == "sampled" and report.samples == 4 and report.devices == 2
    metrics = report.metrics()
    assert metrics["gpu_utilisation_missing"] == 0.0
    assert metrics["gpu_utilisation_mean_pct"] == 15.0
    assert metrics["gpu_utilisation_p10_pct"] == 10.0
    assert metrics["gpu_utilisation_peak_pct"] == 20.0
    assert metrics["gpu_memory_used_peak_mib"] == 1024.0
    assert metrics["gpu_memory_total_mib"] == 81559.0
    assert "15%" in report.warning and "below 40%" in report.warning
    assert "input pipeline" in report.warning and "batch_size" in report.warning
    assert "\n" not in report.warning
    assert lines == ["gpu utilisation: sampling 2 GPU(s) every 5s"]
    assert nvml.state["shutdowns"] == 1 and not sampler.active


def test_busy_gpus_or_a_zero_threshold_give_no_warning():
    nvml = fake_nvml([gpu([40])])
    sampler = GpuSampler(nvml=nvml, log=lambda _: None, wait=stop_after(2, []), environ={})
    sampler.start()
    sampler.stop()
    assert sampler.report(40).warning == ""  # at the threshold is not below it
    assert sampler.report(0).warning == ""
    assert sampler.report(41).warning


def test_per_epoch_figures_follow_the_epoch_marks():
    nvml = fake_nvml([gpu([90, 80, 5, 7, 60])])
    sampler = None

    def wait(seconds: float) -> bool:  # the training thread's epoch marks, between samples
        wait.calls += 1
        if wait.calls == 1:
            sampler.begin_epoch(1)  # the first sample (90) counts for the run only
        elif wait.calls == 3:
            sampler.end_epoch()
            sampler.begin_epoch(2)
        return wait.calls == 5
    wait.calls = 0

    sampler = GpuSampler(nvml=nvml, log=lambda _: None, wait=wait, environ={})
    sampler.start()
    sampler.stop()
    report = sampler.report(40)
    assert sorted(report.epochs) == [1, 2]
    assert (report.epochs[1].utilisation_mean_pct, report.epochs[1].utilisation_peak_pct) == (
        42.5, 80)
    assert (report.epochs[2].utilisation_mean_pct, report.epochs[2].utilisation_p10_pct) == (
        33.5, 7)
    assert report.run.utilisation_mean_pct == (90 + 80 + 5 + 7 + 60) / 5
    epoch = report.epoch_metrics()
    assert epoch["epoch_1_gpu_utilisation_mean_pct"] == 42.5
    assert epoch["epoch_2_gpu_utilisation_peak_pct"] == 60.0
    assert "epoch_3_gpu_utilisation_mean_pct" not in epoch
    data = json.loads(json.dumps(report.to_dict()))
    assert data["epochs"]["2"]["utilisation_p10_pct"] == 7


def test_an_nvml_error_mid_run_stops_sampling_with_one_line_and_keeps_the_figures():
    nvml = fake_nvml([gpu([30, 50, 70])], fail_at_call=3)
    lines = []
    waits = []
    # the third read raises before a third wait could end the thread
    sampler = GpuSampler(nvml=nvml, log=lines.append, wait=stop_after(3, waits), environ={})
    sampler.start()
    sampler.stop()
    report = sampler.report(40)
    assert report.status == "sampled" and report.samples == 2 and len(waits) == 2
    assert report.run.utilisation_mean_pct == 40.0
    assert "sampling stopped after 2 samples" in report.reason
    assert "NVMLError_GpuIsLost" in report.reason
    assert len(lines) == 2 and "sampling stopped" in lines[1]
    assert nvml.state["shutdowns"] == 1


@pytest.mark.parametrize("error, says", [
    (NVMLError_LibraryNotFound, "NVML library"),
    (NVMLError_DriverNotLoaded, "driver is not loaded"),
])
def test_without_nvml_or_driver_it_is_a_no_op_and_the_metric_says_missing(error, says):
    nvml = fake_nvml([gpu([50])], fail_init=error)
    lines = []
    sampler = GpuSampler(nvml=nvml, log=lines.append, environ={}).start()
    sampler.stop()
    report = sampler.report(40)
    assert report.status == "missing" and says in report.reason
    assert report.metrics() == {"gpu_utilisation_missing": 1.0}
    assert report.epoch_metrics() == {} and report.warning == ""
    assert len(lines) == 1 and "not sampled" in lines[0] and says in lines[0]
    assert not sampler.active and nvml.state["shutdowns"] == 0


def test_no_gpu_or_all_hidden_is_missing_and_nvml_is_closed():
    nvml = fake_nvml([])
    sampler = GpuSampler(nvml=nvml, log=lambda _: None, environ={}).start()
    assert sampler.report().reason == "NVML sees no GPU"
    assert nvml.state["shutdowns"] == 1
    nvml = fake_nvml([gpu([50])])
    sampler = GpuSampler(nvml=nvml, log=lambda _: None,
                         environ={"CUDA_VISIBLE_DEVICES": ""}).start()
    assert sampler.report().reason == "CUDA_VISIBLE_DEVICES hides every GPU"
    assert sampler.report().metrics() == {"gpu_utilisation_missing": 1.0}


def test_without_the_nvml_package_it_is_missing(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    lines = []
    report = GpuSampler(log=lines.append, environ={}).start().report()
    assert report.status == "missing" and "nvidia-ml-py" in report.reason
    assert len(lines) == 1


def test_a_reading_averages_the_driver_samples_since_the_last_one():
    # Before start the GPU was busy; the instantaneous rate happens to read 99 each time.
    device = gpu([99], driver=[(10, 100), (20, 100)])
    nvml = fake_nvml([device])
    timeline = [[(30, 0), (40, 100), (50, 50), (60, 10)], [(70, 20), (80, 30)]]

    def wait(seconds):
        if not timeline:
            return True
        device["driver"].extend(timeline.pop(0))
        return False

    sampler = GpuSampler(1, nvml=nvml, log=lambda _: None, wait=wait, environ={})
    sampler.begin_epoch(1)
    sampler.start()
    sampler.stop()
    report = sampler.report(0)
    # First read: nothing after start (t=20) yet -> the instantaneous 99; then every driver
    # sample since the last read, each once.
    assert busy(sampler) == [99, 0, 100, 50, 10, 20, 30]
    assert report.samples == 3 and report.run.readings == 7
    assert report.run.utilisation_mean_pct == 309 / 7


def test_without_driver_samples_the_instantaneous_rate_is_used_from_then_on():
    nvml = fake_nvml([gpu([70, 30], driver=None)])
    sampler = GpuSampler(nvml=nvml, log=lambda _: None, wait=stop_after(2, []), environ={})
    sampler.start()
    sampler.stop()
    assert busy(sampler) == [70, 30]
    assert nvml.state["sample_calls"] == 1  # asked once at start, never again


def test_driver_samples_as_doubles_are_read_from_their_own_field():
    device = gpu([0], driver=[], value_type=0)
    nvml = fake_nvml([device])

    def wait(seconds):
        device["driver"].extend([(5, 12.5), (6, 87.5)])
        return device["taken"] >= 1 and len(device["driver"]) > 2

    sampler = GpuSampler(nvml=nvml, log=lambda _: None, wait=wait, environ={})
    sampler.start()
    sampler.stop()
    assert busy(sampler)[-2:] == [12, 88]


def test_epoch_marks_file_the_driver_samples_before_them_under_the_epoch_that_ends():
    device = gpu([5], driver=[])
    nvml = fake_nvml([device])
    started, go_on = threading.Event(), threading.Event()

    def wait(seconds):
        started.set()
        go_on.wait(5)
        return True

    sampler = GpuSampler(nvml=nvml, log=lambda _: None, wait=wait, environ={})
    sampler.begin_epoch(1)  # before start: nothing to file, nothing read
    sampler.start()
    assert started.wait(5)
    device["driver"] += [(1, 90), (2, 80)]
    sampler.begin_epoch(2)
    device["driver"] += [(3, 10)]
    sampler.end_epoch()
    sampler.end_epoch()  # nothing new: no reading, and no instantaneous one
    go_on.set()
    sampler.stop()
    report = sampler.report(0)
    assert report.epochs[1].utilisation_mean_pct == (5 + 90 + 80) / 3
    assert report.epochs[2].readings == 1 and report.epochs[2].utilisation_peak_pct == 10
    assert report.samples == 1  # the one timed read: epoch marks don't count as samples
    assert report.run.readings == 4


def test_only_the_gpus_cuda_may_use_are_sampled():
    nvml = fake_nvml([gpu([90], uuid="GPU-aaa"), gpu([10], uuid="GPU-bbb")])
    sampler = GpuSampler(nvml=nvml, log=lambda _: None, wait=stop_after(1, []),
                         environ={"CUDA_VISIBLE_DEVICES": "GPU-bb"})
    sampler.start()
    sampler.stop()
    report = sampler.report()
    assert report.devices == 1 and report.run.utilisation_peak_pct == 10
    assert visible_indices(4, None) == [0, 1, 2, 3]
    assert visible_indices(4, "2,0") == [2, 0]
    assert visible_indices(4, "1,7,2") == [1]  # CUDA stops at the first unusable entry
    assert visible_indices(4, "-1") == []


def test_the_interval_is_clamped_and_said_once():
    lines, waits = [], []
    nvml = fake_nvml([gpu([50])])
    sampler = GpuSampler(0.01, nvml=nvml, log=lines.append, wait=stop_after(1, waits),
                         environ={})
    sampler.start()
    sampler.stop()
    assert sampler.interval_s == 1.0 and waits == [1.0]
    assert "clamped to 1s" in lines[0]
    assert GpuSampler(3600, nvml=nvml, log=lambda _: None).interval_s == 60.0


# --- where the figures show


def sampled_card(sampler, model_dir):
    """The model card's utilisation section after one epoch sampled by ``sampler``: its
    report, and the section as the card renders it from the model's metadata file."""
    from gkeflow.components.evaluate.model_card import gpu_utilisation_section

    sampler.begin_epoch(1)
    sampler.start()
    sampler.stop()
    report = sampler.report(40)
    (model_dir / "gkeflow_model.json").write_text(
        json.dumps({"gpu_utilisation": report.to_dict()}))
    return report, gpu_utilisation_section(model_dir)


def test_model_card_section_shows_figures_warning_and_epochs(tmp_path):
    from gkeflow.components.evaluate.model_card import gpu_utilisation_section

    nvml = fake_nvml([gpu([15], used_mib=2048, total_mib=16384)])
    report, card = sampled_card(
        GpuSampler(nvml=nvml, log=lambda _: None, wait=stop_after(1, []), environ={}), tmp_path)
    assert "## GPU utilisation during training" in card
    assert "utilisation mean 15.0%, p10 15%, peak 15%" in card
    assert "peak 2048 of 16384 MiB" in card
    assert report.warning in card
    assert "| 1 | 15.0 | 15 | 15 | 2048 |" in card

    missing = GpuSampler(nvml=fake_nvml([], fail_init=NVMLError_DriverNotLoaded),
                         log=lambda _: None).start().report()
    (tmp_path / "gkeflow_model.json").write_text(
        json.dumps({"gpu_utilisation": missing.to_dict()}))
    assert "Not recorded: the NVIDIA driver is not loaded." in gpu_utilisation_section(tmp_path)
    (tmp_path / "gkeflow_model.json").write_text(json.dumps({}))
    assert gpu_utilisation_section(tmp_path) == ""


def test_the_training_summary_carries_the_warning():
    from gkeflow.components.train.report import trial_report

    summary = json.loads(trial_report("train-model", "/m", {"eval_accuracy": 0.9},
                                      warnings=["GPU utilisation averaged 15%"]))
    assert summary["warnings"] == ["GPU utilisation averaged 15%"]
    assert json.loads(trial_report("t", "/m"))["warnings"] == []


def test_bad_sampling_settings_are_rejected():
    from gkeflow.components.train.logic import TrainParams

    with pytest.raises(ValueError, match="gpu_sample_interval_s"):
        TrainParams(gpu_sample_interval_s=0)
    with pytest.raises(ValueError, match="gpu_utilisation_warn_below"):
        TrainParams(gpu_utilisation_warn_below=101)


# --- the real training function, on CPU


@pytest.mark.slow
def test_training_on_cpu_records_utilisation_as_missing(prepared_penguins, tmp_path,
                                                        monkeypatch, capsys):
    from gkeflow.components.train.logic import TrainParams, train

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")  # no GPU, whatever the host has
    dataset_dir, prepared = prepared_penguins
    result = train(dataset_dir, prepared.schema, tmp_path / "model",
                   TrainParams(epochs=1, early_stopping_patience=0))
    assert result.metrics["gpu_utilisation_missing"] == 1.0
    assert not any(k.startswith("gpu_utilisation_mean") for k in result.metrics)
    assert result.gpu_utilisation.status == "missing"
    assert result.gpu_utilisation_warning == ""
    metadata = json.loads((tmp_path / "model" / "gkeflow_model.json").read_text())
    assert metadata["gpu_utilisation"]["status"] == "missing"
    assert metadata["metrics"]["gpu_utilisation_missing"] == 1.0
    out = capsys.readouterr().out
    assert out.count("gpu utilisation: not sampled") == 1


@pytest.mark.slow
def test_the_train_step_at_15_percent_warns_in_its_summary_metrics_and_card(
        prepared_penguins, tmp_path, monkeypatch, capsys):
    import sys
    import threading

    from kfp.dsl import Artifact, Dataset, Metrics, Model

    from gkeflow.components.evaluate.model_card import gpu_utilisation_section
    from gkeflow.components.train.component import train_model

    nvml = fake_nvml([gpu([15], used_mib=3000, total_mib=24000)])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)  # NVML itself, the library boundary
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    dataset_dir, _ = prepared_penguins
    model, metrics = Model(uri=str(tmp_path / "model")), Metrics(uri=str(tmp_path / "metrics"))
    summary = json.loads(train_model.python_func(
        dataset=Dataset(uri=str(dataset_dir)),
        schema=Artifact(uri=str(dataset_dir / "schema.json")),
        model=model, metrics=metrics, tensorboard=Artifact(uri=str(tmp_path / "tb")),
        epochs=2, hidden_units="8", early_stopping_patience=0, gpu_sample_interval_s=1,
        model_type="mlp"))

    assert len(summary["warnings"]) == 1 and "averaged 15%" in summary["warnings"][0]
    logged = metrics.metadata
    assert logged["gpu_utilisation_missing"] == 0 and logged["gpu_utilisation_mean_pct"] == 15
    assert logged["gpu_memory_used_peak_mib"] == 3000 and logged["gpu_memory_total_mib"] == 24000
    assert all(v == 15 for k, v in logged.items()
               if k.startswith("epoch_") and k.endswith("utilisation_mean_pct"))
    assert model.metadata["gpu_utilisation_warning"] == summary["warnings"][0]
    assert summary["warnings"][0] in gpu_utilisation_section(tmp_path / "model")
    assert capsys.readouterr().out.count(f"WARNING: {summary['warnings'][0]}") == 1
    assert nvml.state["shutdowns"] == 1
    assert not [t for t in threading.enumerate() if t.name == "gkeflow-gpu-sampler"]
