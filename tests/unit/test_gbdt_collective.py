"""Who is who in XGBoost's collective: ranks, the tracker's address and each worker's rows,
from ``TF_CONFIG`` (the two-process training is tests/local/test_gbdt_two_workers.py)."""

from __future__ import annotations

import json

import pytest

from gkeflow.components.train.gbdt_collective import Collective, from_tf_config


def test_ranks_come_from_tf_config_chief_first():
    hosts = {"chief": ["a:1"], "worker": ["b:2", "c:3"]}
    ranks = [from_tf_config(json.dumps({"cluster": hosts, "task": task})) for task in (
        {"type": "chief", "index": 0}, {"type": "worker", "index": 0},
        {"type": "worker", "index": 1})]
    assert [c.rank for c in ranks] == [0, 1, 2] and {c.workers for c in ranks} == {3}
    assert (ranks[2].host, ranks[2].port) == ("a", 1) and ranks[0].chief
    assert from_tf_config("") is None
    assert from_tf_config(json.dumps({"cluster": {"worker": ["a:1"]},
                                      "task": {"type": "worker", "index": 0}})) is None
    assert list(range(10))[Collective(1, 3, "a", 1).share(10)] == [1, 4, 7]


@pytest.mark.parametrize("kind", ["chief", "worker"])
def test_one_worker_is_no_collective(kind):
    config = {"cluster": {kind: ["a:1"]}, "task": {"type": kind, "index": 0}}
    assert from_tf_config(json.dumps(config)) is None


def test_workers_sharing_a_machine_share_its_cores(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    local = {"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
             "task": {"type": "worker", "index": 1}}
    assert from_tf_config(json.dumps(local)).threads == 4
    apart = {"cluster": {"worker": ["pod-0.js:1", "pod-1.js:1"]},
             "task": {"type": "worker", "index": 1}}
    assert from_tf_config(json.dumps(apart)).threads == 0  # its own machine: every core


def test_the_scale_out_steps_hand_every_worker_parameter_train_params_takes():
    import dataclasses
    import inspect

    from gkeflow.components.scaleout.component import (
        train_model_jobset,
        train_model_local_workers,
    )
    from gkeflow.components.scaleout.results import WORKER_PARAMETERS
    from gkeflow.components.train.params import TrainParams

    assert set(WORKER_PARAMETERS) <= {f.name for f in dataclasses.fields(TrainParams)}
    for step in (train_model_local_workers, train_model_jobset):
        assert set(WORKER_PARAMETERS) <= set(inspect.signature(step.python_func).parameters)
