"""A fork server for the pipeline steps the tests run (kfp.local's ``python -m
kfp.dsl.executor_main`` processes): TensorFlow, Keras and the MLflow client imported once per
test run, each step a fork of that process instead of a fresh interpreter that imports
them again (about 4 CPU-seconds a step, and 1 more in interpreter shutdown, on the 2-core
machines that run the suite). What a fresh process in an image proves is proven where it
is run that way: ``make image-test`` runs the compiled steps in their images, and
``GKEFLOW_STEP_ZYGOTE=0 make test`` runs every step as a fresh interpreter.

The step's process stays what kfp.local started (``sitecustomize`` hands its arguments,
environment, working directory and standard streams over a Unix socket, then waits): its
exit status is the forked step's (a signal included), the signals it gets (SIGTERM from a
test, SIGINT) are passed on, and the forked step kills itself when that process dies
(SIGKILL). A step whose import-time settings differ from the server's (another Keras
backend, Python path, TensorFlow log level...) or that the server does not know runs the
ordinary way. Only the tests use it (tests/conftest.py starts one set per test run,
shared by its workers);
production steps are ordinary processes in their images."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import struct
import sys

#: The folder of the servers' sockets, one per flavour.
ADDRESS_VARIABLE = "GKEFLOW_STEP_ZYGOTE"
#: A file a server appends to for every process it forks (``FLAVOUR NAME PID``), declines
#: and sees end (``ended PID CPU-SECONDS``): for debugging and measuring.
LOG_VARIABLE = "GKEFLOW_STEP_ZYGOTE_LOG"
#: What runs forked (``python -m`` these, nothing else on the command line): kfp.local's
#: steps, the local training workers they start (``--compute train-model.replicas=N``) and
#: the tests' own training processes (tests/unit/training_runner.py).
STEP_MODULES = ("kfp.dsl.executor_main", "gkeflow.components.scaleout.worker",
                "tests.unit.training_runner")
#: The ``gkeflow`` command (its console script, or ``python -m``), which the tests run as a
#: process for ``run``, ``deploy`` and ``images`` (tests/gkeflow_cli.py).
CLI_MODULE = "gkeflow.pipelines.cli.main"
CLI_SCRIPT = "gkeflow"
#: Ray's worker process (a trial of a local Ray Tune sweep trains in one): its raylet sees
#: the process it started, and the pid the fork registers; either one ending ends both.
RAY_WORKER_SCRIPT = "default_worker.py"
#: The servers and what each imports before it forks: steps on Keras' TensorFlow backend,
#: steps on its JAX backend, and the command (which imports TensorFlow only where a command
#: needs it, so its server does not).
FLAVOURS = {
    "tensorflow": ("keras", "tensorflow", "mlflow"),
    "jax": ("keras", "tensorflow", "jax", "mlflow"),
    "cli": (CLI_MODULE, "kfp.local", "gkeflow.pipelines.targets.local",
            "gkeflow.pipelines.cli.run", "mlflow"),
}
#: Environment variables read when TensorFlow, Keras or Python start: a process runs forked
#: only where they equal the server's (``KERAS_BACKEND`` picks the flavour).
IMPORT_TIME_VARIABLES = (
    "PYTHONPATH", "PYTHONHASHSEED", "PYTHONWARNINGS", "KERAS_HOME",
    "PYTHONDONTWRITEBYTECODE", "PYTHONOPTIMIZE", "PYTHONSAFEPATH", "TF_CPP_MIN_LOG_LEVEL",
    "TF_CPP_MAX_VLOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS", "TF_XLA_FLAGS", "XLA_FLAGS",
    "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS")
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
                     signal.SIGUSR1, signal.SIGUSR2)
#: The Keras backend a step asks for itself (train-model's ``backend`` parameter, in the
#: executor input or a worker's ``--params``); ``auto`` is JAX on a host with a TPU.
_BACKEND = re.compile(r'"backend":\s*"(jax|tensorflow|auto)"')
_HEADER = struct.Struct("!I")
_PID = struct.Struct("!i")


def import_settings(environ) -> dict:
    return {name: environ.get(name) for name in IMPORT_TIME_VARIABLES}


def what_runs(orig_argv: list[str]) -> tuple[str, str, list[str]] | None:
    """``(kind, name, arguments)`` of a process the servers can run (kind ``module`` for
    ``python -m NAME``, ``script`` for the console script's path), from the interpreter's
    command line with no other option (-X, -W, -c...); else None."""
    if len(orig_argv) >= 3 and orig_argv[1] == "-m" and (
            orig_argv[2] in STEP_MODULES or orig_argv[2] == CLI_MODULE):
        return "module", orig_argv[2], orig_argv[3:]
    if len(orig_argv) >= 2 and os.path.basename(orig_argv[1]) in (CLI_SCRIPT,
                                                                    RAY_WORKER_SCRIPT):
        return "script", orig_argv[1], orig_argv[2:]
    return None


def flavour_of(name: str, orig_argv: list[str], environ) -> str | None:
    """The server that runs ``name``, or None where it must start afresh (a step on a TPU
    host whose backend may be ``auto``). A step that names its backend gets the one
    :func:`~gkeflow.components.train.backend.resolve_backend` picks off a TPU; one that
    does not, ``KERAS_BACKEND``'s (Keras' default: TensorFlow)."""
    if name not in STEP_MODULES and os.path.basename(name) != RAY_WORKER_SCRIPT:
        return "cli"
    asked = {m.group(1) for a in orig_argv for m in _BACKEND.finditer(a)}
    if len(asked) > 1:
        return None
    setting = next(iter(asked), None)
    if setting in (None, "auto") and _on_tpu(environ):
        return None
    if setting is None:
        backend = environ.get("KERAS_BACKEND") or "tensorflow"
    else:
        from gkeflow.components.train.backend import resolve_backend

        backend = resolve_backend(setting, on_tpu=False)
    return backend if backend in FLAVOURS else None


def _on_tpu(environ) -> bool:
    from gkeflow.components.train.tpu import find_tpu, tpu_device_files

    try:
        return find_tpu(environ, tpu_device_files()) is not None
    except ValueError:  # the step itself says what is wrong with its TPU variables
        return True


# --- the step's side (sitecustomize) --------------------------------------------------


def delegate() -> None:
    """Run this process's step in a fork of the server and exit with its status; return
    (the step then runs here, the ordinary way) when there is no server or it declines."""
    folder = os.environ.get(ADDRESS_VARIABLE)
    runs = what_runs(list(sys.orig_argv))
    if not folder or runs is None:
        return
    kind, name, arguments = runs
    flavour = flavour_of(name, list(sys.orig_argv), os.environ)
    if flavour is None:
        return
    request = json.dumps({
        "flavour": flavour, "kind": kind, "name": name, "arguments": arguments,
        "orig_argv": list(sys.orig_argv), "cwd": os.getcwd(), "environ": dict(os.environ),
        "executable": sys.executable,
    }).encode()
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(os.path.join(folder, flavour))
        socket.send_fds(connection, [_HEADER.pack(len(request)) + request], [0, 1, 2])
        reply = _receive(connection, 1 + _PID.size)
    except OSError:
        connection.close()
        return
    if reply[:1] != b"P":
        connection.close()
        return
    pid = _PID.unpack(reply[1:])[0]
    for number in FORWARDED_SIGNALS:
        signal.signal(number, lambda received, _frame: _forward(pid, received))
    try:
        status = _receive(connection, 1 + _PID.size)
    except OSError:
        status = b""
    code = _PID.unpack(status[1:])[0] if status[:1] == b"S" else 70
    if code < 0:  # killed by a signal: so is this process, as its parent expects
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        code = 128 - code
    os._exit(code)


def _forward(pid: int, number: int) -> None:
    try:
        os.kill(pid, number)
    except ProcessLookupError:
        pass


def _receive(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:  # a signal handled meanwhile does not end recv (PEP 475)
        chunk = connection.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


# --- the server ------------------------------------------------------------------------


def preload(flavour: str) -> None:
    import importlib

    if flavour in ("tensorflow", "jax"):
        os.environ["KERAS_BACKEND"] = flavour  # before Keras is imported
    for name in FLAVOURS[flavour]:
        try:
            importlib.import_module(name)
        except ImportError:  # not installed (mlflow-skinny, no JAX): the step imports it
            pass
    os.environ.pop("KERAS_BACKEND", None)


def serve(folder: str, flavour: str, load: bool = True, watch: int | None = None) -> None:
    """Preload (unless not ``load``), then fork a process for every step that connects to
    ``folder/flavour``, until killed or, with ``watch``, until that process has ended
    (then the folder is removed)."""
    if load:
        preload(flavour)
    settings = {**import_settings(os.environ), "flavour": flavour}
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(os.path.join(folder, flavour))
    listener.listen(64)
    waiting: dict[int, socket.socket] = {}
    while True:
        ready, _, _ = select.select([listener], [], [], 0.02 if waiting else 1.0)
        if watch is not None and not alive(watch):
            import shutil

            shutil.rmtree(folder, ignore_errors=True)
            return
        _report_ended(waiting)
        if ready:
            connection, _ = listener.accept()
            _start(connection, listener, settings, waiting)


def start(folder: str, watch: int | None = None) -> list:
    """Start a server of every flavour in ``folder``; with ``watch``, each ends by itself
    once that process has (the test run that shares them), else the caller kills them."""
    import subprocess

    environ = {**os.environ, ADDRESS_VARIABLE: ""}  # step_site is on PYTHONPATH (conftest)
    return [subprocess.Popen(
        [sys.executable, "-m", "step_zygote", folder, flavour,
         *(["--watch", str(watch)] if watch is not None else [])], cwd=folder, env=environ,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for flavour in FLAVOURS]


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, ended but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _interpreter(executable: str) -> tuple[str, str]:
    """The environment (a venv's bin folder) and the interpreter an executable path runs:
    ``.venv/bin/python3`` and ``.venv/bin/python`` are the same."""
    return os.path.dirname(executable), os.path.realpath(executable)


def _log(line: str) -> None:
    if os.environ.get(LOG_VARIABLE):
        with open(os.environ[LOG_VARIABLE], "a", encoding="utf-8") as log:
            log.write(line + "\n")


def _report_ended(waiting: dict[int, socket.socket]) -> None:
    while waiting:
        pid, status, usage = os.wait4(-1, os.WNOHANG)
        if pid == 0:
            return
        _log(f"ended {pid} {usage.ru_utime + usage.ru_stime:.2f} CPU-s")
        connection = waiting.pop(pid, None)
        if connection is None:
            continue
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        try:
            connection.sendall(b"S" + _PID.pack(code))
        except OSError:
            pass
        connection.close()


def _start(connection, listener, settings, waiting) -> None:
    fds: list[int] = []
    try:
        connection.settimeout(10)
        data, fds, _flags, _address = socket.recv_fds(connection, 1 << 16, 3)
        size = _HEADER.unpack(data[:_HEADER.size])[0]
        body = data[_HEADER.size:]
        while len(body) < size:
            chunk = connection.recv(size - len(body))
            if not chunk:
                raise OSError("the step went away")
            body += chunk
        request = json.loads(body)
        connection.settimeout(None)
        asked = {**import_settings(request["environ"]), "flavour": request["flavour"]}
        if (len(fds) != 3 or asked != settings
                or _interpreter(request["executable"]) != _interpreter(sys.executable)):
            connection.sendall(b"D")
            _log(f"{settings['flavour']} {request['name']} declined: "
                 + " ".join(sorted(k for k in asked if asked[k] != settings.get(k))))
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
            _run_step(connection, request, fds)
        finally:
            os._exit(70)
    for fd in fds:
        os.close(fd)
    _log(f"{request['flavour']} {request['name']} {pid}")
    try:
        connection.sendall(b"P" + _PID.pack(pid))
    except OSError:
        pass
    waiting[pid] = connection


def _run_step(connection: socket.socket, request: dict, fds: list[int]) -> None:
    import atexit
    import io
    import runpy
    import threading

    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["environ"])
    import tempfile

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
        code = _exit_code(stop.code)
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


def _exit_code(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


if __name__ == "__main__":  # python -m step_zygote FOLDER FLAVOUR [--no-preload] [--watch PID]
    options = sys.argv[3:]
    serve(sys.argv[1], sys.argv[2], load="--no-preload" not in options,
          watch=int(options[options.index("--watch") + 1]) if "--watch" in options else None)
