"""The ``gkeflow`` command as the tests call it: its real click entry point, in this process
for the commands that only read config and talk to servers, in a subprocess for the rest.

A fresh Python costs about two CPU-seconds of imports per call, and the suite makes hundreds
of such calls. In process, a call runs ``gkeflow.pipelines.cli.main:main`` exactly as the
console script does: same arguments, working folder and environment; what it prints to
standard output and standard error; the exit code; an unexpected exception's traceback on
standard error, as Python would print it. Working folder, environment and ``sys.path`` are
restored afterwards.

Commands that start pipelines under kfp.local, load TensorFlow, build images or handle
signals (:data:`SUBPROCESS_COMMANDS`) run in a subprocess, except their ``--help`` and the
calls a test marks ``before_any_step=True`` (a ``run`` refused while its options and config
are read, which starts no pipeline). All calls run in a subprocess when
``GKEFLOW_TEST_CLI=subprocess`` is set (the whole suite then checks the console script too).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shutil
import subprocess
import sys
import traceback
import warnings
from collections.abc import Iterator
from pathlib import Path

#: What runs in a subprocess whatever the setting: kfp.local runs (``run``), TensorFlow
#: model checks and local endpoints (``deploy``), image builds and their signal handling
#: (``images``).
SUBPROCESS_COMMANDS = frozenset({"run", "deploy", "images"})

#: The environment the console script gets in every test call.
BASE_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2"}

MODE_ENV = "GKEFLOW_TEST_CLI"


def command_of(args: tuple[str, ...]) -> str | None:
    """The subcommand named in ``args`` (the first word that is not an option)."""
    return next((arg for arg in args if not arg.startswith("-")), None)


def runs_in_process(args: tuple[str, ...], before_any_step: bool = False) -> bool:
    if os.environ.get(MODE_ENV, "").strip().lower() == "subprocess":
        return False
    if "--version" in args:
        return False  # the installed distribution's version, as the console script reads it
    if before_any_step or "--help" in args:
        return True  # nothing is started: help text, or a refusal before any step
    return command_of(args) not in SUBPROCESS_COMMANDS


def gkeflow(*args: str, cwd: Path | str | None = None, env: dict | None = None,
            timeout: int = 600, subprocess_only: bool = False,
            before_any_step: bool = False) -> subprocess.CompletedProcess:
    """Run ``gkeflow ARGS`` in ``cwd`` with ``env`` added to this process's environment (a
    value of None removes that variable). ``before_any_step``: the call is expected to end
    before any pipeline step starts (a refused ``run``), so it may run in this process."""
    extra = {**BASE_ENV, **(env or {})}
    if subprocess_only or not runs_in_process(args, before_any_step):
        return _in_subprocess(args, cwd, extra, timeout)
    return _in_process(args, cwd, extra)


def _in_subprocess(args, cwd, extra: dict, timeout: int) -> subprocess.CompletedProcess:
    executable = shutil.which("gkeflow", path=str(Path(sys.executable).parent))
    assert executable, "the gkeflow console script is not installed in this environment"
    return subprocess.run([executable, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, check=False,
                          env={k: v for k, v in {**os.environ, **extra}.items() if v is not None})


def _in_process(args, cwd, extra: dict) -> subprocess.CompletedProcess:
    from click.testing import CliRunner

    from gkeflow.pipelines.cli.main import main

    saved_env, saved_cwd, saved_path = dict(os.environ), os.getcwd(), list(sys.path)
    late = io.StringIO()  # what a fresh Python would add to standard error: warnings, logs
    try:
        os.chdir(cwd or saved_cwd)
        with _python_defaults(late):
            result = CliRunner().invoke(main, list(args), env=extra, prog_name="gkeflow",
                                        catch_exceptions=True)
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        sys.path[:] = saved_path
    stderr = result.stderr + late.getvalue()
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(*result.exc_info))
    return subprocess.CompletedProcess(["gkeflow", *args], result.exit_code, result.stdout,
                                       stderr)


@contextlib.contextmanager
def _python_defaults(stream: io.StringIO) -> Iterator[None]:
    """Warnings under Python's default filters and log records of WARNING and above (as
    ``logging.lastResort`` prints them in a fresh process) go to ``stream``, not to the
    test's own capture."""
    handler = logging.StreamHandler(stream)
    handler.setLevel(logging.WARNING)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.resetwarnings()
            for action, category in (("ignore", DeprecationWarning),
                                     ("ignore", PendingDeprecationWarning),
                                     ("ignore", ImportWarning), ("ignore", ResourceWarning)):
                warnings.simplefilter(action, category)
            yield
    finally:
        root.removeHandler(handler)
    for warning in caught:
        stream.write(warnings.formatwarning(warning.message, warning.category,
                                            warning.filename, warning.lineno))
