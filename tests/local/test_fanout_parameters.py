"""The fan-out pipeline takes prepare_data's parameters and, given the same non-default
values, writes the dataset one prepare_data step writes (malformed input: a quoted value
left open, an oversized row)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from gkeflow.components.prepare.logic import Schema, prepare
from tests.unit.test_prepare_fanout import assert_same_dataset, make_inputs

#: prepare_data parameters the fan-out pipeline has no use for, and why.
NOT_FANNED_OUT = {
    "dataset", "schema", "report", "rejected",  # outputs
    "workspace_path",  # set by the compiler (the GKE workspace), not a pipeline parameter
}


def test_the_fanout_pipeline_takes_every_prepare_data_parameter():
    from gkeflow.components.prepare.component import prepare_data
    from gkeflow.pipelines.definitions.fanout import fanout_prepare_pipeline

    single = prepare_data.component_spec.inputs or {}
    single = set(single) | set(prepare_data.component_spec.outputs or {})
    fanned = set(fanout_prepare_pipeline.component_spec.inputs)
    assert single - NOT_FANNED_OUT - fanned == set()
    for name in ("max_quoted_lines", "max_row_bytes", "max_missing_fraction",
                 "expected_schema_uri", "reject_unseen_categories"):
        assert (fanout_prepare_pipeline.component_spec.inputs[name].default
                == prepare_data.component_spec.inputs[name].default), name


def _malformed_inputs(directory: Path) -> str:
    """Two churn files: one with a quoted value left open (the quote swallows the next
    lines unless max_quoted_lines stops it), one with a 400-byte row."""
    pattern = make_inputs(directory, files=2, rows=3000)
    first, second = sorted(directory.glob("part-*.csv"))
    lines = first.read_text().splitlines()
    cells = lines[100].split(",")
    cells[3] = '"basic'  # opened, never closed
    lines[100] = ",".join(cells)
    first.write_text("\n".join(lines) + "\n")
    lines = second.read_text().splitlines()
    cells = lines[50].split(",")
    cells[4] = "r" * 400  # a valid but long region
    lines[50] = ",".join(cells)
    second.write_text("\n".join(lines) + "\n")
    return pattern


@pytest.mark.slow
def test_fanout_with_row_limits_equals_one_pod_on_malformed_input(tmp_path):
    from gkeflow.pipelines.definitions.fanout import fanout_prepare_pipeline
    from gkeflow.pipelines.targets.local import init_local

    pattern = _malformed_inputs(tmp_path / "in")
    limits = {"max_quoted_lines": 3, "max_row_bytes": 300}
    single = prepare(pattern, tmp_path / "single", "status", rows_per_shard=700, **limits)
    default = prepare(pattern, tmp_path / "default", "status", rows_per_shard=700)
    # the limits matter on this input: fewer rows lost to the open quote, the long row out
    assert single.rejected_reasons != default.rejected_reasons
    assert single.split_rows != default.split_rows

    init_local(pipeline_root=str(tmp_path / "root"), raise_on_error=True)
    task = fanout_prepare_pipeline(data_uri=pattern, label_column="status", max_groups=2,
                                   rows_per_shard=700, max_missing_fraction=0.5, **limits)
    merged_dir = Path(task.output.path)
    stats = json.loads((merged_dir / "stats.json").read_text())
    merged = SimpleNamespace(
        rows_read=stats["rows_read"], split_rows=stats["split_rows"],
        rejected_rows=stats["rejected_rows"], rejected_reasons=stats["rejected_reasons"],
        schema=Schema.from_json((merged_dir / "schema.json").read_text()),
        problems=single.problems)
    assert_same_dataset(tmp_path / "single", merged_dir, single, merged)
