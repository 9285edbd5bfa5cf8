"""Engines that run the training step beyond one pod: one module per target, one interface.

The pipeline asks :func:`training_engine` which engine, if any, runs its training step for
a target and profile; an engine builds the step's task (same inputs and outputs as
``train_model``, so evaluation and registration read the model as usual) and says which
compute the step's own pod needs (:meth:`TrainEngine.launcher_profile`):

- ``vertex`` (:mod:`.vertex`): a Vertex AI CustomJob (chief + worker pools, Spot /
  flex-start scheduling, timeout) when the profile has ``replicas > 1``, a ``scheduling``
  other than ``standard``, or a timeout;
- ``gke`` (:mod:`.gke`): a JobSet of ``replicas`` GPU pods when ``replicas > 1``;
- ``local`` (:mod:`.local`): ``replicas`` worker processes on loopback when ``replicas > 1``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Protocol

from gkeflow.pipelines.compute.profiles import ComputeError, ComputeProfile

#: What the pod that only launches and follows the workload asks for.
LAUNCHER_CPU, LAUNCHER_MEMORY = "1", "2G"


class TrainEngine(Protocol):
    """How one target runs a training step that one pod cannot."""

    name: str
    #: Whether a job of this engine can run another one-machine step than ``train_model``
    #: (a candidate of ``model_type: auto``), given as ``task(..., component=)``.
    runs_any_component: bool

    def applies(self, profile: ComputeProfile) -> bool:
        """Whether this engine, rather than a plain pod, runs a step with ``profile``."""

    def task(self, profile: ComputeProfile, arguments: dict[str, Any],
             env: Mapping[str, str] | None = None, component=None):
        """The pipeline task that runs training with ``arguments`` (``train_model``'s, or
        ``component``'s where :attr:`runs_any_component`) and ``env`` in the training
        containers (the gcsfuse mounts: only a Vertex AI CustomJob sees buckets; the other
        engines refuse a non-empty ``env``)."""

    def launcher_profile(self, profile: ComputeProfile) -> ComputeProfile:
        """The compute of the step's own pod (the workload gets ``profile``)."""

    def machine(self, profile: ComputeProfile) -> str:
        """The machine type the job's chief runs on; "" where the cluster chooses."""

    def describe(self, profile: ComputeProfile, step: str = "train-model") -> str:
        """One line for ``plan`` and ``compile``: what the step launches, machines and GPUs."""


def launcher_profile(profile: ComputeProfile) -> ComputeProfile:
    """A small CPU pod with the training step's retries, timeout and caching."""
    return replace(profile, cpu=LAUNCHER_CPU, memory=LAUNCHER_MEMORY, accelerator="",
                   accelerator_count=0, topology="", spot=False, scheduling="standard", max_wait="",
                   chief_scheduling="",
                   replicas=1, queue="", shm_size="", ephemeral_storage="")


def as_training_step(component):
    """A copy of ``component`` named ``train-model``: the step keeps its task name (and so its
    compute, caching, outputs and run summary) whichever engine runs it."""
    import copy

    renamed = copy.deepcopy(component)
    renamed.component_spec.name = "train-model"
    renamed.name = "train-model"
    return renamed


def keras_arguments(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """``arguments`` without the candidates of ``model_type: auto``, for the engines whose
    workers join one training (local workers, a GKE JobSet): ``auto`` trains the Keras MLP
    alone there (the linear model trains in one pod); the trees' settings (``gbdt_*``) go
    along, for ``model_type: gbdt`` across the workers (XGBoost's collective)."""
    return {k: v for k, v in arguments.items() if k != "candidates"}


def refuse_env(engine: str, env: Mapping[str, str] | None) -> None:
    """ComputeError when ``env`` (the gcsfuse mounts) is given to an engine whose pods
    mount no bucket."""
    if env:
        raise ComputeError(f"train-model's {engine} pods mount no Cloud Storage bucket: "
                           "use gcsfuse buckets for data only or train in one pod")


def with_image(component, image: str):
    """``component`` running in ``image``: a copy when its declared image differs (a TPU
    training step takes the TPU image), else ``component`` itself."""
    import copy

    container = component.component_spec.implementation.container
    if container.image == image:
        return component
    changed = copy.deepcopy(component)
    changed.component_spec.implementation.container.image = image
    return changed


def gpus_text(profile: ComputeProfile, accelerator: str) -> str:
    if not profile.uses_gpu:
        return "no GPU"
    from gkeflow.pipelines.compute.wording import counted

    return (f"{profile.accelerator_count} x {accelerator} each, "
            f"{counted(profile.replicas * profile.accelerator_count, 'GPU')} in all")


def training_steps(profiles: Mapping[str, ComputeProfile]) -> tuple[str, ...]:
    """The steps of ``profiles`` that train: ``model_type: auto``'s candidate steps when the
    pipeline has them (``train-model`` then only chooses among them), else ``train-model``."""
    from gkeflow.components.train.families import CANDIDATE_FAMILIES, candidate_step

    candidates = tuple(step for family in CANDIDATE_FAMILIES
                       if (step := candidate_step(family)) in profiles)
    return candidates or (("train-model",) if "train-model" in profiles else ())


def engine_for(target: str, profiles: Mapping[str, ComputeProfile],
               step: str = "train-model") -> TrainEngine | None:
    """The engine that runs ``step`` of a pipeline with ``profiles``; None for a plain pod,
    and for a step that does not train."""
    if step not in training_steps(profiles):
        return None
    return training_engine(target, profiles[step])


def training_engine(target: str, profile: ComputeProfile) -> TrainEngine | None:
    """The engine that runs a training step with ``profile`` on ``target`` (the one its
    platform declares); None: a plain pod."""
    from gkeflow.pipelines.compute.engines import gke, local, vertex
    from gkeflow.pipelines.settings.platforms import platform

    where = platform(target)
    engines = {"custom-job": vertex.ENGINE, "local-workers": local.ENGINE,
               "jobset": gke.engine_on(where.name)}  # pods placed as the platform wants
    engine = engines.get(where.training_engine)
    return engine if engine is not None and engine.applies(profile) else None
