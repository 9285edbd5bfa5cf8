"""Benchmark of the data-preparation step against the common baseline and a bare CSV parse.

On synthetic data (10 numeric + 3 categorical columns + a label) at two sizes, N and 10 N
rows (default N = 1M), each measurement in its own fresh process (so peak RSS is its own):

- ``prepare``: the prepare_data logic, CSV -> validated, split GZIP TFRecord shards;
- ``baseline``: pandas ``read_csv``, then one ``tf.train.Example`` per row written with
  ``TFRecordWriter`` (on at most --baseline-rows rows: it is slow, and linear);
- ``parse``: ``pyarrow.csv.read_csv`` of the file alone, the practical upper limit;
- ``read``: the training input pipeline (``make_tf_dataset``, shuffled, batches of 1024)
  over the prepared train split, vs. ``TFRecordDataset`` + shuffle + batched
  ``tf.io.parse_example`` over the baseline's per-row Examples (best of 3 passes each).

Ratios compare figures measured in the same run. The last line is::

    prepare_rows_per_s=<f> baseline_ratio=<f> parse_ratio=<f> rss_ratio_10x=<f> read_ratio=<f>
    recovery_ratio=<f>

``recovery_ratio``: prepare's rows/s on the small file with one stray quote every 100,000
rows (each costs its own row, see ``components/prepare/csv_rows.py``) over its rows/s on
the intact file.

Usage: ``nice .venv/bin/python bench/prepare.py [--rows N]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NUMERIC, CATEGORICAL = 10, 3
READ_PASSES = 3


def generate(path: Path, rows: int, seed: int = 0) -> None:
    """Synthetic CSV, written in chunks (bounded memory)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pacsv

    rng = np.random.default_rng(seed)
    levels = [[f"c{j}_{k}" for k in range(n)] for j, n in enumerate((5, 20, 100))]
    labels = np.array(["alpha", "beta", "gamma"])
    chunk = 500_000
    with pacsv.CSVWriter(str(path), _schema(pa)) as writer:
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)
            data = {}
            for i in range(NUMERIC):
                values = np.round(rng.normal(i, 1 + i, n), 4)
                mask = rng.random(n) < 0.01
                data[f"num_{i}"] = pa.array(values, mask=mask)
            for j in range(CATEGORICAL):
                data[f"cat_{j}"] = pa.array(np.array(levels[j])[rng.integers(0, len(levels[j]), n)])
            score = data["num_0"].to_numpy(zero_copy_only=False) + rng.normal(0, 1, n)
            data["label"] = pa.array(labels[np.digitize(np.nan_to_num(score), [-0.5, 0.5])])
            writer.write_table(pa.table(data, schema=_schema(pa)))


def _schema(pa):
    fields = [pa.field(f"num_{i}", pa.float64()) for i in range(NUMERIC)]
    fields += [pa.field(f"cat_{j}", pa.string()) for j in range(CATEGORICAL)]
    return pa.schema(fields + [pa.field("label", pa.string())])


# --- the measurements, each run in a child process --------------------------------------------

def run_prepare(csv_path: str, out: str) -> dict:
    from gkeflow.components.prepare.logic import prepare

    started = time.perf_counter()
    result = prepare(csv_path, Path(out), "label")
    seconds = time.perf_counter() - started
    return {"rows": result.rows_read, "seconds": seconds, "split_rows": result.split_rows,
            "rejected": result.rejected_rows}


def run_damage(csv_path: str, out: str, every: int = 100_000) -> dict:
    """A copy of a generated CSV with one stray quote every ``every`` rows (a quoted value
    whose closing quote is missing), streamed line by line; ``rows``: how many."""
    damaged = 0
    started = time.perf_counter()
    with open(csv_path, "rb") as source, open(out, "wb") as target:
        for index, line in enumerate(source):
            if index and index % every == 0:
                first = line.find(b'",')
                if first > 0:
                    line = line[:first] + line[first + 1:]
                    damaged += 1
            target.write(line)
    return {"rows": damaged, "seconds": time.perf_counter() - started}


def run_parse(csv_path: str, _: str) -> dict:
    import pyarrow.csv as pacsv

    started = time.perf_counter()
    table = pacsv.read_csv(csv_path)
    return {"rows": table.num_rows, "seconds": time.perf_counter() - started}


def run_baseline(csv_path: str, out: str, limit: int) -> dict:
    import pandas as pd
    import tensorflow as tf

    started = time.perf_counter()
    frame = pd.read_csv(csv_path, nrows=limit)
    numeric = [c for c in frame.columns if c.startswith("num_")]
    text = [c for c in frame.columns if not c.startswith("num_")]
    with tf.io.TFRecordWriter(out, options="GZIP") as writer:
        for row in frame.itertuples(index=False):
            row = row._asdict()
            feature = {c: tf.train.Feature(float_list=tf.train.FloatList(value=[row[c]]))
                       for c in numeric}
            feature.update({c: tf.train.Feature(bytes_list=tf.train.BytesList(
                value=[str(row[c]).encode()])) for c in text})
            example = tf.train.Example(features=tf.train.Features(feature=feature))
            writer.write(example.SerializeToString())
    return {"rows": len(frame), "seconds": time.perf_counter() - started}


def run_read_fast(dataset_dir: str, _: str, batch_size: int = 1024) -> dict:
    from gkeflow.components.prepare.logic import Schema
    from gkeflow.components.prepare.reader import make_tf_dataset

    schema = Schema.load(Path(dataset_dir))
    dataset = make_tf_dataset(Path(dataset_dir), "train", schema, batch_size, shuffle_seed=1)
    return _best_of(dataset, READ_PASSES)


