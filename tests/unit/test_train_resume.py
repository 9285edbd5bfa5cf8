"""Non-chief workers resume from the chief's commit and never write the shared store."""

from __future__ import annotations

import json
from dataclasses import asdict

import numpy as np
import pytest

from gkeflow.components.train.checkpoint import read_checkpoint
from gkeflow.components.train.resume import (
    ReadOnlyStore,
    ReadOnlyStoreError,
    WorkerStore,
    agree_on_checkpoint,
    broadcast_from_chief,
)
from gkeflow.components.train.store import LocalStore
from tests.unit.test_train_checkpoint import VAL_LOSSES, run_epochs


def snapshot(directory):
    return {p.relative_to(directory): p.read_bytes() for p in directory.rglob("*")
            if p.is_file()}


def test_a_read_only_view_reads_and_refuses_every_write(tmp_path):
    shared = LocalStore(tmp_path / "shared")
    run_epochs(shared, 1, epochs=2)
    before = snapshot(tmp_path / "shared")
    view = ReadOnlyStore(shared)
    state, _ = read_checkpoint(view)
    assert state.epochs_completed == 2 and view.exists(state.model_file)
    assert view.fetch(state.model_file, view.staging() / "m").is_file()
    source = tmp_path / "x"
    source.write_text("x")
    for write in (lambda: view.put(source, "x"), lambda: view.commit({}, None),
                  lambda: view.delete(state.model_file), view.remove_all):
        with pytest.raises(ReadOnlyStoreError, match="only the chief writes it"):
            write()
    assert snapshot(tmp_path / "shared") == before  # not even a staging directory


def test_a_worker_resumes_from_the_shared_commit_and_saves_privately(tmp_path):
    shared = LocalStore(tmp_path / "shared")
    run_epochs(shared, 1, epochs=3)
    before = snapshot(tmp_path / "shared")
    state, _ = read_checkpoint(shared)
    private = LocalStore(tmp_path / "private")
    worker = run_epochs(WorkerStore(private, ReadOnlyStore(shared)), 1, state, None)
    assert worker.state.epochs_completed == len(VAL_LOSSES)
    assert worker.state.history["val_loss"] == VAL_LOSSES
    assert snapshot(tmp_path / "shared") == before
    assert read_checkpoint(private)[0].epochs_completed == len(VAL_LOSSES)
    # best weights of the chief's commit (epoch 2) are read from the shared store
    state, _ = read_checkpoint(shared)
    assert state.best_epoch == 2
    resumed = run_epochs(WorkerStore(LocalStore(tmp_path / "p2"), ReadOnlyStore(shared)), 1,
                         state, None, epochs=3)
    resumed._best_seen = None
    assert resumed.restore_best()
    assert all(np.all(w == 2) for w in resumed.model.get_weights())


def test_a_worker_store_never_commits_to_the_shared_store(tmp_path):
    shared = LocalStore(tmp_path / "shared")
    with pytest.raises(ReadOnlyStoreError):
        run_epochs(ReadOnlyStore(shared), 1, epochs=1)
    assert not (tmp_path / "shared").exists()


def test_broadcast_and_agreement_on_a_single_worker_strategy(tmp_path):
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    payload = bytes(range(256)) + json.dumps({"epochs_completed": 7}).encode()
    assert broadcast_from_chief(strategy, payload, chief=True) == payload
    assert broadcast_from_chief(strategy, b"", chief=True) == b""
    assert broadcast_from_chief(strategy, payload, chief=False) == b""  # nobody sent it

    shared = LocalStore(tmp_path / "shared")
    assert agree_on_checkpoint(strategy, True, shared) is None
    run_epochs(shared, 1, epochs=2)
    state, token = agree_on_checkpoint(strategy, True, shared)
    assert state.epochs_completed == 2
    assert asdict(state) == asdict(read_checkpoint(shared)[0])
    assert np.isfinite(state.best_value)
