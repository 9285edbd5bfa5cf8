"""Calls to remote APIs (Kubeflow Pipelines, Vertex AI): retries, timeouts, clear errors.

Every remote call goes through :func:`call`: connection errors and 5xx answers are retried
with exponential backoff (plus jitter); a timeout is retried only for calls that are safe to
repeat; a 4xx answer is raised at once as :class:`RemoteError` carrying the server's own
message, and so is a host name that does not resolve (a wrong name stays wrong). Secrets
never appear in messages: :func:`redact` removes known tokens.

Bounded: each attempt is one HTTP request with the policy's timeout (the client libraries'
own retries are turned off by the backends), so one call takes at most
:func:`max_total_s`: ``attempts x timeout_s`` plus the backoff between attempts.

Idempotent creates: a create passes ``recover``, which looks up the resource by the name or
request id the client chose. It runs before every retry, after the last failure and on a 409
Conflict: when an earlier attempt did reach the server, the existing resource is returned
instead of a second one being made. A timed-out create is looked up but not retried: the
server may still be working on it, and a retry could race it. Look-ups share the call's
time budget: no request (create or look-up) starts unless a whole timeout still fits in
:func:`max_total_s`.
"""

from __future__ import annotations

import json
import logging
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")

_SECRETS: set[str] = set()


def register_secret(value: str | None) -> None:
    """Remember a secret so that :func:`redact` removes it from any text, also where a
    message quotes it escaped (``'a\\nb'``, ``b'a\\nb'``)."""
    if value and len(value) >= 4:
        _SECRETS.update({value, repr(value)[1:-1], str(value.encode("utf-8"))[2:-1]})


