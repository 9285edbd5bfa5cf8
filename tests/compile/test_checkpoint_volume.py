"""The GKE pipeline without a workspace gives training a run-scoped checkpoint volume;
Vertex needs none (with the default workspace, see test_workspace_compile.py)."""

from __future__ import annotations

import pytest
from google.protobuf import json_format
from kfp.kubernetes import kubernetes_executor_config_pb2 as k8s

from gkeflow.components import yamlio
from gkeflow.components.train.store import CHECKPOINT_MOUNT
from gkeflow.pipelines.settings.config import GkeflowConfig
from gkeflow.pipelines.settings.workspace_config import WorkspaceSettings
from gkeflow.pipelines.targets.compile import compile_all


def test_gke_creates_mounts_and_deletes_a_volume_per_run(tmp_path):
    paths = {p.name.split(".")[1]: p
             for p in compile_all(tmp_path, pipelines=["training"],
                                  config=GkeflowConfig(
                                      workspace=WorkspaceSettings(enabled=False)))}
    spec, platform = list(yamlio.load_all(paths["gke"].read_text()))
    tasks = spec["root"]["dag"]["tasks"]
    create = tasks["createpvc"]["inputs"]["parameters"]
    assert create["access_modes"]["runtimeValue"]["constant"] == ["ReadWriteOnce"]
    assert create["size"]["runtimeValue"]["constant"].endswith("Gi")
    assert create["storage_class_name"]["runtimeValue"]["constant"] == "standard-rwo"
    # named after the run (<workflow>-<suffix>): the same volume on every retry of the run
    assert create["pvc_name_suffix"]["runtimeValue"]["constant"] == "-gkeflow-checkpoints"
    assert "pvc_name" not in create
    assert tasks["createpvc"]["cachingOptions"] == {}  # never served from cache
    delete = tasks["deletepvc"]
    assert "train-model" in delete["dependentTasks"]
    assert delete["inputs"]["parameters"]["pvc_name"]["taskOutputParameter"] == {
        "outputParameterKey": "name", "producerTask": "createpvc"}

    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    config = json_format.ParseDict(executors["exec-train-model"],
                                   k8s.KubernetesExecutorConfig(), ignore_unknown_fields=False)
    [mount] = config.pvc_mount
    assert mount.mount_path == CHECKPOINT_MOUNT
    assert mount.pvc_name_parameter.task_output_parameter.producer_task == "createpvc"
    for name, value in executors.items():  # only training mounts it
        if name != "exec-train-model":
            assert "pvcMount" not in value, name

    # the checkpoint_uri pipeline parameter reaches the training step
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert params["checkpoint_uri"]["defaultValue"] == ""
    train = tasks["train-model"]["inputs"]["parameters"]
    assert train["checkpoint_uri"]["componentInputParameter"] == "checkpoint_uri"

    vertex = paths["vertex"].read_text()
    assert "createpvc" not in vertex and CHECKPOINT_MOUNT not in vertex
    vspec = yamlio.load(vertex)
    assert vspec["root"]["dag"]["tasks"]["train-model"]["inputs"]["parameters"][
        "checkpoint_uri"]["componentInputParameter"] == "checkpoint_uri"


@pytest.mark.parametrize("target", ["gke", "vertex"])
def test_gkeflow_yaml_sets_checkpoint_uri_per_environment(tmp_path, target):
    from gkeflow.pipelines.settings.config import GkeflowConfig
    from gkeflow.pipelines.targets.submit import prepare_pipeline, resolve_parameters

    prepared = prepare_pipeline("training", target, tmp_path)
    config = GkeflowConfig.model_validate(
        {"parameters": {"prod": {"checkpoint_uri": "gs://team-ckpt/training"}}})
    assert resolve_parameters(config, prepared, "prod", {})["checkpoint_uri"] == (
        "gs://team-ckpt/training")
    assert resolve_parameters(config, prepared, "prod", {"checkpoint_uri": "/mnt/ckpt"})[
        "checkpoint_uri"] == "/mnt/ckpt"
