"""The steps of a local run as forks of one process that imported TensorFlow once.

kfp.local starts every step as ``sh -ec '... python -m kfp.dsl.executor_main ...'``, a fresh
interpreter that imports TensorFlow and Keras again: 3-4 s of each of the five TensorFlow
steps of a ``model_type: auto`` run here. While :func:`forked_steps` lasts, a fork server
(:mod:`~gkeflow.pipelines.targets.fork_server`) imports them once in the background, and
each step's command runs ``python -m gkeflow.pipelines.targets.forked_step ADDRESS
kfp.dsl.executor_main ...`` instead, which hands the step to the server and exits as the
forked step does. Until the server has imported them (a few seconds), and for a step whose
import-time environment differs from the server's, the step runs the ordinary way.

``GKEFLOW_LOCAL_FORKS=0`` turns it off: every step a fresh interpreter, as in the images.
Only local runs use it; the steps of a cluster are ordinary processes in their images.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import subprocess
import sys
import tempfile
import threading

from gkeflow.pipelines.targets.fork_server import FLAVOURS

SWITCH = "GKEFLOW_LOCAL_FORKS"
STEP_MODULE = "kfp.dsl.executor_main"
CLIENT_MODULE = "gkeflow.pipelines.targets.forked_step"
#: The Keras backend a step asks for itself (train-model's ``backend`` parameter).
_BACKEND = re.compile(r'"backend":\s*"(jax|tensorflow|auto)"')

_LOCK = threading.Lock()
_ORIGINAL: dict[str, object] = {}


def enabled(environ=os.environ) -> bool:
    value = environ.get(SWITCH, "1").strip().lower()
    if value not in ("0", "1", "false", "true", "no", "yes", "off", "on", ""):
        raise ValueError(f"{SWITCH}={environ.get(SWITCH)!r}: set it to 1 (steps forked from "
                         "one process that imported TensorFlow) or 0 (each step a fresh "
                         "Python)")
    return value not in ("0", "false", "no", "off")


def step_backend(setting: str, environ=os.environ) -> str | None:
    """The Keras backend a step on this (TPU-less) host imports: the one its ``backend``
    setting resolves to, as the step resolves it; with none, ``KERAS_BACKEND``'s (Keras'
    default: TensorFlow); None for a setting no step accepts."""
    from gkeflow.components.train.backend import BackendError, resolve_backend

    if not setting:
        return environ.get("KERAS_BACKEND") or "tensorflow"
    try:
        return resolve_backend(setting, on_tpu=False)
    except BackendError:  # the step itself refuses it
        return None


def run_flavour(backend: str, environ=os.environ) -> str | None:
    """The server a run needs: its training steps' Keras backend (``backend``: the run's
    setting); None on a TPU host, where ``auto`` steps pick JAX themselves."""
    from gkeflow.components.train.tpu import find_tpu, tpu_device_files

    try:
        if backend in ("", "auto") and find_tpu(environ, tpu_device_files()) is not None:
            return None
    except ValueError:  # the step itself says what is wrong with its TPU variables
        return None
    flavour = step_backend(backend, environ)
    return flavour if flavour in FLAVOURS else None


def rewrite(full_command: list[str], address: str, flavour: str, environ=os.environ
            ) -> list[str]:
    """``full_command`` with its ``python -m kfp.dsl.executor_main`` handed to the server
    at ``address``; unchanged for a step on another Keras backend than ``flavour`` (the one
    it asks for, else ``KERAS_BACKEND``'s), for one that installs packages first, or one
    not started that way."""
    asked = {m.group(1) for part in full_command for m in _BACKEND.finditer(part)}
    if len(asked) > 1 or step_backend(next(iter(asked), ""), environ) != flavour:
        return list(full_command)
    if any("pip install" in part for part in full_command):  # may replace what was imported
        return list(full_command)
    target = f" -m {STEP_MODULE} "
    changed, done = [], False
    for part in full_command:
        if not done and target in part and "ephemeral_component.py" in part:
            part = part.replace(target, f" -m {CLIENT_MODULE} {shlex.quote(address)} "
                                        f"{STEP_MODULE} ", 1)
            done = True
        changed.append(part)
    return changed


class _Server:
    def __init__(self, flavour: str) -> None:
        self.flavour = flavour
        self.folder = tempfile.mkdtemp(prefix="gkeflow-forks-")  # short: < 108 bytes
        self.address = os.path.join(self.folder, flavour)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gkeflow.pipelines.targets.fork_server", self.address,
             flavour, str(os.getpid())],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        import shutil

        shutil.rmtree(self.folder, ignore_errors=True)


def _run_local_subprocess(server: _Server):
    original = _ORIGINAL["run_local_subprocess"]

    def run(full_command, *args, **kwargs):
        return original(rewrite(full_command, server.address, server.flavour), *args,
                        **kwargs)
    return run


@contextlib.contextmanager
def forked_steps(backend: str = ""):
    """Steps of kfp.local runs started while this lasts run as forks of a server that
    imported the Keras ``backend``'s modules (see the module's docstring); nothing changes
    where ``GKEFLOW_LOCAL_FORKS=0``, on a TPU host, or where kfp.local does not start its
    steps the way this knows."""
    try:
        from kfp.local import subprocess_task_handler as handler
    except ImportError:
        handler = None
    flavour = run_flavour(backend) if enabled() else None
    if flavour is None or not callable(getattr(handler, "run_local_subprocess", None)):
        yield None
        return
    with _LOCK:
        if _ORIGINAL:  # a run of this process has one already: its steps use it
            server = None
        else:
            server = _Server(flavour)
            _ORIGINAL["run_local_subprocess"] = handler.run_local_subprocess
            handler.run_local_subprocess = _run_local_subprocess(server)
    if server is None:
        yield None
        return
    try:
        yield server
    finally:
        with _LOCK:
            handler.run_local_subprocess = _ORIGINAL.pop("run_local_subprocess")
        server.stop()
