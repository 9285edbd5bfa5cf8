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
    # a volume per candidate of model_type auto: they may train side by side on several
    # nodes, and a ReadWriteOnce disk attaches to one
    creates = {name: task for name, task in tasks.items() if name.startswith("createpvc")}
    deletes = {name: task for name, task in tasks.items() if name.startswith("deletepvc")}
    assert len(creates) == len(deletes) == 3
    suffixes = set()
    for task in creates.values():
        create = task["inputs"]["parameters"]
        assert create["access_modes"]["runtimeValue"]["constant"] == ["ReadWriteOnce"]
        assert create["size"]["runtimeValue"]["constant"].endswith("Gi")
        assert create["storage_class_name"]["runtimeValue"]["constant"] == "standard-rwo"
        assert "pvc_name" not in create
        assert task["cachingOptions"] == {}  # never served from cache
        # named after the run (<workflow>-<suffix>): the same volume on every retry of the run
        suffixes.add(create["pvc_name_suffix"]["runtimeValue"]["constant"])
    assert suffixes == {f"-gkeflow-checkpoints-train-{family}"
                        for family in ("gbdt", "mlp", "linear")}
    for delete in deletes.values():  # each after the step it serves
        [trained] = set(delete["dependentTasks"]) - set(creates)
        assert trained.startswith("train-")
        assert delete["inputs"]["parameters"]["pvc_name"]["taskOutputParameter"][
            "producerTask"] in creates

    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    # the candidates of model_type auto train (and checkpoint); train-model only chooses,
    # after them, so the volume outlives every one of them
    training = {"exec-train-gbdt", "exec-train-mlp", "exec-train-linear"}
    for name in training:
        config = json_format.ParseDict(executors[name], k8s.KubernetesExecutorConfig(),
                                       ignore_unknown_fields=False)
        [mount] = config.pvc_mount
        assert mount.mount_path == CHECKPOINT_MOUNT
        assert mount.pvc_name_parameter.task_output_parameter.producer_task.startswith(
            "createpvc")
    for name, value in executors.items():  # only training mounts it
        if name not in training:
            assert "pvcMount" not in value, name
    assert {"train-gbdt", "train-mlp", "train-linear"} <= set(
        tasks["train-model"]["dependentTasks"])

    # the checkpoint_uri pipeline parameter reaches the training step
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert params["checkpoint_uri"]["defaultValue"] == ""
    for step in ("train-gbdt", "train-mlp", "train-linear"):
        train = tasks[step]["inputs"]["parameters"]
        assert train["checkpoint_uri"]["componentInputParameter"] == "checkpoint_uri"

    vertex = paths["vertex"].read_text()
    assert "createpvc" not in vertex and CHECKPOINT_MOUNT not in vertex
    vspec = yamlio.load(vertex)
    assert vspec["root"]["dag"]["tasks"]["train-mlp"]["inputs"]["parameters"][
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
