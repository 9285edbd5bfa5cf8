"""Independent steps of a local run run side by side (pipelines/targets/local_parallel.py):
two steps that each wait for the other to have started both finish only when they run at
once; a step still waits for its inputs; a failed step stops its dependants, not the steps
beside it; each step's lines stay its own, "finished" lines included."""

import os

import pytest
from kfp import dsl

from gkeflow.pipelines.targets.local import run_local


@dsl.component(base_image="python:3.11", install_kfp_package=False)
def meet(folder: str, me: str, other: str, wait_s: float) -> str:
    """Say it started, then wait for ``other`` to have started too."""
    import os
    import time

    open(os.path.join(folder, me), "w").close()
    print(f"line of {me}", flush=True)
    print(f"{me}: wait policy {os.environ.get('OMP_WAIT_POLICY')}", flush=True)
    deadline = time.time() + wait_s
    while not os.path.exists(os.path.join(folder, other)):
        if time.time() > deadline:
            raise SystemExit(f"{me}: {other} did not start within {wait_s} s")
        time.sleep(0.05)
    print(f"{me} met {other}", flush=True)
    return me


@dsl.component(base_image="python:3.11", install_kfp_package=False)
def join(first: str, second: str, folder: str) -> str:
    """Runs after both: their outputs are its inputs."""
    import os

    assert os.path.exists(os.path.join(folder, first))
    assert os.path.exists(os.path.join(folder, second))
    return f"{first}+{second}"


@dsl.component(base_image="python:3.11", install_kfp_package=False)
def fail(folder: str) -> str:
    import os

    open(os.path.join(folder, "failed"), "w").close()
    raise SystemExit("this step fails")


@dsl.component(base_image="python:3.11", install_kfp_package=False)
def after_failure(upstream: str, folder: str) -> str:
    import os

    open(os.path.join(folder, "after-failure-ran"), "w").close()
    return upstream


@dsl.component(base_image="python:3.11", install_kfp_package=False)
def alone(folder: str) -> str:
    import os

    open(os.path.join(folder, "alone-ran"), "w").close()
    return "alone"


def _meeting(folder: str, wait_s: float):
    @dsl.pipeline(name="meeting")
    def pipeline():
        left = meet(folder=folder, me="left", other="right", wait_s=wait_s)
        left.set_caching_options(False)
        right = meet(folder=folder, me="right", other="left", wait_s=wait_s)
        right.set_caching_options(False)
        joined = join(first=left.output, second=right.output, folder=folder)
        joined.set_caching_options(False)
    return pipeline


def test_independent_steps_run_at_once_and_their_dependant_after_them(tmp_path, monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    folder = tmp_path / "markers"
    folder.mkdir()
    result = run_local({}, tmp_path / "out", pipeline=_meeting(str(folder), 60.0),
                       parallel_steps=2)
    assert result.ok, result.error
    steps = {step.name: step for step in result.steps}
    assert {name: step.status for name, step in steps.items()} == {
        "meet": "SUCCESS", "meet-2": "SUCCESS", "join": "SUCCESS"}
    assert steps["join"].started >= max(steps["meet"].finished, steps["meet-2"].finished)
    # each step's lines are its own, though both printed at once
    for name, me, other in (("meet", "left", "right"), ("meet-2", "right", "left")):
        log = "\n".join(steps[name].log)
        assert f"line of {me}" in log and f"{me} met {other}" in log
        assert f"line of {other}" not in log
        # side by side, OpenMP threads wait without spinning; the run's own setting returns
        assert f"{me}: wait policy PASSIVE" in log
    assert "OMP_WAIT_POLICY" not in os.environ


def test_one_at_a_time_the_same_steps_cannot_meet(tmp_path, monkeypatch):
    """The test above can fail: one step at a time, the first waits for the second alone."""
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # reaches the steps as it is
    folder = tmp_path / "markers"
    folder.mkdir()
    result = run_local({}, tmp_path / "out", pipeline=_meeting(str(folder), 1.0),
                       parallel_steps=1)
    assert not result.ok
    assert any("did not start within" in line for step in result.steps for line in step.log)
    assert any("wait policy ACTIVE" in line for step in result.steps for line in step.log)


def test_a_failed_step_stops_its_dependants_not_the_steps_beside_it(tmp_path):
    folder = tmp_path / "markers"
    folder.mkdir()

    @dsl.pipeline(name="one-fails")
    def pipeline():
        failed = fail(folder=str(folder))
        failed.set_caching_options(False)
        after = after_failure(upstream=failed.output, folder=str(folder))
        after.set_caching_options(False)
        beside = alone(folder=str(folder))
        beside.set_caching_options(False)

    import builtins
    import logging

    handlers = logging.getLogger().handlers[:]
    result = run_local({}, tmp_path / "out", pipeline=pipeline, parallel_steps=3)
    assert not result.ok
    # kfp.local's logging swaps, entered and left by two threads at once, are undone once
    assert builtins.print is print and logging.getLogger().handlers == handlers
    assert (folder / "failed").exists() and (folder / "alone-ran").exists()
    assert not (folder / "after-failure-ran").exists()
    assert {s.name: s.status for s in result.steps}["alone"] == "SUCCESS"


@pytest.mark.parametrize("value", ["0", "two", "-1"])
def test_a_bad_steps_setting_is_refused_before_the_run(tmp_path, monkeypatch, value):
    from gkeflow.pipelines.targets.local import LocalRunError

    monkeypatch.setenv("GKEFLOW_LOCAL_STEPS", value)
    with pytest.raises(LocalRunError, match="GKEFLOW_LOCAL_STEPS must be a whole number"):
        run_local({}, tmp_path / "out", pipeline=_meeting(str(tmp_path), 1.0))


def test_a_wait_policy_of_the_users_is_kept_side_by_side(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    folder = tmp_path / "markers"
    folder.mkdir()
    result = run_local({}, tmp_path / "out", pipeline=_meeting(str(folder), 60.0),
                       parallel_steps=2)
    assert result.ok, result.error
    logs = [line for step in result.steps for line in step.log]
    assert any("left: wait policy ACTIVE" in line for line in logs)
    assert any("right: wait policy ACTIVE" in line for line in logs)
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
