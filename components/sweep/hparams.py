"""The hyperparameters a sweep may tune, with train_model's defaults (no KFP, no pydantic)."""

TUNABLE_DEFAULTS = {
    "learning_rate": 0.01,
    "batch_size": 32,
    "epochs": 20,
    "dropout": 0.1,
    "hidden_units": "256,128",
    "model_type": "mlp",
    "early_stopping_patience": 5,
    # model_type gbdt only (XGBoost); a sweep that tunes one must train gbdt
    "gbdt_rounds": 2000,
    "gbdt_learning_rate": 0.05,
    "gbdt_max_depth": 6,
    "gbdt_min_child_weight": 1.0,
    "gbdt_subsample": 1.0,
    "gbdt_colsample_bytree": 1.0,
    "gbdt_reg_lambda": 1.0,
}
#: The tunables only gradient-boosted trees use.
GBDT_ONLY = tuple(name for name in TUNABLE_DEFAULTS if name.startswith("gbdt_"))
