"""Per-step compute requests: declared once, validated, then applied to a task for one target.

A :class:`ComputeProfile` says what a step needs: CPU, memory, accelerator and count,
spot, shared memory, timeout, retries (every retry field explicit) and caching.
:func:`validate_profiles` checks a whole pipeline's profiles against the machine shapes in
:mod:`gkeflow.pipelines.compute.accelerators` before anything is compiled, and
:func:`apply_compute` turns a profile into what each backend understands:

- ``gke`` (open-source Kubeflow Pipelines): CPU and memory requests and limits on every
  step; on GPU steps only the accelerator type ``nvidia.com/gpu`` with the count, the GKE
  accelerator node selector and the ``nvidia.com/gpu`` toleration, the selectors, tolerations
  and labels of the step's capacity (spot, flex-start, reservation, Kueue queue: see
  :mod:`gkeflow.pipelines.compute.capacity`), and a memory-backed ``/dev/shm`` on multi-GPU steps;
  ``activeDeadlineSeconds`` when the step has a timeout;
- ``vertex`` (Vertex AI Pipelines): CPU and memory limits and the ``NVIDIA_*`` accelerator
  type and count; no Kubernetes settings, so the compiled YAML stays a single document;
- ``local`` (``kfp.local``): caching only, the one setting it honours.

:func:`gkeflow.pipelines.compute.plan.plan` reports what each step will actually request on a
target, with the training engine chosen there (:mod:`gkeflow.pipelines.compute.engines`).

Longer than most modules on purpose: a profile's fields, their validation and how each
target applies them are one concept, followed from declaration to task in one place.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from gkeflow.components.did_you_mean import did_you_mean
from gkeflow.pipelines.compute import accelerators as acc
from gkeflow.pipelines.compute import capacity, kfp_task_check, launchers, tpu_profile
from gkeflow.pipelines.compute.units import MEMORY_RE, cpu_cores, memory_bytes
from gkeflow.pipelines.compute.wording import counted, plural
from gkeflow.pipelines.config import ConfigError

TARGETS = ("gke", "vertex", "local")

#: GKE accelerator name -> Vertex AI accelerator type.
GKE_TO_VERTEX_ACCELERATOR = {name: a.vertex_type for name, a in acc.ACCELERATORS.items()}
VERTEX_TO_GKE_ACCELERATOR = {v: k for k, v in GKE_TO_VERTEX_ACCELERATOR.items()}

GKE_ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
GKE_SPOT_LABEL = capacity.GKE_SPOT_LABEL
GPU_RESOURCE = "nvidia.com/gpu"
SHM_VOLUME = "dshm"
SHM_PATH = "/dev/shm"

_CPU_RE = re.compile(r"^([0-9]*[.])?[0-9]+m?$")
_DURATION_RE = re.compile(r"^([0-9]+)\s*(s|m|h|d)?$")
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


class ComputeError(ValueError):
    """A compute request that cannot be satisfied; the message names the step."""


class PipelineUnfit(ComputeError):
    """One pipeline cannot take, on one target, the compute asked for a step it shares with
    others (the sweep's trials and ``train-model``); the other pipelines still compile.
    The message names the pipeline, the target and why, in one line."""


# ---------------------------------------------------------------------------------------------
# quantities


def format_gib(n_bytes: float) -> str:
    return f"{n_bytes / acc.GIB:.1f} GiB"


def format_duration(seconds: int) -> str:
    if seconds == 0:
        return "0s"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def canonical_accelerator(name: str) -> str:
    """GKE spelling of an accelerator (Vertex spellings are aliases); unknown names unchanged."""
    if not name or name in GKE_TO_VERTEX_ACCELERATOR:
        return name
    if tpu_profile.tpu_name(name):
        return tpu_profile.tpu_name(name)
    return VERTEX_TO_GKE_ACCELERATOR.get(name.upper(), name)


def _to_bool(field: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ComputeError(f"{field} must be true or false; got {value!r}")


def _to_int(field: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ComputeError(f"{field} must be a whole number; got {value!r}")
    if isinstance(value, str):
        if not re.fullmatch(r"-?[0-9]+", value.strip()):
            raise ComputeError(f"{field} must be a whole number; got {value!r}")
        value = int(value)
    return value


def _to_float(field: str, value: Any) -> float:
    if isinstance(value, bool):
        raise ComputeError(f"{field} must be a number; got {value!r}")
    try:
        result = float(value)
    except (TypeError, ValueError):
        raise ComputeError(f"{field} must be a number; got {value!r}") from None
    if not math.isfinite(result):
        raise ComputeError(f"{field} must be a finite number; got {value!r}")
    return result


def to_seconds(field: str, value: Any) -> int:
    """A duration (90, "30s", "10m", "2h", "1d") in seconds; ComputeError names ``field``."""
    if isinstance(value, bool):
        raise ComputeError(f"{field} must be a duration such as 90, 30s, 10m, 2h; got {value!r}")
    if isinstance(value, int):
        return value
    match = _DURATION_RE.match(value.strip()) if isinstance(value, str) else None
    if not match:
        raise ComputeError(f"{field} must be a duration such as 90, 30s, 10m, 2h; got {value!r}")
    return int(match.group(1)) * _DURATION_UNITS[match.group(2) or "s"]


_ACCOUNT_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _to_account(value: Any) -> str:
    """A Kubernetes service account name (a DNS subdomain)."""
    text = value.strip() if isinstance(value, str) else value
    if not isinstance(text, str) or len(text) > 253 or not _ACCOUNT_RE.match(text):
        raise ComputeError(
            "worker_service_account must name a Kubernetes service account (lowercase "
            f"letters, digits, '-' and '.'), e.g. gkeflow-worker; got {value!r}")
    return text


SCHEDULING = ("standard", "spot", "flex-start", "reservation")

def _to_scheduling(value: Any, spot: bool) -> str:
    text = value.strip().lower().replace("_", "-") if isinstance(value, str) else value
    if text not in SCHEDULING:
        raise ComputeError(f"scheduling must be one of {', '.join(SCHEDULING)}; got {value!r}")
    if spot and text not in ("standard", "spot"):
        raise ComputeError(f"spot: true contradicts scheduling: {text}; keep one of them")
    return "spot" if spot else text


def _to_duration_text(field: str, value: Any) -> str:
    """A duration kept as written ("" for none), checked to parse."""
    if value in ("", None):
        return ""
    seconds = to_seconds(field, value)
    return format_duration(seconds)


def _to_cpu(value: Any) -> str:
    if isinstance(value, bool):
        raise ComputeError(f"cpu must be a CPU quantity such as 2, 0.5 or 500m; got {value!r}")
    if isinstance(value, (int, float)):
        value = f"{value:g}"
    if not isinstance(value, str) or not _CPU_RE.match(value):
        raise ComputeError(f"cpu must be a CPU quantity such as 2, 0.5 or 500m; got {value!r}")
    return value


def _to_memory(field: str, value: Any, allow_empty: bool = False) -> str:
    if allow_empty and value in ("", None):
        return ""
    if isinstance(value, str) and MEMORY_RE.match(value):
        return value
    if isinstance(value, (int, str)) and re.fullmatch(r"[0-9]+", str(value)):
        raise ComputeError(f"{field} {value!r} has no unit; write e.g. {value}G or {value}Gi")
    raise ComputeError(f"{field} must be a memory quantity such as 8G or 8Gi; got {value!r}")


# ---------------------------------------------------------------------------------------------
# the profile


@dataclass(frozen=True)
class ComputeProfile:
    """What one pipeline step asks for.

    Attributes:
        cpu: CPU request and limit, e.g. "2" or "500m".
        memory: Memory request and limit, e.g. "8G" or "8Gi".
        accelerator: GPU model by its GKE name (nvidia-tesla-t4, nvidia-l4, ...); the
            Vertex spelling (NVIDIA_TESLA_T4, ...) is accepted and stored as the GKE name.
            A TPU generation (tpu-v5e, tpu-v6e, ...) asks for a TPU slice instead.
        accelerator_count: GPUs; 0 for none (and for TPUs: the topology sets the chips).
        topology: TPU slice topology, e.g. "2x4" or "2x2x2"; "" for GPU and CPU steps.
        spot: Alias of ``scheduling="spot"`` (kept for existing configs).
        scheduling: Capacity the step runs on: standard (on demand), spot, flex-start
            (Dynamic Workload Scheduler) or reservation.
        max_wait: How long flex-start capacity may be queued for, e.g. "2h"; "" for the
            engine's default.
        chief_scheduling: "standard" puts the chief of a multi-node GKE step (scheduling
            spot) on on-demand nodes and its other workers on Spot; "" runs every machine
            on ``scheduling``. Refused on Vertex AI (one strategy per CustomJob).
        replicas: Machines (GKE: pods) the step runs on; more than 1 only for training.
        queue: Kueue LocalQueue the step's pods are admitted through (GKE); "" for none.
        ephemeral_storage: Local disk the step may write, e.g. "50Gi" (GKE request and
            limit); "" for the node's default.
        reservation: The Compute Engine reservation a scheduling=reservation step consumes:
            its name, or projects/PROJECT/reservations/NAME for a shared one (GKE);
            projects/PROJECT/zones/ZONE/reservations/NAME on Vertex AI.
        shm_size: Size of a memory-backed /dev/shm (GPU steps on GKE); "" means none on
            single-GPU steps and half the memory limit on multi-GPU steps.
        timeout_s: Seconds before the step is stopped (GKE); 0 for no limit.
        retries: Times a failed step is retried.
        retry_backoff_s: Wait before the first retry, in seconds.
        retry_backoff_factor: Multiplier of the wait between retries (>= 1).
        retry_max_duration_s: Seconds after which no more retries start.
        caching: Whether a step with identical inputs may be served from cache.
        worker_service_account: Kubernetes service account the pods of a multi-node GKE
            JobSet run as (never the launcher's); it needs no permission in the cluster
            (deploy/rbac/jobset-worker.yaml), only Cloud Storage access (Workload Identity).
        call_timeout_s: Seconds before a launcher step (a CustomJob, JobSet, tuning or
            batch prediction job it follows) abandons and retries one API call; 0 for the
            launcher's default (``GKEFLOW_CALL_TIMEOUT_S`` or 60).
        retry_budget_s: Seconds a launcher step retries one failing operation before it
            gives up (and stops its job); 0 for the default (``GKEFLOW_RETRY_BUDGET_S`` or
            900).
    """

    cpu: str = "1"
    memory: str = "4G"
    accelerator: str = ""
    accelerator_count: int = 0
    topology: str = ""
    spot: bool = False
    scheduling: str = "standard"
    max_wait: str = ""
    chief_scheduling: str = ""
    replicas: int = 1
    queue: str = ""
    ephemeral_storage: str = ""
    reservation: str = ""
    shm_size: str = ""
    timeout_s: int = 0
    retries: int = 0
    retry_backoff_s: int = 30
    retry_backoff_factor: float = 2.0
    retry_max_duration_s: int = 3600
    caching: bool = True
    worker_service_account: str = "gkeflow-worker"
    call_timeout_s: float = 0.0
    retry_budget_s: float = 0.0

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "cpu", _to_cpu(self.cpu))
        set_(self, "memory", _to_memory("memory", self.memory))
        if not isinstance(self.accelerator, str):
            raise ComputeError(f"accelerator must be a name; got {self.accelerator!r}")
        set_(self, "accelerator", canonical_accelerator(self.accelerator.strip()))
        set_(self, "accelerator_count", _to_int("accelerator_count", self.accelerator_count))
        if not isinstance(self.topology, str):
            raise ComputeError(f"topology must be a TPU topology such as 2x4; got "
                               f"{self.topology!r}")
        set_(self, "topology", self.topology.strip().lower())
        set_(self, "spot", _to_bool("spot", self.spot))
        set_(self, "scheduling", _to_scheduling(self.scheduling, self.spot))
        set_(self, "spot", self.scheduling == "spot")
        set_(self, "max_wait", _to_duration_text("max_wait", self.max_wait))
        if self.chief_scheduling not in ("", "standard"):
            raise ComputeError(f"chief_scheduling must be standard (or empty for the step's "
                               f"scheduling); got {self.chief_scheduling!r}")
        set_(self, "replicas", _to_int("replicas", self.replicas))
        if not isinstance(self.queue, str):
            raise ComputeError(f"queue must be a Kueue LocalQueue name; got {self.queue!r}")
        set_(self, "queue", self.queue.strip())
        set_(self, "ephemeral_storage",
             _to_memory("ephemeral_storage", self.ephemeral_storage, allow_empty=True))
        if not isinstance(self.reservation, str):
            raise ComputeError(f"reservation must be a reservation name; got {self.reservation!r}")
        set_(self, "reservation", self.reservation.strip())
        set_(self, "shm_size", _to_memory("shm_size", self.shm_size, allow_empty=True))
        set_(self, "timeout_s", to_seconds("timeout_s", self.timeout_s))
        set_(self, "retries", _to_int("retries", self.retries))
        set_(self, "retry_backoff_s", to_seconds("retry_backoff_s", self.retry_backoff_s))
        set_(self, "retry_backoff_factor",
             _to_float("retry_backoff_factor", self.retry_backoff_factor))
        set_(self, "retry_max_duration_s",
             to_seconds("retry_max_duration_s", self.retry_max_duration_s))
        set_(self, "caching", _to_bool("caching", self.caching))
        set_(self, "worker_service_account", _to_account(self.worker_service_account))
        try:
            for name, seconds in launchers.checked(self.call_timeout_s,
                                                   self.retry_budget_s).items():
                set_(self, name, seconds)
        except ValueError as exc:
            raise ComputeError(str(exc)) from None

    @property
    def uses_gpu(self) -> bool:
        return self.accelerator_count > 0

    @property
    def uses_tpu(self) -> bool:
        return bool(tpu_profile.tpu_name(self.accelerator))

    @property
    def effective_shm_size(self) -> str:
        """The /dev/shm size GKE gets: explicit, else half the memory on multi-GPU steps."""
        if self.shm_size:
            return self.shm_size
        if self.accelerator_count >= 2:
            return f"{memory_bytes(self.memory) // 2 // 2**20}Mi"
        return ""

    def with_overrides(self, **changes: Any) -> ComputeProfile:
        """A copy with ``changes`` applied; values may be strings (from YAML or the CLI)."""
        unknown = sorted(set(changes) - set(FIELD_NAMES))
        if unknown:
            raise ComputeError(
                f"unknown compute {plural(len(unknown), 'field')} {', '.join(unknown)}"
                f"{did_you_mean(unknown[0], FIELD_NAMES)}; valid: {', '.join(FIELD_NAMES)}"
            )
        if isinstance(changes.get("accelerator"), str):  # switching GPU <-> TPU drops the
            to_tpu = bool(tpu_profile.tpu_name(changes["accelerator"].strip()))  # other's fields
            drop = {"accelerator_count": 0, "shm_size": ""} if to_tpu else {"topology": ""}
            changes = {**{k: v for k, v in drop.items() if k not in changes}, **changes}
        if "scheduling" in changes and "spot" not in changes:
            changes["spot"] = False  # the alias follows the field it stands for
        elif "spot" in changes and "scheduling" not in changes:
            spot = _to_bool("spot", changes["spot"])
            changes["scheduling"] = "spot" if spot else (
                "standard" if self.scheduling == "spot" else self.scheduling)
        return replace(self, **changes)

    def configured(self, step: str, changes: Mapping[str, Any]) -> ComputeProfile:
        """:func:`override_step` for gkeflow.yaml's ``compute.<step>``: an invalid change is a
        :class:`~gkeflow.pipelines.config.ConfigError` naming the key."""
        try:
            return override_step(step, self, changes)
        except (TypeError, ComputeError) as exc:
            raise ConfigError(f"compute.{step}: {exc}") from exc


FIELD_NAMES = tuple(f.name for f in fields(ComputeProfile))


def parse_override(text: str) -> tuple[str, str, str]:
    """``"train-model.accelerator_count=2"`` -> ``("train-model", "accelerator_count", "2")``."""
    match = re.fullmatch(r"\s*([A-Za-z0-9_-]+)\.([a-z_]+)\s*=\s*(.*?)\s*", text)
    if not match:
        raise ComputeError(
            f"expected STEP.FIELD=VALUE (e.g. train-model.accelerator_count=2); got {text!r}"
        )
    return match.group(1), match.group(2), match.group(3)


def apply_overrides(
    profiles: Mapping[str, ComputeProfile], overrides: list[str] | tuple[str, ...]
) -> dict[str, ComputeProfile]:
    """Apply ``STEP.FIELD=VALUE`` overrides (CLI flags) to per-step profiles."""
    result = dict(profiles)
    changes: dict[str, dict[str, str]] = {}
    for text in overrides:
        step, field, value = parse_override(text)
        if step not in result:
            raise ComputeError(f"{text}: unknown step {step!r}{did_you_mean(step, result)}; "
                               f"steps are {', '.join(result)}")
        changes.setdefault(step, {})[field] = value  # a field given twice: the last wins
    for step, requested in changes.items():  # a step's flags together: contradictions show
        try:
            result[step] = override_step(step, result[step], requested)
        except ComputeError as exc:
            raise ComputeError(f"{step}: {exc}") from exc
    return result


def override_step(step: str, profile: ComputeProfile, changes: Mapping[str, Any]
                  ) -> ComputeProfile:
    """``profile`` with ``changes`` (from gkeflow.yaml or --compute) for ``step``; a step
    that must run every time cannot be given caching."""
    if step in NEVER_CACHED and "caching" in changes \
            and _to_bool("caching", changes["caching"]):
        raise ComputeError(f"caching must stay off ({NEVER_CACHED[step]}); drop the "
                           "caching setting")
    return profile.with_overrides(**changes)


# ---------------------------------------------------------------------------------------------
# validation


def _accelerator_choices(target: str) -> str:
    """The accelerators a step can ask for on ``target`` with the GPU counts of a machine
    (those whose machines run the suite's images), spelt as the target spells them first."""
    names = acc.runnable()
    first = [GKE_TO_VERTEX_ACCELERATOR[n] if target == "vertex" else n for n in names]
    other = [n if target == "vertex" else GKE_TO_VERTEX_ACCELERATOR[n] for n in names]
    listed = ", ".join(f"{shown} (x {_counts(name)})" for shown, name in zip(first, names,
                                                                          strict=True))
    spelling = "GKE" if target == "vertex" else "Vertex AI"
    return f"{listed}; the {spelling} spellings also work: {', '.join(dict.fromkeys(other))}"


def _counts(accelerator: str) -> str:
    return ", ".join(str(c) for c in acc.valid_counts(accelerator))


def fitting_shape(profile: ComputeProfile, target: str) -> acc.MachineShape | None:
    """The smallest machine shape that hosts ``profile`` on ``target``; None if there is none.

    On GKE the pod must fit in a node's allocatable resources (what GKE leaves after its
    own reservations); on Vertex AI the request must fit the machine.
    """
    cpu, memory_gib = cpu_cores(profile.cpu), memory_bytes(profile.memory) / acc.GIB
    for shape in acc.shapes_for(profile.accelerator, profile.accelerator_count):
        vcpus, gib = acc.gke_allocatable(shape) if target == "gke" else (
            shape.vcpus, shape.memory_gib)
        if cpu <= vcpus and memory_gib <= gib:
            return shape
    return None


#: Steps a run must execute every time: a cached answer would be stale.
NEVER_CACHED = {
    "fingerprint-data": "it reads what the data is now, which decides whether prepare-data "
                        "may come from cache",
    "evaluate-model": "the champion it compares with may have changed since",
    "register-model": "a run served from cache would not register its model",
    "resolve-model": "the version an alias or 'newest' names may have changed since",
    "deploy-model": "a run served from cache would not deploy",
}


def profile_problems(
    step: str, profile: ComputeProfile, target: str, image_has_gpu: bool | None = None,
    multi_node_steps: tuple[str, ...] = capacity.MULTI_NODE_STEPS,
) -> list[str]:
    """Everything wrong with ``profile`` for ``step`` on ``target``; empty when it is valid.

    ``multi_node_steps`` names the steps that may run on more than one machine.
    """
    problems = []
    p = profile
    if target not in TARGETS:
        return [f"unknown target {target!r}; valid: {', '.join(TARGETS)}"]
    if cpu_cores(p.cpu) <= 0:
        problems.append(f"{step}: cpu must be more than 0; got {p.cpu!r}")
    if memory_bytes(p.memory) <= 0:
        problems.append(f"{step}: memory must be more than 0; got {p.memory!r}")
    accelerator_ok = True
    if p.uses_tpu:
        accelerator_ok = False  # no GPU shape checks: the slice is checked instead
        problems.extend(tpu_profile.tpu_problems(step, p, target, multi_node_steps))
    elif p.topology:
        problems.append(f"{step}: topology {p.topology} applies to TPU steps only; set "
                        f"accelerator to one of {', '.join(tpu_profile.generations())} or drop "
                        "topology")
    if not p.uses_tpu and p.accelerator and p.accelerator not in acc.ACCELERATORS:
        accelerator_ok = False
        problems.append(
            f"{step}: unknown accelerator {p.accelerator!r}; valid: "
            f"{_accelerator_choices(target)}; TPUs (with a topology): "
            f"{', '.join(tpu_profile.generations())}"
        )
    elif p.accelerator and not p.uses_tpu and not acc.runs_the_images(p.accelerator):
        accelerator_ok = False  # nothing else to say about machines it cannot start on
        problems.append(acc.architecture_problem(step, p.accelerator))
    if p.accelerator_count < 0:
        problems.append(f"{step}: accelerator_count must be >= 0; got {p.accelerator_count}")
    elif p.accelerator_count and not p.accelerator:
        problems.append(
            f"{step}: asks for {counted(p.accelerator_count, 'GPU')} but names no accelerator; "
            f"set accelerator to one of {', '.join(acc.runnable())}"
        )
    elif p.accelerator and accelerator_ok and p.accelerator_count == 0:
        problems.append(
            f"{step}: accelerator {p.accelerator} with accelerator_count 0; "
            f"valid counts for {p.accelerator}: {_counts(p.accelerator)} "
            f"(or drop the accelerator for a CPU-only step)"
        )
    elif p.accelerator and accelerator_ok:
        family = acc.ACCELERATORS[p.accelerator].family
        if p.accelerator_count not in acc.valid_counts(p.accelerator):
            problems.append(
                f"{step}: {p.accelerator} x {p.accelerator_count} fits no machine; the {family} "
                f"family hosts {p.accelerator} in counts of {_counts(p.accelerator)}"
            )
        elif cpu_cores(p.cpu) > 0 and fitting_shape(p, target) is None:
            shapes = acc.shapes_for(p.accelerator, p.accelerator_count)
            if target == "gke":
                limits = {s.name: acc.gke_allocatable(s) for s in shapes}
                where = "GKE nodes leave pods"
            else:
                limits = {s.name: (s.vcpus, s.memory_gib) for s in shapes}
                where = "machines offer"
            largest = max(limits, key=lambda name: limits[name])
            problems.append(
                f"{step}: cpu {p.cpu} and memory {p.memory} "
                f"({format_gib(memory_bytes(p.memory))}) fit no {family} machine with "
                f"{p.accelerator} x {p.accelerator_count}; with that accelerator {where} at most "
                f"{max(v[0] for v in limits.values()):.4g} vCPUs and "
                f"{max(v[1] for v in limits.values()):.1f} GiB (largest machine: {largest}, "
                f"{limits[largest][0]:.4g} vCPUs with {limits[largest][1]:.1f} GiB)"
            )
        if image_has_gpu is False:
            problems.append(
                f"{step}: asks for {p.accelerator} but runs in a CPU-only image, "
                "which cannot use a GPU; drop the accelerator or run the step in the GPU image"
            )
    over = [f"{name} {value}" for name, value, too_much in (
        ("cpu", p.cpu, cpu_cores(p.cpu) > acc.VERTEX_STEP_MAX_VCPUS),
        ("memory", p.memory, memory_bytes(p.memory) > acc.VERTEX_STEP_MAX_MEMORY_GIB * acc.GIB))
        if too_much]
    if target == "vertex" and capacity.runs_as_pipeline_step(p) and over and not p.uses_tpu:
        problems.append(
            f"{step}: {' and '.join(over)} exceed{'s' if len(over) == 1 else ''} what Vertex "
            f"AI Pipelines gives a step {'with' if p.uses_gpu else 'without'} accelerator: at "
            f"most {acc.VERTEX_STEP_MAX_VCPUS} vCPUs and {acc.VERTEX_STEP_MAX_MEMORY_GIB} GiB"
        )
    if p.shm_size:
        if not p.uses_gpu:
            problems.append(
                f"{step}: shm_size {p.shm_size} is applied to GPU steps only; this step asks "
                "for no GPU"
            )
        elif memory_bytes(p.shm_size) >= memory_bytes(p.memory):
            problems.append(
                f"{step}: shm_size {p.shm_size} must be smaller than memory {p.memory} "
                "(a memory-backed /dev/shm counts against the memory limit)"
            )
    if p.replicas < 1:
        problems.append(f"{step}: replicas must be >= 1; got {p.replicas}")
    if not (p.uses_tpu and p.replicas > 1):  # said once, as slices, by tpu_problems
        problems.extend(capacity.capacity_problems(step, p, target, multi_node_steps))
    if p.max_wait and p.scheduling != "flex-start":
        problems.append(
            f"{step}: max_wait applies to scheduling=flex-start only; this step's scheduling "
            f"is {p.scheduling}"
        )
    if p.timeout_s < 0:
        problems.append(f"{step}: timeout_s must be >= 0 (0 for no limit); got {p.timeout_s}")
    if p.retries < 0:
        problems.append(f"{step}: retries must be >= 0; got {p.retries}")
    if p.retry_backoff_s < 0 or p.retry_max_duration_s < 0:
        problems.append(f"{step}: retry durations must be >= 0")
    if p.retry_backoff_factor < 1:
        problems.append(
            f"{step}: retry_backoff_factor must be >= 1 (1 keeps the wait constant; the KFP "
            f"SDK silently turns 0 into 2); got {p.retry_backoff_factor:g}"
        )
    if p.retries > 0 and p.retry_max_duration_s < p.retry_backoff_s:
        problems.append(
            f"{step}: retry_max_duration_s {p.retry_max_duration_s} is shorter than "
            f"retry_backoff_s {p.retry_backoff_s}, so no retry would ever start"
        )
    return problems


def validate_profiles(
    profiles: Mapping[str, ComputeProfile],
    target: str,
    gpu_images: Mapping[str, bool] | None = None,
    multi_node_steps: tuple[str, ...] = capacity.MULTI_NODE_STEPS,
) -> None:
    """Raise :class:`ComputeError` listing every invalid step.

    Args:
        profiles: Step -> its compute profile.
        target: gke, vertex or local.
        gpu_images: Step -> whether its image can use a GPU.
        multi_node_steps: Steps that may have replicas > 1 (the training step by default).
    """
    problems = []
    for step, profile in profiles.items():
        has_gpu = (gpu_images or {}).get(step)
        problems.extend(profile_problems(step, profile, target, has_gpu, multi_node_steps))
    if problems:
        raise ComputeError(
            f"invalid compute for target {target}:\n" + "\n".join(f"  - {p}" for p in problems)
        )


# ---------------------------------------------------------------------------------------------
# applying


def apply_compute(task, profile: ComputeProfile, target: str):
    """Apply ``profile`` to the pipeline task ``task`` in the form ``target`` understands."""
    if target not in TARGETS:
        raise ComputeError(f"unknown target {target!r}; valid: {', '.join(TARGETS)}")
    kfp_task_check.install()
    task.set_caching_options(profile.caching)
    if target == "local":
        return task
    if profile.retries:
        task.set_retry(
            num_retries=profile.retries,
            backoff_duration=f"{profile.retry_backoff_s}s",
            backoff_factor=profile.retry_backoff_factor,
            backoff_max_duration=f"{profile.retry_max_duration_s}s",
        )
    if target == "gke":
        _apply_gke(task, profile)
    else:
        task.set_cpu_limit(profile.cpu).set_memory_limit(profile.memory)
        if profile.uses_gpu:
            task.set_accelerator_type(GKE_TO_VERTEX_ACCELERATOR[profile.accelerator])
            task.set_accelerator_limit(profile.accelerator_count)
    return task


def _apply_gke(task, profile: ComputeProfile) -> None:
    from kfp import kubernetes

    task.set_cpu_request(profile.cpu).set_cpu_limit(profile.cpu)
    task.set_memory_request(profile.memory).set_memory_limit(profile.memory)
    if profile.uses_gpu:
        task.set_accelerator_type(GPU_RESOURCE).set_accelerator_limit(profile.accelerator_count)
        kubernetes.add_node_selector(task, GKE_ACCELERATOR_LABEL, profile.accelerator)
        kubernetes.add_toleration(task, key=GPU_RESOURCE, operator="Exists", effect="NoSchedule")
    if profile.uses_tpu:  # a single-host slice (a multi-host one runs as a JobSet)
        tpu = tpu_profile.shape(profile)
        task.set_accelerator_type(tpu_profile.TPU_RESOURCE).set_accelerator_limit(tpu.chips)
        for key, value in tpu_profile.gke_selectors(profile).items():
            kubernetes.add_node_selector(task, key, value)
        kubernetes.add_toleration(task, key=tpu_profile.TPU_RESOURCE, operator="Exists",
                                  effect="NoSchedule")
    capacity.apply_gke_capacity(task, profile)
    if profile.uses_gpu and profile.effective_shm_size:
        kubernetes.empty_dir_mount(
            task, volume_name=SHM_VOLUME, mount_path=SHM_PATH, medium="Memory",
            size_limit=profile.effective_shm_size,
        )
    from gkeflow.pipelines.compute.scratch import apply_gke_disk

    apply_gke_disk(task, profile)
    if profile.timeout_s:
        kubernetes.set_timeout(task, profile.timeout_s)
