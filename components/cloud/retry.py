"""One retry policy for every remote call: exponential backoff with jitter on what is
transient (429, 500, 502, 503, 504, connection errors, timeouts), a timeout per call and a
total budget per operation.

A step that follows a GPU job for hours makes thousands of calls; some of them fail. The
policy retries such failures until ``budget_s`` has passed since the operation's first
call, then raises :class:`GaveUp` naming the operation, how long it tried and the last
error. Anything else (a 400, 403, 404...) is raised at once, unchanged.

Defaults (settable per launcher with ``--retry-budget`` / ``--call-timeout``, or
``GKEFLOW_RETRY_BUDGET_S`` / ``GKEFLOW_CALL_TIMEOUT_S``):

- ``call_timeout_s`` = 60: a call that has not answered by then is abandoned and retried;
- ``budget_s`` = 900: one operation is retried for at most 15 minutes;
- backoff 1 s, doubling to at most 60 s, each delay drawn between half and all of it.
"""

from __future__ import annotations

import http.client
import os
import random
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TypeVar

T = TypeVar("T")

_REQUEST_LINE = re.compile(r"^(?:\d{3} )?(?:GET|POST|PUT|PATCH|DELETE) \S+: ")

#: HTTP statuses worth another try.
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


class GaveUp(RuntimeError):
    """An operation kept failing transiently until the policy's budget was spent."""

    def __init__(self, what: str, elapsed_s: float, attempts: int, last: BaseException):
        self.what, self.elapsed_s, self.attempts, self.last = what, elapsed_s, attempts, last
        super().__init__(f"gave up {what} after {format_duration(elapsed_s)} "
                         f"({attempts} attempts): {describe_error(last)}")


