"""Progress of a long step, as lines the step prints with a mark: the Kubeflow UI and Vertex
AI show them in the step's log like any other, and ``gkeflow run`` shows them at its default
verbosity under the step's name (the rest of a step's output only with ``-v``).

A producer says one line per change worth a look (a candidate starts, a winner is chosen)
and at most one every :data:`EVERY_S` seconds while it repeats (rounds, epochs)."""

from __future__ import annotations

import time

#: What starts a progress line (after the runner's own prefix, if any).
MARK = "gkeflow-progress: "
#: The fewest seconds between two repeated progress lines of one producer.
EVERY_S = 10.0


def say(text: str) -> None:
    """Print one progress line now."""
    print(f"{MARK}{text}", flush=True)


def progress_text(line: str) -> str | None:
    """The progress text of a log line, or None when it is no progress line."""
    at = line.find(MARK)
    return line[at + len(MARK):].strip() if at >= 0 else None


class Throttle:
    """``due()`` is true at most once every ``every_s`` seconds (the first call: after
    ``every_s`` from construction), and always when ``final``."""

    def __init__(self, every_s: float = EVERY_S, clock=time.monotonic) -> None:
        self.every_s, self.clock = every_s, clock
        self.last = clock()

    def due(self, final: bool = False) -> bool:
        now = self.clock()
        if final or now - self.last >= self.every_s:
            self.last = now
            return True
        return False
