"""Cloud TPU: whether this step has one, how TensorFlow reaches it, and the static batches
TPUs need.

The decisions are plain functions over facts (environment variables, device files, row
counts) so they are tested without a TPU; :func:`make_tpu_strategy` and
:func:`serve_tpu_host` are the only parts that touch TensorFlow's TPU runtime, and they take
the TensorFlow module as a parameter.

What a TPU host looks like, from the outside:

- GKE and Cloud TPU VMs (Vertex AI's TPU VMs included) set ``TPU_ACCELERATOR_TYPE``
  (``v5litepod-4``, ``v6e-8``, ``v5p-8``…); GKE's webhook adds ``TPU_WORKER_ID`` and
  ``TPU_WORKER_HOSTNAMES`` (one name per host, ordered by worker id) to the pods of an
  Indexed Job on a multi-host slice; multislice JobSets add ``MEGASCALE_NUM_SLICES``.
- The chips are device files: ``/dev/accel<N>`` (v4, v5p) or ``/dev/vfio/<N>`` (v5e, v6e).

TensorFlow's ``TPUClusterResolver(tpu="local")`` drives the chips of this host. On a
multi-host slice it takes the hosts as ``grpc://host:8470`` endpoints (no Cloud TPU API
exists for GKE node pools): worker 0 runs the training program and its own chips as task 0
of job ``worker``; every other host serves its chips to it as a TensorFlow server.
"""

from __future__ import annotations

import glob
import os
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

#: The port each host of a multi-host slice serves its chips on (Cloud TPU's own port).
TPU_PORT = 8470
#: ``steps_per_execution`` that ``0`` (auto) picks on a TPU, at most one epoch's steps.
TPU_STEPS_PER_EXECUTION = 32
STRATEGIES = ("auto", "tpu")


class TpuUnavailableError(RuntimeError):
    """The step asked for a TPU and this host has none, or one TensorFlow cannot drive."""


@dataclass(frozen=True)
class TpuHost:
    """The TPU of this host as its environment describes it."""

    accelerator_type: str = ""  # e.g. v6e-8; "" when only device files show the chips
    worker_id: int = 0
    hostnames: tuple[str, ...] = ()
    slices: int = 1
    chips_here: int = 0  # device files seen on this host

    @property
    def hosts(self) -> int:
        return max(1, len(self.hostnames))


def tpu_device_files(dev: str = "/dev") -> list[str]:
    """The TPU chips' device files on this host: ``accel<N>`` or ``vfio/<N>``."""
    return sorted(glob.glob(os.path.join(dev, "accel[0-9]*"))
                  + glob.glob(os.path.join(dev, "vfio", "[0-9]*")))


def find_tpu(env: Mapping[str, str], device_files: Iterable[str] = ()) -> TpuHost | None:
    """This host's TPU from the variables GKE / Cloud TPU set, or None without one."""
    files = list(device_files)
    accelerator = env.get("TPU_ACCELERATOR_TYPE", "").strip()
    if not accelerator and not files:
        return None
    hostnames = tuple(h.strip() for h in env.get("TPU_WORKER_HOSTNAMES", "").split(",")
                      if h.strip())
    try:
        worker_id = int(env.get("TPU_WORKER_ID", "0") or 0)
        slices = int(env.get("MEGASCALE_NUM_SLICES", "1") or 1)
    except ValueError as exc:
        raise TpuUnavailableError(f"TPU_WORKER_ID / MEGASCALE_NUM_SLICES is not a number: "
                                  f"{exc}") from None
    if hostnames and not 0 <= worker_id < len(hostnames):
        raise TpuUnavailableError(
            f"TPU_WORKER_ID={worker_id} is outside TPU_WORKER_HOSTNAMES ({len(hostnames)} "
            "hosts); run the step as an Indexed Job with one pod per host")
    return TpuHost(accelerator, worker_id, hostnames, slices, len(files))


def wants_tpu(setting: str, tpu: TpuHost | None) -> bool:
    """``tpu``: a TPU or a one-line error; ``auto``: the TPU when the host has one."""
    if setting not in STRATEGIES:
        raise ValueError(f"unknown strategy {setting!r}; valid: {', '.join(STRATEGIES)}")
    if setting == "tpu" and tpu is None:
        raise TpuUnavailableError(
            "strategy 'tpu' was asked but this step has no TPU (no TPU_ACCELERATOR_TYPE, no "
            "/dev/accel* or /dev/vfio/* chips); give the step a TPU accelerator and topology "
            "in its compute profile, or set strategy: auto")
    return tpu is not None


@dataclass(frozen=True)
class ResolverPlan:
    """How this process reaches its slice: the ``TPUClusterResolver(tpu=...)`` argument and
    its role (``client`` trains; ``server`` serves its chips to worker 0)."""

    tpu: str
    role: str = "client"
    task_index: int = 0
    endpoints: tuple[str, ...] = ()

    @property
    def description(self) -> str:
        if self.tpu == "local":
            return "TPUStrategy on the local TPU"
        return f"TPUStrategy over {len(self.endpoints)} TPU hosts"


