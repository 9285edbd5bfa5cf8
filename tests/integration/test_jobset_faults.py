"""The JobSet launcher against the faults a Kubernetes API serves every day: watch streams
cut mid-event, reset or hung; 410 Gone after a watch-cache restart (as a status and as an
ERROR event); 429/5xx, resets, lost answers and hung reads on GET, LIST, create, the pod
list and log reads; SIGTERM to a launcher process; a budget spent.

What must hold: the JobSet is followed to its end and deleted only after it ended (or on
SIGTERM, or on a final give-up that says so); exactly one JobSet is created; every retry
waits (backoff); a 410 costs one LIST, never a loop of reads; the chief's log is read
incrementally and printed exactly once.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gkeflow.components.cloud.follow import GaveUp
from gkeflow.components.scaleout.chief_log import ChiefLog
from gkeflow.components.scaleout.jobset_launcher import launch
from tests.integration.fake_kube import FakeKube, KubeFaults, _stamp
from tests.integration.kube_helpers import (
    CHIEF,
    NAME,
    NS,
    SUMMARY,
    Waits,
    api_for,
    fast_policy,
    manifest,
    publisher,
)

ROOT = Path(__file__).resolve().parents[2]


def run(kube, output, waits=None, window_s=0.05, lines=None, **policy):
    echo = lines.append if lines is not None else (lambda _: None)
    return launch(api_for(kube), manifest(), str(output), policy=fast_policy(waits, **policy),
                  window_s=window_s, echo=echo)


def chief_lines(lines: list[str]) -> list[str]:
    return [line[len(f"[{CHIEF}] "):] for line in lines if line.startswith(f"[{CHIEF}] ")]


def test_dropped_streams_are_watched_again_from_the_last_version(tmp_path):
    output, waits, lines = tmp_path / "model", Waits(), []
    faults = (KubeFaults().script("cut", times=3, resource="watch")
              .script("reset", resource="watch").script("503", resource="watch")
              .script("error_event", resource="watch").script("truncate", resource="watch"))
    with FakeKube(running_looks=4, on_complete=publisher(tmp_path, str(output)),
                  faults=faults) as kube:
        assert run(kube, output, waits, lines=lines) == SUMMARY
        full_log = kube.log_text(NS, CHIEF).splitlines()
    assert faults.injected == {"cut": 3, "reset": 1, "503": 1, "error_event": 1,
                               "truncate": 1}
    versions = [int(query["resourceVersion"]) for method, _, query in kube.requests
                if query.get("watch")]
    assert versions[:8] == [versions[0]] * 8, "each broken watch is resumed where it was"
    assert versions == sorted(versions)
    assert kube.count("GET", "jobset") == 1 and kube.count("GET", "list") == 0
    assert waits[:7] == [0.01, 0.02, 0.04, 0.08, 0.16, 0.16, 0.16], "every retry backs off"
    assert len(kube.created) == 1 and kube.deleted_states == ["Completed"]
    assert chief_lines(lines) == full_log


@pytest.mark.parametrize("gone_as", ["event", "status"])
def test_a_watch_cache_restart_costs_one_list_not_a_loop_of_reads(tmp_path, gone_as):
    """Every version up to now is too old, though the JobSet has not changed: a GET would
    return its old version and 410 again; the LIST's version is watchable."""
    output, waits, lines = tmp_path / "model", Waits(), []
    with FakeKube(running_looks=3, on_complete=publisher(tmp_path, str(output)),
                  gone_as=gone_as) as kube:
        kube.add_jobset(manifest())  # an earlier attempt's, followed from its old version
        kube.compact()
        assert run(kube, output, waits, lines=lines) == SUMMARY
    first, second = kube.watches[:2]
    assert int(first["resourceVersion"]) < kube.compacted <= int(second["resourceVersion"])
    assert kube.count("GET", "list") == 1, "one LIST after the 410"
    assert kube.count("GET", "jobset") == 1, "no GET loop (the one GET is the look-up)"
    assert waits[0] == 0.01, "the LIST came after a backoff"
    assert sum("410 Gone" in line or "too old" in line for line in lines) == 1
    assert kube.deleted_states == ["Completed"]


def test_410s_in_a_row_back_off_exponentially_and_calls_stay_bounded(tmp_path):
    output, waits = tmp_path / "model", Waits()
    with FakeKube(running_looks=2, on_complete=publisher(tmp_path, str(output)),
                  gone_watches=5) as kube:
        assert run(kube, output, waits) == SUMMARY
    assert waits[:5] == [0.01, 0.02, 0.04, 0.08, 0.16]
    assert kube.count("GET", "list") == 5  # one per 410, each followed by one watch
    assert kube.count("GET", "jobset") == 1
    assert len(kube.watches) <= 5 + 4  # the five answered 410, then a few to completion