def run_read_examples(path: str, _: str, batch_size: int = 1024) -> dict:
    import tensorflow as tf

    spec = {f"num_{i}": tf.io.FixedLenFeature([], tf.float32) for i in range(NUMERIC)}
    spec.update({f"cat_{j}": tf.io.FixedLenFeature([], tf.string) for j in range(CATEGORICAL)})
    spec["label"] = tf.io.FixedLenFeature([], tf.string)
    dataset = (tf.data.TFRecordDataset(path, compression_type="GZIP")
               .shuffle(10_000, seed=1).batch(batch_size)
               .map(lambda x: tf.io.parse_example(x, spec), num_parallel_calls=tf.data.AUTOTUNE)
               .prefetch(tf.data.AUTOTUNE))
    return _best_of(dataset, READ_PASSES)


def _best_of(dataset, passes: int) -> dict:
    """The fastest of several full passes (the machine is shared; reads are cheap).

    The batches are consumed inside TensorFlow (``Dataset.reduce``), as ``model.fit``
    consumes them, so Python's per-batch iteration cost is not what gets measured.
    """
    import tensorflow as tf

    def count(n, batch):
        return n + tf.cast(tf.shape(batch["label"])[0], tf.int64)

    dataset.take(2).reduce(tf.constant(0, tf.int64), count)  # warm up
    best = None
    for _ in range(passes):
        started = time.perf_counter()
        rows = int(dataset.reduce(tf.constant(0, tf.int64), count))
        seconds = time.perf_counter() - started
        best = min(best or seconds, seconds)
    return {"rows": rows, "seconds": best}


MEASUREMENTS = {"prepare": run_prepare, "parse": run_parse, "baseline": run_baseline,
                "read_fast": run_read_fast, "read_examples": run_read_examples,
                "damage": run_damage}


def measure(name: str, *args) -> dict:
    """Run one measurement in a fresh process; add its peak RSS (MiB)."""
    from child import measure as measure_in_child

    return measure_in_child(__file__, name, *args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000,
                        help="small size N; the large size is 10 N (default 1M)")
    parser.add_argument("--baseline-rows", type=int, default=200_000,
                        help="rows the per-row Example baseline converts (default 200k)")
    parser.add_argument("--workdir", default=None, help="where data goes (default: a temp dir)")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        tmp = Path(tmp)
        results = {}
        for label, rows in (("small", args.rows), ("large", 10 * args.rows)):
            csv_path = tmp / f"data-{rows}.csv"
            started = time.perf_counter()
            generate(csv_path, rows)
            size = csv_path.stat().st_size / 2**20
            print(f"generated {rows} rows ({size:.0f} MiB) in {time.perf_counter() - started:.1f}s",
                  flush=True)
            out = tmp / f"prepared-{rows}"
            results[f"prepare_{label}"] = measure("prepare", csv_path, out)
            print(f"prepare {label}: {results[f'prepare_{label}']}", flush=True)
            if label == "small":  # the cost of recovering from broken quoting
                damaged_path = tmp / "damaged.csv"
                damaged = measure("damage", csv_path, damaged_path)["rows"]
                results["prepare_damaged"] = measure("prepare", damaged_path,
                                                     tmp / "prepared-damaged")
                assert results["prepare_damaged"]["rejected"] == damaged, results
                print(f"prepare with {damaged} stray quotes: {results['prepare_damaged']}",
                      flush=True)
                import shutil

                shutil.rmtree(tmp / "prepared-damaged")
                damaged_path.unlink()
            if label == "large":
                results["parse"] = measure("parse", csv_path, "-")
                print(f"parse: {results['parse']}", flush=True)
                baseline_out = tmp / "baseline.tfrecord.gz"
                results["baseline"] = measure("baseline", csv_path, baseline_out,
                                              min(args.baseline_rows, rows))
                print(f"baseline: {results['baseline']}", flush=True)
                results["read_fast"] = measure("read_fast", out / "", "-")
                print(f"read prepared split: {results['read_fast']}", flush=True)
                results["read_examples"] = measure("read_examples", baseline_out, "-")
                print(f"read per-row Examples: {results['read_examples']}", flush=True)
            else:
                import shutil

                shutil.rmtree(out)
            csv_path.unlink() if label == "small" else None
    prepare_rate = results["prepare_large"]["rows_per_s"]
    summary = {
        "prepare_rows_per_s": prepare_rate,
        "baseline_ratio": prepare_rate / results["baseline"]["rows_per_s"],
        "parse_ratio": prepare_rate / results["parse"]["rows_per_s"],
        "rss_ratio_10x": results["prepare_large"]["peak_rss_mib"]
        / results["prepare_small"]["peak_rss_mib"],
        "read_ratio": results["read_fast"]["rows_per_s"] / results["read_examples"]["rows_per_s"],
        "recovery_ratio": results["prepare_damaged"]["rows_per_s"]
        / results["prepare_small"]["rows_per_s"],
    }
    print("| measurement | rows | seconds | rows/s | peak RSS MiB |")
    print("|---|---|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | {r['rows']} | {r['seconds']:.2f} | {r['rows_per_s']:.0f} "
              f"| {r['peak_rss_mib']:.0f} |")
    print(" ".join(f"{k}={v:.3f}" if k != "prepare_rows_per_s" else f"{k}={v:.1f}"
                   for k, v in summary.items()))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        sys.path.insert(0, str(REPO))
        name, rest = sys.argv[2], sys.argv[3:]
        if name == "baseline":
            rest[2] = int(rest[2])
        print(json.dumps(MEASUREMENTS[name](*rest)), flush=True)
    else:
        main()
