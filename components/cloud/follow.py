"""One follower for every paid job a step launches: create-or-attach, follow, stop, give up.

An engine (Vertex AI CustomJob, HyperparameterTuningJob, BatchPredictionJob, GKE JobSet)
describes its job through :class:`Remote`; :func:`follow` owns the rest, the same way for
all of them:

- **create-or-attach**: the job is found by a key derived from the pipeline run and task
  (a label or a name), so a retried step follows the job its earlier attempt created. A job
  that is still stopping (``JOB_STATE_CANCELLING``) is waited out before a replacement is
  made; one that failed or was cancelled is replaced. A create whose answer is lost or
  fails transiently is followed by a look-up before it is tried again, so no second job
  is ever made.
- **follow**: every call goes through the :class:`~.retry.RetryPolicy`; a transient error
  is retried, never a reason to stop the job.
- **ownership**: the follower stops (cancels or deletes) the job only when SIGTERM arrives
  (the run was cancelled) or when it finally gives up for a reason other than the job's own
  failure (retry budget spent, deadline, an error it cannot retry) — and then says so in
  one line, or says why it could not. A job that ended is left as it is.

Every ending is one :class:`Ending` exception with a one-line message; :func:`run_cli`
prints it without a traceback unless ``--debug`` or ``GKEFLOW_DEBUG`` asks for one.
"""

from __future__ import annotations

import enum
import os
import signal
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from gkeflow.components.cloud.retry import GaveUp as RetryGaveUp
from gkeflow.components.cloud.retry import (
    RetryPolicy,
    describe_error,
    format_duration,
    is_transient,
)


class Phase(enum.Enum):
    RUNNING = "running"        # queued, provisioning or running: follow it
    STOPPING = "stopping"      # being cancelled: not over yet, wait it out
    SUCCEEDED = "succeeded"
    FAILED = "failed"          # failed, cancelled or expired: replace it on a new attempt


@dataclass(frozen=True)
class Status:
    phase: Phase
    line: str             # what to print when it changes, e.g. "CustomJob .../1: JOB_STATE_RUNNING"
    error: str = ""       # the engine's own error message when it failed


class Ending(RuntimeError):
    """How a launcher ended, in one line (its ``exit_code`` is the step's)."""

    exit_code = 1


class JobFailed(Ending):
    """The job itself failed or was cancelled by someone else; the message carries why."""


class Cancelled(Ending):
    """SIGTERM: the run was cancelled; the job was stopped."""

    exit_code = 143


class GaveUp(Ending):
    """The launcher gave up (retry budget, deadline, an error it cannot retry); the job was
    stopped, or the message says why it could not be."""


class Remote(Protocol):
    """One job of one engine, as the follower sees it."""

    kind: str  # "CustomJob", "JobSet"...

    def find(self, timeout_s: float) -> Any | None:
        """The newest job carrying this step's key, in any state; None when there is none."""

    def create(self, timeout_s: float) -> Any:
        """Create the job (one call, no retry); returns it."""

    def status(self, job: Any) -> Status: ...

    def identity(self, job: Any) -> str:
        """What tells two jobs apart (a resource name, a uid)."""

    def name(self, job: Any) -> str:
        """The name people use for it in messages and consoles."""

    def next(self, job: Any, timeout_s: float) -> Any | None:
        """Wait up to one poll interval or watch window, then return the job as it is now;
        None when it no longer exists."""

    def stop(self, job: Any, timeout_s: float) -> None:
        """Cancel or delete the job (one call, no retry; already gone is fine)."""

    def clear(self, job: Any, timeout_s: float) -> None:
        """Make room for a replacement of ``job`` (ended); e.g. delete a same-named object."""

    def stop_hint(self, job: Any) -> str:
        """The command that stops the job by hand."""


class _SigTerm(BaseException):
    """SIGTERM arrived while following."""


def follow(remote: Remote, policy: RetryPolicy, *, echo: Callable[[str], None] = print,
           attached: Callable[[Any], None] | None = None, deadline_s: float | None = None,
           stopping_poll_s: float = 10.0, stop_budget_s: float = 25.0) -> Any:
    """Create or attach to the job, follow it to its end and return it (succeeded).

    Args:
        remote: The engine's job.
        policy: Retries every call.
        echo: One line per change of state, retry and ending.
        attached: Called once the job exists (e.g. to write ``gcp_resources``).
        deadline_s: Give up (and stop the job) when it has not ended by then.
        stopping_poll_s: How often a job that is still stopping is looked at.
        stop_budget_s: How long stopping the job is retried after SIGTERM (the pod's grace
            period is short; Kubernetes' default is 30 s).

    Raises:
        JobFailed, Cancelled, GaveUp: see :class:`Ending`.
    """
    started = policy.clock()
    launch = _Launch()

    def on_sigterm(signum, frame):
        raise _SigTerm()

    def retried(operation, what):
        return policy.call(operation, what, on_retry=echo)

    # Handle SIGTERM before creating anything, so a cancel never leaves a job running.
    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        launch.job = _create_or_attach(remote, policy, echo, retried, stopping_poll_s, launch)
        if attached is not None:
            attached(launch.job)
        last_line = ""
        while True:
            job = launch.job
            status = remote.status(job)
            if status.line != last_line:
                echo(status.line)
                last_line = status.line
            if status.phase is Phase.SUCCEEDED:
                return job
            if status.phase is Phase.FAILED:
                raise JobFailed(f"{remote.kind} {remote.name(job)} failed: "
                                f"{status.error or 'no error message'}")
            if deadline_s is not None and policy.clock() - started > deadline_s:
                raise TimeoutError(f"{remote.kind} {remote.name(job)} did not end within "
                                   f"the deadline of {format_duration(deadline_s)}")
            launch.job = retried(lambda job=job: remote.next(job, policy.call_timeout_s),
                                 f"following {remote.kind} {remote.name(job)}")
            if launch.job is None:
                raise JobFailed(f"{remote.kind} {remote.name(job)} was deleted by someone "
                                "else while it ran")
    except _SigTerm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one stop, even if SIGTERM repeats
        quick = policy.with_(budget_s=min(policy.budget_s, stop_budget_s))
        raise Cancelled(f"cancelled (SIGTERM); {_stop(remote, quick, launch, echo)}") from None
    except (JobFailed, Cancelled):
        raise
    except Exception as exc:
        reason = (str(exc) if isinstance(exc, (TimeoutError, RetryGaveUp))
                  else describe_error(exc))
        if "gave up" not in reason:
            reason = f"gave up: {reason}"
        raise GaveUp(f"{reason}; {_stop(remote, policy, launch, echo)}") from exc
    finally:
        signal.signal(signal.SIGTERM, previous)


