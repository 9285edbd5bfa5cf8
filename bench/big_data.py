"""Benchmark of datasets bigger than a pod's disk: local disk, RSS, time to first batch, and
fan-out preparation throughput.

On the synthetic data of ``bench/prepare.py`` at N and 10 N rows (default N = 200k), with a
fake-gcs-server on loopback standing in for Cloud Storage (the real google-cloud-storage
client talks to it), each step in its own fresh process:

- ``prepare`` with the shards written to ``gs://`` (the shard root) vs. inside the dataset
  artifact (what the KFP launcher on GKE would upload and download whole): peak local disk
  of the step (its output directory and temporary files, sampled every 50 ms) and peak RSS;
- ``train`` (one epoch of the MLP) streaming the shards from ``gs://``: time from the step's
  start to the first batch, peak RSS, peak local disk; and, for the inline layout, the time
  the launcher would spend downloading the dataset before the step could start;
- ``fan-out``: the same 10 N rows as 8 files, prepared by one process vs. a plan, 8 group
  processes (2 at a time: the cores this machine has) and a merge.

The last line is::

    disk_ratio_10x=<f> rss_ratio_10x=<f> first_batch_in_order_s_1x=<f>
        first_batch_in_order_s_10x=<f> first_batch_s_1x=<f> first_batch_s_10x=<f>
        fanout_ratio=<f> fanout_work_ratio_8_pods=<f>

Usage: ``nice .venv/bin/python bench/big_data.py [--rows N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BUCKET = "bench"


class DiskPeak:
    """Peak bytes under some directories, sampled in a thread."""

    def __init__(self, *roots: Path, every_s: float = 0.05):
        self.roots = roots
        self.peak = 0
        self._stop = threading.Event()
        self._every = every_s
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _size(self) -> int:
        total = 0
        for root in self.roots:
            for dirpath, _, files in os.walk(root):
                for name in files:
                    try:
                        total += os.stat(os.path.join(dirpath, name)).st_size
                    except OSError:
                        pass
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._size())
            time.sleep(self._every)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._size())


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# --- the measurements, each run in a child process --------------------------------------------

def child_prepare(csv: str, out: str, shard_root: str) -> dict:
    from gkeflow.components.prepare.logic import prepare

    work = Path(out)
    work.mkdir(parents=True, exist_ok=True)
    os.environ["TMPDIR"] = str(work)
    started = time.perf_counter()
    with DiskPeak(work) as disk:
        result = prepare(csv, work / "dataset", "label", workers=1, shard_root=shard_root,
                         rows_per_shard=100_000)
    return {"rows": result.rows_read, "seconds": time.perf_counter() - started,
            "disk_mb": disk.peak / 2**20, "rss_mb": _rss_mb()}


def child_train(dataset: str, out: str) -> dict:
    started = time.perf_counter()
    import tensorflow  # noqa: F401  (imported before the clock: every TF step pays it)

    from gkeflow.components.prepare.logic import Schema
    from gkeflow.components.prepare.reader import make_tf_dataset
    from gkeflow.components.train.logic import TrainParams, train

    imported = time.perf_counter()
    schema = Schema.load(Path(dataset))
    next(iter(make_tf_dataset(Path(dataset), "train", schema, 1024)))
    in_order = time.perf_counter() - imported
    shuffled = time.perf_counter()
    # the shuffled reader first fills its buffer of up to 256 blocks (16,384 rows each)
    next(iter(make_tf_dataset(Path(dataset), "train", schema, 1024, shuffle_seed=1)))
    first_batch = time.perf_counter() - shuffled
    work = Path(out)
    work.mkdir(parents=True, exist_ok=True)
    with DiskPeak(work) as disk:
        result = train(Path(dataset), schema, work / "model",
                       TrainParams(epochs=1, batch_size=1024, early_stopping_patience=0,
                                   cache_dataset="off"))
    return {"import_s": imported - started, "first_batch_in_order_s": in_order,
            "first_batch_s": first_batch,
            "seconds": time.perf_counter() - started,
            "examples_per_s": result.examples_per_s, "disk_mb": disk.peak / 2**20,
            "rss_mb": _rss_mb()}


def child_download(dataset: str, out: str) -> dict:
    """What the KFP launcher does before a step whose input holds the shards: download all."""
    from gkeflow.components.prepare.sources import gcs_client

    client = gcs_client()
    started = time.perf_counter()
    total = 0
    for blob in client.list_blobs(BUCKET, prefix=dataset):
        target = Path(out) / blob.name
        target.parent.mkdir(parents=True, exist_ok=True)
        blob.download_to_filename(str(target))
        total += target.stat().st_size
    return {"seconds": time.perf_counter() - started, "mb": total / 2**20}


def child_fanout(pattern: str, out: str, groups: int, parallel: int) -> dict:
    from gkeflow.components.prepare import fanout

    work = Path(out)
    started = time.perf_counter()
    fanout.plan_groups(pattern, work / "plan", "label", groups, rows_per_shard=100_000,
                       shard_root=str(work / "shards"))
    planned = time.perf_counter()
    pending = list(range(groups))
    running: list[subprocess.Popen] = []
    work_s: list[float] = []  # each group's own preparation time (without process start)
    while pending or running:
        while pending and len(running) < parallel:
            group = pending.pop(0)
            running.append(subprocess.Popen([
                sys.executable, "-c",
                "import sys, time; from pathlib import Path; "
                "from gkeflow.components.prepare.fanout import prepare_group; "
                "t = time.perf_counter(); "
                "prepare_group(Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]), 1); "
                "print(time.perf_counter() - t)",
                str(work / "plan"), str(group), str(work / f"part-{group}")],
                stdout=subprocess.PIPE, text=True))
        for proc in list(running):
            if proc.poll() is not None:
                if proc.returncode:
                    raise RuntimeError(f"group process failed ({proc.returncode})")
                work_s.append(float(proc.stdout.read().strip()))
                running.remove(proc)
        time.sleep(0.02)
    grouped = time.perf_counter()
    result = fanout.merge_groups(work / "plan", [work / f"part-{g}" for g in range(groups)],
                                 work / "merged")
    done = time.perf_counter()
    return {"rows": result.rows_read, "seconds": done - started, "plan_s": planned - started,
            "groups_s": grouped - planned, "merge_s": done - grouped,
            "group_work_s_max": max(work_s), "group_work_s_sum": sum(work_s)}


def child_single(pattern: str, out: str) -> dict:
    from gkeflow.components.prepare.logic import prepare

    started = time.perf_counter()
    result = prepare(pattern, Path(out) / "dataset", "label", workers=1,
                     rows_per_shard=100_000, shard_root=str(Path(out) / "shards"))
    return {"rows": result.rows_read, "seconds": time.perf_counter() - started}


CHILDREN = {"prepare": child_prepare, "train": child_train, "download": child_download,
            "fanout": child_fanout, "single": child_single}


def _child(kind: str, *args) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", kind, *map(str, args)],
        check=True, capture_output=True, text=True, cwd=REPO,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _upload_dir(local: Path, prefix: str) -> None:
    from gkeflow.components.prepare.sources import gcs_client

    bucket = gcs_client().bucket(BUCKET)
    for path in sorted(local.rglob("*")):
        if path.is_file():
            bucket.blob(f"{prefix}/{path.relative_to(local)}").upload_from_filename(str(path))


def _split_csv(csv: Path, directory: Path, files: int) -> str:
    import pyarrow.csv as pacsv

    directory.mkdir(parents=True, exist_ok=True)
    table = pacsv.read_csv(csv)
    step = -(-table.num_rows // files)
    for k in range(files):
        pacsv.write_csv(table.slice(k * step, step), directory / f"part-{k:02d}.csv")
    return str(directory / "part-*.csv")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--child", nargs="+")
    args = parser.parse_args()
    if args.child:
        kind, *rest = args.child
        fn = CHILDREN[kind]
        if kind == "fanout":
            rest = [rest[0], rest[1], int(rest[2]), int(rest[3])]
        print(json.dumps(fn(*rest)))
        return

    sys.path.insert(0, str(REPO / "bench"))
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage
    from prepare import generate  # bench/prepare.py

    sys.path.insert(0, str(REPO))
    from tests.integration import gcs_server  # the server, its log drained

    server = gcs_server.start()
    try:
        storage.Client(project="local", credentials=AnonymousCredentials()).create_bucket(BUCKET)
        results = {}
        with tempfile.TemporaryDirectory(prefix="gkeflow-bench-big-") as tmp:
            tmp = Path(tmp)
            for scale in (1, 10):
                rows = args.rows * scale
                csv = tmp / f"data-{scale}x.csv"
                generate(csv, rows)
                streamed = _child("prepare", csv, tmp / f"prep-gcs-{scale}",
                                  f"gs://{BUCKET}/run-{scale}/_shards/dataset/attempt-1")
                inline = _child("prepare", csv, tmp / f"prep-inline-{scale}", "")
                _upload_dir(tmp / f"prep-inline-{scale}" / "dataset", f"inline-{scale}")
                staged = _child("download", f"inline-{scale}", tmp / f"staged-{scale}")
                trained = _child("train", tmp / f"prep-gcs-{scale}" / "dataset",
                                 tmp / f"train-{scale}")
                results[scale] = {"rows": rows, "prepare_gcs": streamed,
                                  "prepare_inline": inline, "staging_download": staged,
                                  "train_gcs": trained}
                print(f"{scale}x ({rows} rows): {json.dumps(results[scale])}", flush=True)
                csv.unlink()
            csv = tmp / "fanout.csv"
            generate(csv, args.rows * 10)
            pattern = _split_csv(csv, tmp / "fanout-in", 8)
            csv.unlink()
            single = _child("single", pattern, tmp / "single")
            fan = _child("fanout", pattern, tmp / "fanout", 8, 2)
            print(f"fan-out ({single['rows']} rows, 8 files): one process "
                  f"{json.dumps(single)}; 8 groups, 2 at a time {json.dumps(fan)}")
    finally:
        server.stop()
    one, ten = results[1], results[10]
    # one pod per group (8 pods): plan + the slowest group's own work + merge (no pod start)
    fan_work = fan["plan_s"] + fan["group_work_s_max"] + fan["merge_s"]
    disk_ratio = (ten["prepare_gcs"]["disk_mb"] + ten["train_gcs"]["disk_mb"]) / max(
        one["prepare_gcs"]["disk_mb"] + one["train_gcs"]["disk_mb"], 1e-9)
    rss_ratio = max(ten["prepare_gcs"]["rss_mb"], ten["train_gcs"]["rss_mb"]) / max(
        one["prepare_gcs"]["rss_mb"], one["train_gcs"]["rss_mb"])
    print(f"disk_ratio_10x={disk_ratio:.2f} rss_ratio_10x={rss_ratio:.2f} "
          f"first_batch_in_order_s_1x={one['train_gcs']['first_batch_in_order_s']:.2f} "
          f"first_batch_in_order_s_10x={ten['train_gcs']['first_batch_in_order_s']:.2f} "
          f"first_batch_s_1x={one['train_gcs']['first_batch_s']:.2f} "
          f"first_batch_s_10x={ten['train_gcs']['first_batch_s']:.2f} "
          f"fanout_ratio={single['seconds'] / fan['seconds']:.2f} "
          f"fanout_work_ratio_8_pods={single['seconds'] / fan_work:.2f}")


if __name__ == "__main__":
    main()
