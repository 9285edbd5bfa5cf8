"""The chief's log, followed incrementally into the launcher step's log.

Each look asks only for what is new: the log with timestamps since the second of the last
line printed (``sinceTime``, whole seconds, as Kubernetes accepts it), at most
:data:`LIMIT_BYTES` per read; lines already printed (timestamp before the last one, or
the same instant and already counted) are skipped. A long run's log is never downloaded
again: each read re-sends at most the lines of the second it starts from; a read cut by
``limitBytes`` resumes where it stopped.

Reading the log is best effort: a failed read (throttled, a server error, a reset
connection, a missing permission) is reported once, in one line, and tried again at the
next look; it never affects the JobSet.
"""

from __future__ import annotations

from collections.abc import Callable

from gkeflow.components.cloud.retry import describe_error, is_transient

#: Most bytes one read asks for; more (up to MAX_LIMIT_BYTES) only when the lines of a
#: single second are longer than that.
LIMIT_BYTES = 1 << 20
MAX_LIMIT_BYTES = 64 << 20


class ChiefLog:
    """Prints new lines of the chief pod's log, ``[pod] line``."""

    def __init__(self, api, namespace: str, name: str, replicated_job: str,
                 echo: Callable[[str], None], limit_bytes: int = LIMIT_BYTES):
        self.api, self.namespace, self.name = api, namespace, name
        self.replicated_job, self.echo, self.limit_bytes = replicated_job, echo, limit_bytes
        self.pod = ""
        self.last_stamp = ""    # RFC 3339 timestamp of the last line printed
        self.at_last_stamp = 0  # lines printed with exactly that timestamp
        self.tail_lines: list[str] = []
        self.failing = ""       # the error being reported, so it is said once
        self.reads = 0

    def poll(self, timeout_s: float) -> None:
        """Print what is new; never raises (except ``BaseException``: SIGTERM)."""
        try:
            self._poll(timeout_s)
            self.failing = ""
        except Exception as exc:
            problem = describe_error(exc)
            if problem != self.failing:
                hint = "; trying again at the next look" if is_transient(exc) else ""
                self.echo(f"could not read the chief's log ({problem}){hint}")
                self.failing = problem

    def _poll(self, timeout_s: float) -> None:
        if not self.pod:
            self.pod = self.api.chief_pod(self.namespace, self.name, self.replicated_job,
                                          timeout_s)
            if not self.pod:
                return
        limit = self.limit_bytes
        while True:
            since = self.last_stamp[:19] + "Z" if self.last_stamp else ""
            text = self.api.log_since(self.namespace, self.pod, since, limit, timeout_s)
            self.reads += 1
            cut = len(text.encode("utf-8")) >= limit
            lines = text.split("\n")
            if cut and len(lines) > 1:
                lines = lines[:-1]  # the last line may be cut in the middle
            printed = self._print(lines)
            if not cut:
                return
            if printed:
                limit = self.limit_bytes
            elif limit < MAX_LIMIT_BYTES:
                limit *= 2  # one second's lines fill the limit: read more of that second
            else:
                return

    def _print(self, lines: list[str]) -> int:
        printed, same = 0, 0  # same: lines of this read stamped like the last one printed
        for raw in lines:
            if not raw:
                continue
            stamp, _, line = raw.partition(" ")
            key, last = _instant(stamp), _instant(self.last_stamp)
            if self.last_stamp and key < last:
                continue
            if self.last_stamp and key == last:
                same += 1
                if same <= self.at_last_stamp:
                    continue  # printed by an earlier read
                self.at_last_stamp += 1
            else:
                self.last_stamp, self.at_last_stamp, same = stamp, 1, 1
            self.echo(f"[{self.pod}] {line}")
            self.tail_lines = (self.tail_lines + [line])[-20:]
            printed += 1
        return printed

    def tail(self, lines: int = 20) -> list[str]:
        """The last lines printed."""
        return self.tail_lines[-lines:]


def _instant(stamp: str) -> tuple[str, int]:
    """An RFC 3339 UTC timestamp as ``(seconds, nanoseconds)``, comparable whatever the
    number of fraction digits (Kubernetes trims trailing zeros)."""
    seconds, _, fraction = stamp.rstrip("Z").partition(".")
    digits = "".join(ch for ch in fraction if ch.isdigit())[:9]
    return seconds, int(digits.ljust(9, "0")) if digits else 0