@dataclass
class _Launch:
    """What the follower knows of its job: the job, the one it replaces, whether a create
    was sent (whose job may exist though its answer never came)."""

    job: Any = None
    replaced: str | None = None
    create_sent: bool = False


def _create_or_attach(remote, policy, echo, retried, stopping_poll_s, launch: _Launch):
    existing = retried(lambda: remote.find(policy.call_timeout_s),
                       f"looking for this step's {remote.kind}")
    while existing is not None and remote.status(existing).phase is Phase.STOPPING:
        echo(f"{remote.kind} {remote.name(existing)} from an earlier attempt is still stopping; "
             "waiting for it to end before starting a new one")
        policy.sleep(stopping_poll_s)
        current = existing
        existing = retried(lambda current=current: remote.next(current, policy.call_timeout_s),
                           f"reading {remote.kind} {remote.name(current)}")
    if existing is not None and remote.status(existing).phase is not Phase.FAILED:
        echo(f"re-attaching to {remote.kind} {remote.name(existing)}, created by an earlier "
             "attempt of this step")
        return existing
    if existing is not None:
        echo(f"{remote.kind} {remote.name(existing)} from an earlier attempt ended "
             f"{remote.status(existing).phase.value}; starting a new one")
        retried(lambda: remote.clear(existing, policy.call_timeout_s),
                f"clearing {remote.kind} {remote.name(existing)}")
    launch.replaced = remote.identity(existing) if existing is not None else None

    def create_or_find():
        launch.create_sent = True
        try:
            return remote.create(policy.call_timeout_s)
        except Exception as exc:
            if not is_transient(exc):
                raise
            # The create may have been carried out: look before trying again.
            found = _made_by_create(remote, policy, echo, launch)
            if found is not None:
                echo(f"the create's answer was lost ({describe_error(exc)}); "
                     f"found {remote.kind} {remote.name(found)}")
                return found
            raise

    job = retried(create_or_find, f"creating the {remote.kind}")
    echo(f"created {remote.kind} {remote.name(job)}")
    return job


def _made_by_create(remote, policy, echo, launch: _Launch):
    """The job this step's create made, if it made one (retried look-up by key)."""
    found = policy.call(lambda: remote.find(policy.call_timeout_s),
                        f"looking for the {remote.kind} a failed create may have made",
                        on_retry=echo)
    if found is not None and remote.identity(found) != launch.replaced:
        return found
    return None


def _stop(remote, policy, launch: _Launch, echo) -> str:
    """Stop the launch's job with retries; the words that say what happened."""
    job = launch.job
    if job is None and launch.create_sent:
        # A create was sent: its job may exist though no answer said so.
        try:
            job = _made_by_create(remote, policy, echo, launch)
        except Exception as exc:
            return (f"could not check whether the create made a {remote.kind} "
                    f"({describe_error(exc)}): look for one labelled for this step and "
                    "stop it by hand")
    if job is None:
        return f"no {remote.kind} had been created"
    try:
        status = remote.status(job)
        if status.phase in (Phase.SUCCEEDED, Phase.FAILED):
            return f"{remote.kind} {remote.name(job)} had already ended"
        policy.call(lambda: remote.stop(job, policy.call_timeout_s),
                    f"stopping {remote.kind} {remote.name(job)}", on_retry=echo)
    except Exception as exc:
        return (f"could not stop {remote.kind} {remote.name(job)} ({describe_error(exc)}): "
                f"stop it by hand: {remote.stop_hint(job)}")
    return f"stopped {remote.kind} {remote.name(job)}"


def debug_enabled(argv_flag: bool = False) -> bool:
    return argv_flag or os.environ.get("GKEFLOW_DEBUG", "").strip().lower() in {"1", "true", "yes"}


def run_cli(body: Callable[[], Any], debug: bool = False) -> int:
    """Run a launcher's body: 0 on success; one line on stderr and a non-zero code on an
    :class:`Ending` or any other error (with the traceback only when debugging)."""
    try:
        body()
    except Ending as exc:
        if debug_enabled(debug):
            traceback.print_exc()
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    except Exception as exc:
        if debug_enabled(debug):
            traceback.print_exc()
        print(f"error: {describe_error(exc)} (set GKEFLOW_DEBUG=1 for the traceback)",
              file=sys.stderr, flush=True)
        return 1
    return 0



def run_step(body: Callable[[], Any], debug: bool = False) -> Any:
    """Run a component's launcher body and return its value; on an ending or error print
    :func:`run_cli`'s one line and exit with its code (no traceback unless debugging)."""
    result = []
    code = run_cli(lambda: result.append(body()), debug=debug)
    if code:
        raise SystemExit(code)
    return result[0]
