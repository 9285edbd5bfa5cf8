"""What one pipeline step asks for: :class:`ComputeProfile`, its fields checked as they are
set, and the ``STEP.FIELD=VALUE`` overrides of gkeflow.yaml and ``--compute``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from gkeflow.components.did_you_mean import did_you_mean
from gkeflow.pipelines.compute import launchers, tpu_profile
from gkeflow.pipelines.compute.profile_values import (
    ComputeError,
    canonical_accelerator,
    to_account,
    to_bool,
    to_cpu,
    to_duration_text,
    to_float,
    to_int,
    to_memory,
    to_scheduling,
    to_seconds,
)
from gkeflow.pipelines.compute.units import memory_bytes
from gkeflow.pipelines.compute.wording import plural
from gkeflow.pipelines.settings.config import ConfigError


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
        auto_size: Size CPU and memory to the machine the GPUs come on (A2, A3, A4, G2,
            G4; see ``machine_fit``); setting cpu or memory turns it off.
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
    auto_size: bool = False

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "cpu", to_cpu(self.cpu))
        set_(self, "memory", to_memory("memory", self.memory))
        if not isinstance(self.accelerator, str):
            raise ComputeError(f"accelerator must be a name; got {self.accelerator!r}")
        set_(self, "accelerator", canonical_accelerator(self.accelerator.strip()))
        set_(self, "accelerator_count", to_int("accelerator_count", self.accelerator_count))
        if not isinstance(self.topology, str):
            raise ComputeError(f"topology must be a TPU topology such as 2x4; got "
                               f"{self.topology!r}")
        set_(self, "topology", self.topology.strip().lower())
        set_(self, "spot", to_bool("spot", self.spot))
        set_(self, "scheduling", to_scheduling(self.scheduling, self.spot))
        set_(self, "spot", self.scheduling == "spot")
        set_(self, "max_wait", to_duration_text("max_wait", self.max_wait))
        if self.chief_scheduling not in ("", "standard"):
            raise ComputeError(f"chief_scheduling must be standard (or empty for the step's "
                               f"scheduling); got {self.chief_scheduling!r}")
        set_(self, "replicas", to_int("replicas", self.replicas))
        if not isinstance(self.queue, str):
            raise ComputeError(f"queue must be a Kueue LocalQueue name; got {self.queue!r}")
        set_(self, "queue", self.queue.strip())
        set_(self, "ephemeral_storage",
             to_memory("ephemeral_storage", self.ephemeral_storage, allow_empty=True))
        if not isinstance(self.reservation, str):
            raise ComputeError(f"reservation must be a reservation name; got {self.reservation!r}")
        set_(self, "reservation", self.reservation.strip())
        set_(self, "shm_size", to_memory("shm_size", self.shm_size, allow_empty=True))
        set_(self, "timeout_s", to_seconds("timeout_s", self.timeout_s))
        set_(self, "retries", to_int("retries", self.retries))
        set_(self, "retry_backoff_s", to_seconds("retry_backoff_s", self.retry_backoff_s))
        set_(self, "retry_backoff_factor",
             to_float("retry_backoff_factor", self.retry_backoff_factor))
        set_(self, "retry_max_duration_s",
             to_seconds("retry_max_duration_s", self.retry_max_duration_s))
        set_(self, "caching", to_bool("caching", self.caching))
        set_(self, "auto_size", to_bool("auto_size", self.auto_size))
        set_(self, "worker_service_account", to_account(self.worker_service_account))
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
        if ("cpu" in changes or "memory" in changes) and "auto_size" not in changes:
            changes["auto_size"] = False  # a size set by hand is kept
        if "scheduling" in changes and "spot" not in changes:
            changes["spot"] = False  # the alias follows the field it stands for
        elif "spot" in changes and "scheduling" not in changes:
            spot = to_bool("spot", changes["spot"])
            changes["scheduling"] = "spot" if spot else (
                "standard" if self.scheduling == "spot" else self.scheduling)
        return replace(self, **changes)

    def configured(self, step: str, changes: Mapping[str, Any]) -> ComputeProfile:
        """:func:`override_step` for gkeflow.yaml's ``compute.<step>``: an invalid change is a
        :class:`~gkeflow.pipelines.settings.config.ConfigError` naming the key."""
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
            and to_bool("caching", changes["caching"]):
        raise ComputeError(f"caching must stay off ({NEVER_CACHED[step]}); drop the "
                           "caching setting")
    return profile.with_overrides(**changes)


#: Steps a run must execute every time: a cached answer would be stale.
NEVER_CACHED = {
    "fingerprint-data": "it reads what the data is now, which decides whether prepare-data "
                        "may come from cache",
    "evaluate-model": "the champion it compares with may have changed since",
    "register-model": "a run served from cache would not register its model",
    "resolve-model": "the version an alias or 'newest' names may have changed since",
    "deploy-model": "a run served from cache would not deploy",
}
