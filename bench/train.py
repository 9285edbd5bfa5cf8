"""Training throughput: `train`'s logic on prepared data vs bare `model.fit` on NumPy arrays.

Both train the same classifier (the built-in MLP over the same preprocessed features) with
the same batch size, epochs and validation split, in this process. `train` reads the
prepared TFRecord shards (parallel reads, parsing, preprocessing of whole batches,
prefetch) and, with `cache_dataset="auto"`, keeps the preprocessed batches in memory when
they fit; the baseline gets its features preprocessed once up front and held in memory
as NumPy arrays: the fastest a Keras `fit` can go. `fit_ratio` = steady-state examples/s
of `train` / of the baseline (median over epochs after the first, which includes tracing
and cache filling). Both `train` runs shuffle rows afresh every epoch (the default).

`sigterm_to_commit_s`: `train` runs in a child process with a checkpoint directory; after
its first checkpoint, a SIGTERM is sent in the middle of an epoch, and the parent times
how long until the new checkpoint's `state.json` is committed (and until the child exits,
with code 143 and a one-line message).

    python bench/train.py [--quick] [--rows N] [--epochs N]

With ``--workers N`` it measures scale-out instead: the same training through the scale-out
worker entrypoint as 1 process, then as N processes on loopback (MultiWorkerMirroredStrategy,
the TF_CONFIG construction GKE JobSets use), with the same batch size per worker; it prints
each run's steady-state examples/s (median over epochs after the first) and the scaling
efficiency = examples/s with N workers / (N x examples/s with 1).

    python bench/train.py --workers 2 [--quick] [--rows N] [--epochs N]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def synthetic_csv(path: Path, rows: int, seed: int = 0) -> Path:
    """10 numeric + 3 categorical columns and a 3-class label that depends on them."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({f"x{i}": rng.normal(size=rows).round(4) for i in range(10)})
    for i, size in enumerate((5, 20, 100)):
        frame[f"c{i}"] = [f"v{j}" for j in rng.integers(0, size, rows)]
    score = frame["x0"] + 0.5 * frame["x1"] - frame["x2"] * (frame["c0"] == "v1")
    frame["label"] = np.select([score < -0.5, score < 0.5], ["low", "mid"], "high")
    frame.to_csv(path, index=False)
    return path


SIGTERM_CHILD = """
import sys
from pathlib import Path
sys.path.insert(0, {repo!r})
from gkeflow.components.prepare.logic import Schema
from gkeflow.components.train.checkpoint import exit_on_preemption
from gkeflow.components.train.logic import TrainParams, train
data = Path({data!r})
params = TrainParams(epochs=50, batch_size={batch}, learning_rate=1e-3, early_stopping_patience=0)
with exit_on_preemption():
    train(data, Schema.load(data), Path({model!r}), params, checkpoint_dir={ckpt!r})
"""


