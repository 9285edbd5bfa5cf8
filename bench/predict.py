"""Benchmark of batch scoring: the predict step against calling the SavedModel row by row
and against one large in-memory batch.

A penguins model is trained once (1 epoch; accuracy is beside the point) and registered
in a local registry; the rows to score are the penguins rows resampled to N rows
(default 200k) with an id column, as a CSV. Each measurement runs in its own process,
so its peak RSS is its own:

- ``predict``: the predict step's logic, CSV -> typed, checked, scored in batches of
  ``--batch-rows``, drift tracked, Parquet written (end to end, model load excluded);
- ``predict_small_batches``: the same with batches of 1,024 rows;
- ``row_by_row``: the exported model's ``serve`` signature called once per row (on
  ``--row-rows`` rows; it is slow, and linear), inputs prepared beforehand;
- ``one_batch``: the whole CSV read with pandas, converted and scored in one call (no
  rejects, no drift, no output written): the in-memory upper limit.

The last line is::

    predict_rows_per_s=<f> row_by_row_ratio=<f> one_batch_ratio=<f> rss_ratio=<f>

Usage: ``nice .venv/bin/python bench/predict.py [--rows N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def setup(work: Path, rows: int) -> dict:
    import numpy as np
    import palmerpenguins

    from gkeflow.components.prepare.logic import EMBEDDED_PENGUINS, prepare
    from gkeflow.components.register.local_registry import LocalRegistry
    from gkeflow.components.train.logic import TrainParams, train

    prepared = prepare(EMBEDDED_PENGUINS, work / "dataset", "species")
    train(work / "dataset", prepared.schema, work / "model", TrainParams(epochs=1))
    registry = f"sqlite:///{work / 'registry.db'}"
    LocalRegistry(registry).register("bench", str(work / "model"), {}, run_id="bench")
    frame = palmerpenguins.load_penguins().drop(columns="species")
    frame = frame.iloc[np.random.default_rng(0).integers(0, len(frame), rows)].reset_index(
        drop=True)
    frame.insert(0, "id", [f"r{i}" for i in range(rows)])
    frame.to_csv(work / "rows.csv", index=False)
    return {"registry": registry, "model": str(work / "model"), "data": str(work / "rows.csv")}


def measure(kind: str, ctx: dict, work: Path, batch_rows: int, row_rows: int) -> dict:
    import pandas as pd

    if kind.startswith("predict"):
        from gkeflow.components.predict.logic import predict

        result = predict(data_uri=ctx["data"], output_uri=str(work / f"{kind}.parquet"),
                         model="bench", registry_uri=ctx["registry"],
                         rejects_path=work / f"{kind}-rejected.csv",
                         report_path=work / f"{kind}.md", workdir=work / "tmp",
                         key_column="id", batch_rows=batch_rows, max_drift=1.0)
        return {"rows": result.rows_scored, "seconds": result.seconds}
    from gkeflow.components.predict.resolve import training_profile
    from gkeflow.components.train.exported import ExportedModel
    from gkeflow.components.train.inputs import to_model_inputs

    model = ExportedModel(Path(ctx["model"]))
    schema = training_profile(Path(ctx["model"])).schema
    if kind == "row_by_row":
        import tensorflow as tf

        frame = pd.read_csv(ctx["data"], nrows=row_rows)
        inputs = to_model_inputs(frame, schema)
        kinds = {f["input"]: f["type"] for f in model.metadata["features"]}
        rows = [{n: tf.constant(inputs[n][i:i + 1],
                                dtype=tf.float32 if kinds[n] == "numeric" else tf.string)
                 for n in kinds} for i in range(len(frame))]
        model._serve(rows[0])  # traced once, outside the timing
        started = time.perf_counter()
        for row in rows:
            model._serve(row).numpy()
        return {"rows": len(rows), "seconds": time.perf_counter() - started}
    started = time.perf_counter()
    frame = pd.read_csv(ctx["data"])
    probs = model.predict_proba(to_model_inputs(frame, schema), batch_size=len(frame))
    return {"rows": len(probs), "seconds": time.perf_counter() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--batch-rows", type=int, default=65_536)
    parser.add_argument("--row-rows", type=int, default=2_000)
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        work = Path(args.work)
        ctx = json.loads((work / "ctx.json").read_text())
        batch = 1024 if args.measure == "predict_small_batches" else args.batch_rows
        figures = measure(args.measure, ctx, work, batch, args.row_rows)
        figures["rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(figures))
        return
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        ctx = setup(work, args.rows)
        (work / "ctx.json").write_text(json.dumps(ctx))
        results = {}
        for kind in ("predict", "predict_small_batches", "row_by_row", "one_batch"):
            out = subprocess.run(
                [sys.executable, __file__, "--measure", kind, "--work", str(work),
                 "--batch-rows", str(args.batch_rows), "--row-rows", str(args.row_rows)],
                check=True, capture_output=True, text=True)
            results[kind] = json.loads(out.stdout.strip().splitlines()[-1])
    print("| measurement | rows | seconds | rows/s | peak RSS MiB |")
    print("|---|---|---|---|---|")
    rates = {}
    for kind, r in results.items():
        rates[kind] = r["rows"] / r["seconds"]
        print(f"| {kind} | {r['rows']} | {r['seconds']:.2f} | {rates[kind]:.0f} "
              f"| {r['rss_mib']:.0f} |")
    print(f"predict_rows_per_s={rates['predict']:.1f} "
          f"row_by_row_ratio={rates['predict'] / rates['row_by_row']:.3f} "
          f"one_batch_ratio={rates['predict'] / rates['one_batch']:.3f} "
          f"rss_ratio={results['predict']['rss_mib'] / results['one_batch']['rss_mib']:.3f}")


if __name__ == "__main__":
    main()
