"""Keras on JAX against Keras on TensorFlow, fed by the same prepared TFRecord shards.

Both runs call `train` on the same prepared data (the synthetic 13-column set of
`bench/train.py`), same model, batch size, epochs and seed, each in its own process (Keras
reads its backend once). The input pipeline is the same tf.data pipeline on both; on JAX
Keras' dataset adapter hands its batches to JAX. `jax_ratio` = steady-state examples/s on
JAX / on TensorFlow (median over the epochs after the first, which includes tracing or
compilation and cache filling). `cache_dataset` is set both ways: `on` (preprocessed
batches in memory after epoch 1: mostly the step itself) and `off` (the shards read and
preprocessed every epoch: the input pipeline in the loop).

    python bench/jax_backend.py [--rows N] [--epochs N] [--batch-size N]

With ``--input`` it compares the JAX backend's two ways of being fed, in one process on
the same prepared rows, same model and batch: Keras' tf.data adapter over the shards (the
suite's pipeline, batches cached after epoch 1) against a Grain ``MapDataset`` over the
same rows read once and preprocessed up front (Grain reads no TFRecord shards: it needs a
random-access source). `grain_ratio` = Grain examples/s / tf.data examples/s. Needs
``pip install grain``.

    python bench/jax_backend.py --input [--rows N] [--epochs N] [--batch-size N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CHILD = """
import json, sys
from pathlib import Path
from gkeflow.components.prepare.logic import Schema
from gkeflow.components.train.logic import TrainParams, train
data, backend, epochs, batch, cache = sys.argv[1:6]
result = train(Path(data), Schema.load(Path(data)), Path(sys.argv[6]),
               TrainParams(epochs=int(epochs), batch_size=int(batch), backend=backend,
                           early_stopping_patience=0, cache_dataset=cache))
print("RESULT " + json.dumps({"rates": result.epoch_examples_per_s,
                              "strategy": result.strategy}))
"""


def run(data: Path, backend: str, epochs: int, batch: int, cache: str, out: Path) -> float:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run([sys.executable, "-c", CHILD, str(data), backend, str(epochs),
                           str(batch), cache, str(out)], capture_output=True, text=True,
                          env=env, check=False)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if done.returncode != 0 or line is None:
        raise SystemExit(f"{backend} run failed:\n{(done.stdout + done.stderr)[-3000:]}")
    rates = json.loads(line[len("RESULT "):])["rates"]
    return statistics.median(rates[1:]) if len(rates) > 1 else rates[0]


INPUT_CHILD = """
import json, statistics, sys, time
from pathlib import Path
from gkeflow.components.train.backend import select_backend
select_backend("jax")
import grain, keras, numpy as np
from gkeflow.components.prepare.logic import Schema
from gkeflow.components.prepare.reader import load_split
from gkeflow.components.train.inputs import (encode_labels, input_names, make_split_dataset,
                                             to_model_inputs)
from gkeflow.components.train.models import build_builtin, feature_stats_from_prepared
from gkeflow.components.train.tf_features import build_tf_preprocessor
data, epochs, batch = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
schema = Schema.load(data)
names = input_names(schema)
pre = build_tf_preprocessor(schema, feature_stats_from_prepared(schema, data), names)
frame = load_split(data, "train", schema)
x = np.asarray(pre(to_model_inputs(frame, schema)))
y = encode_labels(frame, schema)

class Rate(keras.callbacks.Callback):
    def __init__(self):
        super().__init__(); self.rates = []
    def on_epoch_begin(self, epoch, logs=None):
        self.t = time.perf_counter()
    def on_epoch_end(self, epoch, logs=None):
        self.rates.append(len(y) / (time.perf_counter() - self.t))

def fit(dataset):
    keras.utils.set_random_seed(0)
    model = build_builtin("mlp", x.shape[1], len(schema.label_vocabulary), (64, 32), 0.1, 0)
    model.compile("adam", "sparse_categorical_crossentropy", jit_compile=True)
    rate = Rate()
    model.fit(dataset, epochs=epochs, verbose=0, callbacks=[rate])
    return statistics.median(rate.rates[1:])

tfdata = make_split_dataset(data, "train", schema, batch, pre, seed=0, shuffle=True, cache=True)
grain_ds = (grain.MapDataset.range(len(y)).shuffle(seed=0).batch(batch)
            .map(lambda idx: (x[np.asarray(idx)], y[np.asarray(idx)])))
print("RESULT " + json.dumps({"tfdata": fit(tfdata), "grain": fit(grain_ds)}))
"""


def compare_inputs(data: Path, epochs: int, batch: int) -> dict:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run([sys.executable, "-c", INPUT_CHILD, str(data), str(epochs),
                           str(batch)], capture_output=True, text=True, env=env, check=False)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if done.returncode != 0 or line is None:
        raise SystemExit(f"input comparison failed:\n{(done.stdout + done.stderr)[-3000:]}")
    rates = json.loads(line[len("RESULT "):])
    return {"tfdata_examples_per_s": round(rates["tfdata"], 1),
            "grain_examples_per_s": round(rates["grain"], 1),
            "grain_ratio": round(rates["grain"] / rates["tfdata"], 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--input", action="store_true",
                        help="compare the JAX backend's tf.data adapter with Grain")
    args = parser.parse_args()

    from bench.train import synthetic_csv
    from gkeflow.components.prepare.logic import prepare

    with tempfile.TemporaryDirectory(prefix="gkeflow-bench-jax-") as tmp:
        tmp = Path(tmp)
        prepare(str(synthetic_csv(tmp / "data.csv", args.rows)), tmp / "dataset", "label")
        if args.input:
            figures = compare_inputs(tmp / "dataset", args.epochs, args.batch_size)
            print(" ".join(f"{k}={v}" for k, v in figures.items()))
            return
        figures = {}
        for cache in ("on", "off"):
            rates = {backend: run(tmp / "dataset", backend, args.epochs, args.batch_size,
                                  cache, tmp / f"model-{backend}-{cache}")
                     for backend in ("tensorflow", "jax")}
            figures[f"tf_examples_per_s_cache_{cache}"] = round(rates["tensorflow"], 1)
            figures[f"jax_examples_per_s_cache_{cache}"] = round(rates["jax"], 1)
            figures[f"jax_ratio_cache_{cache}"] = round(rates["jax"] / rates["tensorflow"], 3)
    print(" ".join(f"{k}={v}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
