"""What the steps around training log into their MLflow runs: the data fingerprint, the
deployment and the prediction report (the sweep's selection: :mod:`.sweep`). As in
:mod:`.steps`: one call at the end of each step's shell, best effort, within the step's
tracking budget, nothing imported or sent when tracking is off.
"""

from __future__ import annotations

from typing import Any

from gkeflow.components.tracking.pipeline_run import open_step_run
from gkeflow.components.tracking.steps import FINGERPRINT_TAG, best_effort
from gkeflow.components.tracking.vertex_run import log_step

CODE_FINGERPRINT_TAG = "gkeflow.code_fingerprint"
DEPLOY_OUTCOME_TAG = "gkeflow.deploy.outcome"
#: At most this many hashed sources go into data/fingerprint.json (a glob may match
#: thousands of files; the fingerprint itself covers all of them).
MAX_LISTED_SOURCES = 1000


@best_effort
def track_fingerprint(result: Any, code: str, data_uri: str) -> None:
    """fingerprint-data: the data and code fingerprints and what was hashed."""
    params = {"data_uri": data_uri, "fingerprint_kind": result.kind,
              "data_fingerprint": result.value, "code_fingerprint": code or "(built-in model)"}
    counts = {"sources": len(result.items)}
    log_step("fingerprint-data", params, counts)
    t = open_step_run("fingerprint-data")
    if not t.enabled:
        return
    t.log_params(params)
    t.log_metrics(counts)
    t.set_tags({FINGERPRINT_TAG: result.value, **({CODE_FINGERPRINT_TAG: code} if code else {})})
    t.log_dict({"value": result.value, "kind": result.kind, "code": code,
                "sources": list(result.items[:MAX_LISTED_SOURCES]),
                "sources_listed": min(len(result.items), MAX_LISTED_SOURCES),
                "sources_total": len(result.items)}, "data/fingerprint.json")
    t.finish()


@best_effort
def track_deployment(outcome: Any = None, *, target: str, registered: dict[str, Any],
                     traffic: int = 0, error: BaseException | None = None) -> None:
    """deploy-model: where the version went, with which image, the traffic split and the
    outcome (``deployed`` or ``failed``, the run then ``FAILED``)."""
    params = {"target": target,
              "model_name": str(registered.get("modelName") or ""),
              "model_version": str(registered.get("version") or ""),
              "requested_traffic": str(traffic or "(the settings')")}
    tags: dict[str, Any] = {DEPLOY_OUTCOME_TAG: "deployed" if error is None else "failed"}
    metrics: dict[str, float] = {}
    if outcome is not None:
        params.update({"endpoint": outcome.endpoint,
                       "serving_image": outcome.serving_image or "(unknown)"})
        tags.update({"gkeflow.deploy.resource": outcome.resource,
                     "gkeflow.deploy.traffic_split": outcome.split_text,
                     "gkeflow.deploy.servability": outcome.servability})
        new = f"{outcome.model_name}@{outcome.model_version}"
        metrics = {"traffic_percent": float(outcome.split.get(new, 0)),
                   "versions_serving": float(sum(1 for v in outcome.split.values() if v))}
    if error is not None:
        tags["gkeflow.deploy.error"] = f"{type(error).__name__}: {error}"[:500]
    log_step("deploy-model", {**params, "outcome": tags[DEPLOY_OUTCOME_TAG]}, metrics)
    t = open_step_run("deploy-model")
    if not t.enabled:
        return
    t.log_params(params)
    t.log_metrics(metrics)
    t.set_tags(tags)
    if outcome is not None:
        t.log_dict(outcome.metadata(), "deployment/deployment.json")
    t.finish("FINISHED" if error is None else "FAILED")


@best_effort
def track_prediction_report(figures: dict[str, Any], summary: str) -> None:
    """report-predictions: the class mix and confidence figures, and the summary."""
    log_step("report-predictions", {}, figures)
    t = open_step_run("report-predictions")
    if not t.enabled:
        return
    t.log_metrics(figures)
    t.log_text(summary, "prediction/summary.md")
    t.finish()
