"""A whole split as a DataFrame (`load_split`, read as protocol buffers) holds exactly the
rows the training input pipeline (`make_tf_dataset`, tf.data) reads: the same values,
missing ones included, over several shards and blocks."""

from __future__ import annotations

import numpy as np
import pandas as pd

from gkeflow.components.prepare.logic import prepare
from gkeflow.components.prepare.reader import load_split, make_tf_dataset


def test_load_split_reads_the_rows_tf_data_reads(tmp_path):
    rng = np.random.default_rng(3)
    rows = 1200
    table = pd.DataFrame({
        "size": np.where(rng.random(rows) < 0.1, np.nan, rng.normal(10, 3, rows).round(3)),
        "colour": rng.choice(["red", "green", "blue", ""], rows),
        "weight": rng.integers(0, 100, rows),
        "label": rng.choice(["a", "b"], rows)})
    source = tmp_path / "table.csv"
    table.to_csv(source, index=False)
    out = tmp_path / "dataset"
    result = prepare(str(source), out, "label", rows_per_shard=250)
    schema = result.schema
    for split in ("train", "eval", "test"):
        frame = load_split(out, split, schema)
        read = {c.name: [] for c in schema.columns}
        for batch in make_tf_dataset(out, split, schema, batch_size=97).as_numpy_iterator():
            for name, values in batch.items():
                read[name].append(values)
        expected = pd.DataFrame({
            c.name: (np.concatenate(read[c.name]).astype(str).astype(np.float64)
                     if c.type == "numeric" else
                     [v.decode() if v else None for v in np.concatenate(read[c.name])])
            for c in schema.columns})
        assert len(frame) == len(expected) > 0
        assert list(frame.columns) == [c.name for c in schema.columns]
        # the same rows (shards may interleave differently): compare as sorted records
        key = [c.name for c in schema.columns]
        left = frame.fillna("<missing>").astype(str).sort_values(key).reset_index(drop=True)
        right = expected.fillna("<missing>").astype(str).sort_values(key).reset_index(drop=True)
        pd.testing.assert_frame_equal(left, right)
        assert frame["size"].isna().any() or split != "train"

        # a sample: its first rows, in the same order
        head = load_split(out, split, schema, max_rows=100)
        assert len(head) == min(100, len(frame))
        pd.testing.assert_frame_equal(head, frame.head(len(head)))