def redact(text: str) -> str:
    for secret in sorted(_SECRETS, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


class RemoteError(RuntimeError):
    """A remote call failed; the message says which call, the status and the server's words."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(redact(message))
        self.status = status


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5  # first try included
    base_delay_s: float = 0.5
    max_delay_s: float = 8.0
    timeout_s: float = 30.0


@dataclass(frozen=True)
class _Failure:
    retryable: bool
    status: int | None
    message: str


def _server_message(body) -> str:
    if body is None:
        return ""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    try:
        data = json.loads(body)
    except (TypeError, ValueError):
        return str(body).strip()[:500]
    if isinstance(data, dict):
        error = data.get("error", data)
        if isinstance(error, dict):
            return str(error.get("message") or error.get("error") or data)[:500]
        return str(data.get("message") or error)[:500]
    return str(data)[:500]


def _is_timeout(exc: BaseException) -> bool:
    import requests
    import urllib3

    candidates = [exc, getattr(exc, "reason", None)]
    if isinstance(exc, requests.exceptions.ConnectionError) and exc.args:
        candidates.append(exc.args[0])
        candidates.append(getattr(exc.args[0], "reason", None))
    for candidate in candidates:
        # urllib3's "connection refused" is a subclass of its connect-timeout error.
        if isinstance(candidate, (urllib3.exceptions.NewConnectionError,
                                  requests.exceptions.ConnectTimeout)):
            return not isinstance(candidate, urllib3.exceptions.NewConnectionError)
        if isinstance(candidate, (TimeoutError, requests.exceptions.Timeout,
                                  urllib3.exceptions.TimeoutError)):
            return True
    return False


def unresolved_host(exc: BaseException) -> str | None:
    """The host name whose look-up failed, when ``exc`` (or what it wraps) is a DNS failure
    (``socket.gaierror``); ``""`` when the name is unknown; ``None`` for anything else."""
    import socket

    import urllib3

    seen: set[int] = set()
    pending: list = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen or not isinstance(current, BaseException):
            continue
        seen.add(id(current))
        if isinstance(current, urllib3.exceptions.NameResolutionError):
            match = re.search(r"Failed to resolve '([^']+)'", str(current))
            return match.group(1) if match else ""
        if isinstance(current, socket.gaierror):
            return ""
        pending += [current.__cause__, current.__context__, getattr(current, "reason", None),
                    *[a for a in current.args if isinstance(a, BaseException)]]
    return None


def classify(exc: BaseException) -> _Failure | None:
    """What a failure means for a retry; ``None`` for errors that are not about the call."""
    import requests
    import urllib3
    from google.api_core import exceptions as gexc

    try:
        from kfp_server_api.exceptions import ApiException
    except ImportError:  # pragma: no cover - kfp is a dependency
        ApiException = ()  # type: ignore[assignment]

    if isinstance(exc, ApiException):
        status = exc.status or None
        message = _server_message(exc.body) or (exc.reason or "")
        return _Failure(status is None or status >= 500 or status == 429, status, message)
    from gkeflow.components.cloud.mlmd import MetadataError

    if isinstance(exc, MetadataError):
        status = exc.status
        return _Failure(status is None or status >= 500 or status == 429, status, str(exc))
    if isinstance(exc, gexc.GoogleAPICallError):
        status = exc.code if isinstance(exc.code, int) else None
        retry = isinstance(exc, (gexc.ServerError, gexc.TooManyRequests)) or status is None
        if isinstance(exc, gexc.DeadlineExceeded):
            retry = True
        # REST errors read "POST https://...: <the server's message>"; keep the message.
        message = re.sub(r"^(GET|POST|PATCH|PUT|DELETE) \S+: ", "", exc.message or str(exc))
        return _Failure(retry, status, message)
    host = unresolved_host(exc)
    if host is not None:  # DNS: not transient, retrying only delays the message
        return _Failure(False, None, f"cannot resolve host name {host!r}" if host
                        else "cannot resolve the host name")
    if _is_timeout(exc):
        return _Failure(True, None, "timed out")
    if isinstance(exc, (requests.exceptions.ConnectionError, urllib3.exceptions.HTTPError,
                        ConnectionError)):
        return _Failure(True, None, f"cannot connect ({type(exc).__name__})")
    return None


def backoff_s(policy: RetryPolicy, attempt: int) -> float:
    """The longest wait after failed attempt number ``attempt`` (1-based)."""
    return min(policy.max_delay_s, policy.base_delay_s * 2 ** (attempt - 1))


def max_total_s(policy: RetryPolicy) -> float:
    """The most one :func:`call` can take: every attempt timing out, plus the waits."""
    return policy.attempts * policy.timeout_s + sum(
        backoff_s(policy, attempt) for attempt in range(1, policy.attempts))


def no_library_retries():
    """A urllib3 ``Retry`` that never retries (redirects still followed): the client's own
    retries would multiply :func:`call`'s attempts (urllib3's default is three)."""
    from urllib3.util.retry import Retry

    return Retry(total=None, connect=0, read=0, status=0, other=0, redirect=5,
                 raise_on_status=False)


def call(what: str, func: Callable[[], T], policy: RetryPolicy, *, idempotent: bool = True,
         sleep: Callable[[float], None] = time.sleep,
         recover: Callable[[], T | None] | None = None) -> T:
    """Run ``func`` (one remote call) with ``policy``; ``what`` names it in messages.

    Non-idempotent calls (creating a run) are not retried after a timeout, since the server
    may still act on them; they are retried after connection errors and 5xx answers.
    ``recover`` (look the resource up; ``None`` when absent) is consulted after every
    failure of a create and on a 409, so a create the server carried out is not repeated.
    """
    deadline = time.monotonic() + max_total_s(policy)

    looked_up = False

    def time_for(requests: int, wait: float = 0.0) -> bool:
        """Whether ``requests`` more requests (each up to the timeout) fit the budget; only
        look-ups can spend it early (otherwise ``policy.attempts`` is the bound)."""
        if not looked_up:
            return True
        return time.monotonic() + wait + requests * policy.timeout_s <= deadline

    attempt = 0
    while True:
        attempt += 1
        try:
            return func()
        except Exception as exc:
            failure = classify(exc)
            if failure is None:
                raise
            status = f"HTTP {failure.status}" if failure.status else failure.message
            if recover is not None and (failure.retryable or failure.status == 409) \
                    and (failure.status == 409 or time_for(1)):
                looked_up = True
                found = _recover(what, recover)
                if found is not None:
                    log.warning("%s: %s, but the server had done it; using the result", what,
                                redact(status))
                    return found
            retry = failure.retryable and attempt < policy.attempts
            if retry and not idempotent and _is_timeout(exc):
                retry = False  # the server may still be working on it: a retry could race
            delay = backoff_s(policy, attempt) * (0.5 + random.random() / 2)
            if retry and not time_for(1, delay):
                retry = False  # the call's time budget is spent (look-ups took some)
            if not retry:
                if failure.status and 400 <= failure.status < 500:
                    raise RemoteError(f"{what} was refused ({status}): {failure.message}",
                                      failure.status) from None
                tries = f" after {attempt} attempt{'s' if attempt > 1 else ''}"
                detail = f": {failure.message}" if failure.status else ""
                raise RemoteError(f"{what} failed ({status}){detail}{tries}",
                                  failure.status) from None
            log.warning("%s: %s; retrying in %.1fs (attempt %d of %d)", what,
                        redact(status), delay, attempt + 1, policy.attempts)
            sleep(delay)


def _recover(what: str, recover: Callable[[], T | None]) -> T | None:
    """``recover()``; a look-up that fails itself counts as "not found" (the create is then
    retried, and its own retries consult the look-up again)."""
    try:
        return recover()
    except Exception as exc:  # noqa: BLE001 - only remote failures are swallowed
        if classify(exc) is None and not isinstance(exc, RemoteError):
            raise
        log.warning("%s: could not look for an earlier attempt's result: %s", what,
                    redact(str(exc)))
        return None
