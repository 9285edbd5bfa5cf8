"""The platforms a pipeline runs on, as objects: what each is, what it honours and what it
does not, declared once, so that no module compares a platform's name.

A :class:`Platform` declares its kind (Kubernetes pods on a GKE cluster, Vertex AI's managed
steps and jobs, or kfp.local on this machine), how it spells accelerators, which price rows
and TPU offers are its own, and, as :class:`Unsupported` features with their wording, what a
pipeline step asks for that it does not apply. Code asks the object
(``platform(target).kubernetes``, ``platform(target).ignores(Unsupported.QUEUE)``); a new
platform is one :func:`register` call with its declaration (the tests register a fourth).

The built-in platforms are :data:`LOCAL`, :data:`GKE` and :data:`VERTEX`, declared here,
and GKE Autopilot, declared in :mod:`~gkeflow.pipelines.settings.autopilot` (registered when
the package is imported). A platform may be picked by a flag of another's target section
(``targets.gke.autopilot: true``: :func:`platform_for`). Imports nothing from gkeflow: every
layer may ask.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Unsupported(StrEnum):
    """What a plain pipeline step may ask for that a platform does not apply (said in a
    plan note, never dropped silently)."""

    RESOURCES = "resources"  # CPU, memory, accelerators, spot, timeout and retries
    STEP_SPOT = "spot"
    STEP_TIMEOUT = "timeout_s"
    SHM_SIZE = "shm_size"
    STEP_CAPACITY = "flex-start and reservation"
    QUEUE = "queue"
    STEP_EPHEMERAL_STORAGE = "ephemeral_storage"


@dataclass(frozen=True)
class PodRules:
    """What a platform does to a pod's CPU and memory requests before it schedules it (as GKE
    Autopilot does), declared with the page that documents it and the day it was read.

    A CPU-only pod's requests are raised to the minimums, its memory or CPU raised into the
    allowed GiB-per-vCPU ratio, its CPU rounded up to ``cpu_step``; above the maximums it is
    refused. An accelerator pod gets the minimums only (no ratio: its node is sized to the
    accelerator) and the node selectors of ``accelerator_selectors``."""

    title: str
    source: str
    read: str
    cpu_min: float
    memory_min_gib: float
    cpu_max: float
    memory_max_gib: float
    cpu_step: float
    gib_per_cpu_min: float
    gib_per_cpu_max: float
    #: Node selectors a GPU pod adds (Autopilot: its Accelerator compute class).
    accelerator_selectors: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Platform:
    """One platform's declaration (see the module docstring)."""

    name: str
    title: str
    #: Steps are pods on a GKE cluster: requests = limits, node selectors and tolerations,
    #: PersistentVolumeClaims, Kubernetes Secrets, JobSets and RayJobs.
    kubernetes: bool = False
    #: Vertex AI: managed pipeline steps on machines it picks, CustomJobs for training.
    managed: bool = False
    #: kfp.local on this machine: only caching applies.
    local: bool = False
    #: It names GPUs by Vertex AI's AcceleratorType (``NVIDIA_TESLA_T4``), not by GKE's
    #: node label (``nvidia-tesla-t4``).
    accelerator_types: bool = False
    #: Its key in the TPU catalogue's offers (``gke`` or ``vertex``).
    tpu_offers: str = "gke"
    #: The prefix of its price rows' kinds ("" Compute Engine's, ``vertex-`` Vertex AI's).
    price_kinds: str = ""
    #: What a plain step asks for that it does not apply, each with the note's wording.
    unsupported: dict[Unsupported, str] = field(default_factory=dict)
    #: The engine that runs training beyond one pod there (a name of
    #: ``compute/engines``: ``local-workers``, ``jobset``, ``custom-job``; "" for none).
    training_engine: str = ""
    #: The ``targets:`` section it is configured under and submitted through ("": its own
    #: name). GKE Autopilot's is ``gke``: the same Kubeflow Pipelines API.
    backend: str = ""
    #: A boolean field of that section which, when true, makes this the platform of the
    #: section (Autopilot: ``autopilot``); "" for a section's plain platform.
    selected_by: str = ""
    #: Node pools hold its accelerators: a GPU or TPU pod tolerates their taints itself.
    #: False where the platform provisions nodes and adds the tolerations (Autopilot).
    node_pools: bool = True
    #: The rules it applies to a pod's requests (None: the requests are used as written).
    pod_rules: PodRules | None = None
    #: It bills a pod by its requests (the ``autopilot-*`` price rows), not the node it
    #: runs on.
    pod_prices: bool = False

    @property
    def runtime(self) -> str:
        """The name a pipeline step is told at run time (components speak of ``gke`` for
        Kubeflow Pipelines on any Kubernetes cluster, ``vertex`` and ``local``)."""
        return LOCAL.name if self.local else VERTEX.name if self.managed else GKE.name

    @property
    def submits_to(self) -> str:
        """The ``targets:`` section (and submit backend) this platform uses."""
        return self.backend or self.name

    @property
    def cloud(self) -> bool:
        """Runs on Google Cloud (images, buckets, prices apply)."""
        return not self.local

    def ignores(self, feature: Unsupported) -> bool:
        return feature in self.unsupported

    def why(self, feature: Unsupported) -> str:
        return self.unsupported.get(feature, "")


