"""Fan-out preparation (plan, groups, merge) gives the single-pod result."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from gkeflow.components.prepare import fanout, shard_store
from gkeflow.components.prepare.logic import prepare
from gkeflow.components.prepare.reader import load_split
from tests.conftest import make_churn_csv


def make_inputs(directory: Path, files: int = 8, rows: int = 12_000) -> str:
    """``files`` CSVs cut from one churn table, with malformed rows here and there and a
    region value that appears only after the first 10,000 rows (past the sample)."""
    directory.mkdir(parents=True, exist_ok=True)
    header, *lines = make_churn_csv(directory / "all.tmp", rows=rows).read_text().splitlines()
    (directory / "all.tmp").unlink()
    rng = random.Random(3)
    for i in range(len(lines) - 600, len(lines), 7):
        cells = lines[i].split(",")
        cells[4] = "central"
        lines[i] = ",".join(cells)
    for i in rng.sample(range(len(lines)), 40):
        lines[i] = rng.choice([lines[i] + ",extra", lines[i].replace(",", ";", 2),
                               lines[i].split(",", 1)[0] + ",abc,1,basic,north,2,stayed"])
    step = math.ceil(len(lines) / files)
    for k in range(files):
        part = lines[k * step:(k + 1) * step]
        (directory / f"part-{k:02d}.csv").write_text("\n".join([header, *part]) + "\n")
    return str(directory / "part-*.csv")


def assert_same_stats(a, b, path="stats"):
    if isinstance(a, float) and isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-9, abs=1e-9), path
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for key in a:
            assert_same_stats(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for k, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_stats(x, y, f"{path}[{k}]")
    else:
        assert a == b, path


def assert_same_dataset(single_dir: Path, merged_dir: Path, single, merged) -> None:
    assert merged.rows_read == single.rows_read
    assert merged.split_rows == single.split_rows
    assert merged.rejected_reasons == single.rejected_reasons and merged.rejected_rows > 0
    assert (merged_dir / "schema.json").read_text() == (single_dir / "schema.json").read_text()
    assert "central" in merged.schema.column("region").vocabulary  # from all rows
    assert merged.problems == single.problems
    assert_same_stats(json.loads((merged_dir / "stats.json").read_text()),
                      json.loads((single_dir / "stats.json").read_text()))
    lines = lambda d: sorted((d / "rejected.csv").read_text().splitlines()[1:])  # noqa: E731
    assert lines(merged_dir) == lines(single_dir)
    assert ((merged_dir / "rejected.csv").read_text().splitlines()[0]
            == (single_dir / "rejected.csv").read_text().splitlines()[0])
    records = lambda d: sorted((d / "rejected.jsonl").read_text().splitlines())  # noqa: E731
    assert records(merged_dir) == records(single_dir) and records(merged_dir)
    for split in ("train", "eval", "test"):
        here = load_split(single_dir, split, single.schema)
        there = load_split(merged_dir, split, merged.schema)
        assert sorted(there["customer_id"]) == sorted(here["customer_id"])
        assert len(there) == single.split_rows[split]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fanout")
    pattern = make_inputs(tmp / "in")
    single = prepare(pattern, tmp / "single", "status", rows_per_shard=700)
    return tmp, pattern, single


@pytest.mark.parametrize("max_groups", [3, 8])
def test_groups_merged_equal_one_pod(inputs, tmp_path, max_groups):
    tmp, pattern, single = inputs
    root = str(tmp_path / "shards" / "run")
    groups = fanout.plan_groups(pattern, tmp_path / "plan", "status", max_groups,
                                rows_per_shard=700, shard_root=root)
    assert groups == list(range(max_groups))
    for group in reversed(groups):  # any order, as parallel pods finish
        fanout.prepare_group(tmp_path / "plan", group, tmp_path / f"part-{group}", workers=1)
    merged = fanout.merge_groups(tmp_path / "plan", [tmp_path / f"part-{g}" for g in groups],
                                 tmp_path / "merged")
    assert_same_dataset(tmp / "single", tmp_path / "merged", single, merged)
    manifest = shard_store.read_manifest(tmp_path / "merged")
    listed = sorted(f for files in manifest["splits"].values() for f in files)
    assert listed == sorted(str(p) for p in (tmp_path / "shards").rglob("*.tfrecord.gz"))
    assert not list((tmp_path / "merged").rglob("*.tfrecord.gz"))


def test_without_a_shard_root_the_merge_copies_the_shards_in(inputs, tmp_path):
    tmp, pattern, single = inputs
    groups = fanout.plan_groups(pattern, tmp_path / "plan", "status", 2, rows_per_shard=700)
    for group in groups:
        fanout.prepare_group(tmp_path / "plan", group, tmp_path / f"part-{group}", workers=1)
    merged = fanout.merge_groups(tmp_path / "plan", [tmp_path / f"part-{g}" for g in groups],
                                 tmp_path / "merged")
    assert shard_store.read_manifest(tmp_path / "merged") is None
    assert_same_dataset(tmp / "single", tmp_path / "merged", single, merged)


def test_a_missing_or_repeated_part_is_refused(inputs, tmp_path):
    _, pattern, _ = inputs
    groups = fanout.plan_groups(pattern, tmp_path / "plan", "status", 2, rows_per_shard=700,
                                shard_root=str(tmp_path / "shards"))
    fanout.prepare_group(tmp_path / "plan", 0, tmp_path / "part-0", workers=1)
    for parts in ([tmp_path / "part-0"], [tmp_path / "part-0", tmp_path / "part-0"]):
        with pytest.raises(RuntimeError, match="one part per group"):
            fanout.merge_groups(tmp_path / "plan", parts, tmp_path / "merged")
    assert not (tmp_path / "merged").exists()
    assert groups == [0, 1]
    with pytest.raises(ValueError, match="max_groups"):
        fanout.plan_groups(pattern, tmp_path / "plan2", "status", 101)


def test_the_merge_refuses_an_empty_test_split_as_one_pod_does(tmp_path):
    """Files of a few distinct rows repeated: the rows per split say which split is empty,
    and nothing is published."""
    from gkeflow.components.prepare.sources import EmptySplit

    folder = tmp_path / "in"
    folder.mkdir()
    for i in range(3):
        (folder / f"part-{i}.csv").write_text("x,status\n" + "1,a\n2,b\n" * 100)
    pattern = str(folder / "*.csv")
    with pytest.raises(EmptySplit) as single:
        prepare(pattern, tmp_path / "single", "status")
    groups = fanout.plan_groups(pattern, tmp_path / "plan", "status", 3)
    for group in groups:
        fanout.prepare_group(tmp_path / "plan", group, tmp_path / f"part-{group}", workers=1)
    with pytest.raises(EmptySplit) as merged:
        fanout.merge_groups(tmp_path / "plan", [tmp_path / f"part-{g}" for g in groups],
                            tmp_path / "merged")
    assert merged.value.split_rows == single.value.split_rows
    assert sum(merged.value.split_rows.values()) == 600
    assert not (tmp_path / "merged").exists() and not (tmp_path / "single").exists()