def test_transient_errors_on_every_kind_of_call_never_delete_a_running_jobset(tmp_path):
    output, waits, lines = tmp_path / "model", Waits(), []
    faults = (KubeFaults(hang_s=1.0)
              .script("503", times=2, resource="serviceaccount")
              .script("429", resource="jobset", method="GET")
              .script("hang", resource="jobset", method="GET")
              .script("lost", resource="jobset", method="POST")
              .script("gone_event", resource="watch")
              .script("500", times=2, resource="list")
              .script("502", resource="pods")
              .script("503", resource="log")
              .script("504", resource="watch"))
    with FakeKube(running_looks=4, on_complete=publisher(tmp_path, str(output)),
                  faults=faults) as kube:
        assert run(kube, output, waits, lines=lines, call_timeout_s=0.3) == SUMMARY
        full_log = kube.log_text(NS, CHIEF).splitlines()
    assert faults.unused() == [] and faults.total == 11
    assert len(kube.created) == 1, "the lost create was found, not repeated"
    assert kube.count("POST", "jobset") == 1
    assert kube.deleted_states == ["Completed"], "deleted once, after it completed"
    assert any("the create's answer was lost" in line for line in lines)
    assert chief_lines(lines) == full_log, "every log line once, in order, despite faults"
    assert sum(line.startswith("could not read the chief's log") for line in lines) <= 2
    assert len(waits) >= 8  # log reads are retried at the next look instead


def test_hung_watches_are_abandoned_and_resumed(tmp_path):
    output, waits = tmp_path / "model", Waits()
    faults = KubeFaults(hang_s=2.0).script("hang", times=2, resource="watch")
    with FakeKube(running_looks=3, on_complete=publisher(tmp_path, str(output)),
                  faults=faults) as kube:
        started = time.monotonic()
        assert run(kube, output, waits, window_s=1, call_timeout_s=0.2) == SUMMARY
    assert faults.injected == {"hang": 2}
    assert time.monotonic() - started < 20
    versions = [int(w["resourceVersion"]) for w in kube.watches]
    assert versions[0] == versions[1] == versions[2]
    assert kube.deleted_states == ["Completed"]


def test_a_budget_spent_gives_up_in_one_line_and_says_the_jobset_was_deleted(tmp_path):
    faults = KubeFaults().script("503", times=10_000, resource="watch")
    with FakeKube(outcome="Running", faults=faults) as kube:
        with pytest.raises(GaveUp) as gave_up:
            run(kube, tmp_path / "m", budget_s=0.5)
    message = str(gave_up.value)
    assert "\n" not in message
    assert message.startswith(f"gave up following JobSet {NAME} after ")
    assert "HTTP 503" in message and message.endswith(f"stopped JobSet {NAME}")
    assert kube.deleted_states == ["Running"]


def test_the_chiefs_log_is_read_incrementally_never_downloaded_again():
    seconds = itertools.count(0, 1.5)  # a log line every 1.5 s of the chief's clock
    with FakeKube(outcome="Running", log_time=lambda: next(seconds)) as kube:
        kube.add_jobset(manifest())
        printed: list[str] = []
        log = ChiefLog(api_for(kube), NS, NAME, "worker", printed.append)
        for look in range(40):
            kube.logs[(NS, CHIEF)].append((next(seconds), f"step {look} " + "x" * look))
            log.poll(1.0)
        full = kube.log_text(NS, CHIEF)
        stamped = [len(f"{_stamp(at)} {line}\n") for at, line in kube.logs[(NS, CHIEF)]]
    assert chief_lines(printed) == full.splitlines()
    assert len(kube.log_bytes) == 40
    # each read sends the last line printed again (same second) and the new one, no more
    assert kube.log_bytes[1:] == [stamped[i] + stamped[i + 1] for i in range(1, 40)]
    assert sum(kube.log_bytes) < 2 * sum(stamped)


def test_the_whole_chiefs_log_reaches_the_step_once_over_many_windows(tmp_path):
    output, lines = tmp_path / "model", []
    with FakeKube(running_looks=40, on_complete=publisher(tmp_path, str(output)),
                  tick_s=0.02, end_stream_after=1) as kube:
        assert run(kube, output, lines=lines) == SUMMARY
        full = kube.log_text(NS, CHIEF)
    assert len(kube.log_bytes) >= 2
    assert chief_lines(lines) == full.splitlines()


