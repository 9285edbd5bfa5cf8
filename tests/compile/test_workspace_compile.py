"""The GKE pipelines ask KFP for a run workspace (roots other than gs://): preparation,
training and evaluation mount it; Vertex AI and JobSet training take none."""

from __future__ import annotations

import pytest

from gkeflow.components import yamlio
from gkeflow.pipelines.compute.profiles import ComputeError
from gkeflow.pipelines.definitions.training import DEFAULT_COMPUTE
from gkeflow.pipelines.settings.config import GkeflowConfig
from gkeflow.pipelines.settings.workspace_config import WorkspaceSettings
from gkeflow.pipelines.targets.compile import compile_pipeline

PLACEHOLDER = "{{$.workspace_path}}"


def _config(**workspace) -> GkeflowConfig:
    return GkeflowConfig(workspace=WorkspaceSettings(**workspace))


def _docs(path):
    return list(yamlio.load_all(path.read_text()))


def _workspace_steps(spec) -> set[str]:
    steps = set()

    def walk(dag):
        for name, task in dag.get("tasks", {}).items():
            params = task.get("inputs", {}).get("parameters", {})
            value = params.get("workspace_path", {}).get("runtimeValue", {}).get("constant")
            if value == PLACEHOLDER:
                steps.add(name)
            component = spec["components"].get(task["componentRef"]["name"], {})
            if "dag" in component:
                walk(component["dag"])

    walk(spec["root"]["dag"])
    return steps


def test_gke_training_uses_the_configured_workspace(tmp_path):
    config = GkeflowConfig(workspace=WorkspaceSettings(
        size="750Gi", storage_class="standard-rwx", access_mode="ReadWriteMany"))
    spec, platform = _docs(compile_pipeline("training", "gke", tmp_path, config=config))
    workspace = platform["platforms"]["kubernetes"]["pipelineConfig"]["workspace"]
    assert workspace == {"size": "750Gi", "kubernetes": {"pvcSpecPatch": {
        "accessModes": ["ReadWriteMany"], "storageClassName": "standard-rwx"}}}
    # the candidates of model_type auto read the shards there; train-model chooses
    assert _workspace_steps(spec) == {"prepare-data", "train-gbdt", "train-mlp", "train-linear",
                                      "train-model", "evaluate-model"}
    # the workspace holds the checkpoints: no separate checkpoint volume
    assert "createpvc" not in spec["root"]["dag"]["tasks"]


def test_default_gke_compile_has_a_workspace_and_vertex_none(tmp_path):
    gke = _docs(compile_pipeline("training", "gke", tmp_path / "g"))
    assert gke[1]["platforms"]["kubernetes"]["pipelineConfig"]["workspace"]["size"] == "100Gi"
    vertex = compile_pipeline("training", "vertex", tmp_path / "v").read_text()
    assert "workspace_path}}" not in vertex and "pipelineConfig" not in vertex


def test_disabled_workspace_falls_back_to_the_checkpoint_volume(tmp_path):
    spec, platform = _docs(compile_pipeline("training", "gke", tmp_path,
                                            config=_config(enabled=False)))
    assert "pipelineConfig" not in platform["platforms"]["kubernetes"]
    assert _workspace_steps(spec) == set()
    assert "createpvc" in spec["root"]["dag"]["tasks"]


def test_sweep_trials_and_evaluation_mount_the_workspace(tmp_path):
    spec, platform = _docs(compile_pipeline("sweep", "gke", tmp_path))
    assert "workspace" in platform["platforms"]["kubernetes"]["pipelineConfig"]
    assert _workspace_steps(spec) == {"prepare-data", "train-model", "evaluate-model"}
    vertex = compile_pipeline("sweep", "vertex", tmp_path / "v").read_text()
    assert "workspace_path}}" not in vertex


def test_jobset_training_takes_no_workspace(tmp_path):
    compute = {"train-model": DEFAULT_COMPUTE["train-model"].with_overrides(replicas=2)}
    spec, platform = _docs(compile_pipeline("training", "gke", tmp_path, compute=compute))
    assert "pipelineConfig" not in platform["platforms"]["kubernetes"]
    with pytest.raises(ComputeError, match="workspace.enabled: false"):
        compile_pipeline("training", "gke", tmp_path, compute=compute,
                         config=_config(enabled=True))


@pytest.mark.parametrize("root, refused", [("minio://mlpipeline/v2/artifacts", True),
                                           ("gs://bucket/kfp-root", False)])
def test_jobset_training_needs_a_gs_pipeline_root(root, refused, tmp_path):
    compute = {"train-model": DEFAULT_COMPUTE["train-model"].with_overrides(replicas=2)}
    config = GkeflowConfig.model_validate({"targets": {"gke": {
        "host": "https://kfp.example.com", "pipeline_root": root}}})
    if not refused:
        assert compile_pipeline("training", "gke", tmp_path, compute=compute, config=config)
        return
    with pytest.raises(ComputeError, match=f"targets.gke.pipeline_root is {root}: set it "
                                           "to gs://BUCKET/PATH"):
        compile_pipeline("training", "gke", tmp_path, compute=compute, config=config)
    assert not list(tmp_path.glob("*.yaml"))




def test_a_gs_root_in_gkeflow_yaml_turns_the_workspace_off(tmp_path):
    config = GkeflowConfig.model_validate({"targets": {"gke": {
        "host": "https://kfp.example.com", "pipeline_root": "gs://bucket/kfp-root"}}})
    spec, platform = _docs(compile_pipeline("training", "gke", tmp_path, config=config))
    assert "pipelineConfig" not in platform["platforms"]["kubernetes"]
    assert _workspace_steps(spec) == set()
    # checkpoints go under the gs:// root: no checkpoint volume either
    assert "createpvc" not in spec["root"]["dag"]["tasks"]