def measure_sigterm(dataset: Path, work: Path, batch_size: int) -> dict:
    """Seconds from SIGTERM (mid-epoch, after the first checkpoint) to the committed
    checkpoint and to the process's exit."""
    ckpt = work / "ckpt"
    state_file = ckpt / "state.json"
    code = SIGTERM_CHILD.format(repo=str(Path(__file__).resolve().parent.parent),
                                data=str(dataset), batch=batch_size, model=str(work / "model"),
                                ckpt=str(ckpt))
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    first = None
    while first is None:
        if child.poll() is not None:
            raise SystemExit("training ended before its first checkpoint:\n"
                             + child.stderr.read()[-2000:])
        if state_file.exists():
            first = json.loads(state_file.read_text())
        time.sleep(0.01)
    epoch_started = time.perf_counter()
    time.sleep(0.6)  # into the next epoch
    while json.loads(state_file.read_text())["model_file"] != first["model_file"]:
        first = json.loads(state_file.read_text())  # an epoch ended meanwhile: go on
        time.sleep(0.3)
    sent = time.perf_counter()
    child.send_signal(signal.SIGTERM)
    committed = None
    while committed is None:
        try:
            if json.loads(state_file.read_text())["model_file"] != first["model_file"]:
                committed = time.perf_counter()
        except (OSError, ValueError):
            pass
        if committed is None and child.poll() is not None:
            break
        time.sleep(0.002)
    _, err = child.communicate(timeout=120)
    exited = time.perf_counter()
    lines = [line for line in err.splitlines() if "SIGTERM" in line]
    return {"sigterm_to_commit_s": (committed or exited) - sent,
            "sigterm_to_exit_s": exited - sent, "exit_code": child.returncode,
            "message": lines[-1] if lines else "", "traceback": "Traceback" in err,
            "signal_after_epoch_start_s": sent - epoch_started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20k rows, 3 epochs")
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=int, default=0,
                        help="Measure 1 vs N local workers (N >= 2) instead.")
    args = parser.parse_args()
    rows, epochs = (20_000, 3) if args.quick else (args.rows, args.epochs)
    if args.workers:
        bench_workers(rows, epochs, args.batch_size, args.workers)
        return

    import keras
    import tensorflow as tf

    from gkeflow.components.prepare.logic import Schema, prepare
    from gkeflow.components.prepare.reader import load_split
    from gkeflow.components.train.inputs import encode_labels, input_names, to_model_inputs
    from gkeflow.components.train.logic import TrainParams, throughput_callback, train
    from gkeflow.components.train.models import (
        build_builtin,
        build_preprocessor,
        feature_stats_from_prepared,
    )

    gpus = tf.config.list_physical_devices("GPU")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        started = time.perf_counter()
        prepare(str(synthetic_csv(tmp / "data.csv", rows)), tmp / "dataset", "label")
        schema = Schema.load(tmp / "dataset")
        print(f"rows={rows} epochs={epochs} batch={args.batch_size} gpus={len(gpus)} "
              f"(data ready in {time.perf_counter() - started:.1f}s)")

        def run_train(precision: str, cache: str = "auto") -> float:
            params = TrainParams(epochs=epochs, batch_size=args.batch_size, learning_rate=1e-3,
                                 early_stopping_patience=0, precision=precision,
                                 cache_dataset=cache)
            result = train(tmp / "dataset", schema, tmp / f"model-{precision}", params)
            return statistics.median(result.epoch_examples_per_s[1:] or
                                     result.epoch_examples_per_s)

        ours = run_train("float32")
        streaming = run_train("float32", cache="off")

        # Baseline: the same model on in-memory NumPy arrays of preprocessed features.
        keras.utils.set_random_seed(42)
        train_frame = load_split(tmp / "dataset", "train", schema)
        eval_frame = load_split(tmp / "dataset", "eval", schema)
        raw_train = to_model_inputs(train_frame, schema)
        stats = feature_stats_from_prepared(schema, tmp / "dataset")
        preprocessor = build_preprocessor(schema, stats, input_names(schema))
        x_train = preprocessor.predict(raw_train, batch_size=8192, verbose=0)
        x_eval = preprocessor.predict(to_model_inputs(eval_frame, schema), batch_size=8192,
                                      verbose=0)
        y_train, y_eval = encode_labels(train_frame, schema), encode_labels(eval_frame, schema)
        model = build_builtin("mlp", x_train.shape[1], len(schema.label_vocabulary),
                              (64, 32), 0.1, 42)
        model.compile(optimizer=keras.optimizers.Adam(1e-3),
                      loss="sparse_categorical_crossentropy", metrics=["accuracy"])
        throughput = throughput_callback(len(y_train))
        model.fit(x_train, y_train, validation_data=(x_eval, y_eval), epochs=epochs,
                  batch_size=args.batch_size, callbacks=[throughput], verbose=0)
        baseline = statistics.median(throughput.rates[1:] or throughput.rates)

        print(f"train (prepared shards, cache auto):   {ours:12.0f} examples/s")
        print(f"train (shards re-read every epoch):    {streaming:12.0f} examples/s "
              "(the rate for splits too large to cache)")
        print(f"bare model.fit (NumPy arrays in RAM):  {baseline:12.0f} examples/s")
        if gpus:
            mixed = run_train("auto")
            print(f"train, mixed precision (auto):         {mixed:12.0f} examples/s "
                  f"({mixed / ours:.2f}x float32)")
        preemption = measure_sigterm(tmp / "dataset", tmp / "sigterm", args.batch_size)
        print(f"SIGTERM: exit code {preemption['exit_code']}, traceback: "
              f"{preemption['traceback']}, exit after {preemption['sigterm_to_exit_s']:.2f}s; "
              f"message: {preemption['message']}")
        print(f"train_examples_per_s={ours:.1f} fit_ratio={ours / baseline:.3f} "
              f"sigterm_to_commit_s={preemption['sigterm_to_commit_s']:.3f}")


def bench_workers(rows: int, epochs: int, batch_size: int, workers: int) -> None:
    """1 worker process vs ``workers`` processes on loopback, same data and batch per worker."""
    import json
    import os
    import subprocess

    import tensorflow as tf

    from gkeflow.components.prepare.logic import prepare
    from gkeflow.components.scaleout import storage
    from gkeflow.components.scaleout.local_workers import run_local_workers

    if workers < 2:
        raise SystemExit("--workers must be >= 2")
    gpus = tf.config.list_physical_devices("GPU")
    params = {"epochs": epochs, "batch_size": batch_size, "learning_rate": 1e-3,
              "early_stopping_patience": 0}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        prepare(str(synthetic_csv(tmp / "data.csv", rows)), tmp / "dataset", "label")
        print(f"rows={rows} epochs={epochs} batch per worker={batch_size} gpus={len(gpus)} "
              f"cpus={os.cpu_count()}")
        started = time.perf_counter()
        env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
        single = subprocess.run(
            [sys.executable, "-m", "gkeflow.components.scaleout.worker", "--dataset",
             str(tmp / "dataset"), "--schema", str(tmp / "dataset"), "--output",
             str(tmp / "one"), "--params", json.dumps(params)],
            env={**env, "TF_CPP_MIN_LOG_LEVEL": "2"}, capture_output=True, text=True, check=False)
        if single.returncode:
            raise SystemExit(single.stdout[-3000:] + single.stderr[-3000:])
        one = storage.published_summary(str(tmp / "one"))
        one_wall = time.perf_counter() - started
        started = time.perf_counter()
        many, published = run_local_workers(str(tmp / "dataset"), str(tmp / "dataset"), params,
                                            workers, echo=lambda _: None)
        many_wall = time.perf_counter() - started

        def steady(summary: dict) -> float:
            rates = summary["epoch_examples_per_s"]
            return statistics.median(rates[1:] or rates)

        rate_one, rate_many = steady(one), steady(many)
        print(f"1 worker  ({one['strategy']}): {rate_one:10.0f} examples/s, "
              f"wall {one_wall:.1f}s")
        print(f"{workers} workers ({many['strategy']}): {rate_many:10.0f} examples/s, "
              f"wall {many_wall:.1f}s")
        print(f"examples_per_s_1={rate_one:.1f} examples_per_s_{workers}={rate_many:.1f} "
              f"speedup={rate_many / rate_one:.3f} "
              f"scaling_efficiency={rate_many / (workers * rate_one):.3f}")


if __name__ == "__main__":
    main()
