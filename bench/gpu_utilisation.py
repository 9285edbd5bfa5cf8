"""GPU utilisation figures on a real GPU: `GpuSampler` (NVML through nvidia-ml-py, what the
training step records) against two baselines run alongside.

Four phases, each one "epoch" of the sampler, on GPU 0 with PyTorch making the load:

1. ``idle``: nothing runs;
2. ``busy``: back-to-back bf16 matrix products, the GPU never waits;
3. ``half``: matrix products for 0.25 s, then the host sleeps 0.25 s (a starved input pipeline);
4. ``trickle``: one small product, then 0.1 s of host sleep.

Two samplers run side by side: gkeflow's (``sampler``: each reading the mean of the driver's
samples since the last one) and the same class reading only the instantaneous rate
(``instant``: NVML without ``nvmlDeviceGetSamples``, what the sampler did before).
Baselines: ``kernel_pct``, the share of the phase's wall time that CUDA events timed as
kernel work (what NVML's utilisation means: time with a kernel running), and ``smi_pct``,
the mean of ``nvidia-smi --query-gpu=utilization.gpu`` polled every 200 ms in a separate
process. Memory: the sampler's peak against ``torch.cuda.memory_reserved`` plus what NVML
saw in use before PyTorch started. It also checks the `CUDA_VISIBLE_DEVICES` spellings
(index, UUID, a GPU that does not exist) and times one NVML sample.

    python3 bench/gpu_utilisation.py [--phase-s 12] [--interval-s 1] [--out figures.json]

It loads ``components/train/utilisation.py`` by path (it imports only the standard library),
so it runs where gkeflow is not installed. Without PyTorch or a GPU it says so and exits 2.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_sampler_module():
    spec = importlib.util.spec_from_file_location(
        "gkeflow_utilisation", ROOT / "components" / "train" / "utilisation.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def smi_poller(path: Path) -> subprocess.Popen:
    out = path.open("w")
    return subprocess.Popen(
        ["nvidia-smi", "--query-gpu=timestamp,utilization.gpu,memory.used",
         "--format=csv,noheader,nounits", "-i", "0", "-lms", "200"], stdout=out,
        stderr=subprocess.DEVNULL)


def smi_readings(path: Path) -> list[tuple[float, int]]:
    """(monotonic-comparable wall time, utilisation %) per nvidia-smi line."""
    from datetime import datetime

    rows = []
    for line in path.read_text().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3 or not parts[1].isdigit():
            continue
        stamp = datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        rows.append((stamp, int(parts[1])))
    return rows


def run_phase(torch, name: str, seconds: float, a, b, small) -> dict:
    """Run one load pattern for ``seconds``; returns wall and CUDA-event kernel time."""
    kernel_ms = 0.0
    start = time.time()
    end = start + seconds
    while time.time() < end:
        if name == "idle":
            time.sleep(0.05)
            continue
        first, last = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        first.record()
        if name == "busy":
            for _ in range(20):
                a @ b
        elif name == "half":
            burst_end = time.time() + 0.25
            while time.time() < burst_end:
                for _ in range(4):
                    a @ b
                torch.cuda.synchronize()
        else:  # trickle
            small @ small
        last.record()
        torch.cuda.synchronize()
        kernel_ms += first.elapsed_time(last)
        if name in ("half", "trickle"):
            time.sleep(0.25 if name == "half" else 0.1)
    wall = time.time() - start
    return {"phase": name, "start": start, "end": start + wall, "wall_s": round(wall, 2),
            "kernel_pct": round(min(100.0, 100.0 * kernel_ms / 1000.0 / wall), 1)}


class WithoutDriverSamples:
    """pynvml with ``nvmlDeviceGetSamples`` hidden: the instantaneous rate only."""

    def __init__(self, nvml):
        self._nvml = nvml

    def __getattr__(self, name):
        if name == "nvmlDeviceGetSamples":
            raise AttributeError(name)
        return getattr(self._nvml, name)


def visible_checks(module, nvml) -> dict:
    nvml.nvmlInit()
    try:
        uuid = str(nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(0)))
        count = nvml.nvmlDeviceGetCount()
    finally:
        nvml.nvmlShutdown()
    results = {"gpus": count, "uuid": uuid}
    for label, value in (("unset", None), ("index 0", "0"), ("uuid", uuid),
                         ("uuid prefix", uuid[:12]), ("missing index", str(count)),
                         ("empty", "")):
        environ = {} if value is None else {"CUDA_VISIBLE_DEVICES": value}
        lines: list[str] = []
        sampler = module.GpuSampler(interval_s=1, environ=environ, log=lines.append).start()
        sampler.stop()
        report = sampler.report()
        results[label] = {"devices": report.devices, "status": report.status,
                          "reason": report.reason}
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phase-s", type=float, default=12.0)
    parser.add_argument("--interval-s", type=float, default=1.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    try:
        import pynvml
        import torch
    except ImportError as exc:
        print(f"gpu utilisation bench: {exc.name} is not installed; figures missing")
        return 2
    if not torch.cuda.is_available():
        print("gpu utilisation bench: no GPU visible to PyTorch; figures missing")
        return 2
    module = load_sampler_module()
    figures: dict = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
                     "interval_s": args.interval_s, "phase_s": args.phase_s}

    figures["visible_devices"] = visible_checks(module, pynvml)

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    before_used = pynvml.nvmlDeviceGetMemoryInfo(handle).used
    timings = []
    for _ in range(200):
        t0 = time.perf_counter()
        pynvml.nvmlDeviceGetUtilizationRates(handle)
        pynvml.nvmlDeviceGetMemoryInfo(handle)
        timings.append(time.perf_counter() - t0)
    try:
        _, kept = pynvml.nvmlDeviceGetSamples(handle, 1, 0)
        stamps = sorted(int(k.timeStamp) for k in kept)
        gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
        figures["driver_samples"] = {
            "kept": len(stamps),
            "span_s": round((stamps[-1] - stamps[0]) / 1e6, 2) if stamps else None,
            "median_gap_ms": round(statistics.median(gaps) / 1000, 1) if gaps else None}
    except pynvml.NVMLError as exc:
        figures["driver_samples"] = {"error": str(exc)}
    pynvml.nvmlShutdown()
    figures["nvml_sample_us_median"] = round(statistics.median(timings) * 1e6, 1)

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    small = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
    ballast = torch.empty(16 * 2**30, dtype=torch.uint8, device="cuda")  # 16 GiB held
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()

    lines: list[str] = []
    sampler = module.GpuSampler(interval_s=args.interval_s, environ={}, log=lines.append)
    instant = module.GpuSampler(interval_s=args.interval_s, environ={}, log=lines.append,
                                nvml=WithoutDriverSamples(pynvml))
    smi_log = Path(tempfile.mkdtemp()) / "smi.csv"
    poller = smi_poller(smi_log)
    sampler.start()
    instant.start()
    phases = []
    for epoch, name in enumerate(("idle", "busy", "half", "trickle"), start=1):
        sampler.begin_epoch(epoch)
        instant.begin_epoch(epoch)
        phases.append(run_phase(torch, name, args.phase_s, a, b, small))
        sampler.end_epoch()
        instant.end_epoch()
    sampler.stop()
    instant.stop()
    poller.terminate()
    poller.wait()
    report = sampler.report()
    instant_report = instant.report()
    smi = smi_readings(smi_log)
    reserved_mib = torch.cuda.memory_reserved(0) / 2**20
    del ballast

    rows = []
    for epoch, phase in enumerate(phases, start=1):
        mine = report.epochs.get(epoch)
        before = instant_report.epochs.get(epoch)
        window = [pct for stamp, pct in smi if phase["start"] + 0.5 <= stamp <= phase["end"]]
        rows.append({**{k: phase[k] for k in ("phase", "wall_s", "kernel_pct")},
                     "sampler_samples": mine.readings if mine else 0,
                     "sampler_mean_pct": round(mine.utilisation_mean_pct, 1) if mine else None,
                     "sampler_p10_pct": mine.utilisation_p10_pct if mine else None,
                     "sampler_peak_pct": mine.utilisation_peak_pct if mine else None,
                     "instant_mean_pct": round(before.utilisation_mean_pct, 1)
                     if before else None,
                     "smi_samples": len(window),
                     "smi_pct": round(statistics.mean(window), 1) if window else None})
    figures["phases"] = rows
    figures["run"] = report.to_dict()["run"]
    figures["summary_line"] = report.summary_line()
    figures["warning"] = report.warning
    figures["sampler_log"] = lines
    figures["memory"] = {"nvml_used_before_torch_mib": round(before_used / 2**20),
                         "torch_reserved_mib": round(reserved_mib),
                         "sampler_peak_mib": round(report.run.memory_used_peak_mib)
                         if report.run else None}

    print(f"{figures['gpu']}, torch {figures['torch']}, interval {args.interval_s:g}s, "
          f"{args.phase_s:g}s per phase")
    print(f"{'phase':8} {'kernel%':>8} {'sampler mean':>13} {'p10':>4} {'peak':>5} "
          f"{'n':>3} {'instant':>8} {'smi%':>6} {'n':>3}")
    for row in rows:
        print(f"{row['phase']:8} {row['kernel_pct']:8.1f} {row['sampler_mean_pct']!s:>13} "
              f"{row['sampler_p10_pct']!s:>4} {row['sampler_peak_pct']!s:>5} "
              f"{row['sampler_samples']:3d} {row['instant_mean_pct']!s:>8} "
              f"{row['smi_pct']!s:>6} {row['smi_samples']:3d}")
    print(report.summary_line())
    print(json.dumps({"memory": figures["memory"],
                      "driver_samples": figures["driver_samples"],
                      "nvml_sample_us_median": figures["nvml_sample_us_median"],
                      "visible_devices": figures["visible_devices"]}, indent=1))
    if args.out:
        args.out.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
