"""The hyperparameters a sweep may tune, with train_model's defaults (no KFP, no pydantic)."""

TUNABLE_DEFAULTS = {
    "learning_rate": 0.01,
    "batch_size": 32,
    "epochs": 20,
    "dropout": 0.1,
    "hidden_units": "64,32",
    "model_type": "mlp",
    "early_stopping_patience": 5,
}
