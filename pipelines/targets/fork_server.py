"""A fork server for the steps of a local run: one process imports TensorFlow and Keras (and
the MLflow client) once, and each step kfp.local starts is a fork of it instead of a fresh
interpreter that imports them again (3-4 s of every TensorFlow step here, more when steps
run side by side on few cores).

The step's process stays what kfp.local started (:mod:`~gkeflow.pipelines.targets.
forked_step` hands its arguments, environment, working directory and standard streams over
a Unix socket, then waits): its exit status is the forked step's (a signal included), the
signals it gets (SIGTERM, SIGINT) are passed on, and the forked step kills itself when that
process dies. A step whose import-time settings (:data:`IMPORT_TIME_VARIABLES`) or Python
differ from the server's is declined and runs the ordinary way, as does every step while
the server is still importing.

The server serves one run (:mod:`~gkeflow.pipelines.targets.local_forks` starts it) and ends
with the process that started it.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import sys

#: Environment variables read when TensorFlow, Keras, OpenMP or Python start: a step runs
#: forked only where they equal the server's.
IMPORT_TIME_VARIABLES = (
    "PYTHONPATH", "PYTHONHASHSEED", "PYTHONWARNINGS", "KERAS_HOME", "KERAS_BACKEND",
    "PYTHONDONTWRITEBYTECODE", "PYTHONOPTIMIZE", "PYTHONSAFEPATH", "TF_CPP_MIN_LOG_LEVEL",
    "TF_CPP_MAX_VLOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS", "TF_XLA_FLAGS", "XLA_FLAGS",
    "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "OMP_WAIT_POLICY", "TF_USE_LEGACY_KERAS")
#: What each server imports before it forks: steps on Keras' TensorFlow backend or on JAX.
FLAVOURS = {
    "tensorflow": ("keras", "tensorflow"),
    "jax": ("keras", "tensorflow", "jax"),
}
#: Imported once the server answers, while it waits for a step: what some steps import
#: (trees, tracking, tables); a step that comes first imports them itself.
LATER = ("pandas", "pyarrow", "xgboost", "mlflow")
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
                     signal.SIGUSR1, signal.SIGUSR2)
HEADER = struct.Struct("!I")
PID = struct.Struct("!i")
#: The exit status of a step whose fork could not report one.
LOST = 70


def import_settings(environ) -> dict:
    return {name: environ.get(name) for name in IMPORT_TIME_VARIABLES}


def receive(connection: socket.socket, size: int) -> bytes:
    """``size`` bytes, or fewer when the other side went away."""
    data = b""
    while len(data) < size:  # a signal handled meanwhile does not end recv (PEP 475)
        chunk = connection.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, ended but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def interpreter(executable: str) -> tuple[str, str]:
    """The environment (a venv's bin folder) and the interpreter an executable path runs:
    ``.venv/bin/python3`` and ``.venv/bin/python`` are the same."""
    return os.path.dirname(executable), os.path.realpath(executable)


def preload(flavour: str, names: tuple[str, ...]) -> None:
    """Import ``names``, Keras on ``flavour``'s backend when it names one."""
    import importlib

    backend = os.environ.get("KERAS_BACKEND")
    if flavour in ("tensorflow", "jax"):
        os.environ["KERAS_BACKEND"] = flavour  # before Keras is imported
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:  # not installed (no JAX, no MLflow): a step imports its own
            pass
    if backend is None:
        os.environ.pop("KERAS_BACKEND", None)
    else:
        os.environ["KERAS_BACKEND"] = backend


def serve(address: str, flavour: str, watch: int | None = None, load: bool = True,
          log=None, settings_of=None, modules: tuple[str, ...] | None = None,
          later: tuple[str, ...] = LATER) -> None:
    """Import ``modules`` (default: ``flavour``'s; none unless ``load``), then listen on
    ``address`` and fork a process for every step that connects, importing ``later`` while
    none does, until killed or, with ``watch``, until that process has ended (then the
    socket is removed). ``log(line)`` hears of each fork, decline and end; ``settings_of``
    as :func:`start_step`'s."""
    settings_of = settings_of or (lambda request: import_settings(request["environ"]))
    settings = settings_of({"environ": dict(os.environ)})  # before the imports: they may
    if load:                                                # set some
        preload(flavour, FLAVOURS[flavour] if modules is None else modules)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(64)
    waiting: dict[int, socket.socket] = {}
    later = list(later) if load else []
    while True:
        ready, _, _ = select.select([listener], [], [], 0.02 if waiting or later else 0.5)
        if not ready and later:
            preload(flavour, (later.pop(0),))
            continue
        if watch is not None and not alive(watch):
            for remove in (os.unlink, os.rmdir):  # its folder too, when nothing else is in it
                try:
                    remove(address if remove is os.unlink else os.path.dirname(address))
                except OSError:
                    pass
            return
        report_ended(waiting, log)
        if ready:
            connection, _ = listener.accept()
            start_step(connection, listener, settings, waiting, log, settings_of)


def report_ended(waiting: dict[int, socket.socket], log=None) -> None:
    """Send each ended fork's exit status (negative: the signal that killed it) to the
    process that asked for it."""
    while waiting:
        pid, status, usage = os.wait4(-1, os.WNOHANG)
        if pid == 0:
            return
        if log is not None:
            log(f"ended {pid} {usage.ru_utime + usage.ru_stime:.2f} CPU-s")
        connection = waiting.pop(pid, None)
        if connection is None:
            continue
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        try:
            connection.sendall(b"S" + PID.pack(code))
        except OSError:
            pass
        connection.close()


def start_step(connection, listener, settings: dict, waiting: dict, log=None,
               settings_of=None) -> None:
    """Read a step's request and its three standard streams from ``connection`` and fork it
    (``P`` and its pid back), or decline it (``D``) where its settings (``settings_of(
    request)``, default: :func:`import_settings` of its environment) are not ``settings``."""
    fds: list[int] = []
    try:
        connection.settimeout(10)
        data, fds, _flags, _address = socket.recv_fds(connection, 1 << 16, 3)
        size = HEADER.unpack(data[:HEADER.size])[0]
        body = data[HEADER.size:]
        while len(body) < size:
            chunk = connection.recv(size - len(body))
            if not chunk:
                raise OSError("the step went away")
            body += chunk
        request = json.loads(body)
        connection.settimeout(None)
        asked = (settings_of or (lambda r: import_settings(r["environ"])))(request)
        if (len(fds) != 3 or asked != settings
                or interpreter(request["executable"]) != interpreter(sys.executable)):
            connection.sendall(b"D")
            if log is not None:
                log(f"{request['name']} declined: " + " ".join(
                    sorted(k for k in asked if asked[k] != settings.get(k))))
            raise OSError("declined")
    except (OSError, ValueError, KeyError):
        for fd in fds:
            os.close(fd)
        connection.close()
        return
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    pid = os.fork()
    if pid == 0:
        try:
            listener.close()
            for other in waiting.values():
                other.close()
            run_forked_step(connection, request, fds)
        finally:
            os._exit(LOST)
    for fd in fds:
        os.close(fd)
    if log is not None:
        log(f"{request['name']} {pid}")
    try:
        connection.sendall(b"P" + PID.pack(pid))
    except OSError:
        pass
    waiting[pid] = connection


def run_forked_step(connection: socket.socket, request: dict, fds: list[int]) -> None:
    """In the fork: become the step (its streams, directory, environment and command
    line), run it as ``python -m`` (or ``python SCRIPT``) would, and exit with its status."""
    import atexit
    import io
    import runpy
    import tempfile
    import threading

    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["environ"])
    tempfile.tempdir = None  # cached by the server's imports: the step's TMPDIR decides
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(
        io.BufferedReader(io.FileIO(0, "r", closefd=False)))
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(1, "w", closefd=False)), line_buffering=os.isatty(1),
        write_through=unbuffered)
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(2, "w", closefd=False)), errors="backslashreplace",
        line_buffering=True, write_through=unbuffered)
    sys.orig_argv = request["orig_argv"]
    sys.executable = request["executable"]
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()

    def watch_the_step_process() -> None:  # it died (SIGKILL): so does the step
        try:
            while connection.recv(1):
                pass
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch_the_step_process, daemon=True).start()
    code = 0
    try:
        if request["kind"] == "module":  # what ``python -m`` does
            sys.argv, sys.path[0] = ["-m", *request["arguments"]], request["cwd"]
            sys.modules.pop(request["name"], None)  # preloaded: it runs afresh as __main__
            runpy._run_module_as_main(request["name"])
        else:  # what ``python SCRIPT`` does
            script = request["name"]
            sys.argv = [script, *request["arguments"]]
            sys.path[0] = os.path.dirname(os.path.realpath(script))
            runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        code = exit_code(stop.code)
    except BaseException:  # noqa: BLE001 - reported as the interpreter would
        sys.excepthook(*sys.exc_info())
        code = 1
    # What interpreter shutdown does that a step can see; the rest (freeing every module)
    # is what the fork saves.
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def exit_code(code) -> int:
    """The process exit status ``SystemExit(code)`` gives (a message: printed, status 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def delegate(address: str, kind: str, name: str, arguments: list[str]) -> int | None:
    """Run ``name`` (``python -m`` it, or the script) with ``arguments`` in a fork of the
    server at ``address`` and return its exit status; None where there is no server there
    or it declines (the caller then runs it the ordinary way)."""
    orig_argv = ([sys.executable, "-m", name, *arguments] if kind == "module"
                 else [sys.executable, name, *arguments])
    request = json.dumps({
        "kind": kind, "name": name, "arguments": arguments, "orig_argv": orig_argv,
        "cwd": os.getcwd(), "environ": dict(os.environ), "executable": sys.executable,
    }).encode()
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(address)
        socket.send_fds(connection, [HEADER.pack(len(request)) + request], [0, 1, 2])
        reply = receive(connection, 1 + PID.size)
    except OSError:
        connection.close()
        return None
    if reply[:1] != b"P":
        connection.close()
        return None
    pid = PID.unpack(reply[1:])[0]
    for number in FORWARDED_SIGNALS:
        signal.signal(number, lambda received, _frame: _forward(pid, received))
    try:
        status = receive(connection, 1 + PID.size)
    except OSError:
        status = b""
    return PID.unpack(status[1:])[0] if status[:1] == b"S" else LOST


def exit_as(code: int) -> None:
    """End this process as :func:`delegate`'s step ended: its exit status, or killed by
    the same signal (as the process that started it expects)."""
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        code = 128 - code
    os._exit(code)


def _forward(pid: int, number: int) -> None:
    try:
        os.kill(pid, number)
    except ProcessLookupError:
        pass


if __name__ == "__main__":  # python -m ...fork_server ADDRESS FLAVOUR WATCH_PID [--no-preload]
    serve(sys.argv[1], sys.argv[2], watch=int(sys.argv[3]), load="--no-preload" not in sys.argv)
