"""MLflow for a candidate step of ``model_type: auto`` (``train-gbdt``, ``train-mlp``...):
its own nested run under the pipeline run, with its parameters, its curves epoch by epoch
(or round by round) as it trains, and its eval metrics, so the candidates can be compared
side by side; train-model's run then says which one won."""

from __future__ import annotations

from typing import Any

from gkeflow.components.tracking.client import Tracker, one_line
from gkeflow.components.tracking.pipeline_run import open_step_run
from gkeflow.components.tracking.steps import training_params

#: The tag naming a candidate run's outcome: succeeded or failed.
STATUS_TAG = "gkeflow.candidate_status"


def open_candidate_run(step: str, params: Any) -> Tracker:
    """``step``'s run, opened as it starts training, its parameters logged at once; a
    tracker that logs nothing when tracking is off or fails (it never fails the step)."""
    try:
        tracker = open_step_run(step, task=step)
        tracker.log_params(training_params(params))
        return tracker
    except Exception as exc:  # noqa: BLE001 - best effort: tracking never fails the step
        print(f"mlflow: tracking off for {step}: {one_line(exc)}", flush=True)
        return Tracker()


def close_candidate_run(tracker: Tracker, entry: dict) -> None:
    """The candidate's eval and train metrics, training seconds and outcome; the run ends
    FINISHED, or FAILED when its family failed."""
    if not tracker.enabled:
        return
    try:
        tracker.log_metrics({name: float(value) for name, value in entry.items()
                             if (name.startswith(("eval_", "train_")) or name == "seconds")
                             and isinstance(value, int | float)})
        tracker.set_tags({STATUS_TAG: entry.get("status", "")})
        tracker.finish("FAILED" if entry.get("status") == "failed" else "FINISHED")
    except Exception as exc:  # noqa: BLE001 - best effort
        print(f"mlflow: {one_line(exc)}", flush=True)
