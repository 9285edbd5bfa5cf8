"""The compiled run notifications carry each step's hourly rate, in every pipeline that
notifies."""

from __future__ import annotations

import json

from gkeflow.components import yamlio
from gkeflow.pipelines.settings.config import GkeflowConfig
from gkeflow.pipelines.targets.compile import compile_pipeline


def test_the_prediction_pipeline_notification_carries_each_step_s_rate(tmp_path):
    """A webhook notification of the prediction pipeline prices its run like the training
    pipeline's (the notification then gives the run's cost)."""
    from gkeflow.pipelines.definitions.operations import select

    config = select(GkeflowConfig.model_validate({"notifications": {"default": {
        "when": "always",
        "webhook": {"format": "generic", "gke_secret": "gkeflow-webhook"}}}}))
    (spec, *_) = yamlio.load_all(
        compile_pipeline("prediction", "gke", tmp_path, config=config).read_text())
    parameters = spec["root"]["dag"]["tasks"]["notify-run"]["inputs"]["parameters"]
    rates = json.loads(parameters["step_rates"]["runtimeValue"]["constant"])
    assert set(rates["steps"]) >= {"predict-batch", "report-predictions"}
    assert rates["region"]
