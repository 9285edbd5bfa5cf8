"""`gkeflow run`'s steps as forks of one process that imported TensorFlow and Keras
(pipelines/targets/local_forks.py), through kfp.local for real: once the server has
imported them, each step is a fork of it, whose outputs, failures and logs kfp.local sees
as a fresh process's; the server ends with the run."""

import os
import tempfile
import time

from kfp import dsl

from gkeflow.pipelines.targets.local import run_local
from gkeflow.pipelines.targets.local_forks import forked_steps


@dsl.component(base_image="python:3.11", install_kfp_package=False)
def where(me: str) -> str:
    """Its parent process, and whether Keras was imported before it ran."""
    import os
    import sys

    print(f"{me} ran", flush=True)
    return f"{os.getppid()} {'keras' in sys.modules}"


@dsl.component(base_image="python:3.11", install_kfp_package=False)
def boost(upstream: str) -> str:
    """Trees with two OpenMP threads in a forked step (the server may have imported
    XGBoost before the fork)."""
    import os

    import numpy as np
    import xgboost as xgb

    x = np.arange(200, dtype=np.float32).reshape(100, 2)
    booster = xgb.train({"nthread": 2, "max_depth": 2}, xgb.DMatrix(x, label=x[:, 0] > 50),
                        num_boost_round=5)
    return f"{os.getppid()} {booster.num_boosted_rounds()}"


@dsl.component(base_image="python:3.11", install_kfp_package=False)
def broken(upstream: str) -> str:
    raise SystemExit(f"this step fails after {upstream.split()[0]}")


def test_steps_run_as_forks_of_the_server_once_it_has_imported_keras(tmp_path, monkeypatch):
    monkeypatch.setenv("GKEFLOW_LOCAL_FORKS", "1")

    @dsl.pipeline(name="forked")
    def pipeline():
        first = where(me="first")
        first.set_caching_options(False)
        trees = boost(upstream=first.output)
        trees.set_caching_options(False)
        failed = broken(upstream=trees.output)
        failed.set_caching_options(False)

    with forked_steps() as server:
        assert server is not None
        deadline = time.monotonic() + 120
        while not os.path.exists(server.address):  # the server answers once imported
            assert server.process.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        result = run_local({}, tmp_path / "out", pipeline=pipeline)
        steps = {step.name: step for step in result.steps}
        assert steps["where"].status == "SUCCESS"
        assert result.parameter_outputs("where")["Output"] == f"{server.process.pid} True"
        assert "first ran" in "\n".join(steps["where"].log)
        assert result.parameter_outputs("boost")["Output"] == f"{server.process.pid} 5"
        # a forked step's failure is the step's: its message, the run failed
        assert steps["broken"].status == "FAILURE" and not result.ok
        assert f"this step fails after {server.process.pid}" in "\n".join(
            steps["broken"].log)
    assert server.process.poll() is not None and not os.path.exists(server.folder)


def test_a_run_starts_its_own_server_and_leaves_none_behind(tmp_path, monkeypatch):
    monkeypatch.setenv("GKEFLOW_LOCAL_FORKS", "1")
    temporary = tempfile.gettempdir()
    before = {p for p in os.listdir(temporary) if p.startswith("gkeflow-forks-")}

    @dsl.pipeline(name="alone")
    def pipeline():
        where(me="alone").set_caching_options(False)

    result = run_local({}, tmp_path / "out", pipeline=pipeline)
    assert result.ok, result.error
    assert {p for p in os.listdir(temporary) if p.startswith("gkeflow-forks-")} == before
