"""prepare over BigQuery: the real google-cloud-bigquery client against a strict local fake."""

from __future__ import annotations

import pytest

from gkeflow.components.prepare import bigquery
from gkeflow.components.prepare.logic import DataError, prepare
from gkeflow.components.prepare.reader import load_split
from tests.integration.fake_bigquery import FakeBigQuery

SCHEMA = [("x", "FLOAT"), ("n", "INTEGER"), ("c", "STRING"), ("y", "STRING")]


def _rows(count=1200):
    return [
        {"x": (i % 97) / 10 - 4, "n": i, "c": "abc"[i % 3] if i % 50 else None,
         "y": "pos" if (i % 97) > 48 else "neg"}
        for i in range(count)
    ]


def _where_x_positive(sql, rows):
    return [r for r in rows if r["x"] > 0] if sql.endswith("WHERE x > 0") else rows


@pytest.fixture
def fake_bq(monkeypatch):
    with FakeBigQuery("proj", "ds", "tbl", SCHEMA, _rows(), _where_x_positive) as fake:
        monkeypatch.setenv("BIGQUERY_API_ENDPOINT", fake.endpoint)
        monkeypatch.setattr(bigquery, "PAGE_ROWS", 250)  # several pages per read
        yield fake
        assert fake.errors == []


def test_table_is_read_page_by_page(fake_bq, tmp_path):
    result = prepare("bq://proj.ds.tbl", tmp_path / "out", "y", key_column="n")
    assert result.rows_read == 1200 and result.rejected_rows == 0
    assert sum(result.split_rows.values()) == 1200
    types = {c.name: c.type for c in result.schema.columns}
    assert types == {"x": "numeric", "n": "numeric", "c": "categorical", "y": "categorical"}
    pages = [r for r in fake_bq.requests if r[1].endswith("/tables/tbl/data")]
    assert len(pages) == 1200 // 250 + 1, "each page is read once: the sample is replayed"
    assert all(p[2]["maxResults"] == ["250"] for p in pages)
    train = load_split(tmp_path / "out", "train", result.schema)
    assert len(train) == result.split_rows["train"]
    assert train["c"].isna().sum() + sum(
        load_split(tmp_path / "out", s, result.schema)["c"].isna().sum() for s in ("eval", "test")
    ) == 24


def test_row_filter_runs_a_query(fake_bq, tmp_path):
    result = prepare("bq://proj.ds.tbl", tmp_path / "out", "y", bq_filter="x > 0")
    assert fake_bq.queries == ["SELECT * FROM `proj.ds.tbl` WHERE x > 0"]
    expected = sum(1 for r in _rows() if r["x"] > 0)
    assert result.rows_read == expected
    assert any(r[1].startswith("/bigquery/v2/projects/proj/queries/") for r in fake_bq.requests)


def test_custom_query(fake_bq, tmp_path):
    sql = "SELECT x, n, c, y FROM `proj.ds.tbl`"
    result = prepare("bq://proj.ds.tbl", tmp_path / "out", "y", bq_query=sql)
    assert fake_bq.queries == [sql] and result.rows_read == 1200


def test_missing_table_and_bad_arguments(fake_bq, tmp_path):
    with pytest.raises(DataError, match="not found"):
        prepare("bq://proj.ds.nope", tmp_path / "out", "y")
    fake_bq.errors.clear()  # the 404 above was the point
    with pytest.raises(DataError, match="either bq_query or bq_filter"):
        prepare("bq://proj.ds.tbl", tmp_path / "out", "y", bq_query="SELECT 1", bq_filter="x")
    with pytest.raises(DataError, match="malformed BigQuery URI"):
        prepare("bq://just-a-table", tmp_path / "out", "y")
    with pytest.raises(DataError, match="only to bq://"):
        prepare("/tmp/x.csv", tmp_path / "out", "y", bq_filter="x > 0")
    assert not (tmp_path / "out").exists()
