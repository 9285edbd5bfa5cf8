"""A short soak of each Vertex AI launcher: a job of two simulated hours followed with 20 s
polls while the fake injects 3 % random transient faults on every call (the full six-hour,
2 % run is ``bench/launchers.py``)."""

from __future__ import annotations

import pytest

from tests.integration.soak import LAUNCHERS, POLL_S, soak

HOURS = 2.0


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_long_job_with_random_faults_is_followed_to_its_end(launcher):
    result = soak(launcher, seed=LAUNCHERS.index(launcher) + 1, hours=HOURS, fault_rate=0.03)
    assert result["jobs_created"] == 1 and result["spurious_stops"] == 0
    assert result["violations"] == 0 and result["faults_injected"] >= 5
    assert result["simulated_s"] >= HOURS * 3600
    polls = HOURS * 3600 / POLL_S
    # one read per poll, plus one retry per fault and the few calls of the start
    assert result["soak_calls"] <= polls + 2 * result["faults_injected"] + 10
    # a fault costs at most a backoff and a timeout on top of a poll
    assert result["max_gap_s"] <= 3 * POLL_S + 60
