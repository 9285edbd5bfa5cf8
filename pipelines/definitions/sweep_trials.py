"""What each sweep trial gets, per target and engine: the trial step's compute fitted to
what runs a trial (a pipeline step, a Vizier CustomJob, a Ray worker pod), and which
engine runs the trials at all."""

from gkeflow.pipelines.compute import tpu_profile
from gkeflow.pipelines.compute.profiles import (
    ComputeProfile,
    PipelineUnfit,
    profile_problems,
)
from gkeflow.pipelines.settings.platforms import platform

TRIAL_STEP = "train-model"  # trials use the training step's compute profile


def uses_vizier(target: str, engine: str) -> bool:
    """Vizier runs trials only on Vertex AI; GKE and local runs fan out with ParallelFor."""
    return engine == "vizier" and platform(target).managed


def uses_ray(target: str, engine: str) -> bool:
    """Ray Tune runs the trials of a local run on a local Ray instance and of a GKE run on
    a KubeRay cluster; on Vertex AI ``engine: ray`` is refused (:func:`ray_refusal`)."""
    return engine == "ray" and not platform(target).managed


def ray_step(target: str) -> str:
    """The step that runs a Ray sweep's trials: in its own pod locally, as a RayJob on GKE."""
    return "tune-on-kuberay" if platform(target).kubernetes else "tune-with-ray"


def ray_refusal(target: str, engine: str) -> str:
    """Why ``engine`` cannot run on ``target``; "" when it can."""
    if engine == "ray" and not uses_ray(target, engine):
        return (f"sweep.engine ray runs Ray Tune locally or on a GKE cluster with KubeRay; a "
                f"{target} sweep cannot use it: set sweep.engine vizier (early stopping on "
                "Vertex AI) or kfp")
    return ""


def fit_trial(target: str, engine: str, trial: ComputeProfile) -> tuple[ComputeProfile, str]:
    """The profile sweep trials run with, and a note when it is not ``trial``.

    Ray Tune trials on GKE are one worker pod each, GPU or CPU (a TPU is refused).

    Trials fanned out with ParallelFor are pipeline steps. What only a training engine
    gives (several pods or machines; on Vertex AI, Spot, flex-start or a reservation)
    applies to the training pipeline's ``train-model``: each trial gets one machine (on
    Vertex AI, of standard capacity), and the note says what was left out. Vizier trials
    are CustomJobs of one machine: they keep the capacity and leave ``replicas`` out.

    Raises:
        PipelineUnfit: the trials cannot run at all with what a pipeline step can take
            (on Vertex AI: a machine not offered on demand, or larger than a pipeline step
            gets), although ``train-model`` can; one line naming the sweep, why and the fix.
    """
    if platform(target).local:
        return trial, ""
    vizier, ray = uses_vizier(target, engine), uses_ray(target, engine)
    if trial.uses_tpu and ray:
        raise PipelineUnfit(f"sweep.engine ray on {target.upper()} runs each trial on a GPU "
                            f"or CPU pod; {TRIAL_STEP} asks for a TPU slice: set sweep.engine "
                            "kfp, or give it a GPU")
    if trial.uses_tpu and not vizier and (platform(target).managed
                                          or tpu_profile.multi_host(trial)):
        where = ("a Vertex AI pipeline step cannot ask for a TPU; use sweep.engine: vizier"
                 if platform(target).managed else "each trial is one pod; use a single-host "
                 f"topology ({', '.join(tpu_profile.single_host_topologies(trial))})")
        raise PipelineUnfit(f"sweep on {target}: its trials cannot take {TRIAL_STEP}'s "
                            f"{trial.accelerator} {trial.topology} slice: {where}")
    dropped = {}
    if trial.replicas > 1:
        dropped["replicas"] = (1, f"replicas {trial.replicas}")
    if platform(target).managed and not vizier and trial.scheduling != "standard":
        dropped["scheduling"] = ("standard", f"scheduling {trial.scheduling}")
    if not dropped:
        return trial, ""
    changes = {field: value for field, (value, _) in dropped.items()}
    if "scheduling" in changes:
        changes.update(reservation="", max_wait="")
    fitted = trial.with_overrides(**changes)
    asked = " and ".join(text for _, text in dropped.values())
    hint = " (sweep.engine: vizier runs trials as CustomJobs)" if platform(target).managed else ""
    if vizier or ray:
        runs_as = "Vertex AI tuning trials" if vizier else "Ray Tune trials on worker pods"
        return fitted, (f"sweep trials run as {runs_as}, one machine each: "
                        f"{TRIAL_STEP}'s {asked} applies to the training pipeline only")
    unfit = _new_problems(target, trial, fitted)
    if unfit:
        on_demand = ", which Vertex AI runs on demand" if "scheduling" in dropped else ""
        raise PipelineUnfit(
            f"sweep on {target}: its trials cannot take {TRIAL_STEP}'s {asked}: each trial "
            f"is a pipeline step{on_demand} on one machine, and then {'; '.join(unfit)}; "
            f"{_unfit_fix(target, trial)}")
    return fitted, (
        f"sweep trials run as pipeline steps, one machine each: {TRIAL_STEP}'s {asked} "
        f"appl{'y' if len(dropped) > 1 else 'ies'} to the training pipeline only{hint}")


def trial_note(target: str, engine: str, trial: ComputeProfile) -> str:
    """:func:`fit_trial`'s note; "" when the sweep is not compiled at all (said apart)."""
    try:
        return fit_trial(target, engine, trial)[1]
    except PipelineUnfit:
        return ""


def _new_problems(target: str, trial: ComputeProfile, fitted: ComputeProfile) -> list[str]:
    """What is wrong with ``fitted`` and not with ``trial`` (whose own problems the
    validation reports as usual), without the step's name."""
    before = set(profile_problems(TRIAL_STEP, trial, target))
    # The capacity check's own advice (another scheduling) is what the trials cannot take.
    return [problem.removeprefix(f"{TRIAL_STEP}: ").split(": use scheduling=")[0]
            for problem in profile_problems(TRIAL_STEP, fitted, target)
            if problem not in before]


def _unfit_fix(target: str, trial: ComputeProfile) -> str:
    """How to give the sweep's trials what they asked for, or something they can take."""
    if platform(target).managed:
        takes = (f" (which takes scheduling {trial.scheduling})"
                 if trial.scheduling != "standard" else "")
        return (f"set sweep.engine: vizier to run each trial as a CustomJob{takes}, or give "
                f"{TRIAL_STEP} compute that a Vertex AI pipeline step can take")
    return f"set compute for {TRIAL_STEP} that one {target} pod can take"
