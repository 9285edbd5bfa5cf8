"""The compiled exit handler runs under kfp.local: a training run that fails in train-model
sends one webhook message (state, run, link, changed parameters), the URL stays out of the
payload and the logs, and a run whose endpoint is down still ends with its own state."""

from __future__ import annotations

import json

import pytest

from gkeflow.pipelines.definitions.operations import Operations
from gkeflow.pipelines.definitions.training import build_training_pipeline
from gkeflow.pipelines.settings.operations_config import NotificationSettings
from gkeflow.pipelines.targets.local import run_local
from tests.integration.webhook_receiver import WebhookReceiver, down_url

pytestmark = pytest.mark.slow

FAILING_MODEL = '''
def build_model(schema, hparams):
    raise ValueError("this model cannot be built: 3 classes, 0 layers")
'''


def _pipeline(shape: str = "generic"):
    settings = NotificationSettings.model_validate({"when": "failure",
                                                    "webhook": {"format": shape}})
    operations = Operations("local", settings, link_template="http://ui.local/#/runs/"
                                                             "details/{run_id}")
    return build_training_pipeline("local", operations=operations)


def _failing_run(tmp_path, monkeypatch, url: str):
    module = tmp_path / "failing_model.py"
    module.write_text(FAILING_MODEL)
    monkeypatch.setenv("GKEFLOW_WEBHOOK_URL", url)
    return run_local({"epochs": 1, "user_module": str(module),
                      "registry_uri": f"sqlite:///{tmp_path / 'registry.db'}"},
                     tmp_path / "out", pipeline=_pipeline(), enable_caching=False)


def test_a_failed_training_run_sends_one_message(tmp_path, monkeypatch):
    with WebhookReceiver() as hook:
        result = _failing_run(tmp_path, monkeypatch, hook.url)
    assert not result.ok and result.failed_step.name == "train-model"
    (message,) = hook.messages
    assert message["kind"] == "gkeflow.run" and message["state"] == "FAILED"
    assert message["pipeline"] == "gkeflow-training" and message["target"] == "local"
    assert message["run"] and message["link"].startswith("http://ui.local/#/runs/details/")
    assert message["link"] != "http://ui.local/#/runs/details/{run_id}"
    assert message["parameters"]["epochs"] == "1"
    assert message["parameters"]["user_module"].endswith("failing_model.py")
    assert "learning_rate" not in message["parameters"]  # the default
    logs = result.log_path.read_text()
    assert "notification sent (generic, HTTP 200)" in logs
    assert "T0P-SECRET" not in json.dumps(message) + logs


def test_a_run_whose_endpoint_is_down_still_ends_with_its_own_state(tmp_path, monkeypatch):
    monkeypatch.setenv("GKEFLOW_NOTIFY_BUDGET_S", "4")  # the default minute, shortened
    result = _failing_run(tmp_path, monkeypatch, down_url())
    assert not result.ok and result.failed_step.name == "train-model"
    logs = result.log_path.read_text()
    assert "notification not sent" in logs and "T0P-SECRET" not in logs
