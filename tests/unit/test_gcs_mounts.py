"""Steps that mount a bucket read and write its gs:// URIs through the mount (the mount is a
local directory here, as the gcsfuse or /gcs mount is in a pod)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import palmerpenguins
import pytest

from gkeflow.components.cloud.mounts import (
    MOUNTS_ENV,
    READ_ONLY_ENV,
    mounted_path,
    writable_path,
)
from gkeflow.components.fingerprint.logic import fingerprint
from gkeflow.components.prepare import shard_store
from gkeflow.components.prepare.logic import prepare
from gkeflow.components.prepare.sources import resolve_sources
from gkeflow.components.train.store import resolve_checkpoint_location

PENGUINS = Path(palmerpenguins.__file__).parent / "data" / "penguins.csv"


@pytest.fixture
def bucket(tmp_path, monkeypatch):
    """gs://raw-data mounted at tmp_path/raw, holding the penguins in csv/."""
    mount = tmp_path / "raw"
    (mount / "csv").mkdir(parents=True)
    shutil.copy(PENGUINS, mount / "csv" / "penguins.csv")
    monkeypatch.setenv(MOUNTS_ENV, json.dumps({"raw-data": str(mount)}))
    return mount


def test_mounted_path_rewrites_only_mounted_buckets():
    env = {MOUNTS_ENV: json.dumps({"raw-data": "/gcs/raw-data/"})}
    assert mounted_path("gs://raw-data/a/b.csv", env) == "/gcs/raw-data/a/b.csv"
    assert mounted_path("gs://raw-data", env) == "/gcs/raw-data"
    assert mounted_path("gs://raw-data-2/a.csv", env) == "gs://raw-data-2/a.csv"
    assert mounted_path("/local/a.csv", env) == "/local/a.csv"
    assert mounted_path("gs://raw-data/a.csv", {}) == "gs://raw-data/a.csv"
    with pytest.raises(ValueError, match="not JSON"):
        mounted_path("gs://raw-data/a.csv", {MOUNTS_ENV: "raw-data=/x"})


def test_data_under_a_mounted_bucket_is_read_from_the_mount(bucket):
    sources = resolve_sources("gs://raw-data/csv/*.csv")
    assert [s.name for s in sources] == [str(bucket / "csv" / "penguins.csv")]
    result = fingerprint("gs://raw-data/csv/")
    assert result.kind == "local" and len(result.items) == 1


def test_prepare_writes_shards_through_a_mounted_shard_root(bucket, tmp_path):
    out = tmp_path / "dataset"
    root = shard_store.resolve_shard_root(str(out), "gs://raw-data/shards")
    prepare("gs://raw-data/csv/penguins.csv", out, "species", shard_root=root)
    manifest = json.loads((out / shard_store.MANIFEST_FILE).read_text())
    assert manifest["root"].startswith(str(bucket / "shards" / "attempt-"))
    train = shard_store.split_shards(out, "train", ".tfrecord.gz")
    assert train and all(Path(p).is_file() for p in train)


def test_manifest_of_gs_shards_is_read_through_the_mount(bucket, tmp_path):
    (bucket / "shards").mkdir()
    (bucket / "shards" / "part-0.tfrecord.gz").write_bytes(b"")
    shard_store.write_manifest(tmp_path, "gs://raw-data/shards",
                               {"train": ["gs://raw-data/shards/part-0.tfrecord.gz"]})
    assert shard_store.split_shards(tmp_path, "train", ".tfrecord.gz") == [
        str(bucket / "shards" / "part-0.tfrecord.gz")]


def test_checkpoints_under_a_mounted_bucket_go_to_the_mount(bucket):
    location = resolve_checkpoint_location("gs://raw-data/ckpt", "minio://root", "run-1",
                                           "train-model")
    assert location == f"{bucket}/ckpt/run-1/train-model"
    location = resolve_checkpoint_location("", "gs://raw-data/root", "run-1", "train-model")
    assert location == f"{bucket}/root/checkpoints/run-1/train-model"


def test_outputs_in_a_bucket_mounted_read_only_are_refused(bucket, monkeypatch, tmp_path):
    monkeypatch.setenv(READ_ONLY_ENV, "raw-data")
    with pytest.raises(ValueError, match="raw-data, which gcsfuse mounts read-only"):
        shard_store.resolve_shard_root(str(tmp_path / "out"), "gs://raw-data/shards")
    with pytest.raises(ValueError, match="mounts read-only"):
        resolve_checkpoint_location("gs://raw-data/ckpt", "", "run-1", "train-model")
    # reading it is fine, and other buckets are written as before
    assert resolve_sources("gs://raw-data/csv/penguins.csv")[0].name.startswith(str(bucket))
    assert writable_path("gs://other/x") == "gs://other/x"


def test_batch_scoring_reads_rows_through_the_mount(bucket, tmp_path):
    from gkeflow.components.predict.logic import predict
    from gkeflow.components.prepare.sources import DataError

    # the header comes from the mounted file: the unknown key column is named against it,
    # before any registry is read
    with pytest.raises(DataError, match="available columns: species, island"):
        predict("gs://raw-data/csv/penguins.csv", str(tmp_path / "p.parquet"), "m",
                "sqlite:///nowhere.db", tmp_path / "rejects.csv", tmp_path / "report.md",
                tmp_path, key_column="row_id")


def test_predictions_to_a_bucket_mounted_read_only_are_refused_before_scoring(
        bucket, monkeypatch, tmp_path):
    from gkeflow.components.predict.logic import predict
    from gkeflow.components.predict.resolve import PredictError
    from gkeflow.components.predict.sinks import check_output_uri

    monkeypatch.setenv(READ_ONLY_ENV, "raw-data")
    with pytest.raises(PredictError, match="mounts read-only: write predictions to another"):
        predict("gs://raw-data/csv/penguins.csv", "gs://raw-data/out/p.parquet", "m",
                "sqlite:///nowhere.db", tmp_path / "rejects.csv", tmp_path / "report.md",
                tmp_path)
    check_output_uri("gs://other-bucket/out/p.parquet")  # other buckets take them
    monkeypatch.delenv(READ_ONLY_ENV)
    check_output_uri("gs://raw-data/out/p.parquet")  # and a read-write mount too
