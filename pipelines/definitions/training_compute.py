"""The training pipeline's steps, their default compute and images, and the per-step
compute of one build (defaults, then gkeflow.yaml, validated for a target): what
``gkeflow plan``, ``compile`` and the pipeline itself read."""

from collections.abc import Mapping

from gkeflow.components import (
    deploy_model,
    evaluate_model,
    fingerprint_data,
    prepare_data,
    register_model,
    train_candidate,
    train_model,
)
from gkeflow.components.train.families import DEFAULT_CANDIDATES
from gkeflow.pipelines.compute.engines import training_engine
from gkeflow.pipelines.compute.machine_fit import sized
from gkeflow.pipelines.compute.profiles import ComputeError, ComputeProfile, validate_profiles
from gkeflow.pipelines.compute.tpu_profile import training_image
from gkeflow.pipelines.compute.wording import plural
from gkeflow.pipelines.definitions import candidates_stage
from gkeflow.pipelines.definitions.deploy_stage import DEPLOY_STEP, SERVING_PROFILE
from gkeflow.pipelines.definitions.preparation import (
    FANOUT_COMPONENTS,
    FANOUT_STEPS,
    ONE_POD,
    PreparationSettings,
    preparation_steps,
)

TRAIN_PROFILE = ComputeProfile(
    cpu="7", memory="26G", accelerator="nvidia-tesla-t4", accelerator_count=1,
    auto_size=True, timeout_s=6 * 3600, retries=2, retry_backoff_s=60, retry_backoff_factor=2.0,
    retry_max_duration_s=3600,
)

#: Default per-step compute: one T4 GPU for training only, sized to fit an n1-standard-8 GKE
#: node (what GKE leaves to pods) and a Vertex n1-standard-8 machine; with GPUs that come on
#: a fixed machine (A3, G2, ...) train-model asks for that machine's room (``auto_size``).
#: Every retry field is explicit. Data preparation is cached on the fingerprint of its
#: input's content, which a light step computes at run time and never caches; evaluation
#: (the champion may change) and registration are never served from cache.
DEFAULT_COMPUTE: Mapping[str, ComputeProfile] = {
    "fingerprint-data": ComputeProfile(cpu="1", memory="2G", caching=False, timeout_s=1800),
    "prepare-data": ComputeProfile(cpu="2", memory="8G", caching=True, timeout_s=3600),
    # fan-out preparation (prepare_groups > 1): plan, one pod per group, merge
    **FANOUT_STEPS,
    "train-model": TRAIN_PROFILE,
    "evaluate-model": ComputeProfile(cpu="2", memory="8G", caching=False, timeout_s=3600),
    "register-model": ComputeProfile(
        cpu="1", memory="2G", caching=False, timeout_s=600, retries=2, retry_backoff_s=30,
        retry_backoff_factor=2.0, retry_max_duration_s=600,
    ),
    DEPLOY_STEP: SERVING_PROFILE,  # the serving machines (the deploy task itself is small)
}

#: model_type auto's candidate steps (a task each, candidates_stage.py), before gkeflow.yaml:
#: unset, a candidate inherits train-model's compute (see candidates_stage.candidate_profiles).
CANDIDATE_COMPUTE: Mapping[str, ComputeProfile] = candidates_stage.default_profiles(TRAIN_PROFILE)

#: Step -> the component it runs (and so the image it runs in).
STEP_COMPONENTS = {
    "fingerprint-data": fingerprint_data,
    "prepare-data": prepare_data,
    "train-model": train_model,
    **dict.fromkeys(candidates_stage.CANDIDATE_STEPS, train_candidate),
    "evaluate-model": evaluate_model,
    "register-model": register_model,
    DEPLOY_STEP: deploy_model,
    **FANOUT_COMPONENTS,
}


def step_images(profiles: Mapping[str, ComputeProfile] | None = None) -> dict[str, str]:
    """Step -> the image its component runs in, as declared by the component; with
    ``profiles``, a training step on a TPU runs in the TPU image."""
    images = {
        step: component.component_spec.implementation.container.image
        for step, component in STEP_COMPONENTS.items()
    }
    if profiles and "train-model" in profiles:
        images["train-model"] = training_image(profiles["train-model"])
    for step in candidates_stage.CANDIDATE_STEPS:  # the candidates, and train-model choosing
        if profiles and step in profiles:
            images[step] = candidates_stage.image_for(profiles[step])
            images["train-model"] = candidates_stage.image_for(profiles["train-model"])
    return images


def resolve_compute(
    target: str, compute: Mapping[str, ComputeProfile] | None = None,
    preparation: PreparationSettings = ONE_POD, families: tuple[str, ...] = DEFAULT_CANDIDATES,
) -> dict[str, ComputeProfile]:
    """Per-step profiles (defaults, then ``compute``) of the steps the pipeline has with
    ``preparation`` (one pod or fan-out) and the model ``families`` it trains (a task each
    when several, see :mod:`candidates_stage`), validated for ``target``.

    Raises:
        ComputeError: naming every step whose request cannot be met, what it asked and
            the valid choices.
    """
    from gkeflow.components.images import IMAGES

    unknown = sorted(set(compute or {}) - set(DEFAULT_COMPUTE) - set(CANDIDATE_COMPUTE))
    if unknown:
        raise ComputeError(
            f"unknown {plural(len(unknown), 'step')} {', '.join(unknown)}; steps are "
            f"{', '.join([*DEFAULT_COMPUTE, *CANDIDATE_COMPUTE])}"
        )
    merged = {**DEFAULT_COMPUTE, **(compute or {})}
    # what gkeflow.yaml asked of train-model is checked as such, before any candidate
    # inherits it
    base = sized(merged["train-model"], target)
    validate_profiles({"train-model": base}, target, {
        "train-model": IMAGES.get(step_images({"train-model": base})["train-model"])})
    engine = training_engine(target, base)
    one_machine = base.replicas == 1 and (engine is None or engine.runs_any_component)
    chosen = {}
    if candidates_stage.in_parallel(tuple(families), one_machine):
        chosen = candidates_stage.candidate_profiles(tuple(families), merged, CANDIDATE_COMPUTE)
        merged["train-model"] = candidates_stage.CHOOSE_PROFILE
    ordered = {}
    for step, profile in merged.items():  # the candidates, then train-model choosing
        if step == "train-model":
            ordered.update(chosen)
        if step not in candidates_stage.CANDIDATE_STEPS:
            ordered[step] = profile
    merged = ordered
    profiles = {step: sized(profile, target) for step, profile in merged.items()}
    for step in {"prepare-data", *FANOUT_STEPS} - preparation_steps(preparation):
        profiles.pop(step)
    gpu_images = {step: IMAGES.get(image) for step, image in step_images(profiles).items()}
    gpu_images[DEPLOY_STEP] = None  # its GPU serves in the serving runtime's image
    if problems := candidates_stage.candidate_problems(chosen, target):
        raise ComputeError(f"invalid compute for target {target}:\n"
                           + "\n".join(f"  - {p}" for p in problems))
    # a candidate trains where train-model would (a TPU included), on one machine
    validate_profiles(profiles, target, gpu_images, ("train-model", *chosen))
    return profiles
