"""The fan-out preparation pipeline really runs under kfp.local (ParallelFor over 8 groups,
Collected parts, merge) and writes the dataset one prepare_data step writes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from gkeflow.components.prepare import shard_store
from gkeflow.components.prepare.logic import Schema, prepare
from tests.unit.test_prepare_fanout import assert_same_dataset, make_inputs

pytestmark = pytest.mark.slow


def test_fanout_pipeline_on_8_files_equals_one_pod(tmp_path):
    from gkeflow.pipelines.definitions.fanout import fanout_prepare_pipeline
    from gkeflow.pipelines.targets.local import init_local

    pattern = make_inputs(tmp_path / "in", files=8, rows=11_000)
    single = prepare(pattern, tmp_path / "single", "status", rows_per_shard=700)
    init_local(pipeline_root=str(tmp_path / "root"), raise_on_error=True)
    task = fanout_prepare_pipeline(data_uri=pattern, label_column="status", max_groups=8,
                                   rows_per_shard=700)
    merged_dir = Path(task.output.path)
    manifest = shard_store.read_manifest(merged_dir)
    assert manifest is not None and "_shards" in manifest["root"]
    parts = sorted((tmp_path / "root").rglob("part.json"))
    assert len(parts) == 8  # one pod per input file
    assert task.output.metadata["rows_read"] == single.rows_read

    stats = json.loads((merged_dir / "stats.json").read_text())
    merged = SimpleNamespace(  # what assert_same_dataset compares, read back from the artifact
        rows_read=stats["rows_read"], split_rows=stats["split_rows"],
        rejected_rows=stats["rejected_rows"], rejected_reasons=stats["rejected_reasons"],
        schema=Schema.from_json((merged_dir / "schema.json").read_text()),
        problems=single.problems)
    assert_same_dataset(tmp_path / "single", merged_dir, single, merged)
    # the report, but for its sample rejected rows: a single pod takes the first ones its
    # parallel readers meet, in no fixed order
    def report(directory):
        lines = (directory / "report.md").read_text().splitlines()
        samples = [line for line in lines if re.match(r"^- .*: `.*`$", line)]
        return [line for line in lines if line not in samples], len(samples)

    assert report(merged_dir) == report(tmp_path / "single")
