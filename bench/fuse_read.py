"""Reading a prepared dataset through a mounted bucket against reading it by reference.

Prepares one CSV twice: shards under ``gs://bench-shards/ref`` in fake-gcs-server (read by
reference: the streamed Cloud Storage download training uses for ``gs://`` shards) and
under ``gs://bench-shards/fuse`` with the bucket "mounted" at a local directory through
``GKEFLOW_GCS_MOUNTS`` (read as local files with TFRecordDataset, as training does on a
gcsfuse or /gcs mount). The local directory stands in for the mount: this measures gkeflow's
two read paths, not gcsfuse itself.

Usage: ``.venv/bin/python bench/fuse_read.py [--rows N] [--repeats R]``; prints
``fuse_read_rows_per_s``, ``ref_read_rows_per_s`` and ``fuse_read_ratio`` (rows of the
train split per second; each TFRecord frames a block of rows).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BUCKET = "bench-shards"


def write_csv(path: Path, rows: int) -> None:
    import palmerpenguins

    source = Path(palmerpenguins.__file__).parent / "data" / "penguins.csv"
    with source.open() as handle:
        lines = list(csv.reader(handle))
    header, body = lines[0], lines[1:]
    with path.open("w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(header)
        for i in range(rows):
            out.writerow(body[i % len(body)])


def read_split(files: list[str]) -> tuple[int, float]:
    """Records read from ``files`` as training reads them, and the seconds it took."""
    import tensorflow as tf

    from gkeflow.components.prepare.shard_store import record_dataset_fn

    started = time.perf_counter()
    dataset = tf.data.Dataset.from_tensor_slices(files).interleave(
        record_dataset_fn(files), cycle_length=2, num_parallel_calls=2)
    count = sum(1 for _ in dataset)
    return count, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from gkeflow.components.cloud.mounts import MOUNTS_ENV
    from gkeflow.components.prepare import shard_store
    from gkeflow.components.prepare.logic import prepare
    from tests.integration import gcs_server

    server = gcs_server.start()
    try:
        storage.Client(project="bench", credentials=AnonymousCredentials()).create_bucket(BUCKET)
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            data = tmp / "data.csv"
            write_csv(data, args.rows)
            os.environ.pop(MOUNTS_ENV, None)
            per_shard = max(1000, args.rows // 16)
            result = prepare(str(data), tmp / "ref", "species", rows_per_shard=per_shard,
                             shard_root=shard_store.resolve_shard_root(
                                 str(tmp / "ref"), f"gs://{BUCKET}/ref"))
            ref = shard_store.split_shards(tmp / "ref", "train", ".tfrecord.gz")
            os.environ[MOUNTS_ENV] = json.dumps({BUCKET: str(tmp / "mount")})
            prepare(str(data), tmp / "fuse", "species", rows_per_shard=per_shard,
                    shard_root=shard_store.resolve_shard_root(
                        str(tmp / "fuse"), f"gs://{BUCKET}/fuse"))
            fuse = shard_store.split_shards(tmp / "fuse", "train", ".tfrecord.gz")
            assert all(f.startswith(str(tmp / "mount")) for f in fuse)
            assert all(f.startswith("gs://") for f in ref)
            read_split(fuse[:1])  # TensorFlow's start-up outside the timings
            best = {"fuse": float("inf"), "ref": float("inf")}
            counts = {}
            for _ in range(args.repeats):  # alternate, best of each
                for name, files in (("ref", ref), ("fuse", fuse)):
                    counts[name], seconds = read_split(files)
                    best[name] = min(best[name], seconds)
            if counts["fuse"] != counts["ref"]:
                raise SystemExit(f"record counts differ: {counts}")
    finally:
        server.stop()
    rows = result.split_rows["train"]
    fuse_rate, ref_rate = rows / best["fuse"], rows / best["ref"]
    print(f"train_rows={rows} shards={len(fuse)} fuse_read_rows_per_s={fuse_rate:.1f} "
          f"ref_read_rows_per_s={ref_rate:.1f} fuse_read_ratio={fuse_rate / ref_rate:.3f}")


if __name__ == "__main__":
    main()
