"""Benchmark of evaluation on big test splits: streamed vs. the whole split in memory.

On the synthetic data of ``bench/prepare.py`` (10 numeric + 3 categorical columns, 3
classes) prepared with most rows in the test split, at N and 10 N rows (default N = 200k),
with one small model trained once (one epoch on the small dataset), each measurement in its
own fresh process (so its peak RSS is its own):

- ``stream``: ``evaluate()``, the evaluation step's logic: the test shards streamed in
  batches through the model, every metric accumulated (confusion matrix, macro metrics,
  log loss, ECE, slices by the three categorical columns, ROC/PR curves from bounded
  score histograms);
- ``memory`` (the baseline, how evaluation worked before): the whole test split loaded
  into a DataFrame (``load_split``), predicted at once, exact metrics over all the arrays
  (``roc_curve``, ``roc_auc``, ``average_precision`` on every score) and the same slices.

Ratios compare figures measured in the same run. The last line is::

    stream_rows_per_s_10x=<f> stream_speed_ratio_10x=<f> stream_rss_ratio_10x=<f>
        memory_rss_ratio_10x=<f> stream_rss_vs_memory_10x=<f> max_auc_error_10x=<f>

``stream_speed_ratio_10x``: streamed rows/s over in-memory rows/s at 10 N;
``*_rss_ratio_10x``: peak RSS at 10 N over peak RSS at N (1.0 = flat);
``max_auc_error_10x``: largest |streamed AUC - exact AUC| over the per-class ROC and PR
AUCs at 10 N (the in-memory figures are exact).

Usage: ``nice .venv/bin/python bench/evaluate.py [--rows N]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SLICES = "cat_0,cat_1,cat_2"


def run_prepare(csv_path: str, out: str) -> dict:
    from gkeflow.components.prepare.logic import SplitRatios, prepare

    started = time.perf_counter()
    result = prepare(csv_path, Path(out), "label", ratios=SplitRatios(0.1, 0.05, 0.85))
    return {"rows": result.rows_read, "seconds": time.perf_counter() - started,
            "test_rows": result.split_rows["test"]}


def run_train(dataset_dir: str, model_dir: str) -> dict:
    from gkeflow.components.prepare.logic import Schema
    from gkeflow.components.train.logic import TrainParams, train

    started = time.perf_counter()
    train(Path(dataset_dir), Schema.load(Path(dataset_dir)), Path(model_dir),
          TrainParams(epochs=1, batch_size=512))
    return {"rows": 0, "seconds": time.perf_counter() - started}


def run_stream(dataset_dir: str, model_dir: str) -> dict:
    from gkeflow.components.evaluate.logic import evaluate
    from gkeflow.components.prepare.logic import Schema

    schema = Schema.load(Path(dataset_dir))
    started = time.perf_counter()
    result = evaluate(Path(dataset_dir), schema, Path(model_dir), min_accuracy=0.0,
                      slice_columns=SLICES)
    seconds = time.perf_counter() - started
    return {"rows": result.metrics.examples, "seconds": seconds,
            "aucs": {k: [v.roc_auc, v.pr_auc] for k, v in result.metrics.per_class.items()},
            "auc_error_bound": result.metrics.auc_error_bound,
            "accuracy": result.metrics.accuracy}


def run_memory(dataset_dir: str, model_dir: str) -> dict:
    """The previous evaluation: the whole split in memory, exact metrics on all arrays."""
    from gkeflow.components.evaluate.logic import slice_metrics
    from gkeflow.components.evaluate.metrics import (
        average_precision,
        expected_calibration_error,
        log_loss,
        positive_class_roc,
        roc_auc,
    )
    from gkeflow.components.prepare.logic import Schema
    from gkeflow.components.prepare.reader import load_split
    from gkeflow.components.train.exported import ExportedModel
    from gkeflow.components.train.inputs import encode_labels, to_model_inputs

    schema = Schema.load(Path(dataset_dir))
    started = time.perf_counter()
    model = ExportedModel(Path(model_dir))
    test = load_split(Path(dataset_dir), "test", schema)
    true = encode_labels(test, schema)
    probs = model.predict_proba(to_model_inputs(test, schema)).astype("float64")
    aucs = {label: [roc_auc(true == i, probs[:, i]), average_precision(true == i, probs[:, i])]
            for i, label in enumerate(schema.label_vocabulary)}
    log_loss(true, probs)
    expected_calibration_error(true, probs)
    positive_class_roc(true, probs, schema.label_vocabulary)
    slice_metrics(test, SLICES.split(","), true, probs)
    seconds = time.perf_counter() - started
    return {"rows": len(test), "seconds": seconds, "aucs": aucs,
            "accuracy": float((probs.argmax(axis=1) == true).mean())}


MEASUREMENTS = {"prepare": run_prepare, "train": run_train, "stream": run_stream,
                "memory": run_memory}


def measure(name: str, *args) -> dict:
    """Run one measurement in a fresh process; add its peak RSS (MiB)."""
    from child import measure as measure_in_child

    return measure_in_child(__file__, name, *args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000,
                        help="small size N; the large size is 10 N (default 200k)")
    parser.add_argument("--workdir", default=None, help="where data goes (default: a temp dir)")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from bench.prepare import generate

    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        work = Path(tmp)
        sizes = {"1x": args.rows, "10x": 10 * args.rows}
        results: dict[str, dict] = {}
        for size, rows in sizes.items():
            csv = work / f"{size}.csv"
            generate(csv, rows)
            results[f"prepare_{size}"] = measure("prepare", csv, work / f"data_{size}")
            csv.unlink()
        results["train"] = measure("train", work / "data_1x", work / "model")
        for size in sizes:
            for mode in ("stream", "memory"):
                results[f"{mode}_{size}"] = measure(mode, work / f"data_{size}", work / "model")
                r = results[f"{mode}_{size}"]
                print(f"{mode:>6} {size:>3}: {r['rows']} test rows in {r['seconds']:.2f} s "
                      f"({r['rows_per_s']:,.0f} rows/s), peak RSS {r['peak_rss_mib']:.0f} MiB",
                      flush=True)
    s1, s10, m1, m10 = (results[k] for k in ("stream_1x", "stream_10x", "memory_1x",
                                             "memory_10x"))
    assert s10["rows"] == m10["rows"] and s10["accuracy"] == m10["accuracy"]
    error = max(abs(a - b) for label in m10["aucs"]
                for a, b in zip(s10["aucs"][label], m10["aucs"][label], strict=True))
    print(f"stream 10x AUC error bound {s10['auc_error_bound']}, actual max error {error:.2e}")
    print(f"stream_rows_per_s_10x={s10['rows_per_s']:.0f} "
          f"stream_speed_ratio_10x={s10['rows_per_s'] / m10['rows_per_s']:.3f} "
          f"stream_rss_ratio_10x={s10['peak_rss_mib'] / s1['peak_rss_mib']:.3f} "
          f"memory_rss_ratio_10x={m10['peak_rss_mib'] / m1['peak_rss_mib']:.3f} "
          f"stream_rss_vs_memory_10x={s10['peak_rss_mib'] / m10['peak_rss_mib']:.3f} "
          f"max_auc_error_10x={error:.2e}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        sys.path.insert(0, str(REPO))
        print(json.dumps(MEASUREMENTS[sys.argv[2]](*sys.argv[3:])))
    else:
        main()
