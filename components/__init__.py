"""gkeflow's KFP components: prepare_data, train_model, evaluate_model, register_model,
predict_batch, report_predictions.

The components are loaded lazily: inside a running step only the logic modules are
imported, and those must not pull in the KFP DSL.
"""

import importlib

#: The suite's components: each one listed here is also shipped as
#: compiled/components/<name>.yaml (`gkeflow compile`) and documented in
#: docs/components.md (`gkeflow docs`).
_COMPONENTS = {
    "prepare_data": "gkeflow.components.prepare.component",
    "train_model": "gkeflow.components.train.component",
    "evaluate_model": "gkeflow.components.evaluate.component",
    "register_model": "gkeflow.components.register.component",
    "fingerprint_data": "gkeflow.components.fingerprint.component",
    "predict_batch": "gkeflow.components.predict.component",
    "report_predictions": "gkeflow.components.predict.component",
}

__all__ = list(_COMPONENTS)


def __getattr__(name: str):
    if name in _COMPONENTS:
        return getattr(importlib.import_module(_COMPONENTS[name]), name)
    raise AttributeError(f"module 'components' has no attribute {name!r}")
