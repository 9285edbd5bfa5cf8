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
ordinary way. The forking itself is gkeflow.pipelines.targets.fork_server's, which serves
the steps of `gkeflow run`; this adds the tests' flavours (the command's server, JAX) and
hands over every Python process the tests start that it knows (tests/conftest.py starts one
set per test run, shared by its workers). Steps in images are ordinary processes."""

from __future__ import annotations

import os
import re
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
#: The Keras backend a step asks for itself (train-model's ``backend`` parameter, in the
#: executor input or a worker's ``--params``); ``auto`` is JAX on a host with a TPU.
_BACKEND = re.compile(r'"backend":\s*"(jax|tensorflow|auto)"')


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
    # imported here: every process the tests start loads this module (a step that is not
    # handed over, e.g. an example that must not import gkeflow, does not import it)
    from gkeflow.pipelines.targets import fork_server

    code = fork_server.delegate(os.path.join(folder, flavour), kind, name, arguments)
    if code is not None:
        fork_server.exit_as(code)


# --- the server (gkeflow.pipelines.targets.fork_server's, with the tests' flavours) -------


def serve(folder: str, flavour: str, load: bool = True, watch: int | None = None) -> None:
    """Preload (unless not ``load``), then fork a process for every step that connects to
    ``folder/flavour``, until killed or, with ``watch``, until that process has ended
    (then the folder is removed)."""
    from gkeflow.pipelines.targets import fork_server

    fork_server.serve(os.path.join(folder, flavour), flavour, watch=watch, load=load,
                      log=(lambda line: _log(f"{flavour} {line}"))
                      if os.environ.get(LOG_VARIABLE) else None,
                      settings_of=lambda request: import_settings(request["environ"]),
                      modules=FLAVOURS[flavour], later=())
    if watch is not None:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


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
    from gkeflow.pipelines.targets import fork_server

    return fork_server.alive(pid)


def _log(line: str) -> None:
    with open(os.environ[LOG_VARIABLE], "a", encoding="utf-8") as log:
        log.write(line + "\n")


if __name__ == "__main__":  # python -m step_zygote FOLDER FLAVOUR [--no-preload] [--watch PID]
    options = sys.argv[3:]
    serve(sys.argv[1], sys.argv[2], load="--no-preload" not in options,
          watch=int(options[options.index("--watch") + 1]) if "--watch" in options else None)
