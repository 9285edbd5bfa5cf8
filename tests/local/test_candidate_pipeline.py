"""model_type auto's candidates as steps of the pipeline under kfp.local, side by side: a
candidate whose family fails leaves its step and the run green when another candidate
trained, and the run says so in one line."""

from __future__ import annotations

import json

import pytest

from gkeflow.pipelines.targets.local import run_local

pytestmark = pytest.mark.slow

FAILING_MODEL = '''
def build_model(schema, hparams):
    raise ValueError("this model cannot be built: 3 classes, 0 layers")
'''


def test_a_failed_candidate_leaves_the_run_green_when_another_trained(tmp_path):
    module = tmp_path / "failing_model.py"
    module.write_text(FAILING_MODEL)
    result = run_local({"epochs": 1, "user_module": str(module), "candidates": "user,linear",
                        "registry_uri": f"sqlite:///{tmp_path / 'registry.db'}",
                        "min_accuracy": 0.0},
                       tmp_path / "out", enable_caching=False, parallel_steps=2)
    assert result.ok, result.error
    names = [step.name for step in result.steps]
    steps = {step.name: step for step in result.steps}
    # the two candidates ran at once, train-model after both
    assert steps["train-linear"].started < steps["train-user"].finished
    assert steps["train-user"].started < steps["train-linear"].finished
    assert steps["train-model"].started >= max(steps["train-user"].finished,
                                               steps["train-linear"].finished)
    assert {"train-user", "train-linear", "train-model"} <= set(names)
    assert names.index("train-model") > max(names.index("train-user"),
                                            names.index("train-linear"))
    assert {step.name: step.status for step in result.steps}["train-user"] == "SUCCESS"
    logs = result.log_path.read_text()
    assert ("candidate user failed (ValueError: this model cannot be built: 3 classes, "
            "0 layers); the others go on") in logs
    model = next((tmp_path / "out" / "runs").glob("*/train-model/model"))
    selection = json.loads((model / "gkeflow_model.json").read_text())["model_selection"]
    assert selection["chosen"] == "linear"
    assert selection["candidates"]["user"]["status"] == "failed"
    assert "Traceback" not in logs.split("train-user", 1)[1].split("train-model", 1)[0]
