"""The gated deploy stage in the compiled training and sweep pipelines of both targets, the
serving machines from the deploy-model profile, and gkeflow.yaml's deploy: section."""

from __future__ import annotations

import json

import pytest

from gkeflow.components import yamlio
from gkeflow.pipelines.compute.profiles import ComputeProfile
from gkeflow.pipelines.definitions.deploy_stage import gke_placement, serving_compute
from gkeflow.pipelines.settings.deploy_config import DeployEnvironment, deploy_parameters
from gkeflow.pipelines.targets.compile import compile_pipeline

T4_SPOT = ComputeProfile(cpu="4", memory="16G", accelerator="nvidia-tesla-t4",
                         accelerator_count=1, scheduling="spot")


def _condition_path(spec: dict, task: str) -> list[str]:
    """The conditions (outermost first) a task runs under."""
    parents = {}
    for name, component in spec["components"].items():
        for child, body in component.get("dag", {}).get("tasks", {}).items():
            parents[child] = (name, body)
    for name, body in spec["root"]["dag"]["tasks"].items():
        parents.setdefault(name, ("root", body))
    path, current = [], task
    while current in parents:
        owner, body = parents[current]
        condition = body.get("triggerPolicy", {}).get("condition")
        if condition:
            path.append(condition)
        if owner == "root":
            break
        current = owner.removeprefix("comp-")
    return list(reversed(path))


@pytest.mark.parametrize("pipeline", ["training", "sweep"])
@pytest.mark.parametrize("target", ["gke", "vertex"])
def test_deploy_runs_only_when_blessed_registered_and_asked(pipeline, target, tmp_path):
    spec = next(yamlio.load_all(compile_pipeline(pipeline, target, tmp_path).read_text()))
    conditions = _condition_path(spec, "deploy-model")
    assert conditions[0].startswith("inputs.parameter_values['pipelinechannel--evaluate-model"
                                    "-Output'] == true")
    assert conditions[-1] == "inputs.parameter_values['pipelinechannel--deploy'] == true"
    parameters = spec["root"]["inputDefinitions"]["parameters"]
    assert parameters["deploy"]["defaultValue"] is False  # off unless asked
    assert parameters["deploy_traffic"]["defaultValue"] == 10
    component = spec["components"]["comp-deploy-model"]
    inputs = component["inputDefinitions"]["artifacts"]
    assert set(inputs) == {"model", "evaluation", "registered_model"}
    outputs = component["outputDefinitions"]["artifacts"]
    expected = "google.VertexEndpoint" if target == "vertex" else "system.Artifact"
    assert outputs["deployment"]["artifactType"]["schemaTitle"] == expected
    assert outputs["summary"]["artifactType"]["schemaTitle"] == "system.Markdown"
    resources = spec["deploymentSpec"]["executors"]["exec-deploy-model"]["container"][
        "resources"]
    assert "accelerator" not in resources  # the task checks on CPU; GPUs are for serving


def test_gke_serving_placement_follows_the_gke_step_rules():
    placement = gke_placement(T4_SPOT, "gke")
    assert placement["resources"] == {
        "requests": {"cpu": "4", "memory": "16G"},
        "limits": {"cpu": "4", "memory": "16G", "nvidia.com/gpu": "1"}}
    assert placement["node_selector"] == {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4",
                                          "cloud.google.com/gke-spot": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in placement[
        "tolerations"]
    assert json.loads(serving_compute(ComputeProfile(), "gke"))["gke"]["tolerations"] == []


def test_vertex_serving_machine_is_the_smallest_that_fits():
    assert json.loads(serving_compute(T4_SPOT, "vertex")) == {"vertex": {
        "machine_type": "n1-standard-4", "accelerator_type": "NVIDIA_TESLA_T4",
        "accelerator_count": 1}}
    plain = json.loads(serving_compute(ComputeProfile(cpu="3", memory="8G"), "vertex"))
    assert plain == {"vertex": {"machine_type": "n1-standard-4"}}


def test_deploy_section_per_environment_becomes_parameters():
    from gkeflow.pipelines.settings.config import GkeflowConfig

    config = GkeflowConfig.model_validate({"deploy": {"prod": {
        "enabled": True, "traffic": 25, "keep": 2, "kserve_mode": "standard"}}})
    types = {"deploy": bool, "deploy_traffic": int, "deploy_settings": str}
    values = deploy_parameters(config.deploy, "prod", types)
    assert values["deploy"] is True and values["deploy_traffic"] == 25
    assert json.loads(values["deploy_settings"]) == {"keep": 2, "kserve_mode": "standard"}
    assert deploy_parameters(config.deploy, "dev", types) == {}
    assert deploy_parameters(config.deploy, "prod", {"data_uri": str}) == {}  # no stage
    assert DeployEnvironment().settings_json() == ""


@pytest.mark.parametrize("entry", [{"traffic": 0}, {"kserve_mode": "raw"},
                                   {"storage_root": "/local"}, {"endpoint": "Bad_Name"},
                                   {"unknown": 1}])
def test_deploy_section_is_validated(entry):
    from gkeflow.pipelines.settings.config import ConfigError, GkeflowConfig

    with pytest.raises((ValueError, ConfigError)):
        GkeflowConfig.model_validate({"deploy": {"prod": entry}})


def test_submit_takes_deploy_parameters_from_the_environment(tmp_path):
    from gkeflow.pipelines.settings.config import GkeflowConfig
    from gkeflow.pipelines.targets.submit import prepare_pipeline, resolve_parameters

    config = GkeflowConfig.model_validate({
        "parameters": {"prod": {"epochs": 5}},
        "deploy": {"prod": {"enabled": True, "traffic": 20, "endpoint": "penguins"}}})
    prepared = prepare_pipeline("training", "gke", tmp_path, config=config)
    values = resolve_parameters(config, prepared, "prod", {"deploy_traffic": 30})
    assert values["deploy"] is True and values["epochs"] == 5
    assert values["deploy_traffic"] == 30  # --param wins over deploy.prod
    assert json.loads(values["deploy_settings"]) == {"endpoint": "penguins"}
    assert "deploy" not in resolve_parameters(config, prepared, "default", {})
