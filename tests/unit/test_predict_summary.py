"""The report step's summary of a predictions file, Parquet or CSV (no TensorFlow)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from gkeflow.components.predict.summary import predictions_file, summarize


def _table() -> pa.Table:
    return pa.table({
        "row_number": [0, 1, 2, 3],
        "predicted_class": ["b", "a", "b", "b"],
        "probability_a": pa.array([0.2, 0.95, 0.05, 0.4], pa.float32()),
        "probability_b": pa.array([0.8, 0.05, 0.95, 0.6], pa.float32()),
        "model_name": ["m"] * 4, "model_version": [3] * 4,
    })


@pytest.mark.parametrize("name", ["predictions.parquet", "predictions.csv"])
def test_summary_counts_classes_and_confidence(tmp_path, name):
    path = tmp_path / name
    if name.endswith(".csv"):
        pacsv.write_csv(_table(), str(path))
    else:
        pq.write_table(_table(), path)
    assert predictions_file(tmp_path) == path
    text, metrics = summarize(path, "# Scoring report\n\n- Rows read: 4")
    assert metrics["rows"] == 4
    assert metrics["class_share_b"] == 0.75 and metrics["class_share_a"] == 0.25
    assert metrics["mean_top_probability"] == pytest.approx((0.8 + 0.95 + 0.95 + 0.6) / 4)
    assert "| b | 3 | 75.0% |" in text and "2 rows (50.0%) at 0.9 or above" in text
    assert "## Scoring report" in text


def test_a_missing_predictions_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no predictions.parquet"):
        predictions_file(tmp_path)
