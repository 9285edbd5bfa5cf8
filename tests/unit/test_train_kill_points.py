"""Training killed right after any checkpoint commit, the last one included, is resumed by
the retried step, which exports the model with the best epoch's weights restored.

The kill is real: the training process ends itself (``os._exit``, no clean-up, as SIGKILL
would) the moment ``state.json`` of the chosen commit is written; the retry runs
:func:`train` on the same checkpoint location.
"""

from __future__ import annotations

import json

import pytest

from gkeflow.components.train.checkpoint import load_state
from gkeflow.components.train.exported import MODEL_METADATA_FILE, ExportedModel
from gkeflow.components.train.logic import TrainParams, train
from tests.unit.test_train_resilience import run_training

pytestmark = pytest.mark.slow

#: In the training process: die right after the commit that ``{condition}`` picks.
DIE_AFTER_COMMIT = """
import os
from gkeflow.components.train import store as _store
_commit, _commits = _store.LocalStore.commit, []
def _dying_commit(self, state, token):
    result = _commit(self, state, token)
    _commits.append(state)
    if {condition}:
        os._exit(137)
    return result
_store.LocalStore.commit = _dying_commit
"""

EPOCHS = 3
PARAMS = {"epochs": EPOCHS, "batch_size": 32, "early_stopping_patience": 0,
          "hidden_units": [16]}


def killed_after(dataset, model, ckpt, params, condition: str):
    code, out = run_training(dataset, model, ckpt, params,
                             setup=DIE_AFTER_COMMIT.format(condition=condition))
    assert code == 137, f"the run was not killed where it should have been:\n{out[-3000:]}"
    assert not model.exists(), "killed before export"
    return load_state(ckpt)


@pytest.mark.parametrize("commit", range(1, EPOCHS + 1))
def test_a_kill_after_any_commit_resumes_and_finishes(prepared_penguins, tmp_path, commit):
    dataset, prepared = prepared_penguins
    ckpt, model = tmp_path / "ckpt", tmp_path / "model"
    state = killed_after(dataset, model, ckpt, PARAMS, f"len(_commits) == {commit}")
    assert state.epochs_completed == commit

    result = train(dataset, prepared.schema, model, TrainParams(**{
        **PARAMS, "hidden_units": tuple(PARAMS["hidden_units"])}), checkpoint_dir=ckpt)
    assert result.resumed_from_epoch == commit
    assert result.epochs_run == EPOCHS
    assert result.best_epoch == state.best_epoch or commit < EPOCHS
    metadata = json.loads((model / MODEL_METADATA_FILE).read_text())
    assert metadata["restored_best_weights"] is True
    assert metadata["best_epoch"] == result.best_epoch
    assert ExportedModel(model).predict_rows([{"island": "Biscoe"}])
    assert not ckpt.exists(), "checkpoints are removed once the model is exported"


def test_a_kill_after_early_stopping_fired_exports_the_best_epoch(prepared_penguins,
                                                                  tmp_path):
    dataset, prepared = prepared_penguins
    ckpt, model = tmp_path / "ckpt", tmp_path / "model"
    params = {**PARAMS, "epochs": 60, "learning_rate": 0.05, "early_stopping_patience": 1}
    state = killed_after(dataset, model, ckpt, params, "state['stopped_early']")
    assert state.stopped_early and state.epochs_completed < 60
    assert state.best_epoch == state.epochs_completed - 1

    result = train(dataset, prepared.schema, model, TrainParams(**{
        **params, "hidden_units": tuple(params["hidden_units"])}), checkpoint_dir=ckpt)
    assert result.resumed_from_epoch == state.epochs_completed
    assert result.best_epoch == state.best_epoch
    metadata = json.loads((model / MODEL_METADATA_FILE).read_text())
    assert metadata["restored_best_weights"] is True
    # the exported metrics are the best epoch's, from the committed history
    assert result.metrics["eval_loss"] == state.history["val_loss"][state.best_epoch - 1]
    assert ExportedModel(model).predict_rows([{"island": "Dream"}])