def test_failed_log_reads_are_said_once_and_lose_no_line():
    faults = (KubeFaults(hang_s=0.6).script("502", times=2, resource="pods")
              .script("reset", resource="pods").script("503", times=3, resource="log")
              .script("hang", resource="log").script("403", resource="log"))
    with FakeKube(outcome="Running", faults=faults, log_time=lambda: 0.0) as kube:
        kube.add_jobset(manifest())
        printed: list[str] = []
        log = ChiefLog(api_for(kube), NS, NAME, "worker", printed.append)
        for look in range(12):
            kube.logs[(NS, CHIEF)].append((look + 0.5, f"step {look}"))
            log.poll(0.3)
        full = kube.log_text(NS, CHIEF)
    assert faults.unused() == [] and faults.total == 8
    assert chief_lines(printed) == full.splitlines()
    problems = [line for line in printed if line.startswith("could not read")]
    assert problems == [
        "could not read the chief's log (HTTP 502: injected 502); trying again at the next "
        "look",
        "could not read the chief's log (ProtocolError: ('Connection aborted.', "
        "RemoteDisconnected('Remote end closed connection without response'))); trying "
        "again at the next look",
        "could not read the chief's log (HTTP 503: injected 503); trying again at the next "
        "look",
        problems[3],  # the hung read: a read timeout
        "could not read the chief's log (HTTP 403: injected 403)"], problems
    assert "did not answer in time (read timeout)" in problems[3]


def test_a_log_read_cut_by_limit_bytes_resumes_where_it_stopped():
    with FakeKube(outcome="Running", log_time=lambda: 0.25) as kube:
        kube.add_jobset(manifest())
        for i in range(50):  # fifty lines stamped with the same instant
            kube.logs[(NS, CHIEF)].append((0.25, f"line {i:02d} " + "x" * 20))
        printed: list[str] = []
        log = ChiefLog(api_for(kube), NS, NAME, "worker", printed.append, limit_bytes=200)
        kube.log_bytes.clear()
        log.poll(1.0)
        log.poll(1.0)  # nothing new: nothing printed again
        kube.logs[(NS, CHIEF)].append((1.75, "the next second"))
        log.poll(1.0)
    assert chief_lines(printed) == kube.log_text(NS, CHIEF).splitlines()
    assert max(kube.log_bytes) <= 3200  # the limit doubled until the second's lines fit


LAUNCHER = """
import sys
sys.path.insert(0, {root!r})
from gkeflow.components.cloud.follow import run_cli
from gkeflow.components.scaleout.jobset_launcher import launch
from tests.integration.kube_helpers import api_for, fast_policy, manifest

class Kube:
    url = sys.argv[1]

sys.exit(run_cli(lambda: launch(api_for(Kube), manifest(), sys.argv[2], window_s=0.05,
                                policy=fast_policy(budget_s=5.0),
                                echo=lambda line: print(line, flush=True))))
"""


def launcher_process(kube, tmp_path):
    return subprocess.Popen(
        [sys.executable, "-c", LAUNCHER.format(root=str(ROOT)), kube.url,
         str(tmp_path / "model")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "GKEFLOW_DEBUG": ""})


def test_sigterm_to_a_launcher_process_deletes_the_jobset_in_one_line(tmp_path):
    with FakeKube(outcome="Running") as kube:
        process = launcher_process(kube, tmp_path)
        try:
            for line in process.stdout:
                if line.startswith(f"JobSet {NAME} Running"):
                    break
            process.send_signal(signal.SIGTERM)
            out, err = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
    assert process.returncode == 143, err
    assert err == f"error: cancelled (SIGTERM); stopped JobSet {NAME}\n"
    assert kube.deleted_states == ["Running"] and not kube.jobsets


@pytest.mark.parametrize(("outcome", "expected"), [
    ("Failed", f"error: JobSet {NAME} failed: worker-0 exited with code 1\n"),
    ("deleted", f"error: JobSet {NAME} was deleted by someone else while it ran\n"),
])
def test_failure_and_external_deletion_end_a_launcher_process_in_one_line(tmp_path, outcome,
                                                                          expected):
    running = outcome == "deleted"
    with FakeKube(running_looks=3, outcome="Running" if running else outcome,
                  message="worker-0 exited with code 1") as kube:
        process = launcher_process(kube, tmp_path)
        try:
            if running:
                for line in process.stdout:
                    if line.startswith(f"JobSet {NAME} Running"):
                        break
                kube.delete_externally(NS, NAME)
            out, err = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
    assert process.returncode == 1, err
    assert err == expected and "Traceback" not in out
