"""The test split streamed batch by batch through the challenger (and the champion).

Batches come from the split's shards, local or ``gs://`` (through ``shard_store``), read
as training reads them (``reader.iter_split_batches``, or ``reader.make_tf_dataset`` for a
large split), so evaluation holds one batch
of rows and its predictions at a time, whatever the size of the test split; every metric
is accumulated (``accumulate``, ``slices``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gkeflow.components.evaluate.accumulate import MetricAccumulator
from gkeflow.components.evaluate.slices import SliceAccumulator

#: Rows per batch read from the test split (and predicted at once).
EVAL_BATCH_ROWS = 8192
#: Test rows whose raw values and predicted probabilities the evaluation keeps, so a later
#: step (the deploy step's servability check) can send the same rows to the served model.
SAMPLE_ROWS = 32
#: Test splits of up to this many values (rows x columns) are read without tf.data.
PROTO_CELLS = 4_000_000


class LabelError(ValueError):
    """Test rows whose label is not in the schema's label vocabulary."""


def iter_test_batches(dataset_dir: Path, schema, batch_rows: int = EVAL_BATCH_ROWS
                 ) -> Iterator[dict[str, np.ndarray]]:
    """Batches ``{column: values}`` of the test split: numeric columns float32 (NaN for
    missing), categorical ones bytes (b"" for missing); features and the label. A split of
    up to ``PROTO_CELLS`` values is read as protocol buffers (no tf.data graph, whose
    building outweighs reading a small split), a larger one through tf.data."""
    from gkeflow.components.prepare.reader import iter_split_batches, make_tf_dataset
    from gkeflow.components.train.inputs import split_rows

    columns = [c.name for c in schema.features] + [schema.label]
    try:
        rows = split_rows(Path(dataset_dir)).get("test", 0)
    except FileNotFoundError:  # a dataset without its row counts: read it as training does
        rows = PROTO_CELLS + 1
    if rows * len(columns) <= PROTO_CELLS:
        yield from iter_split_batches(Path(dataset_dir), "test", schema, batch_rows, columns)
        return
    dataset = make_tf_dataset(Path(dataset_dir), "test", schema, batch_rows, columns=columns)
    yield from dataset.as_numpy_iterator()


def label_indices(values: np.ndarray, labels: list[str]) -> np.ndarray:
    """Label values (bytes) -> class indices; a value outside ``labels`` is a LabelError."""
    index = {label.encode("utf-8"): i for i, label in enumerate(labels)}
    unique, inverse = np.unique(np.asarray(values, dtype=object), return_inverse=True)
    unknown = sorted(u.decode("utf-8", "replace") for u in unique if u not in index)
    if unknown:
        raise LabelError(f"label values {unknown} are not in the schema's label vocabulary "
                         f"{labels}")
    return np.array([index[u] for u in unique], np.int64)[inverse.reshape(-1)]


def model_inputs(features: list[dict], batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A batch as a model's inputs (its metadata's features: name, input, type), converting
    a column the model takes with another type than the data has."""
    inputs = {}
    for feature in features:
        values = batch[feature["name"]]
        if feature["type"] == "numeric" and values.dtype == object:
            text = [v.decode("utf-8", "replace") for v in values]
            values = np.array([_number(t) for t in text], np.float32)
        elif feature["type"] != "numeric" and values.dtype != object:
            values = np.array([b"" if np.isnan(v) else str(v).encode() for v in values],
                              dtype=object)
        inputs[feature["input"]] = values
    return inputs


def _number(text: str) -> float:
    try:
        return float(text) if text else float("nan")
    except ValueError:
        return float("nan")


@dataclass
class Scored:
    """What one pass over the test split accumulated."""

    challenger: MetricAccumulator
    champion: MetricAccumulator | None
    slices: SliceAccumulator
    batches: int
    sample: dict | None = None


def score_test_split(dataset_dir: Path, schema, model, slices: SliceAccumulator,
                     champion_model=None, champion_order: list[int] | None = None,
                     batch_rows: int = EVAL_BATCH_ROWS, max_bins: int = 0) -> Scored:
    """Stream the test split once through ``model`` (and ``champion_model``, whose classes
    ``champion_order`` maps to the schema's), accumulating every metric."""
    labels = schema.label_vocabulary
    challenger = MetricAccumulator(labels, max_bins)
    champion = MetricAccumulator(labels, max_bins) if champion_model is not None else None
    features = model.metadata["features"]
    batches = 0
    sample = None
    for batch in iter_test_batches(dataset_dir, schema, batch_rows):
        true = label_indices(batch[schema.label], labels)
        probabilities = model.predict_proba(model_inputs(features, batch))
        if sample is None:
            sample = prediction_sample(features, batch, probabilities, labels)
        predicted = challenger.update(true, probabilities)
        champion_predicted = None
        if champion is not None:
            theirs = champion_model.predict_proba(
                model_inputs(champion_model.metadata["features"], batch))[:, champion_order]
            champion_predicted = champion.update(true, theirs)
        slices.update(batch, true, predicted, probabilities, champion_predicted)
        batches += 1
    return Scored(challenger, champion, slices, batches, sample)


def _plain(value):
    """A raw test value as JSON holds it: bytes as text, NaN and infinities as None."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    value = float(value)
    return value if np.isfinite(value) else None


def prediction_sample(features: list[dict], batch: dict[str, np.ndarray],
                      probabilities: np.ndarray, labels: list[str],
                      rows: int = SAMPLE_ROWS) -> dict:
    """The first ``rows`` test rows (raw feature values by column) with the challenger's
    class probabilities for them: what a served model must answer for the same rows."""
    n = min(rows, len(probabilities))
    return {
        "rows": [{f["name"]: _plain(batch[f["name"]][i]) for f in features} for i in range(n)],
        "probabilities": [[float(p) for p in probabilities[i]] for i in range(n)],
        # a regressor (no labels): its one value per row is in "probabilities"
        "classes": [labels[int(probabilities[i].argmax())] for i in range(n)] if labels else [],
        "labels": list(labels),
    }
