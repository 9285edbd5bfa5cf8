"""Devices: which tf.distribute strategy, whether the GPU or TPU we asked for is there, which
precision.

The decisions are plain functions over facts (``plan_strategy``, ``choose_precision``) so
they are tested without hardware; ``detect`` and ``make_strategy`` read TensorFlow.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field

from gkeflow.components.train.tpu import ResolverPlan, make_tpu_strategy


class GpuUnavailableError(RuntimeError):
    """The step asked for a GPU and TensorFlow sees none."""


@dataclass(frozen=True)
class Devices:
    gpus: list[str] = field(default_factory=list)
    #: (major, minor) compute capability per GPU, when known.
    gpu_capabilities: list[tuple[int, int]] = field(default_factory=list)
    cpus: list[str] = field(default_factory=lambda: ["/device:CPU:0"])


@dataclass(frozen=True)
class StrategyPlan:
    kind: str  # "default" | "mirrored" | "multi_worker_mirrored" | "tpu"
    devices: tuple[str, ...] = ()
    workers: int = 1
    resolver: ResolverPlan | None = None  # how a TPU plan reaches its slice

    @property
    def description(self) -> str:
        if self.resolver is not None:
            return self.resolver.description
        if self.kind == "multi_worker_mirrored":
            return f"MultiWorkerMirroredStrategy over {self.workers} workers"
        if self.kind == "mirrored":
            return f"MirroredStrategy over {len(self.devices)} devices: {', '.join(self.devices)}"
        return "default strategy (one device)"


def workers_in_tf_config(tf_config: str) -> int:
    """Number of workers (chief included) that ``TF_CONFIG`` describes; 1 without a cluster."""
    if not tf_config:
        return 1
    try:
        cluster = json.loads(tf_config).get("cluster", {})
    except json.JSONDecodeError as exc:
        raise ValueError(f"TF_CONFIG is not valid JSON: {exc}") from exc
    return sum(len(cluster.get(role, [])) for role in ("chief", "worker")) or 1


def is_chief(tf_config: str) -> bool:
    """Whether this process writes shared outputs: the chief, else worker 0, else alone."""
    if not tf_config:
        return True
    task = json.loads(tf_config).get("task", {})
    cluster = json.loads(tf_config).get("cluster", {})
    kind, index = task.get("type", "worker"), int(task.get("index", 0))
    if "chief" in cluster:
        return kind == "chief"
    return kind == "worker" and index == 0


def writes_outputs(env: Mapping[str, str]) -> bool:
    """Whether this process publishes the step's outputs: the chief of ``TF_CONFIG`` and
    worker 0 of a TPU slice (``TPU_WORKER_ID``)."""
    return is_chief(env.get("TF_CONFIG", "")) and env.get("TPU_WORKER_ID", "0").strip() in (
        "", "0")


def plan_strategy(devices: Devices, tf_config: str = "",
                  tpu: ResolverPlan | None = None) -> StrategyPlan:
    """A TPU -> TPUStrategy; several workers -> MultiWorkerMirrored; several GPUs (or logical
    CPUs) -> Mirrored."""
    if tpu is not None:
        return StrategyPlan("tpu", workers=max(1, len(tpu.endpoints)), resolver=tpu)
    workers = workers_in_tf_config(tf_config)
    if workers > 1:
        return StrategyPlan("multi_worker_mirrored", tuple(devices.gpus), workers)
    if len(devices.gpus) > 1:
        return StrategyPlan("mirrored", tuple(devices.gpus))
    if not devices.gpus and len(devices.cpus) > 1:
        return StrategyPlan("mirrored", tuple(devices.cpus))
    return StrategyPlan("default", tuple(devices.gpus[:1] or devices.cpus[:1]))


def detect() -> Devices:
    """The devices TensorFlow sees in this process."""
    import tensorflow as tf

    gpus = tf.config.list_logical_devices("GPU")
    capabilities = []
    for gpu in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(gpu)
        if "compute_capability" in details:
            capabilities.append(tuple(details["compute_capability"]))
    cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
    return Devices(gpus=[g.name for g in gpus], gpu_capabilities=capabilities, cpus=cpus)


def make_strategy(plan: StrategyPlan):
    import tensorflow as tf

    if plan.kind == "tpu":
        return make_tpu_strategy(plan.resolver, tf)
    if plan.kind == "multi_worker_mirrored":
        return tf.distribute.MultiWorkerMirroredStrategy()
    if plan.kind == "mirrored":
        return tf.distribute.MirroredStrategy(devices=list(plan.devices))
    return tf.distribute.get_strategy()


def gpu_diagnostics() -> str:
    """What this container can see of CUDA, for the fail-fast message."""
    import tensorflow as tf

    build = tf.sysconfig.get_build_info()
    lines = [
        (f"TensorFlow {tf.__version__}, built with CUDA: {tf.test.is_built_with_cuda()} "
         f"(cuda {build.get('cuda_version', 'n/a')}, cudnn {build.get('cudnn_version', 'n/a')})"),
        f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '(unset)')}",
        f"LD_LIBRARY_PATH={os.environ.get('LD_LIBRARY_PATH', '(unset)')}",
    ]
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20,
                                 check=False)
            lines.append(f"nvidia-smi -L: {(out.stdout or out.stderr).strip() or '(no output)'}")
        except (OSError, subprocess.TimeoutExpired) as exc:
            lines.append(f"nvidia-smi failed: {exc}")
    else:
        lines.append("nvidia-smi: not found on PATH (no NVIDIA driver mounted into the container?)")
    return "\n".join(lines)


def require_gpu(devices: Devices, required: bool) -> None:
    """Fail fast when the step asked for a GPU and none is visible."""
    if required and not devices.gpus:
        raise GpuUnavailableError(
            "this step asked for a GPU but TensorFlow sees none; refusing to train on CPU.\n"
            + gpu_diagnostics()
        )


PRECISIONS = ("auto", "float32", "mixed_float16", "mixed_bfloat16")


def choose_precision(setting: str, devices: Devices, on_tpu: bool = False) -> str:
    """The Keras dtype policy: ``auto`` picks bfloat16 on TPUs and on compute capability
    >= 8.0, float16 on >= 7.0, float32 otherwise (and on CPU)."""
    if setting not in PRECISIONS:
        raise ValueError(f"unknown precision {setting!r}; valid: {', '.join(PRECISIONS)}")
    if setting != "auto":
        return setting
    if on_tpu:
        return "mixed_bfloat16"
    if not devices.gpus or not devices.gpu_capabilities:
        return "float32"
    lowest = min(devices.gpu_capabilities)
    if lowest >= (8, 0):
        return "mixed_bfloat16"
    if lowest >= (7, 0):
        return "mixed_float16"
    return "float32"


def choose_jit(setting: str, devices: Devices, on_tpu: bool = False) -> bool:
    """XLA: ``auto`` compiles on GPUs, not on CPU (where it rarely pays off for small MLPs),
    nor on TPUs (TPUStrategy compiles every step with XLA itself)."""
    if setting not in ("auto", "on", "off"):
        raise ValueError(f"unknown jit_compile setting {setting!r}; valid: auto, on, off")
    return bool(devices.gpus) and not on_tpu if setting == "auto" else setting == "on"


def gpu_memory_metrics() -> dict[str, float]:
    """Peak GPU memory per device in MiB, where TensorFlow reports it."""
    import tensorflow as tf

    metrics = {}
    for i, _ in enumerate(tf.config.list_logical_devices("GPU")):
        try:
            info = tf.config.experimental.get_memory_info(f"GPU:{i}")
        except (ValueError, RuntimeError):
            continue
        metrics[f"gpu{i}_peak_memory_mib"] = info["peak"] / 2**20
    return metrics


def gpu_utilisation() -> float | None:
    """Mean utilisation (%) of the visible GPUs now, from ``nvidia-smi``; None where absent."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10, check=False,
        )
        values = [float(v) for v in out.stdout.split() if v.strip()]
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None
    return sum(values) / len(values) if values else None
