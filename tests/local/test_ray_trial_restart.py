"""A Ray Tune trial whose worker dies (as on a reclaimed Spot node) is restarted by Tune
and resumes from its last committed checkpoint instead of starting over: the model is
built once, the trial still trains every epoch and is reported like any finished one."""

from __future__ import annotations

import json
import textwrap

import pytest

pytest.importorskip("ray", reason="Ray Tune is not installed (pip install -e '.[dev]')")
pytestmark = pytest.mark.slow

#: The trial's model (a user module): the first time it is built, a thread waits for the
#: trial's first committed checkpoint and then kills the worker process outright, once.
CRASHING_MODEL = textwrap.dedent("""
    import os, threading, time
    from pathlib import Path

    import keras

    def _kill_after_first_commit(state, marker):
        while not state.exists():
            time.sleep(0.05)
        marker.write_text("killed")
        os._exit(1)  # no cleanup, no report: the node is gone

    def build_model(schema, hparams):
        watch = Path(os.environ["CRASH_TEST_DIR"])
        with open(watch / "builds.txt", "a") as builds:
            builds.write("built\\n")
        marker = watch / "killed.txt"
        if not marker.exists():
            state = watch / "out" / "checkpoints" / "trial-000" / "state.json"
            threading.Thread(target=_kill_after_first_commit, args=(state, marker),
                             daemon=True).start()
        inputs = keras.Input(shape=(hparams["input_dim"],))
        hidden = keras.layers.Dense(8, activation="relu")(inputs)
        outputs = keras.layers.Dense(hparams["num_classes"], activation="softmax")(hidden)
        return keras.Model(inputs, outputs)
""")


def test_a_trial_whose_worker_died_resumes_from_its_checkpoint(prepared_penguins, tmp_path,
                                                               monkeypatch):
    from gkeflow.components.sweep.ray_settings import TuneSettings
    from gkeflow.components.sweep.ray_tune import run_tune

    (tmp_path / "crashing_model.py").write_text(CRASHING_MODEL)
    monkeypatch.setenv("CRASH_TEST_DIR", str(tmp_path))  # the Ray workers inherit it
    dataset_dir, prepared = prepared_penguins
    (tmp_path / "schema.json").write_text(prepared.schema.to_json())
    _, reports = run_tune(
        dataset_dir, tmp_path / "schema.json", [{"trial_id": "trial-000"}],
        {"epochs": 4, "early_stopping_patience": 0,
         "user_module": str(tmp_path / "crashing_model.py")},
        TuneSettings(scheduler="none", parallel_trials=1, trial_retries=1),
        tmp_path / "out", echo=lambda _: None)
    assert (tmp_path / "killed.txt").read_text() == "killed", "the worker died once"
    assert (tmp_path / "builds.txt").read_text() == "built\n", \
        "the restarted trial loaded its checkpoint: the model was not built again"
    [report] = [json.loads(r) for r in reports]
    assert report["status"] == "succeeded", report
    assert report["metrics"]["epochs_run"] == 4
    assert not (tmp_path / "out" / "checkpoints" / "trial-000" / "state.json").exists(), \
        "a finished trial removes its checkpoints"
