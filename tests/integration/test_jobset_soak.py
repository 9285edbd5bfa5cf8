"""A short soak of the JobSet launcher (``bench/soak_jobset.py`` runs six hours): a JobSet
followed for simulated hours while random transient faults hit every call, dropped streams
and 410s included. Followed to its end, exactly one JobSet, never deleted before it ended,
calls bounded by the number of watch windows."""

from __future__ import annotations

import pytest

from bench.soak_jobset import WINDOW_S, line, soak


@pytest.mark.parametrize(("seed", "hours", "fault_rate"), [(3, 0.5, 0.02), (5, 0.25, 0.2)])
def test_a_jobset_is_followed_to_its_end_through_random_faults(seed, hours, fault_rate):
    result = soak(seed=seed, hours=hours, fault_rate=fault_rate)
    assert result["followed_to_end"] and result["deleted_after_end"] == 1
    assert result["jobs_created"] == 1 and result["spurious_stops"] == 0
    assert result["faults_injected"] > 0
    windows = hours * 3600 / WINDOW_S
    # a watch and a log read per window, plus the retries the faults cost
    assert result["soak_calls"] <= 2 * windows + 4 * result["faults_injected"] + 20, result
    assert result["max_gap_s"] <= 10 * WINDOW_S + 120, result
    assert line(result).startswith(f"launcher=jobset soak_calls={result['soak_calls']} ")
    assert line(result).endswith("jobs_created=1 spurious_stops=0 "
                                 f"max_gap_s={result['max_gap_s']}")
