"""``python -m gkeflow.pipelines.targets.forked_step ADDRESS MODULE ARGS...``: run
``python -m MODULE ARGS...`` as a fork of the local run's fork server at ADDRESS
(:mod:`~gkeflow.pipelines.targets.fork_server`) and exit as it did; where there is no server
or it declines, become ``python -m MODULE ARGS...`` itself (the ordinary way)."""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> None:
    from gkeflow.pipelines.targets.fork_server import delegate, exit_as

    address, module, arguments = argv[0], argv[1], argv[2:]
    code = delegate(address, "module", module, arguments)
    if code is None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(sys.executable, [sys.executable, "-m", module, *arguments])
    exit_as(code)


if __name__ == "__main__":
    main(sys.argv[1:])
