"""The training pipeline built with a run workspace, under kfp.local: preparation writes the
shards into the workspace, only their manifest passes through the artifact store, training
and evaluation read them from there and training keeps its checkpoints there (as on GKE
with KFP's default MinIO root, where the workspace is a volume mounted in those steps)."""

from __future__ import annotations

import json

import pytest

from gkeflow.pipelines.definitions.training import build_training_pipeline
from gkeflow.pipelines.settings.workspace_config import WorkspaceSettings
from gkeflow.pipelines.targets.local import run_local

pytestmark = pytest.mark.slow


def test_shards_and_checkpoints_live_in_the_workspace(tmp_path):
    workspace = tmp_path / "workspace"
    pipeline = build_training_pipeline("local", workspace=WorkspaceSettings(enabled=True))
    result = run_local({"epochs": 3, "min_accuracy": 0.0,
                        "registry_uri": f"sqlite:///{tmp_path / 'registry.db'}"},
                       tmp_path / "out", pipeline=pipeline, workspace_root=workspace)
    assert result.ok, result.error + "\n" + "\n".join(result.failed_step.error_lines())
    dataset_dir = result.output_dir("prepare-data", "dataset")
    assert not list(dataset_dir.rglob("*.tfrecord.gz"))  # nothing to stage but the manifest
    manifest = json.loads((dataset_dir / "shards.json").read_text())
    files = [f for split in manifest["splits"].values() for f in split]
    assert files and all(f.startswith(str(workspace / "_shards")) for f in files)
    dataset = result.artifact_metadata("prepare-data", "dataset")
    evidence = json.loads(result.output_dir("evaluate-model", "evaluation").read_text())
    assert sum(evidence["data"]["test_class_counts"].values()) == dataset["test_rows"]
    log = result.log_path.read_text()
    assert f"checkpoints: {workspace / 'checkpoints'}/" in log
    assert not workspace.exists()  # kfp.local removes the workspace when the run ends
