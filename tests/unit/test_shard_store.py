"""Shard locations and the streamed TFRecord reader (no server needed)."""

from __future__ import annotations

import gzip

import pytest

from gkeflow.components.prepare import shard_store
from gkeflow.components.prepare.records import frame_record


def _chunks(data: bytes, size: int):
    return (data[i:i + size] for i in range(0, len(data), size))


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_records_across_chunk_and_member_boundaries(chunk):
    records = [b"", b"x", bytes(range(256)) * 40, b"last"]
    # two GZIP members, as an appended or concatenated shard would have
    data = gzip.compress(b"".join(frame_record(r) for r in records[:2])) + gzip.compress(
        b"".join(frame_record(r) for r in records[2:]))
    assert list(shard_store.iter_records(_chunks(data, chunk))) == records


def test_truncated_stream_is_an_error():
    data = gzip.compress(frame_record(b"abc") + frame_record(b"defgh")[:-2])
    with pytest.raises(OSError, match="truncated"):
        list(shard_store.iter_records(_chunks(data, 5)))


def test_shard_root_next_to_the_artifact_not_under_it(tmp_path):
    gcs = shard_store.resolve_shard_root("gs://b/root/p/run/prepare-data/dataset", attempt="a1")
    assert gcs == "gs://b/root/p/run/prepare-data/_shards/dataset/a1"
    # the launcher downloads every object under the artifact's URI prefix
    assert not gcs.startswith("gs://b/root/p/run/prepare-data/dataset")
    local = shard_store.resolve_shard_root(str(tmp_path / "task" / "dataset"), attempt="a1")
    assert local == str(tmp_path / "task" / "_shards" / "dataset" / "a1")
    assert shard_store.resolve_shard_root("minio://mlpipeline/v2/artifacts/x/dataset") == ""
    given = shard_store.resolve_shard_root("minio://mlpipeline/x/dataset", "gs://big/data/")
    assert given.startswith("gs://big/data/attempt-")
    assert given != shard_store.resolve_shard_root("minio://mlpipeline/x/dataset", "gs://big/data")
    with pytest.raises(ValueError, match="gs:// URI or a local path"):
        shard_store.resolve_shard_root("gs://b/x/dataset", "s3://elsewhere")


def test_missing_credentials_name_the_fix(tmp_path, monkeypatch):
    from gkeflow.components.prepare.logic import DataError, prepare
    from tests.conftest import make_churn_csv

    for name in ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    csv = make_churn_csv(tmp_path / "churn.csv", rows=50)
    with pytest.raises(DataError, match="no Google Cloud credentials.*shard_root"):
        prepare(str(csv), tmp_path / "out", "status", shard_root="gs://b/shards/a1")
    assert not (tmp_path / "out").exists()
