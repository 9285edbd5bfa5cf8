"""``call_timeout_s`` and ``retry_budget_s`` set per step in gkeflow.yaml reach the launchers
that follow a job (CustomJob, JobSet, Vizier tuning, Vertex AI batch prediction) in the
compiled YAML; bad values are refused at the edge in one line naming the step and key."""

from __future__ import annotations

import argparse

import pytest
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2

from gkeflow.components import yamlio
from gkeflow.components.cloud import options
from tests.integration.conftest import gkeflow

CONFIG = """\
compute:
  train-model:
    accelerator: nvidia-l4
    accelerator_count: 1
    replicas: 2
    call_timeout_s: 30
    retry_budget_s: 1200s
  tune-with-vizier:
    call_timeout_s: 45
    retry_budget_s: 300
  batch-predict-vertex:
    retry_budget_s: 600
  evaluate-model:
    call_timeout_s: 20
sweep:
  engine: vizier
  parameters:
    learning_rate: {type: loguniform, min: 0.0001, max: 0.1}
"""


def _spec(path) -> dict:
    document = next(d for d in yamlio.load_all(path.read_text()) if d)
    json_format.ParseDict(document, pipeline_spec_pb2.PipelineSpec())  # strict
    return document


def _constants(spec: dict, task: str) -> dict:
    dags = [spec["root"]["dag"], *(c["dag"] for c in spec["components"].values() if "dag" in c)]
    found = next(dag["tasks"][task] for dag in dags if task in dag["tasks"])
    return {name: value["runtimeValue"]["constant"]
            for name, value in found["inputs"].get("parameters", {}).items()
            if "runtimeValue" in value}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    root = tmp_path_factory.mktemp("launchers")
    (root / "gkeflow.yaml").write_text(CONFIG)
    result = gkeflow("compile", "--output", "out", cwd=root)
    assert result.returncode == 0, result.stderr
    return root / "out", result.stdout


def test_the_jobset_launcher_gets_them_as_parameters(compiled):
    out, _ = compiled
    settings = _constants(_spec(out / "training.gke.yaml"), "train-model")
    assert settings["call_timeout_s"] == 30.0 and settings["retry_budget_s"] == 1200.0


def test_the_customjob_launcher_gets_them_as_flags_it_parses(compiled):
    out, _ = compiled
    spec = _spec(out / "training.vertex.yaml")
    args = spec["deploymentSpec"]["executors"]["exec-train-model"]["container"]["args"]
    parser = argparse.ArgumentParser()
    options.add_arguments(parser)
    flags = [arg for index, arg in enumerate(args)
             if arg.startswith("--") and arg.split("=")[0] in ("--call-timeout", "--retry-budget")
             or index and args[index - 1] in ("--call-timeout", "--retry-budget")]
    policy = options.policy_from_args(parser.parse_args(flags))
    assert (policy.call_timeout_s, policy.budget_s) == (30.0, 1200.0)


def test_the_tuning_and_batch_prediction_steps_get_their_own(compiled):
    out, _ = compiled
    tuning = _constants(_spec(out / "sweep.vertex.yaml"), "tune-with-vizier")
    assert tuning["call_timeout_s"] == 45.0 and tuning["retry_budget_s"] == 300.0
    batch = _constants(_spec(out / "prediction.vertex.yaml"), "batch-predict-vertex")
    assert batch["retry_budget_s"] == 600.0 and "call_timeout_s" not in batch


def test_a_step_that_launches_nothing_is_named_in_a_note(compiled):
    _, stdout = compiled
    assert ("note (gke): call_timeout_s and retry_budget_s apply to steps that launch and "
            "follow a job (on gke: train-model); not applied: evaluate-model") in stdout


@pytest.mark.parametrize("setting, message", [
    ("call_timeout_s: -1", "call_timeout_s must be 0 (the launcher's default) or 1 to 3600 "
                           "seconds; got -1"),
    ("call_timeout_s: 0.5", "call_timeout_s must be 0 (the launcher's default) or 1 to 3600 "
                            "seconds; got 0.5"),
    ("retry_budget_s: 100000", "retry_budget_s must be 0 (the launcher's default) or 10 to "
                               "86400 seconds; got 100000"),
    ("call_timeout_s: soon", "call_timeout_s must be a number of seconds; got 'soon'"),
    ("call_timeout_s: true", "call_timeout_s must be a number of seconds; got True"),
    ("call_timeout_s: [30]", "call_timeout_s must be a number of seconds; got [30]"),
    ("call_timeout_s: .nan", "call_timeout_s must be 0 (the launcher's default) or 1 to 3600 "
                             "seconds; got nan"),
    ("{call_timeout_s: 120, retry_budget_s: 60}",
     "retry_budget_s 60 is shorter than call_timeout_s 120"),
])
def test_bad_values_are_refused_in_one_line(tmp_path, setting, message):
    body = (f"compute:\n  train-model: {setting}\n" if setting.startswith("{")
            else f"compute:\n  train-model:\n    {setting}\n")
    (tmp_path / "gkeflow.yaml").write_text(body)
    for command in (["compile", "--output", "out"], ["plan"]):
        result = gkeflow(*command, cwd=tmp_path)
        assert result.returncode == 1, result.stdout
        line = result.stderr.strip()
        assert "\n" not in line and "Traceback" not in result.stderr
        assert line.startswith("Error: ") and "compute.train-model: " in line
        assert message in line
    assert not (tmp_path / "out").exists()


def test_a_bad_flag_names_the_step_and_key(tmp_path):
    result = gkeflow("plan", "--compute", "train-model.retry_budget_s=5", cwd=tmp_path)
    assert result.returncode == 2
    assert ("train-model: retry_budget_s must be 0 (the launcher's default) or 10 to 86400 "
            "seconds; got '5'") in result.stderr
    assert "Traceback" not in result.stderr
