"""The reliability options every launcher takes, declared once: ``--call-timeout``,
``--retry-budget`` and ``--debug`` on its command line, ``GKEFLOW_CALL_TIMEOUT_S``,
``GKEFLOW_RETRY_BUDGET_S`` and ``GKEFLOW_DEBUG`` in its environment (the flag wins).
Components take the same two numbers as parameters (0 = the environment, else the default).
"""

from __future__ import annotations

import argparse

from gkeflow.components.cloud.retry import RetryPolicy


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("must be a positive number of seconds")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--call-timeout``, ``--retry-budget`` and ``--debug`` to ``parser``."""
    defaults = RetryPolicy()
    group = parser.add_argument_group(
        "reliability", "Transient failures (429, 5xx, dropped connections, timeouts) of any "
        "call are retried with exponential backoff and jitter; see "
        "docs/scale-out-reliability.md.")
    group.add_argument("--call-timeout", type=_seconds, default=None, metavar="SECONDS",
                       help="abandon and retry a call that has not answered by then "
                            f"(default: $GKEFLOW_CALL_TIMEOUT_S or "
                            f"{defaults.call_timeout_s:g})")
    group.add_argument("--retry-budget", type=_seconds, default=None, metavar="SECONDS",
                       help="give up one operation that keeps failing transiently after this "
                            "long, then cancel the job (default: $GKEFLOW_RETRY_BUDGET_S or "
                            f"{defaults.budget_s:g})")
    group.add_argument("--debug", action="store_true",
                       help="print tracebacks (also GKEFLOW_DEBUG=1)")


def policy_from(call_timeout_s: float | None = None, retry_budget_s: float | None = None,
                **overrides) -> RetryPolicy:
    """The policy: defaults, then the environment, then explicit values (None or 0: unset)."""
    return RetryPolicy.from_env(call_timeout_s=call_timeout_s or None,
                                budget_s=retry_budget_s or None, **overrides)


def policy_from_args(args: argparse.Namespace) -> RetryPolicy:
    return policy_from(args.call_timeout, args.retry_budget)