def plan_resolver(tpu: TpuHost, port: int = TPU_PORT) -> ResolverPlan:
    """``tpu="local"`` on one host; on several, grpc endpoints of every host, in worker order."""
    if tpu.slices > 1:
        raise TpuUnavailableError(
            f"this step runs on {tpu.slices} TPU slices, but TensorFlow's TPUStrategy trains "
            "within one slice (Multislice is for JAX and PyTorch); set backend: jax (or auto), "
            "or replicas: 1 on the TPU step and a larger topology")
    if tpu.hosts == 1:
        return ResolverPlan("local")
    endpoints = tuple(f"{host}:{port}" for host in tpu.hostnames)
    return ResolverPlan(",".join(f"grpc://{e}" for e in endpoints),
                        "client" if tpu.worker_id == 0 else "server", tpu.worker_id, endpoints)


def require_tensorflow_tpu(installed: Callable[[str], bool] | None = None) -> None:
    """TensorFlow drives TPUs only in its TPU build (``tensorflow-tpu``), which the suite's
    TPU image does not carry (Keras on JAX trains there): a one-line error without it."""
    if installed is None:
        import importlib.metadata

        def installed(name: str) -> bool:
            try:
                importlib.metadata.version(name)
                return True
            except importlib.metadata.PackageNotFoundError:
                return False
    if not installed("tensorflow-tpu"):
        raise TpuUnavailableError(
            "backend tensorflow on a TPU needs TensorFlow's TPU build (tensorflow-tpu), which "
            "this image does not have (the TPU image trains with Keras on JAX); set backend: "
            "jax (or auto)")


def make_tpu_strategy(plan: ResolverPlan, tf):
    """Connect to the slice, initialise its TPU system and return a ``TPUStrategy``."""
    if plan.role != "client":
        raise ValueError("only worker 0 builds the TPUStrategy; the others serve_tpu_host()")
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=plan.tpu)
    if plan.tpu == "local":
        tf.config.experimental_connect_to_cluster(resolver)
    else:  # this process is task 0 of the slice's ``worker`` job: its chips join the mesh
        tf.config.experimental_connect_to_cluster(resolver, job_name="worker", task_index=0)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


def serve_tpu_host(plan: ResolverPlan, tf, coordinator_alive: Callable[[], bool] | None = None,
                   poll_s: float = 10.0, misses: int = 3) -> None:
    """A host other than worker 0: serve this host's chips until worker 0 has gone."""
    server = tf.distribute.Server(
        tf.train.ClusterSpec({"worker": list(plan.endpoints)}), job_name="worker",
        task_index=plan.task_index, protocol="grpc", start=True)
    alive = coordinator_alive or (lambda: reachable(plan.endpoints[0]))
    wait_while_alive(alive, poll_s, misses)
    del server


def reachable(endpoint: str, timeout_s: float = 5.0) -> bool:
    """Whether ``host:port`` accepts a TCP connection now."""
    host, _, port = endpoint.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return True
    except OSError:
        return False


def wait_while_alive(alive: Callable[[], bool], poll_s: float, misses: int,
                     sleep: Callable[[float], None] = time.sleep) -> int:
    """Return once ``alive()`` has failed ``misses`` times in a row; returns the checks made."""
    checks = missed = 0
    seen = False
    while missed < misses:
        checks += 1
        if alive():
            seen, missed = True, 0
        elif seen or checks > 60 * misses:  # worker 0 may start after this host
            missed += 1
        sleep(poll_s)
    return checks


@dataclass(frozen=True)
class StaticBatches:
    """Whole, equal batches for a split (TPUs compile one shape)."""

    per_replica: int
    global_batch: int
    steps: int
    dropped_rows: int
    note: str = ""


def static_batches(rows: int, batch_size: int, replicas: int, split: str = "train",
                   on_tpu: bool = True) -> StaticBatches:
    """Global batch = per-replica batch x replicas; lowered (with a note) to fit the split.
    ``on_tpu``: the replicas are TPU chips (else the devices of a JAX mesh)."""
    if rows < replicas:
        what, fix = (("TPU", "pick a smaller topology") if on_tpu
                     else ("device", "train on fewer devices"))
        raise ValueError(f"the {split} split has {rows} rows, fewer than the {replicas} {what} "
                         f"replicas; add rows or {fix}")
    per_replica = min(batch_size, rows // replicas)
    note = ""
    if per_replica != batch_size:
        note = (f"{split}: batch_size lowered from {batch_size} to {per_replica} per replica "
                f"so that one global batch ({per_replica} x {replicas} replicas) fits its "
                f"{rows} rows")
    global_batch = per_replica * replicas
    steps = rows // global_batch
    return StaticBatches(per_replica, global_batch, steps, rows - steps * global_batch, note)


def choose_steps_per_execution(setting: int, on_tpu: bool, steps_per_epoch: int) -> int:
    """``0`` (auto): up to 32 steps per TPU call, never more than an epoch; 1 elsewhere."""
    if setting < 0:
        raise ValueError(f"steps_per_execution must be >= 0 (0 = auto); got {setting}")
    if setting:
        return setting
    return max(1, min(TPU_STEPS_PER_EXECUTION, steps_per_epoch)) if on_tpu else 1


def tpu_summary(tpu: TpuHost) -> str:
    """One line for the log: type, hosts, this worker."""
    kind = tpu.accelerator_type or f"{tpu.chips_here} chip device files"
    return f"TPU {kind}, host {tpu.worker_id + 1} of {tpu.hosts}"


__all__ = ["STRATEGIES", "TPU_PORT", "ResolverPlan", "StaticBatches", "TpuHost",
           "TpuUnavailableError", "choose_steps_per_execution", "find_tpu", "make_tpu_strategy",
           "plan_resolver", "serve_tpu_host", "static_batches", "tpu_device_files",
           "wants_tpu"]
