"""The GKE run workspace: settings validated at the edge, where shards and checkpoints go."""

from __future__ import annotations

from pathlib import Path

import pytest

from gkeflow.components.prepare.shard_store import resolve_shard_root
from gkeflow.components.train.store import CHECKPOINT_MOUNT, checkpoint_mount
from gkeflow.pipelines.compute.workspace import parallel_note
from gkeflow.pipelines.settings.config import ConfigError, GkeflowConfig, load_config
from gkeflow.pipelines.settings.workspace_config import WorkspaceSettings, quantity_bytes

ARTIFACT = "minio://mlpipeline/v2/artifacts/gkeflow-training/run-1/prepare-data/42/dataset"


@pytest.mark.parametrize("value, expected", [
    ("1Gi", 2**30), ("200Gi", 200 * 2**30), ("1.5Ti", int(1.5 * 2**40)), ("500G", 500 * 10**9),
    ("2000000000", 2 * 10**9)])
def test_quantities(value, expected):
    assert quantity_bytes(value) == expected


@pytest.mark.parametrize("raw, message", [
    ({"size": "10Mi"}, "under 1Gi"),
    ({"size": "lots"}, "not a storage quantity"),
    ({"storage_class": "Fast SSD"}, "not a StorageClass name"),
    ({"access_mode": "ReadOnlyMany"}, "ReadWriteOnce"),
    ({"sise": "10Gi"}, "sise"),
])
def test_bad_settings_are_refused_by_the_config_file(tmp_path, raw, message):
    import yaml

    path = tmp_path / "gkeflow.yaml"
    path.write_text(yaml.safe_dump({"workspace": raw}))
    with pytest.raises(ConfigError, match=message) as caught:
        load_config(path)
    assert "workspace" in str(caught.value)


def _config(root: str | None, **workspace) -> GkeflowConfig:
    gke = {"host": "https://kfp.example.com"} | ({"pipeline_root": root} if root else {})
    return GkeflowConfig.model_validate({"targets": {"gke": gke}, "workspace": workspace})


def test_enabled_follows_the_gke_pipeline_root_unless_set():
    assert _config(None).gke_workspace().active("gke")  # KFP's default MinIO root
    assert _config("minio://mlpipeline/v2").gke_workspace().active("gke")
    assert not _config("gs://bucket/root").gke_workspace().active("gke")
    assert _config("gs://bucket/root", enabled=True).gke_workspace().active("gke")
    assert not _config(None, enabled=False).gke_workspace().active("gke")
    assert GkeflowConfig().gke_workspace().active("gke")


def test_where_each_target_uses_it():
    auto, on, off = (WorkspaceSettings(), WorkspaceSettings(enabled=True),
                     WorkspaceSettings(enabled=False))
    assert auto.active("gke") and not auto.active("gke", "gs://b/r")
    assert on.active("gke", "gs://b/r") and not off.active("gke")
    assert not on.active("vertex") and not auto.active("vertex")
    assert on.active("local") and not auto.active("local")


def test_parallel_steps_on_a_single_node_volume_are_flagged():
    assert "ReadWriteMany" in parallel_note(WorkspaceSettings(), "sweep trials", 4)
    assert parallel_note(WorkspaceSettings(), "sweep trials", 1) == ""
    assert parallel_note(WorkspaceSettings(access_mode="ReadWriteMany"), "trials", 4) == ""


def test_shards_go_to_the_workspace_unless_a_shard_root_is_given(tmp_path):
    root = resolve_shard_root(ARTIFACT, workspace=str(tmp_path), attempt="attempt-1")
    assert Path(root) == tmp_path / "_shards" / "prepare-data" / "42" / "dataset" / "attempt-1"
    # an explicit shard root wins; no workspace keeps the old behaviour
    assert resolve_shard_root(ARTIFACT, "gs://b/s", "attempt-1", str(tmp_path)) == \
        "gs://b/s/attempt-1"
    assert resolve_shard_root(ARTIFACT, attempt="attempt-1") == ""
    # an unresolved placeholder (a component run outside KFP) is no workspace
    assert resolve_shard_root(ARTIFACT, workspace="{{$.workspace_path}}") == ""


def test_checkpoints_live_in_the_workspace_when_there_is_one(tmp_path):
    assert checkpoint_mount("") == CHECKPOINT_MOUNT
    assert checkpoint_mount("{{$.workspace_path}}") == CHECKPOINT_MOUNT
    mount = checkpoint_mount(str(tmp_path))
    assert mount == str(tmp_path / "checkpoints") and Path(mount).is_dir()
