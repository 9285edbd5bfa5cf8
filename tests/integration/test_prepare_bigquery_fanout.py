"""Fan-out preparation of a BigQuery table: the plan splits the table into row ranges
(tabledata.list startIndex/maxResults), each group reads one, and the merge equals one pod.
The real google-cloud-bigquery client talks to the strict local fake."""

from __future__ import annotations

import json

import pytest

from gkeflow.components.prepare import bigquery, fanout
from gkeflow.components.prepare.logic import DataError, prepare
from gkeflow.components.prepare.reader import load_split
from tests.integration.fake_bigquery import FakeBigQuery
from tests.unit.test_prepare_fanout import assert_same_stats

SCHEMA = [("x", "FLOAT"), ("n", "INTEGER"), ("c", "STRING"), ("y", "STRING")]
TABLE = "bq://proj.ds.tbl"


def _rows(count=1300):
    """Rows with missing labels here and there (rejected, with their row number)."""
    return [
        {"x": (i % 97) / 10 - 4, "n": i, "c": "abcd"[i % 4] if i % 50 else None,
         "y": None if i % 173 == 5 else ("pos" if (i % 97) > 48 else "neg")}
        for i in range(count)
    ]


def _where_x_positive(sql, rows):
    return [r for r in rows if r["x"] > 0] if sql.endswith("WHERE x > 0") else rows


@pytest.fixture
def fake_bq(monkeypatch):
    with FakeBigQuery("proj", "ds", "tbl", SCHEMA, _rows(), _where_x_positive) as fake:
        monkeypatch.setenv("BIGQUERY_API_ENDPOINT", fake.endpoint)
        monkeypatch.setattr(bigquery, "PAGE_ROWS", 250)  # several pages per range
        yield fake
        assert fake.errors == []


def _fan_out(tmp_path, max_groups, **kwargs):
    groups = fanout.plan_groups(TABLE, tmp_path / "plan", "y", max_groups, rows_per_shard=200,
                                shard_root=str(tmp_path / "shards"), min_range_rows=100,
                                **kwargs)
    for group in reversed(groups):  # in any order, as parallel pods finish
        fanout.prepare_group(tmp_path / "plan", group, tmp_path / f"part-{group}", workers=1)
    merged = fanout.merge_groups(tmp_path / "plan", [tmp_path / f"part-{g}" for g in groups],
                                 tmp_path / "merged")
    return groups, merged


def _assert_same(single_dir, merged_dir, single, merged):
    assert merged.rows_read == single.rows_read
    assert merged.split_rows == single.split_rows
    assert merged.rejected_reasons == single.rejected_reasons
    assert merged.problems == single.problems
    assert (merged_dir / "schema.json").read_text() == (single_dir / "schema.json").read_text()
    assert_same_stats(json.loads((merged_dir / "stats.json").read_text()),
                      json.loads((single_dir / "stats.json").read_text()))
    for name in ("rejected.csv", "rejected.jsonl"):
        lines = [sorted((d / name).read_text().splitlines()) for d in (merged_dir, single_dir)]
        assert lines[0] == lines[1]
    for split in ("train", "eval", "test"):
        here = load_split(single_dir, split, single.schema)
        there = load_split(merged_dir, split, merged.schema)
        assert sorted(there["n"]) == sorted(here["n"]) and len(there) == len(here)


def test_table_ranges_merged_equal_one_pod(fake_bq, tmp_path):
    single = prepare(TABLE, tmp_path / "single", "y", rows_per_shard=200)
    assert single.rejected_rows == 8  # the rows without a label
    fake_bq.requests.clear()
    groups, merged = _fan_out(tmp_path, max_groups=4)
    assert groups == [0, 1, 2, 3]
    plan = json.loads((tmp_path / "plan" / fanout.PLAN_FILE).read_text())
    assert plan["bigquery"]["ranges"] == [[0, 325], [325, 325], [650, 325], [975, None]]
    _assert_same(tmp_path / "single", tmp_path / "merged", single, merged)
    # each group read its own range: startIndex on its first page only, then page tokens
    reads = [p for m, path, p in fake_bq.requests if path.endswith("/tables/tbl/data")]
    starts = sorted(int(p["startIndex"][0]) for p in reads if "startIndex" in p)
    assert starts == [325, 650, 975]
    assert all(int(p["maxResults"][0]) <= 250 for p in reads)
    # a range is not read past its end: the second page of each bounded range (325 rows)
    # asks for the 75 rows left
    assert [int(p["maxResults"][0]) for p in reads].count(75) == 3


def test_a_small_table_is_one_range_and_a_filter_one_group(fake_bq, tmp_path):
    assert bigquery.plan_ranges(99, 8, min_rows=100) == [(0, None)]
    assert bigquery.plan_ranges(0, 8, min_rows=100) == [(0, None)]
    assert bigquery.plan_ranges(1000, 3, min_rows=1) == [(0, 333), (333, 334), (667, None)]
    single = prepare(TABLE, tmp_path / "single", "y", rows_per_shard=200, bq_filter="x > 0")
    groups, merged = _fan_out(tmp_path, max_groups=4, bq_filter="x > 0")
    assert groups == [0]
    # one pod, then the plan (its sample) and the one group
    assert fake_bq.queries == ["SELECT * FROM `proj.ds.tbl` WHERE x > 0"] * 3
    _assert_same(tmp_path / "single", tmp_path / "merged", single, merged)


def test_a_table_modified_after_the_plan_is_refused(fake_bq, tmp_path):
    groups = fanout.plan_groups(TABLE, tmp_path / "plan", "y", 3, min_range_rows=100,
                                shard_root=str(tmp_path / "shards"))
    fanout.prepare_group(tmp_path / "plan", groups[0], tmp_path / "part-0", workers=1)
    fake_bq.modified_ms += 1000  # rows appended, or the table rewritten
    with pytest.raises(DataError, match="changed while it was being prepared"):
        fanout.prepare_group(tmp_path / "plan", groups[1], tmp_path / "part-1", workers=1)
    assert not (tmp_path / "part-1").exists()


@pytest.mark.slow
def test_fanout_pipeline_over_a_table_equals_one_pod(fake_bq, tmp_path):
    """The pipeline under kfp.local: each ParallelFor pod reads its range from the fake."""
    from pathlib import Path
    from types import SimpleNamespace

    from gkeflow.components.prepare.logic import Schema
    from gkeflow.pipelines.definitions.fanout import fanout_prepare_pipeline
    from gkeflow.pipelines.targets.local import init_local

    single = prepare(TABLE, tmp_path / "single", "y", rows_per_shard=200)
    init_local(pipeline_root=str(tmp_path / "root"), raise_on_error=True)
    task = fanout_prepare_pipeline(data_uri=TABLE, label_column="y", max_groups=3,
                                   rows_per_shard=200, bq_min_range_rows=100)
    merged_dir = Path(task.output.path)
    stats = json.loads((merged_dir / "stats.json").read_text())
    merged = SimpleNamespace(
        rows_read=stats["rows_read"], split_rows=stats["split_rows"],
        rejected_rows=stats["rejected_rows"], rejected_reasons=stats["rejected_reasons"],
        schema=Schema.from_json((merged_dir / "schema.json").read_text()),
        problems=single.problems)
    _assert_same(tmp_path / "single", merged_dir, single, merged)
    starts = sorted(int(p["startIndex"][0]) for _, path, p in fake_bq.requests
                    if path.endswith("/tables/tbl/data") and "startIndex" in p)
    assert starts == [433, 867]  # two pods started mid-table, one at row 0
