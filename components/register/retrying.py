"""Retrying remote registry calls: server errors (5xx, 429, dropped connections) are retried
with exponential backoff; client errors (4xx) are reported at once with the server's message.

A retried operation must be idempotent: every backend's ``register`` first looks up the
version made by the same pipeline run and task, so repeating it after a failure that the
server did carry out returns that version instead of creating a second one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from gkeflow.components.register.local_registry import RegistryError

T = TypeVar("T")


class TransientRegistryError(Exception):
    """A failure worth retrying (server error, throttling, connection reset)."""


def with_retries(
    operation: Callable[[], T],
    classify: Callable[[Exception], Exception | None],
    what: str,
    attempts: int = 5,
    initial_delay_s: float = 0.5,
    max_delay_s: float = 20.0,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run ``operation``; retry it while ``classify`` maps the failure to a transient error.

    Args:
        operation: The idempotent call.
        classify: Maps a raised exception to :class:`TransientRegistryError` (retry),
            :class:`RegistryError` (report now) or ``None`` (re-raise unchanged).
        what: Words for error messages, e.g. ``"registering churn in Vertex AI"``.
        attempts: Calls in all, the first included.
        initial_delay_s: Wait before the second call; doubled each time up to ``max_delay_s``.
        sleep: Injected for tests.
    """
    delay = initial_delay_s
    last: Exception | None = None
    for attempt in range(1, attempts + 1):
        try:
            return operation()
        except RegistryError:
            raise
        except Exception as exc:
            mapped = classify(exc)
            if mapped is None:
                raise
            if not isinstance(mapped, TransientRegistryError):
                raise mapped from exc
            last = mapped
            if attempt == attempts:
                break
            print(f"{what}: attempt {attempt} of {attempts} failed ({mapped}); "
                  f"retrying in {delay:.1f}s", flush=True)
            sleep(delay)
            delay = min(delay * 2, max_delay_s)
    raise RegistryError(f"{what} failed after {attempts} attempts: {last}") from last
