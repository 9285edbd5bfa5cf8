"""The gradient-boosted trees' settings (``gbdt_*`` of
:class:`~gkeflow.components.train.params.TrainParams`), checked when the parameters are made:
before any step, by ``gkeflow run``, ``submit`` and ``schedule``."""

from __future__ import annotations


class GbdtSettingsError(ValueError):
    """A gbdt hyperparameter out of its range; the message names it and the range."""


def check_gbdt_settings(params) -> None:
    """GbdtSettingsError for the first gbdt hyperparameter XGBoost would refuse."""
    checks = (
        ("gbdt_rounds", params.gbdt_rounds >= 1, ">= 1"),
        ("gbdt_learning_rate", 0 < params.gbdt_learning_rate <= 1, "in (0, 1]"),
        ("gbdt_max_depth", 1 <= params.gbdt_max_depth <= 20, "in [1, 20]"),
        ("gbdt_min_child_weight", params.gbdt_min_child_weight >= 0, ">= 0"),
        ("gbdt_subsample", 0 < params.gbdt_subsample <= 1, "in (0, 1]"),
        ("gbdt_colsample_bytree", 0 < params.gbdt_colsample_bytree <= 1, "in (0, 1]"),
        ("gbdt_reg_lambda", params.gbdt_reg_lambda >= 0, ">= 0"),
        ("gbdt_early_stopping_rounds", params.gbdt_early_stopping_rounds >= 0,
         ">= 0 (0 = off)"),
        ("gbdt_checkpoint_every", params.gbdt_checkpoint_every >= 0, ">= 0 (0 = on SIGTERM "
         "only)"),
    )
    for name, ok, allowed in checks:
        if not ok:
            raise GbdtSettingsError(f"{name} must be {allowed}; got {getattr(params, name)}")