def format_duration(seconds: float) -> str:
    """``75.2`` -> ``1m15s``; ``3.4`` -> ``3.4s``."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def status_of(exc: BaseException) -> int | None:
    """The HTTP status an exception carries, from any of the client libraries we use."""
    for attribute in ("code", "status", "status_code"):
        value = getattr(exc, attribute, None)
        if isinstance(value, int) and 100 <= value <= 599:
            return value
        code = getattr(value, "value", None)  # grpc/http enums
        if attribute == "code" and isinstance(code, int) and 100 <= code <= 599:
            return code
    response = getattr(exc, "response", None)
    value = getattr(response, "status_code", None)
    return value if isinstance(value, int) else None


def is_transient(exc: BaseException) -> bool:
    """True for failures that another try may not meet: throttling, server errors,
    dropped or refused connections, timeouts, streams cut short."""
    if isinstance(exc, (ConnectionError, TimeoutError, socket.timeout,
                        http.client.IncompleteRead, http.client.RemoteDisconnected)):
        return True
    status = status_of(exc)
    if status is not None:
        return status in TRANSIENT_STATUSES
    module = type(exc).__module__ or ""
    name = type(exc).__name__
    if module.startswith("requests") and name in {
            "ConnectionError", "Timeout", "ReadTimeout", "ConnectTimeout",
            "ChunkedEncodingError", "ContentDecodingError", "ProxyError", "SSLError"}:
        return True
    if module.startswith("urllib3") and name in {
            "ProtocolError", "ReadTimeoutError", "ConnectTimeoutError", "MaxRetryError",
            "NewConnectionError", "TimeoutError", "IncompleteRead", "InvalidChunkLength",
            "SSLError"}:
        return True
    if module.startswith("google.auth") and name in {"TransportError", "RefreshError"}:
        return "timed out" in str(exc).lower() or name == "TransportError"
    if module.startswith("google.api_core") and name in {
            "RetryError", "DeadlineExceeded", "ServiceUnavailable", "TooManyRequests",
            "InternalServerError", "BadGateway", "GatewayTimeout"}:
        return True
    if module.startswith("kubernetes") and name == "ApiException":
        return getattr(exc, "status", 0) in (0, None)  # no response at all
    if module.startswith("urllib") and name == "URLError":
        return True
    cause = exc.__cause__ or exc.__context__
    return cause is not None and cause is not exc and is_transient(cause)


_POOL = re.compile(r"HTTPS?ConnectionPool\(host='([^']*)', port=(\d+)\)")
_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\")\]]+)")


def _connection_problem(exc: BaseException) -> str | None:
    """``cannot connect to HOST:PORT: Connection refused`` for the client libraries'
    many-layered connection errors (urllib3 inside requests inside google-api-core)."""
    text = str(exc)
    pool = _POOL.search(text)
    if pool is None:
        return None
    where = f"{pool.group(1)}:{pool.group(2)}"
    if "Read timed out" in text:
        return f"{where} did not answer in time (read timeout)"
    if "timed out" in text:
        return f"cannot connect to {where}: timed out"
    reason = _ERRNO.search(text)
    if reason:
        return f"cannot connect to {where}: {reason.group(1).strip()}"
    if "NameResolution" in text or "Name or service not known" in text:
        return f"cannot connect to {where}: the name does not resolve"
    return f"cannot connect to {where}"


def describe_error(exc: BaseException) -> str:
    """One line for an error: its status and the first line of its message (for Google API
    errors, the service's message without the request line; for connection errors, the
    host and the reason)."""
    problem = _connection_problem(exc)
    if problem is not None:
        return f"{type(exc).__name__}: {problem}"
    message = getattr(exc, "message", None)
    raw = message if isinstance(message, str) and message.strip() else str(exc)
    text = raw.strip().splitlines()[0] if raw.strip() else ""
    text = _REQUEST_LINE.sub("", text)  # REST errors start with "POST https://...: "
    status = status_of(exc)
    head = type(exc).__name__ if status is None else f"HTTP {status}"
    return f"{head}: {text[:300]}" if text and text != str(status) else head


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise ValueError(f"{name}={raw!r} is not a number of seconds") from exc
    if value <= 0:
        raise ValueError(f"{name} must be positive; got {raw}")
    return value


@dataclass(frozen=True)
class RetryPolicy:
    """How every remote call is retried (see the module docstring for the defaults)."""

    call_timeout_s: float = 60.0
    budget_s: float = 900.0
    initial_s: float = 1.0
    maximum_s: float = 60.0
    multiplier: float = 2.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False, repr=False)
    clock: Callable[[], float] = field(default=time.monotonic, compare=False, repr=False)
    jitter: Callable[[float], float] = field(
        default=lambda delay: random.uniform(delay / 2, delay), compare=False, repr=False)

    def __post_init__(self):
        for name in ("call_timeout_s", "budget_s", "initial_s", "maximum_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"retry policy: {name} must be positive")
        if self.multiplier < 1:
            raise ValueError("retry policy: multiplier must be at least 1")

    @classmethod
    def from_env(cls, **overrides) -> RetryPolicy:
        """Defaults, then ``GKEFLOW_RETRY_BUDGET_S`` / ``GKEFLOW_CALL_TIMEOUT_S``, then
        ``overrides`` (None values ignored)."""
        settings = {"budget_s": _env_float("GKEFLOW_RETRY_BUDGET_S", cls.budget_s),
                    "call_timeout_s": _env_float("GKEFLOW_CALL_TIMEOUT_S",
                                                 cls.call_timeout_s)}
        settings.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**settings)

    def with_(self, **changes) -> RetryPolicy:
        return replace(self, **changes)

    def delays(self):
        """The waits between tries, before jitter: initial, doubled, capped."""
        delay = self.initial_s
        while True:
            yield delay
            delay = min(delay * self.multiplier, self.maximum_s)

    def call(self, operation: Callable[[], T], what: str,
             on_retry: Callable[[str], None] | None = None,
             transient: Callable[[BaseException], bool] = is_transient) -> T:
        """Run ``operation`` until it succeeds, fails for good, or the budget is spent.

        Args:
            operation: The call; it should pass :attr:`call_timeout_s` to its client.
            what: Words for messages, e.g. ``"reading CustomJob projects/p/.../123"``.
            on_retry: Told one line before each retry (``None``: silent).
            transient: Which failures to retry.

        Raises:
            GaveUp: transient failures until ``budget_s`` had passed.
            Exception: the first failure that is not transient, unchanged.
        """
        start = self.clock()
        attempts = 0
        for delay in self.delays():
            attempts += 1
            try:
                return operation()
            except Exception as exc:
                if not transient(exc):
                    raise
                elapsed = self.clock() - start
                wait = self.jitter(delay)
                if elapsed + wait > self.budget_s:
                    raise GaveUp(what, elapsed, attempts, exc) from exc
                if on_retry is not None:
                    on_retry(f"{what}: {describe_error(exc)}; retrying in {wait:.1f}s "
                             f"(attempt {attempts + 1})")
                self.sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover
