"""gkeflow's KFP components: prepare_data, train_model (and the
candidates it chooses from, train_candidate), evaluate_model, register_model (and
its Vertex AI variant register_model_vertex), fingerprint_data, resolve_model,
predict_batch, report_predictions, the sweep's select_best_trial, tune_with_vizier,
tune_with_ray and tune_on_kuberay, the fan-out preparation steps plan_prepare,
prepare_group and merge_prepared, the run notification notify_run (the exit task of
pipelines compiled with notifications), the tracking end end_tracking (the exit task of
tracked pipelines without them), and deploy_model (and its Vertex AI variant
deploy_model_vertex).

The components are loaded lazily: inside a running step only the logic modules are
imported, and those must not pull in the KFP DSL.
"""

import atexit
import gc
import importlib

# A step that imported TensorFlow spends about a second at exit in the interpreter's last
# garbage collections over TensorFlow's objects, which nothing needs collected then: every
# object alive at exit is frozen out of their reach (outputs are written and closed by then).
atexit.register(gc.freeze)

#: The suite's components: each one listed here is also shipped as
#: compiled/components/<name>.yaml (`gkeflow compile`) and documented in
#: docs/components.md (`gkeflow docs`). Value: the module defining it, or
#: "module:function" when the registry name differs from the function's name.
_COMPONENTS = {
    "prepare_data": "gkeflow.components.prepare.component",
    "train_model": "gkeflow.components.train.component",
    "train_candidate": "gkeflow.components.train.candidate_component",
    "evaluate_model": "gkeflow.components.evaluate.component",
    "register_model": "gkeflow.components.register.component",
    "register_model_vertex": "gkeflow.components.register.vertex_component:register_model",
    "fingerprint_data": "gkeflow.components.fingerprint.component",
    "resolve_model": "gkeflow.components.predict.resolve_component",
    "predict_batch": "gkeflow.components.predict.component",
    "report_predictions": "gkeflow.components.predict.component",
    "select_best_trial": "gkeflow.components.sweep.component",
    "tune_with_vizier": "gkeflow.components.sweep.vizier_component",
    "tune_with_ray": "gkeflow.components.sweep.ray_component",
    "tune_on_kuberay": "gkeflow.components.sweep.rayjob_component",
    "plan_prepare": "gkeflow.components.prepare.fanout_component",
    "prepare_group": "gkeflow.components.prepare.fanout_component",
    "merge_prepared": "gkeflow.components.prepare.fanout_component",
    "notify_run": "gkeflow.components.notify.component",
    "end_tracking": "gkeflow.components.tracking.component",
    "deploy_model": "gkeflow.components.deploy.component",
    "deploy_model_vertex": "gkeflow.components.deploy.vertex_component:deploy_model",
}

__all__ = list(_COMPONENTS)


def __getattr__(name: str):
    if name in _COMPONENTS:
        module, _, function = _COMPONENTS[name].partition(":")
        return getattr(importlib.import_module(module), function or name)
    raise AttributeError(f"module 'components' has no attribute {name!r}")
