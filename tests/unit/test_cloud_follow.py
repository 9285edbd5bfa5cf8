"""The shared retry policy and job follower, against an in-memory engine that fails the
way clouds do (the launchers' own tests drive them through real HTTP fakes)."""

from __future__ import annotations

import pytest

from gkeflow.components.cloud import follow as fl
from gkeflow.components.cloud.retry import GaveUp, RetryPolicy, is_transient


class Http(Exception):
    def __init__(self, code):
        super().__init__(f"status {code}")
        self.code = code


class Clock:
    def __init__(self):
        self.now = 0.0

    def sleep(self, s):
        self.now += s

    def __call__(self):
        return self.now


def policy(clock, budget=100.0):
    return RetryPolicy(budget_s=budget, sleep=clock.sleep, clock=clock, jitter=lambda d: d)


def test_transient_classification():
    assert is_transient(Http(503)) and is_transient(Http(429)) and is_transient(Http(504))
    assert not is_transient(Http(404)) and not is_transient(Http(403))
    assert is_transient(ConnectionResetError()) and is_transient(TimeoutError())
    assert not is_transient(ValueError("bad"))


def test_retries_until_success_and_backs_off():
    clock, calls = Clock(), []

    def flaky():
        calls.append(clock.now)
        if len(calls) < 4:
            raise Http(503)
        return "ok"

    assert policy(clock).call(flaky, "reading") == "ok"
    assert [b - a for a, b in zip(calls, calls[1:], strict=False)] == [1.0, 2.0, 4.0]


def test_gives_up_after_the_budget_with_one_line():
    clock = Clock()

    def down():
        raise Http(503)

    with pytest.raises(GaveUp) as info:
        policy(clock, budget=30).call(down, "reading job j")
    assert "gave up reading job j after" in str(info.value) and "HTTP 503" in str(info.value)
    assert clock.now <= 30


def test_non_transient_raised_at_once():
    clock = Clock()
    with pytest.raises(Http):
        policy(clock).call(lambda: (_ for _ in ()).throw(Http(403)), "x")
    assert clock.now == 0


class FakeEngine:
    """A job that runs for ``steps`` reads; faults injected per operation."""

    kind = "Job"

    def __init__(self, steps=3, faults=None, existing=None):
        self.steps, self.faults = steps, dict(faults or {})
        self.jobs: list[dict] = list(existing or [])
        self.stops = []

    def _fault(self, op):
        pending = self.faults.get(op) or []
        if pending:
            fault = pending.pop(0)
            if fault == "lost":
                return "lost"
            raise fault
        return None

    def find(self, timeout_s):
        self._fault("find")
        return self.jobs[-1] if self.jobs else None

    def create(self, timeout_s):
        job = {"id": len(self.jobs) + 1, "reads": 0, "state": "running"}
        if self._fault("create") == "lost":
            self.jobs.append(job)
            raise TimeoutError("read timed out")
        self.jobs.append(job)
        return job

    def status(self, job):
        phase = {"running": fl.Phase.RUNNING, "succeeded": fl.Phase.SUCCEEDED,
                 "failed": fl.Phase.FAILED, "stopping": fl.Phase.STOPPING}[job["state"]]
        return fl.Status(phase, f"job {job['id']}: {job['state']}", "boom")

    def identity(self, job):
        return str(job["id"])

    def name(self, job):
        return f"j{job['id']}"

    def next(self, job, timeout_s):
        self._fault("next")
        job["reads"] += 1
        if job["state"] == "stopping":
            job["state"] = "failed"
        elif job["reads"] >= self.steps and job["state"] == "running":
            job["state"] = "succeeded"
        return job

    def stop(self, job, timeout_s):
        self._fault("stop")
        self.stops.append(job["id"])
        job["state"] = "failed"

    def clear(self, job, timeout_s):
        pass

    def stop_hint(self, job):
        return f"cancel {job['id']}"


def test_lost_create_answer_attaches_to_the_job_it_made():
    clock, engine = Clock(), FakeEngine(faults={"create": ["lost"], "next": [Http(503)] * 3})
    job = fl.follow(engine, policy(clock), echo=lambda _: None)
    assert job["state"] == "succeeded" and len(engine.jobs) == 1 and engine.stops == []


def test_stopping_job_is_waited_out_then_replaced():
    clock = Clock()
    engine = FakeEngine(existing=[{"id": 1, "reads": 0, "state": "stopping"}])
    fl.follow(engine, policy(clock), echo=lambda _: None)
    assert [j["state"] for j in engine.jobs] == ["failed", "succeeded"]


def test_give_up_stops_the_job_and_says_so():
    clock, engine = Clock(), FakeEngine(steps=100, faults={"next": [Http(503)] * 100,
                                                          "stop": [Http(502)]})
    with pytest.raises(fl.GaveUp) as info:
        fl.follow(engine, policy(clock, budget=20), echo=lambda _: None)
    assert engine.stops == [1] and "stopped Job j1" in str(info.value)


def test_job_failure_is_reported_and_not_stopped():
    clock, engine = Clock(), FakeEngine()
    engine.jobs.append({"id": 1, "reads": 0, "state": "running"})
    engine.next = lambda job, t: {**job, "state": "failed"}
    with pytest.raises(fl.JobFailed, match="Job j1 failed: boom"):
        fl.follow(engine, policy(clock), echo=lambda _: None)
    assert engine.stops == []


def test_run_cli_prints_one_line(capsys):
    def body():
        raise fl.JobFailed("Job j1 failed: out of memory")

    assert fl.run_cli(body) == 1
    err = capsys.readouterr().err
    assert err.strip() == "error: Job j1 failed: out of memory"
