"""train-model's curves while it trains, against a real MLflow server: the run opens as
training starts, each epoch lands with its own timestamp (and the learning rate and the
host's CPU and memory as system metrics), and the run ends with the step's state."""

from __future__ import annotations

import math
import time

import pytest

from gkeflow.components.tracking.client import PARENT_TAG, TASK_TAG
from tests.integration.test_mlflow_more_steps import parent  # noqa: F401

pytest.importorskip("mlflow", reason="mlflow is not installed (pip install -e '.[dev]')")


def _train_run(mlflow_server, parent_run_id, task="train-model"):
    experiment_id = mlflow_server.run(parent_run_id)["info"]["experiment_id"]
    found = mlflow_server.search_runs(
        experiment_id, f"tags.`{PARENT_TAG}` = '{parent_run_id}' and tags.`{TASK_TAG}` = "
                       f"'{task}'")
    assert len(found) == 1, found
    return mlflow_server.run(found[0]["info"]["run_id"])


def test_each_epoch_is_logged_as_it_ends_with_its_own_time(parent, mlflow_server,  # noqa: F811
                                                           prepared_penguins, tmp_path):
    from gkeflow.components.tracking.live import live_curves
    from gkeflow.components.tracking.steps import start_training_run, track_training
    from gkeflow.components.train.logic import TrainParams, train

    dataset_dir, prepared = prepared_penguins
    params = TrainParams(epochs=5, early_stopping_patience=0)
    seen = {}

    def spy(sampler):
        # the run is open, with its parameters, before the first epoch ends
        run = _train_run(mlflow_server, parent)
        seen["before"] = (run["info"]["status"], run["params"].get("epochs"))
        return live_curves(tracker, sampler)

    started = int(time.time() * 1000)
    tracker = start_training_run(params)
    result = train(dataset_dir, prepared.schema, tmp_path / "model", params, live=spy)
    ended = int(time.time() * 1000)
    track_training(result, params, tmp_path / "model", tracker=tracker, live=True)

    assert seen["before"] == ("RUNNING", "5")
    run = _train_run(mlflow_server, parent)
    assert run["info"]["status"] == "FINISHED"
    points = mlflow_server.metric_points(run["info"]["run_id"], "loss")
    assert [step for step, _t, _v in points] == list(range(1, result.epochs_run + 1))
    stamps = [t for _s, t, _v in points]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)  # one per epoch end
    assert started <= stamps[0] and stamps[-1] <= ended
    assert [v for _s, _t, v in points] == pytest.approx(result.history["loss"])
    rates = mlflow_server.metric_points(run["info"]["run_id"], "learning_rate")
    # the optimizer's rate at each epoch's end: the cosine decay from learning_rate to 0
    steps = math.ceil(prepared.split_rows["train"] / params.batch_size)
    total = params.epochs * steps
    assert [v for _s, _t, v in rates] == pytest.approx(
        [params.learning_rate * 0.5 * (1 + math.cos(math.pi * epoch * steps / total))
         for epoch in range(1, len(points) + 1)], abs=1e-7)
    memory = mlflow_server.metric_points(run["info"]["run_id"],
                                         "system/system_memory_usage_megabytes")
    assert len(memory) == len(points) and all(v > 0 for _s, _t, v in memory)
    # the final figures are logged once, not a second copy of the curves
    assert run["metrics"]["epochs_run"] == result.epochs_run
    assert len(mlflow_server.metric_points(run["info"]["run_id"], "val_loss")) == len(points)


def test_a_failed_training_ends_its_run_failed_and_a_retry_reopens_it(parent, mlflow_server,  # noqa: F811
                                                                      tmp_path):
    from gkeflow.components.tracking.steps import start_training_run
    from gkeflow.components.train.logic import TrainParams

    tracker = start_training_run(TrainParams(epochs=3), task="train-model")
    tracker.log_metrics({"loss": 1.0}, step=1)
    tracker.finish("KILLED")  # as the step does when it is preempted
    first = _train_run(mlflow_server, parent)
    assert first["info"]["status"] == "KILLED"
    again = start_training_run(TrainParams(epochs=3), task="train-model")  # the retry
    assert again.run_id == first["info"]["run_id"]
    assert _train_run(mlflow_server, parent)["info"]["status"] == "RUNNING"
    again.finish("FAILED")
    assert _train_run(mlflow_server, parent)["info"]["status"] == "FAILED"
