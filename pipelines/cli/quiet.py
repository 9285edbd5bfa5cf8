"""Keep native libraries' start-up lines out of a command's output.

TensorFlow's C++ core writes to the process's standard error as it loads (oneDNN notes,
"could not find cuda drivers", absl's pre-init warning), before any Python logging setting
applies. A command that loads a model at a terminal runs that part with file descriptor 2
pointed at /dev/null; Python's own errors are raised after it as usual, and ``--debug``
keeps everything.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

import click


@contextlib.contextmanager
def native_stderr_silenced() -> Iterator[None]:
    """Within the block, what native code writes to standard error is dropped (unless
    ``--debug`` / ``GKEFLOW_DEBUG``)."""
    from gkeflow.pipelines.cli.errors import debug_enabled

    if debug_enabled(click.get_current_context(silent=True)):
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w", encoding="utf-8") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
