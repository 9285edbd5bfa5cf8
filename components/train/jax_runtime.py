"""Keras on JAX: joining hosts, the data-parallel mesh over chips and slices, agreeing on the
checkpoint to resume, and exporting the TensorFlow SavedModel the rest of the suite reads.

Hosts join with ``keras.distribution.initialize()``, which hands over to
``jax.distributed.initialize``: on Cloud TPU (GKE's TPU webhook, Vertex AI's TPU VMs) JAX
finds the coordinator itself; elsewhere the ``KERAS_DISTRIBUTION_JOB_ADDRESSES``,
``KERAS_DISTRIBUTION_NUM_PROCESSES`` and ``KERAS_DISTRIBUTION_PROCESS_ID`` variables name
it. Every process then feeds its share of each global batch (Keras shards the tf.data
input per process) and the gradients are reduced over every chip of every slice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gkeflow.components.train.devices import Devices
from gkeflow.components.train.tpu import TpuHost

#: Keras' own variables for joining processes without a TPU environment.
ADDRESSES_VAR = "KERAS_DISTRIBUTION_JOB_ADDRESSES"
PROCESS_COUNT_VAR = "KERAS_DISTRIBUTION_NUM_PROCESSES"
PROCESS_ID_VAR = "KERAS_DISTRIBUTION_PROCESS_ID"


def processes_to_join(env: Mapping[str, str], tpu: TpuHost | None) -> int:
    """How many processes train together: the TPU hosts of every slice, or Keras' variable;
    1 trains alone (nothing to join)."""
    if tpu is not None and (tpu.hosts > 1 or tpu.slices > 1):
        return tpu.hosts * tpu.slices
    try:
        count = int(env.get(PROCESS_COUNT_VAR, "1") or 1)
    except ValueError:
        raise ValueError(f"{PROCESS_COUNT_VAR} is not a number: "
                         f"{env.get(PROCESS_COUNT_VAR)!r}") from None
    if count < 1:
        raise ValueError(f"{PROCESS_COUNT_VAR} must be >= 1; got {count}")
    return count


def require_libtpu(installed: bool | None = None) -> None:
    """JAX drives TPU chips through libtpu: a one-line error, before joining any host,
    when the step has a TPU and this image has no libtpu (the TPU image has it)."""
    if installed is None:
        import importlib.util

        installed = importlib.util.find_spec("libtpu") is not None
    if not installed:
        from gkeflow.components.train.tpu import TpuUnavailableError

        raise TpuUnavailableError(
            "this step has a TPU but JAX has no TPU runtime here (libtpu is not installed); "
            "run it in the TPU image (gkeflow images build --flavour tpu)")


def join_hosts(env: Mapping[str, str], tpu: TpuHost | None) -> int:
    """Join the other processes of this run (once per process); the number joined."""
    count = processes_to_join(env, tpu)
    if count > 1:
        import keras

        keras.distribution.initialize()
    return count


def order_devices(devices: Sequence) -> list:
    """Devices in mesh order: slice by slice (DCN), host by host, chip by chip (ICI), so
    each contiguous share of a batch stays within one slice."""
    return sorted(devices, key=lambda d: (getattr(d, "slice_index", 0) or 0,
                                          getattr(d, "process_index", 0), d.id))


@dataclass(frozen=True)
class JaxPlan:
    """Where this process trains: every device of the run, and its own place in it."""

    devices: int
    processes: int = 1
    process_id: int = 0
    slices: int = 1
    platform: str = "cpu"

    @property
    def chief(self) -> bool:
        return self.process_id == 0

    @property
    def description(self) -> str:
        what = f"JAX data parallel over {self.devices} {self.platform} device(s)"
        if self.slices > 1:
            what += f" in {self.slices} slices"
        if self.processes > 1:
            what += f", {self.processes} processes"
        return what if self.devices > 1 else f"JAX on one {self.platform} device"


def distribute(tpu: TpuHost | None) -> tuple[JaxPlan, Devices]:
    """Lay a data-parallel mesh over every device of the run (nothing to lay over one)."""
    import jax
    import keras

    devices = order_devices(jax.devices())
    platform = devices[0].platform
    slices = len({getattr(d, "slice_index", 0) or 0 for d in devices})
    plan = JaxPlan(len(devices), jax.process_count(), jax.process_index(),
                   max(slices, tpu.slices if tpu else 1), platform)
    if len(devices) > 1:
        mesh = keras.distribution.DeviceMesh((len(devices),), ["batch"], devices)
        keras.distribution.set_distribution(keras.distribution.DataParallel(device_mesh=mesh))
    gpus = [d for d in jax.local_devices() if d.platform == "gpu"]
    capabilities = [c for c in map(_capability, gpus) if c]
    found = Devices(gpus=[str(d) for d in gpus], gpu_capabilities=capabilities,
                    cpus=[str(d) for d in jax.local_devices(backend="cpu")])
    return plan, found


def _capability(device) -> tuple[int, int] | None:
    value = str(getattr(device, "compute_capability", "") or "")
    major, _, minor = value.partition(".")
    return (int(major), int(minor or 0)) if major.isdigit() else None


def agree_on_epoch(plan: JaxPlan, epochs_completed: int) -> None:
    """Every process must resume from the checkpoint the chief read: a process that read
    another (the chief committed one in between) stops the run, which then resumes whole."""
    if plan.processes < 2:
        return
    import numpy as np
    from jax.experimental import multihost_utils

    chiefs = int(multihost_utils.broadcast_one_to_all(np.int32(epochs_completed)))
    if chiefs != epochs_completed:
        raise RuntimeError(f"process {plan.process_id} read a checkpoint of "
                           f"{epochs_completed} epochs, the chief one of {chiefs}; restart "
                           "the step to resume every process from the same checkpoint")


def classify_endpoint(archive, classifier):
    """Add ``classify`` (the dense feature vector in, the classifier's output out) to a Keras
    ``ExportArchive`` that tracks ``classifier``: the JAX-trained model converted to
    TensorFlow by Keras' jax2tf export; returns it as a TensorFlow function."""
    import keras

    width = int(classifier.inputs[0].shape[-1])
    return archive.add_endpoint(
        "classify", lambda x: classifier(x, training=False),
        input_signature=[keras.InputSpec(shape=(None, width), dtype="float32")],
        jax2tf_kwargs={"with_gradient": False})  # serving only: no gradient to save
