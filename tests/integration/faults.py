"""Faults a fake server serves the way clouds do: error statuses, connections dropped
before or after the request was carried out, and reads that hang past the client's timeout.

``Faults`` is consulted once per request: scripted faults first (``script("503", times=3,
method="GET", path_contains=":cancel")``), then, with probability ``rate``, a random one.

Kinds:
    ``"429"``, ``"500"``, ``"502"``, ``"503"``, ``"504"``: answered with that status, nothing done
        (any other status, e.g. ``"403"``, may be scripted too).
    ``"reset"``: the connection is closed before the request is carried out.
    ``"lost"``: the request is carried out (a create creates), then the connection is closed:
        the answer never arrives.
    ``"hang"``: the request is carried out, then the answer waits ``hang_s`` (longer than the
        client's timeout): a read timeout.
"""

from __future__ import annotations

import random
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable

STATUSES = ("429", "500", "502", "503", "504")
KINDS = (*STATUSES, "reset", "lost", "hang")


class Faults:
    def __init__(self, rate: float = 0.0, seed: int = 0, kinds: tuple[str, ...] = KINDS,
                 hang_s: float = 1.0, on_hang: Callable[[], None] | None = None):
        unknown = set(kinds) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}")
        self.rate, self.kinds, self.hang_s, self.on_hang = rate, kinds, hang_s, on_hang
        self._random = random.Random(seed)
        self._script: list[list] = []
        self._lock = threading.Lock()
        self.injected: Counter = Counter()

    def script(self, kind: str, times: int = 1, method: str | None = None,
               path_contains: str | None = None) -> Faults:
        if kind not in KINDS and not (kind.isdigit() and 400 <= int(kind) <= 599):
            raise ValueError(f"unknown fault kind {kind!r}")
        self._script.append([kind, method, path_contains, times])
        return self

    @property
    def total(self) -> int:
        return sum(self.injected.values())

    def pick(self, method: str, path: str) -> str | None:
        with self._lock:
            for entry in self._script:
                kind, want_method, contains, left = entry
                if left > 0 and (not want_method or want_method == method) and (
                        not contains or contains in path):
                    entry[3] -= 1
                    self.injected[kind] += 1
                    return kind
            if self.rate and self._random.random() < self.rate:
                kind = self._random.choice(self.kinds)
                self.injected[kind] += 1
                return kind
        return None

    def serve(self, environ, start_response, method: str, path: str,
              handle: Callable[[], object], error: Callable[[int, str], object]):
        """Answer one WSGI request through ``handle`` (which returns a WSGI response),
        injecting the fault :meth:`pick` chooses. A response's ``on_delivered`` callable,
        if it has one, is called when no fault keeps the answer from the client."""
        kind = self.pick(method, path)
        if kind is not None and kind.isdigit():
            return error(int(kind), f"injected {kind}")(environ, start_response)
        if kind == "reset":
            return _drop(environ)
        response = handle()
        if kind is None:  # the answer reaches the client
            getattr(response, "on_delivered", lambda: None)()
        if kind == "lost":
            return _drop(environ)
        if kind == "hang":
            if self.on_hang is not None:
                self.on_hang()
            time.sleep(self.hang_s)
        return response(environ, start_response)


def _drop(environ):
    """Close the client's connection without an answer."""
    connection = environ.get("werkzeug.socket")
    if connection is None:  # pragma: no cover - only the werkzeug server is used
        raise RuntimeError("no socket to drop")
    try:
        connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    raise _Dropped()


class _Dropped(ConnectionError):
    """Raised into the server after the connection was closed on purpose."""