LOCAL = Platform(
    "local", "kfp.local", local=True, training_engine="local-workers",
    unsupported={
        Unsupported.RESOURCES: ("kfp.local honours only caching; resources, spot, timeout and "
                                "retries apply on gke and vertex"),
        Unsupported.QUEUE: "queue (Kueue) applies on gke only; ignored on local",
    })
GKE = Platform("gke", "GKE", kubernetes=True, training_engine="jobset")
VERTEX = Platform(
    "vertex", "Vertex AI", managed=True, accelerator_types=True, tpu_offers="vertex",
    price_kinds="vertex-", training_engine="custom-job",
    unsupported={
        Unsupported.STEP_SPOT: ("spot is not applied on Vertex AI Pipelines (a pipeline step "
                                "runs on on-demand capacity)"),
        Unsupported.STEP_TIMEOUT: ("timeout_s is not enforced on Vertex AI Pipelines (the "
                                   "pipeline spec has no per-step timeout)"),
        Unsupported.SHM_SIZE: ("shm_size is not applied on Vertex AI Pipelines (the machine's "
                               "own /dev/shm is used)"),
        Unsupported.STEP_CAPACITY: ("scheduling flex-start and reservation are not applied to "
                                    "a Vertex AI Pipelines step (only a CustomJob asks for "
                                    "them)"),
        Unsupported.QUEUE: "queue (Kueue) applies on gke only; ignored on vertex",
        Unsupported.STEP_EPHEMERAL_STORAGE: (
            "ephemeral_storage is not applied to a single-pod Vertex AI step (it reads "
            "artifacts through /gcs and stages nothing); a training CustomJob takes it as its "
            "boot disk"),
    })

_REGISTRY: dict[str, Platform] = {}


def register(declared: Platform) -> Platform:
    """Make ``declared`` known by its name (a second declaration of a name replaces it)."""
    _REGISTRY[declared.name] = declared
    return declared


def unregister(name: str) -> None:
    """Forget the platform called ``name`` (a test's own declaration, say)."""
    _REGISTRY.pop(name, None)


for _builtin in (LOCAL, GKE, VERTEX):
    register(_builtin)


def platform(name: str | Platform) -> Platform:
    """The platform called ``name`` (a Platform is returned as it is)."""
    if isinstance(name, Platform):
        return name
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown platform {name!r}; choose one of "
                         f"{', '.join(_REGISTRY)}") from None


def platform_for(target: str, section=None) -> Platform:
    """The platform a run on ``target`` (a ``targets:`` section's name, or a platform's)
    uses, given that section's settings ``section``: the platform it selects by a flag set
    true (``targets.gke.autopilot``), else the platform called ``target``."""
    for declared in _REGISTRY.values():
        if (declared.selected_by and declared.backend == target and section is not None
                and getattr(section, declared.selected_by, False) is True):
            return declared
    return platform(target)


def names() -> tuple[str, ...]:
    """The registered platforms' names, built-in first."""
    return tuple(_REGISTRY)
