"""A preempted training step (Spot, SIGTERM): the exception that stops it once its checkpoint
is committed, and the exit code its retry policy retries. No Keras here: steps that only
choose or export import it without loading TensorFlow."""

from __future__ import annotations

import contextlib
import sys

#: Exit code of a step stopped by SIGTERM after committing its checkpoint (128 + SIGTERM).
PREEMPTED_EXIT_CODE = 143


class Preempted(RuntimeError):
    """Training stopped on SIGTERM after committing a checkpoint; a retry resumes from it."""


@contextlib.contextmanager
def exit_on_preemption():
    """Turn :class:`Preempted` into one line on stderr and exit code 143 (no traceback)."""
    try:
        yield
    except Preempted as exc:
        print(f"gkeflow: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(PREEMPTED_EXIT_CODE) from None
