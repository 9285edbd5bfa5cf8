"""Bayesian search for ``sweep.engine: ray`` (``algorithm: bayesian``): the sweep's search
space as Ray Tune domains, sampled by Optuna's TPE sampler (``OptunaSearch``), each new
trial chosen from the eval metric the earlier ones reached, at most ``parallel_trials``
in flight. Ray and Optuna are imported only when such a sweep runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def tune_domains(space: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """``sweep.parameters`` (as gkeflow.yaml declares them) as Ray Tune domains."""
    from ray import tune

    domains = {}
    for name, spec in space.items():
        kind = spec["type"]
        if kind == "choice":
            domains[name] = tune.choice(list(spec["values"]))
        elif kind == "uniform":
            domains[name] = tune.uniform(float(spec["min"]), float(spec["max"]))
        elif kind == "loguniform":
            domains[name] = tune.loguniform(float(spec["min"]), float(spec["max"]))
        elif kind == "int":  # upper bound included, as the grid has it
            domains[name] = tune.qrandint(int(spec["min"]), int(spec["max"]),
                                          int(spec.get("step", 1)))
        else:
            raise ValueError(f"parameters.{name}: type {kind!r} cannot be searched")
    return domains


def bayesian_search(metric: str, mode: str, seed: int, parallel_trials: int):
    """Optuna's TPE sampler (seeded) behind a limit of ``parallel_trials`` at once."""
    from ray.tune.search import ConcurrencyLimiter
    from ray.tune.search.optuna import OptunaSearch

    return ConcurrencyLimiter(OptunaSearch(metric=metric, mode=mode, seed=seed),
                              max_concurrent=parallel_trials)


def trial_id_of(tune_trial_id: str) -> str:
    """A searched trial's id: ``trial-`` and Tune's own id, the same on every restart of
    the trial (``trial-000``... when Tune numbers its trials, ``<experiment>_<counter>``)."""
    counter = tune_trial_id.rsplit("_", 1)[-1]
    return f"trial-{int(counter):03d}" if "_" in tune_trial_id and counter.isdigit() \
        else f"trial-{tune_trial_id}"
