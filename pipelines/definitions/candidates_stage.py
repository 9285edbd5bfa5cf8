"""``model_type: auto``'s candidates as parallel tasks of the training pipeline.

With two or more candidate families and one-pod training, each family trains in a task of
its own (``train-gbdt``, ``train-mlp``, ``train-linear``, ...) on its own compute, side by
side, and ``train-model`` keeps the best of them on the eval split (or their ensemble),
evaluated and registered as before. Each candidate is cached on its own; a candidate whose
family fails leaves its task green with the error recorded, and ``train-model`` fails only
when none trained.

The families are chosen when the pipeline is built (gkeflow.yaml ``candidates:``, or
``model_type`` / ``candidates`` / ``user_module`` among its ``parameters:``, or the CLI's
``--model-type`` / ``--param``): a run that asks for one family gets one ``train-model``
task, as before. Training beyond one pod (several workers, a CustomJob on Vertex AI)
trains the candidates one after the other inside ``train-model``.

Compute: ``compute.train-<family>`` in gkeflow.yaml; unset, the Keras families take
``train-model``'s, the trees too when it has one GPU (XGBoost trains on one GPU per
process), else a CPU machine (beside several GPUs or a TPU, which XGBoost cannot use),
the linear model a small CPU machine, and
``train-model`` itself, which only chooses, :data:`CHOOSE_PROFILE`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from kfp import dsl

from gkeflow.components.train.families import (
    CANDIDATE_FAMILIES,
    DEFAULT_CANDIDATES,
    candidate_step,
)
from gkeflow.pipelines.compute.profiles import ComputeProfile

#: The candidate steps a pipeline may have, one per family.
CANDIDATE_STEPS = {candidate_step(family): family for family in CANDIDATE_FAMILIES}
#: A candidate that trains on CPUs: the linear model, and the trees beside a TPU.
CPU_CANDIDATE = ComputeProfile(cpu="4", memory="16G", timeout_s=6 * 3600, retries=2,
                               retry_backoff_s=60, retry_backoff_factor=2.0,
                               retry_max_duration_s=3600)
#: ``train-model`` when the candidates train in tasks of their own: it reads their eval
#: predictions, builds the ensemble when it wins and exports one SavedModel: a pod, never a
#: job (on Vertex AI its timeout is not applied, as for evaluate-model).
CHOOSE_PROFILE = ComputeProfile(cpu="2", memory="8G", timeout_s=3600, retries=2,
                                retry_backoff_s=30, retry_backoff_factor=2.0,
                                retry_max_duration_s=1800)


def default_profiles(train: ComputeProfile) -> dict[str, ComputeProfile]:
    """Each candidate step's profile before gkeflow.yaml: ``train`` (train-model's default)
    for every family but the linear model."""
    return {step: CPU_CANDIDATE if family == "linear" else train
            for step, family in CANDIDATE_STEPS.items()}


def in_parallel(families: tuple[str, ...], one_machine: bool) -> bool:
    """Whether ``families`` train as tasks of their own: several, and train-model's compute
    one machine (a pod, or a one-machine CustomJob)."""
    return one_machine and len(families) > 1


def candidate_profiles(families: tuple[str, ...], merged: Mapping[str, ComputeProfile],
                       defaults: Mapping[str, ComputeProfile]) -> dict[str, ComputeProfile]:
    """The profile of each of ``families``' steps: gkeflow.yaml's when set (``merged``
    differs from ``defaults``), else inherited from ``train-model``."""
    base = merged["train-model"]
    chosen = {}
    for family in families:
        step = candidate_step(family)
        if step in merged and merged[step] != defaults.get(step):
            chosen[step] = merged[step]
        elif family == "linear" or (family == "gbdt" and base.uses_tpu):
            chosen[step] = CPU_CANDIDATE
        elif family == "gbdt":
            chosen[step] = one_gpu(base)
        else:
            chosen[step] = base
    return chosen


def candidate_problems(profiles: Mapping[str, ComputeProfile], target: str) -> list[str]:
    """What keeps each candidate step of ``profiles`` off one machine of ``target``."""
    from gkeflow.pipelines.compute.engines import training_engine

    problems = []
    for step, profile in profiles.items():
        if profile.uses_tpu and CANDIDATE_STEPS[step] in ("gbdt", "linear"):
            problems.append(f"{step}: {CANDIDATE_STEPS[step]} trains on CPUs or GPUs, not on a "
                            "TPU; drop its accelerator and topology")
            continue
        engine = training_engine(target, profile)
        if profile.replicas > 1 or (engine is not None and not engine.runs_any_component):
            problems.append(
                f"{step}: a candidate trains on one machine (replicas 1, a single-host TPU "
                "slice); give train-model the several machines instead (model_type auto then "
                "trains its candidates one after the other there)")
    return problems


def one_gpu(profile: ComputeProfile) -> ComputeProfile:
    """``profile`` when it has at most one GPU (XGBoost trains on one GPU per process), else
    :data:`CPU_CANDIDATE`: the idle GPUs of a several-GPU machine cost more than CPUs, and
    the one-GPU machines of the largest GPUs are mostly Spot or flex-start only."""
    if not profile.uses_gpu or profile.accelerator_count <= 1:
        return profile
    return CPU_CANDIDATE


def image_for(profile: ComputeProfile) -> str:
    """The declared image a candidate step, or train-model choosing, runs in: the TPU or GPU
    image with an accelerator, else the CPU image (TensorFlow, Keras and XGBoost for CPUs:
    a smaller pull than the GPU image)."""
    from gkeflow.components.images import CPU_IMAGE
    from gkeflow.pipelines.compute.tpu_profile import training_image

    return training_image(profile) if profile.uses_tpu or profile.uses_gpu else CPU_IMAGE


def display_names() -> dict[str, str]:
    """Step -> its name in the Kubeflow UI ("Train gbdt": the run APIs report a KFP task by
    this name, which the notification reads back as the step)."""
    return {step: f"Train {family.replace('_', ' ')}" for step, family in CANDIDATE_STEPS.items()}


def named(component, step: str):
    """A copy of ``component`` named ``step``, so that its task, its pod and its folder in
    a local run are called after the family (``train-gbdt``), not ``train-candidate-2``."""
    import copy

    renamed = copy.deepcopy(component)
    renamed.component_spec.name = step
    renamed.name = step
    return renamed


def candidates_and_choice(families: tuple[str, ...], arguments: dict,
                          profiles: Mapping[str, ComputeProfile], target: str,
                          checkpoint_volume: bool, configure: Callable[..., dsl.PipelineTask],
                          env: Mapping[str, Mapping[str, str]]) -> dsl.PipelineTask:
    """A task per family of ``families`` (``arguments``: train-model's), each on its step's
    profile (through the target's engine where one applies), then ``train-model`` choosing
    among their outputs; ``configure(task, step[, profile])`` applies a step's compute,
    tracking and mounts, ``env[step]`` the environment of a job's containers."""
    from gkeflow.components import train_candidate, train_model
    from gkeflow.pipelines.compute.capacity import label_training_pod
    from gkeflow.pipelines.compute.checkpoints import add_checkpoint_volume
    from gkeflow.pipelines.compute.engines import training_engine, with_image
    from gkeflow.pipelines.settings.platforms import platform

    inputs = {}
    for family in families:
        step = candidate_step(family)
        profile = profiles[step]
        given = {**arguments, "family": family, "pipeline_candidates": ",".join(families),
                 "require_gpu": platform(target).cloud and profile.uses_gpu}
        engine = training_engine(target, profile)
        if engine is not None:  # a one-machine job (a Vertex AI CustomJob: a timeout, Spot)
            given.pop("workspace_path", None)
            component = with_image(named(train_candidate, step), image_for(profile))
            task = configure(engine.task(profile, given, env=env.get(step), component=component),
                             step, engine.launcher_profile(profile))
            inputs[f"{family}_candidate"] = task.outputs["candidate"]
            continue
        trainer = with_image(named(train_candidate, step), image_for(profile))
        task = configure(trainer(**given), step)
        if platform(target).kubernetes:
            label_training_pod(task)
            if checkpoint_volume:  # a volume each: they may train on several nodes at once
                add_checkpoint_volume(task, step=step)
        inputs[f"{family}_candidate"] = task.outputs["candidate"]
    chooser = with_image(train_model, image_for(profiles["train-model"]))
    return configure(chooser(**{**arguments, "require_gpu": False}, **inputs), "train-model")


__all__ = ["CANDIDATE_STEPS", "CHOOSE_PROFILE", "CPU_CANDIDATE", "DEFAULT_CANDIDATES",
           "candidate_profiles", "candidate_step", "candidates_and_choice", "default_profiles",
           "display_names", "in_parallel"]
