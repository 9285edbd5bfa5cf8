"""``sweep:``: a hyperparameter search space, declared once and expanded into trials.

Example (``gkeflow.yaml``)::

    sweep:
      engine: kfp              # kfp: ParallelFor on GKE/Vertex/local; vizier: Vertex AI tuning job;
                               # ray: Ray Tune (local runs), poor trials stopped early
      scheduler: asha          # ray only: asha | median | none
      grace_epochs: 1          # ray only: epochs every trial trains before it can be stopped
      algorithm: random        # grid | random (seeded) | bayesian (engine ray: Optuna TPE)
      seed: 0
      max_trials: 8
      parallel_trials: 2       # trials (and so GPUs) in flight at once
      metric: eval_accuracy    # eval_accuracy | eval_loss, measured on the eval split
      direction: maximize      # maximize | minimize (default: what suits the metric)
      parameters:
        learning_rate: {type: loguniform, min: 0.0001, max: 0.1}
        batch_size: {type: choice, values: [16, 32, 64]}
        hidden_units: {type: choice, values: ["64,32", "128,64"]}
        epochs: {type: int, min: 5, max: 20}

The trials are expanded deterministically (:func:`expand_trials`) into a list of dicts,
one per trial, each holding a ``trial_id`` and the searched hyperparameters; the sweep
pipeline fans out over that list, and takes every other hyperparameter from its own
parameters (``epochs``, ``batch_size``... as in the training pipeline).
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gkeflow.components.sweep.hparams import GBDT_ONLY, TUNABLE_DEFAULTS


class SweepError(ValueError):
    """The search space is invalid; the message names the key and the fix."""


#: Tunable train_model parameters: name -> (python type, default, validity check, meaning).
_D = TUNABLE_DEFAULTS
TUNABLE: dict[str, tuple[type, Any, Any, str]] = {
    "learning_rate": (float, _D["learning_rate"], lambda v: v > 0, "a number > 0"),
    "batch_size": (int, _D["batch_size"], lambda v: v >= 1, "an integer >= 1"),
    "epochs": (int, _D["epochs"], lambda v: v >= 1, "an integer >= 1"),
    "dropout": (float, _D["dropout"], lambda v: 0 <= v < 1, "a number in [0, 1)"),
    "hidden_units": (str, _D["hidden_units"], lambda v: _is_units(v),
                     "comma-separated positive layer sizes, e.g. \"64,32\""),
    "model_type": (str, _D["model_type"], lambda v: v in ("mlp", "wide_deep", "gbdt"),
                   "mlp, wide_deep or gbdt"),
    "early_stopping_patience": (int, _D["early_stopping_patience"], lambda v: v >= 0,
                                "an integer >= 0"),
    # gradient-boosted trees (model_type gbdt), the bounds train-model checks
    "gbdt_rounds": (int, _D["gbdt_rounds"], lambda v: v >= 1, "an integer >= 1"),
    "gbdt_learning_rate": (float, _D["gbdt_learning_rate"], lambda v: 0 < v <= 1,
                           "a number in (0, 1]"),
    "gbdt_max_depth": (int, _D["gbdt_max_depth"], lambda v: 1 <= v <= 20,
                       "an integer from 1 to 20"),
    "gbdt_min_child_weight": (float, _D["gbdt_min_child_weight"], lambda v: v >= 0,
                              "a number >= 0"),
    "gbdt_subsample": (float, _D["gbdt_subsample"], lambda v: 0 < v <= 1,
                       "a number in (0, 1]"),
    "gbdt_colsample_bytree": (float, _D["gbdt_colsample_bytree"], lambda v: 0 < v <= 1,
                              "a number in (0, 1]"),
    "gbdt_reg_lambda": (float, _D["gbdt_reg_lambda"], lambda v: v >= 0, "a number >= 0"),
}

#: Metric -> the direction that is better, when the config does not say.
METRICS = {"eval_accuracy": "maximize", "eval_loss": "minimize",
           "eval_rmse": "minimize"}  # eval_rmse: regression only
METRIC_ALIASES = {"accuracy": "eval_accuracy", "loss": "eval_loss",
                  "val_accuracy": "eval_accuracy", "val_loss": "eval_loss",
                  "rmse": "eval_rmse", "val_rmse": "eval_rmse"}
MAX_TRIALS = 100  # Vertex fails to collect over more than 100 loop iterations


def _is_units(value: Any) -> bool:
    parts = str(value).split(",")
    return all(p.strip().isdigit() and int(p) > 0 for p in parts) and bool(parts)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Choice(_Strict):
    type: Literal["choice"]
    values: list[bool | int | float | str] = Field(min_length=1)

    def grid(self) -> list:
        return list(self.values)

    def sample(self, rng: random.Random):
        return self.values[rng.randrange(len(self.values))]


class Uniform(_Strict):
    type: Literal["uniform"]
    min: float
    max: float

    @model_validator(mode="after")
    def _range(self):
        if not self.min < self.max:
            raise ValueError(f"min ({self.min:g}) must be below max ({self.max:g})")
        return self

    def grid(self) -> list:
        raise SweepError("a uniform range has no grid; use algorithm: random or a choice")

    def sample(self, rng: random.Random) -> float:
        return _round(rng.uniform(self.min, self.max))


class LogUniform(Uniform):
    type: Literal["loguniform"]  # type: ignore[assignment]

    @model_validator(mode="after")
    def _positive(self):
        if self.min <= 0:
            raise ValueError(f"min ({self.min:g}) must be > 0 for a loguniform range")
        return self

    def grid(self) -> list:
        raise SweepError("a loguniform range has no grid; use algorithm: random or a choice")

    def sample(self, rng: random.Random) -> float:
        return _round(math.exp(rng.uniform(math.log(self.min), math.log(self.max))))


class IntRange(_Strict):
    type: Literal["int"]
    min: int
    max: int
    step: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _range(self):
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must not exceed max ({self.max})")
        return self

    def grid(self) -> list:
        return list(range(self.min, self.max + 1, self.step))

    def sample(self, rng: random.Random) -> int:
        return rng.choice(self.grid())


Parameter = Annotated[Union[Choice, Uniform, LogUniform, IntRange], Field(discriminator="type")]


def _round(value: float) -> float:
    """Six significant digits: readable in the trial table, identical on every expansion."""
    return float(f"{value:.6g}")


class SweepConfig(_Strict):
    """The ``sweep:`` section: the search space and how it is searched."""

    engine: Literal["kfp", "vizier", "ray"] = "kfp"
    #: engine ray: the scheduler stopping poor trials (asha, median) or none
    scheduler: Literal["asha", "median", "none"] = "asha"
    grace_epochs: int = Field(1, ge=1)
    algorithm: Literal["grid", "random", "bayesian"] = "random"
    seed: int = 0
    max_trials: int = Field(8, ge=1, le=MAX_TRIALS)
    parallel_trials: int = Field(2, ge=1, le=MAX_TRIALS)
    metric: str = "eval_accuracy"
    direction: Literal["maximize", "minimize", ""] = ""
    parameters: dict[str, Parameter] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _aliases(cls, data):
        if isinstance(data, dict) and isinstance(data.get("metric"), str):
            data = {**data, "metric": METRIC_ALIASES.get(data["metric"], data["metric"])}
        return data

    @model_validator(mode="after")
    def _check(self):
        if self.metric not in METRICS:
            raise ValueError(f"metric: {self.metric!r} is not measured by training; choose "
                             f"{' or '.join(METRICS)}")
        if not self.direction:
            self.direction = METRICS[self.metric]
        if not self.parameters:
            raise ValueError("parameters: name at least one hyperparameter to search, e.g. "
                             "learning_rate: {type: loguniform, min: 0.0001, max: 0.1}")
        for name, spec in self.parameters.items():
            _check_parameter(name, spec)
        if self.algorithm == "bayesian" and self.engine != "ray":
            raise ValueError(f"algorithm: bayesian chooses each trial from the results so "
                             f"far, which engine {self.engine} cannot (its trials are fixed "
                             "before the run): set engine: ray, or algorithm: random")
        if self.algorithm == "grid":
            size = self.grid_size()
            if size > self.max_trials:
                raise ValueError(f"max_trials: the grid has {size} points but max_trials is "
                                 f"{self.max_trials}; raise max_trials or drop values")
        if self.parallel_trials > self.max_trials:
            self.parallel_trials = self.max_trials
        return self

    def grid_size(self) -> int:
        size = 1
        for name, spec in self.parameters.items():
            try:
                size *= len(spec.grid())
            except SweepError as exc:
                raise ValueError(f"parameters.{name}: {exc}") from None
        return size

    @property
    def tuned(self) -> list[str]:
        return list(self.parameters)

    def trial_count(self) -> int:
        return min(self.grid_size(), self.max_trials) if self.algorithm == "grid" \
            else self.max_trials


def _check_parameter(name: str, spec) -> None:
    if name not in TUNABLE:
        raise ValueError(f"parameters.{name}: not a tunable hyperparameter; tunable: "
                         f"{', '.join(TUNABLE)}")
    kind, _, valid, meaning = TUNABLE[name]
    if isinstance(spec, (Uniform, LogUniform)) and kind is not float:
        raise ValueError(f"parameters.{name}: {spec.type} gives real numbers but {name} is "
                         f"{meaning}; use type: int or choice")
    if isinstance(spec, IntRange) and kind is str:
        raise ValueError(f"parameters.{name}: {name} is {meaning}; use type: choice")
    values = spec.grid() if isinstance(spec, (Choice, IntRange)) else [spec.min, spec.max]
    for value in values:
        if not _fits(kind, value) or not valid(kind(value)):
            raise ValueError(f"parameters.{name}: not valid; {name} must be "
                             f"{meaning}")


def family_problem(sweep: SweepConfig, model_type: str) -> str:
    """Why ``sweep`` cannot train ``model_type``: it tunes gradient-boosted trees' settings
    (``gbdt_*``) for a Keras model; "" when it can."""
    trees = [name for name in sweep.parameters if name in GBDT_ONLY]
    if not trees:
        return ""
    tuned = sweep.parameters.get("model_type")
    families = set(tuned.grid()) if isinstance(tuned, Choice) else {model_type}
    if families == {"gbdt"}:
        return ""
    return (f"the sweep tunes {', '.join(trees)}, which only gradient-boosted trees use, but "
            f"trains {', '.join(sorted(families))}: add --model-type gbdt (or drop "
            f"{', '.join(trees)})")


def _fits(kind: type, value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if kind is float:
        return isinstance(value, (int, float))
    if kind is int:
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    return isinstance(value, str)


def parse_sweep(raw: Mapping[str, Any] | None, where: str = "sweep") -> SweepConfig:
    """Validate a ``sweep:`` mapping; errors name ``where.<key>``."""
    from pydantic import ValidationError

    from gkeflow.pipelines.settings.validation import validation_message

    try:
        return SweepConfig.model_validate(dict(raw or {}))
    except ValidationError as exc:
        raise SweepError(validation_message(
            exc, SweepConfig, root=where,
            skip=("choice", "uniform", "loguniform", "int"))) from None


def expand_trials(sweep: SweepConfig) -> list[dict]:
    """The trials of ``sweep``: the same list for the same config and seed.

    Each trial holds ``trial_id`` (``trial-000``...) and the searched hyperparameters, typed
    as train_model expects (the others come from the pipeline's parameters). Grid: the
    cartesian product in the order the parameters are declared. Random: each trial samples
    every parameter in declaration order from ``random.Random(seed)``; a point drawn twice
    is kept (trials stay numbered by draw). Bayesian: ``max_trials`` trials with ids only;
    the search chooses their hyperparameters as the sweep runs.
    """
    names = list(sweep.parameters)
    if sweep.algorithm == "bayesian":
        return [{"trial_id": f"trial-{index:03d}"} for index in range(sweep.max_trials)]
    if sweep.algorithm == "grid":
        points = itertools.product(*(sweep.parameters[n].grid() for n in names))
        points = list(itertools.islice(points, sweep.max_trials))
    else:
        rng = random.Random(sweep.seed)
        points = [tuple(sweep.parameters[n].sample(rng) for n in names)
                  for _ in range(sweep.max_trials)]
    trials = []
    for index, point in enumerate(points):
        trial: dict[str, Any] = {"trial_id": f"trial-{index:03d}"}
        for name, value in zip(names, point, strict=True):
            trial[name] = TUNABLE[name][0](value)
        trials.append(trial)
    return trials


def sweep_from_flags(
    base: SweepConfig | None = None,
    params: tuple[str, ...] = (),
    algorithm: str | None = None,
    max_trials: int | None = None,
    parallel_trials: int | None = None,
    metric: str | None = None,
    direction: str | None = None,
    seed: int | None = None,
) -> SweepConfig:
    """A config file's sweep (or none) with command-line flags on top.

    ``params`` are ``NAME=SPEC`` with SPEC one of ``a,b,c`` (choice), ``uniform:LO:HI``,
    ``loguniform:LO:HI`` or ``int:LO:HI[:STEP]``; a flag replaces the file's parameter of
    that name.
    """
    data = base.model_dump() if base is not None else {}
    parameters = dict(data.get("parameters", {}))
    for option in params:
        name, sep, spec = option.partition("=")
        if not sep or not name.strip() or not spec.strip():
            raise SweepError(f"--sweep-param {option!r}: expected NAME=SPEC, e.g. "
                             "learning_rate=loguniform:0.0001:0.1 or batch_size=16,32,64")
        parameters[name.strip()] = _parse_spec(name.strip(), spec.strip())
    data["parameters"] = parameters
    for key, value in {"algorithm": algorithm, "max_trials": max_trials,
                       "parallel_trials": parallel_trials, "metric": metric,
                       "direction": direction, "seed": seed}.items():
        if value is not None:
            data[key] = value
    if metric is not None and direction is None:
        data["direction"] = ""  # re-derive from the new metric
    return parse_sweep(data)


def _parse_spec(name: str, spec: str) -> dict:
    kind, _, rest = spec.partition(":")
    if kind in ("uniform", "loguniform", "int") and rest:
        bounds = rest.split(":")
        try:
            numbers = [int(b) if kind == "int" else float(b) for b in bounds]
        except ValueError:
            raise SweepError(f"--sweep-param {name}={spec}: bounds must be numbers") from None
        if len(numbers) not in ((2, 3) if kind == "int" else (2,)):
            raise SweepError(f"--sweep-param {name}={spec}: expected {kind}:MIN:MAX"
                             + ("[:STEP]" if kind == "int" else ""))
        out = {"type": kind, "min": numbers[0], "max": numbers[1]}
        if len(numbers) == 3:
            out["step"] = numbers[2]
        return out
    kind_of = TUNABLE.get(name, (str,))[0]
    values = []
    for raw in spec.split(";" if kind_of is str and ";" in spec else ","):
        raw = raw.strip()
        try:
            values.append(kind_of(float(raw)) if kind_of in (int, float) else raw)
        except ValueError:
            raise SweepError(f"--sweep-param {name}={spec}: {raw!r} is not a number") from None
    return {"type": "choice", "values": values}


def default_sweep() -> SweepConfig:
    """The search space compiled into ``compiled/sweep.*.yaml`` when no ``sweep:`` is given:
    four learning rates a decade apart and two batch sizes, four random trials, two at once."""
    return parse_sweep({
        "algorithm": "random", "seed": 0, "max_trials": 4, "parallel_trials": 2,
        "metric": "eval_accuracy",
        "parameters": {
            "learning_rate": {"type": "loguniform", "min": 0.0001, "max": 0.1},
            "batch_size": {"type": "choice", "values": [16, 32, 64]},
        },
    })
