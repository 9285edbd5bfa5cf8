"""What a Ray Tune sweep is run with, and where it publishes: shared by the local engine,
the KubeRay driver and the launcher step (which must not import Ray or Keras)."""

from __future__ import annotations

from dataclasses import dataclass

SCHEDULERS = ("asha", "median", "none")
#: How the trials' hyperparameters are chosen: ``fixed`` (the grid or seeded random draws
#: every engine runs, given as the trial list) or ``bayesian`` (Optuna's TPE sampler over
#: the search space, each trial chosen from the results so far).
SEARCHES = ("fixed", "bayesian")
#: Under the output URI: the published reports of every trial (``reports``, trials order).
SWEEP_DIR = "sweep"


@dataclass(frozen=True)
class TuneSettings:
    """How Tune runs the trials: the scheduler, how many at once, and what each gets."""

    metric: str = "eval_accuracy"
    direction: str = "maximize"
    scheduler: str = "asha"
    parallel_trials: int = 2
    grace_epochs: int = 1  # epochs every trial trains before it can be stopped
    reduction_factor: int = 2  # ASHA: 1 in this many trials goes on at each rung
    cpus_per_trial: float = 1.0
    gpus_per_trial: float = 0.0
    trial_retries: int = 0  # restarts of a trial whose worker was lost (from its checkpoint)
    search: str = "fixed"
    seed: int = 0  # bayesian: the sampler's seed

    def __post_init__(self) -> None:
        if self.scheduler not in SCHEDULERS:
            raise ValueError(f"scheduler must be one of {', '.join(SCHEDULERS)}; "
                             f"got {self.scheduler!r}")
        if self.direction not in ("maximize", "minimize"):
            raise ValueError(f"direction must be maximize or minimize; got {self.direction!r}")
        if self.parallel_trials < 1 or self.grace_epochs < 1 or self.reduction_factor < 2:
            raise ValueError("parallel_trials and grace_epochs must be >= 1, "
                             "reduction_factor >= 2")
        if self.search not in SEARCHES:
            raise ValueError(f"search must be one of {', '.join(SEARCHES)}; got {self.search!r}")
        if self.trial_retries < 0:
            raise ValueError(f"trial_retries must be >= 0; got {self.trial_retries}")

    @property
    def mode(self) -> str:
        return "max" if self.direction == "maximize" else "min"

    def check_space(self, space) -> None:
        """Refuse a Bayesian search without the space it samples (before any cluster)."""
        if self.search == "bayesian" and not space:
            raise ValueError("search: bayesian needs the search space (sweep.parameters)")


def sweep_uri(output: str) -> str:
    """Where the driver publishes every trial's report."""
    return f"{output.rstrip('/')}/{SWEEP_DIR}"


def trial_uri(output: str, trial_id: str) -> str:
    """Where a trial publishes its model and report."""
    return f"{output.rstrip('/')}/trials/{trial_id}"
