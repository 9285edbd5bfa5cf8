"""The scoring run's summary for the Kubeflow UI: the predicted-class mix and confidence,
followed by the scoring step's own report (counts, rejects, drift)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gkeflow.components.predict.logic import (
    DEFAULT_BATCH_ROWS,
    PREDICTED_CLASS,
    PREDICTED_VALUE,
)
from gkeflow.components.reservoir import Reservoir

#: Most predicted values kept for the quantiles (a uniform sample beyond).
VALUE_SAMPLE = 1_000_000


def _batches(path: Path):
    if path.suffix == ".csv":
        import pyarrow.csv as pacsv

        yield from pacsv.open_csv(str(path))
    else:
        import pyarrow.parquet as pq

        yield from pq.ParquetFile(str(path)).iter_batches(batch_size=DEFAULT_BATCH_ROWS)


def predictions_file(directory: Path) -> Path:
    """The predictions file inside a predictions artifact directory."""
    directory = Path(directory)
    for name in ("predictions.parquet", "predictions.csv"):
        if (directory / name).exists():
            return directory / name
    raise FileNotFoundError(f"no predictions.parquet or predictions.csv in {directory}")


def summarize_values(predictions: Path, sample_size: int = VALUE_SAMPLE
                     ) -> tuple[list[str], dict]:
    """A regressor's predictions: rows, the predicted values' range and mean (exact) and
    quantiles (over at most ``sample_size`` values: a uniform sample beyond)."""
    kept = Reservoir(sample_size)
    rows, total, low, high = 0, 0.0, math.inf, -math.inf
    for batch in _batches(Path(predictions)):
        values = pa.Table.from_batches([batch]).column(PREDICTED_VALUE).to_numpy()
        if not values.size:
            continue
        rows += values.size
        total += float(values.sum())
        low, high = min(low, float(values.min())), max(high, float(values.max()))
        kept.add(values)
    if not rows:
        return ["# Predictions", "", "0 rows scored."], {"rows": 0}
    mean = total / rows
    quantiles = {f"p{q}": float(np.quantile(kept.values, q / 100)) for q in (5, 25, 50, 75, 95)}
    lines = ["# Predictions", "", f"{rows} rows scored; `{PREDICTED_VALUE}` from "
             f"{low:.6g} to {high:.6g}, mean {mean:.6g}.", "",
             "| quantile | predicted value |", "|---|---:|"]
    lines += [f"| {name} | {value:.6g} |" for name, value in quantiles.items()]
    if kept.sampled:
        lines += ["", f"Quantiles from a uniform sample of {kept.size:,} of the {rows:,} "
                      "predictions."]
    metrics = {"rows": int(rows), "mean_predicted_value": round(mean, 6),
               **{f"predicted_value_{k}": round(v, 6) for k, v in quantiles.items()}}
    return lines, metrics


def _is_regression(predictions: Path) -> bool:
    for batch in _batches(Path(predictions)):
        return PREDICTED_VALUE in batch.schema.names
    return False


def summarize(predictions: Path, scoring_report: str = "") -> tuple[str, dict]:
    """Markdown summary and metrics: rows per predicted class, mean top probability (a
    regressor: the predicted values' range and quantiles)."""
    if _is_regression(predictions):
        lines, metrics = summarize_values(predictions)
        text = "\n".join(lines) + "\n"
        if scoring_report:
            text += "\n" + scoring_report.replace("# Scoring report", "## Scoring report", 1)
        return text, metrics
    counts: dict[str, int] = {}
    confidence_sum, rows = 0.0, 0
    confident = 0
    for batch in _batches(Path(predictions)):
        table = pa.Table.from_batches([batch])
        for entry in pc.value_counts(table.column(PREDICTED_CLASS)).to_pylist():
            counts[str(entry["values"])] = counts.get(str(entry["values"]), 0) + entry["counts"]
        probability = [n for n in table.column_names if n.startswith("probability_")]
        if probability and table.num_rows:
            top = np.max(np.column_stack([table.column(n).to_numpy() for n in probability]),
                         axis=1)
            confidence_sum += float(top.sum())
            confident += int((top >= 0.9).sum())
            rows += table.num_rows
    mean = confidence_sum / rows if rows else 0.0
    lines = ["# Predictions", "", f"{rows} rows scored; mean top-class probability {mean:.3f}; "
             f"{confident} rows ({(confident / rows if rows else 0):.1%}) at 0.9 or above.", "",
             "| predicted class | rows | share |", "|---|---:|---:|"]
    for cls, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"| {cls} | {n} | {n / rows:.1%} |" if rows else f"| {cls} | {n} | |")
    text = "\n".join(lines) + "\n"
    if scoring_report:
        text += "\n" + scoring_report.replace("# Scoring report", "## Scoring report", 1)
    metrics = {"rows": rows, "mean_top_probability": round(mean, 6),
               **{f"class_share_{c}": round(n / rows, 6) for c, n in counts.items() if rows}}
    return text, metrics
