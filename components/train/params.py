"""What ``train`` takes and gives: its hyperparameters and run settings, checked on
construction, and its result."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gkeflow.components.train.utilisation import (
    DEFAULT_INTERVAL_S,
    DEFAULT_WARN_BELOW_PCT,
    UtilisationReport,
)

#: How the Keras models' learning rate moves over the epochs.
LR_SCHEDULES = ("cosine", "constant")


@dataclass(frozen=True)
class TrainParams:
    """Hyperparameters and run settings of ``train``.

    ``batch_size`` is per replica: the global batch is ``batch_size * replicas``. With
    ``scale_learning_rate`` the learning rate is multiplied by the number of replicas too
    (the linear scaling rule), so one setting works for 1 or 8 GPUs.
    """

    epochs: int = 20
    batch_size: int = 32
    learning_rate: float = 0.01
    model_type: str = "mlp"
    hidden_units: tuple[int, ...] = (256, 128)
    dropout: float = 0.1
    # Keras models: each number also as a piecewise-linear encoding over this many quantile
    # bins of the train split (0 = standardised value only), and the learning rate decayed
    # along a cosine over the epochs (cosine) or held (constant); see train/models.py
    numeric_bins: int = 16
    lr_schedule: str = "cosine"
    seed: int = 42
    early_stopping_patience: int = 5
    scale_learning_rate: bool = True
    precision: str = "auto"
    jit_compile: str = "auto"
    require_gpu: bool = False
    user_module: str = ""
    cache_dataset: str = "auto"
    checkpoint_every_epochs: int = 1
    checkpoint_every_steps: int = 0
    strategy: str = "auto"
    steps_per_execution: int = 0
    gpu_sample_interval_s: float = DEFAULT_INTERVAL_S
    gpu_utilisation_warn_below: float = DEFAULT_WARN_BELOW_PCT
    loss: str = "auto"  # regression: mse (auto) or huber; classification: cross-entropy
    label_transform: str = "none"  # regression: none or log (skewed positive targets)
    backend: str = "auto"  # Keras backend: tensorflow, jax, or auto (JAX on a TPU)
    # model_type gbdt (XGBoost): boosting rounds (at most), shrinkage, tree shape, row and
    # column subsampling, L2 regularisation, early stopping on the eval split's loss (rounds
    # without improvement; 0 = off) and a checkpoint every N rounds (0 = on SIGTERM only)
    gbdt_rounds: int = 2000
    gbdt_learning_rate: float = 0.05
    gbdt_max_depth: int = 6
    gbdt_min_child_weight: float = 1.0
    gbdt_subsample: float = 1.0
    gbdt_colsample_bytree: float = 1.0
    gbdt_reg_lambda: float = 1.0
    gbdt_early_stopping_rounds: int = 100
    gbdt_checkpoint_every: int = 100
    # model_type auto: the families tried (comma-separated; empty = gbdt, mlp, linear)
    candidates: str = ""
    # gbdt and linear: once the eval split has chosen the rounds (or the L2 strength), fit
    # the exported model on the train and eval splits together (the eval figures stay those
    # of the first fit)
    refit: bool = True
    # model_type auto: serve a weighted average of the candidates when it beats the best of
    # them on the eval split (train/ensemble.py)
    ensemble: bool = True

    def __post_init__(self) -> None:
        from gkeflow.components.train.backend import check_backend
        from gkeflow.components.train.devices import PRECISIONS
        from gkeflow.components.train.families import MODEL_TYPES, parse_candidates
        from gkeflow.components.train.regression import check_settings
        from gkeflow.components.train.tpu import STRATEGIES

        check_settings(self.loss, self.label_transform)
        check_backend(self.backend)

        if self.epochs < 1:
            raise ValueError(f"epochs must be >= 1; got {self.epochs}")
        if not 0 <= self.numeric_bins <= 256:
            raise ValueError(f"numeric_bins must be 0 (off) to 256; got {self.numeric_bins}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"lr_schedule must be one of {', '.join(LR_SCHEDULES)}; got "
                             f"{self.lr_schedule!r}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1; got {self.batch_size}")
        if not (0.0 < self.learning_rate < 10.0):
            raise ValueError(f"learning_rate must be in (0, 10); got {self.learning_rate}")
        if not (0.0 <= self.dropout < 1.0):
            raise ValueError(f"dropout must be in [0, 1); got {self.dropout}")
        if self.model_type not in MODEL_TYPES and not self.user_module:
            raise ValueError(f"model_type must be one of {', '.join(MODEL_TYPES)}; "
                             f"got {self.model_type!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}; "
                             f"got {self.precision!r}")
        if self.jit_compile not in ("auto", "on", "off"):
            raise ValueError(f"jit_compile must be auto, on or off; got {self.jit_compile!r}")
        if self.early_stopping_patience < 0:
            raise ValueError("early_stopping_patience must be >= 0 (0 disables it)")
        if self.cache_dataset not in ("auto", "on", "off"):
            raise ValueError(f"cache_dataset must be auto, on or off; got {self.cache_dataset!r}")
        if self.checkpoint_every_epochs < 0 or self.checkpoint_every_steps < 0:
            raise ValueError("checkpoint frequencies must be >= 0")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}; "
                             f"got {self.strategy!r}")
        if self.steps_per_execution < 0:
            raise ValueError("steps_per_execution must be >= 0 (0 = auto)")
        if not self.gpu_sample_interval_s > 0:
            raise ValueError("gpu_sample_interval_s must be > 0 (it is kept within 1-60 s)")
        parse_candidates(self.candidates)
        if self.model_type in ("gbdt", "auto") and not self.user_module:
            from gkeflow.components.train.gbdt_settings import check_gbdt_settings

            check_gbdt_settings(self)
        if not 0 <= self.gpu_utilisation_warn_below <= 100:
            raise ValueError("gpu_utilisation_warn_below must be a percentage in [0, 100] "
                             "(0 = never warn)")


@dataclass
class TrainResult:
    metrics: dict[str, float]
    history: dict[str, list[float]]
    epochs_run: int
    examples_per_s: float
    features: list[str] = field(default_factory=list)
    best_epoch: int = 0
    resumed_from_epoch: int = 0
    epoch_examples_per_s: list[float] = field(default_factory=list)
    strategy: str = ""
    precision: str = "float32"
    backend: str = "tensorflow"  # the Keras backend that trained
    #: GPU utilisation sampled during fit (status ``missing`` without a GPU).
    gpu_utilisation: UtilisationReport | None = None
    #: One line when the GPUs were mostly idle (input-bound or small batches); "" otherwise.
    gpu_utilisation_warning: str = ""
    #: The eval split's predictions as served (class probabilities, or values in the
    #: label's units) by a model that never saw the eval split; None when not kept.
    eval_predictions: Any = None


def params_from(values: dict[str, Any]) -> TrainParams:
    """:class:`TrainParams` of named values as steps and JSON carry them: ``hidden_units``
    as ``"64,32"`` or a list."""
    values = dict(values)
    if isinstance(values.get("hidden_units"), str):
        values["hidden_units"] = tuple(int(u) for u in values["hidden_units"].split(",")
                                       if u.strip())
    elif "hidden_units" in values:
        values["hidden_units"] = tuple(values["hidden_units"])
    return TrainParams(**values)


def step_params(arguments: dict[str, Any]) -> TrainParams:
    """The :class:`TrainParams` of a training step's arguments (its other arguments, such
    as its artifacts, are ignored)."""
    from dataclasses import fields

    taken = {f.name for f in fields(TrainParams)}
    return params_from({k: v for k, v in arguments.items() if k in taken})
