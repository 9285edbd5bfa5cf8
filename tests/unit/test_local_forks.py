"""gkeflow run's fork server (pipelines/targets/fork_server.py, forked_step.py,
local_forks.py): a step handed to it runs as a fork with the step process's arguments,
streams, directory and environment and ends as the process would; without a server, or
with other import-time settings, the step runs the ordinary way."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from gkeflow.pipelines.targets import local_forks
from gkeflow.pipelines.targets.fork_server import alive

PROBE = textwrap.dedent("""
    import json, os, sys, time
    print(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "argv": sys.argv[1:],
                      "cwd": os.getcwd(), "marker": os.environ.get("PROBE_MARKER")}),
          flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    if sys.argv[1] == "wait":
        open("started", "w").close()
        time.sleep(60)
    sys.exit(int(sys.argv[1]))
""")


@pytest.fixture
def server(tmp_path):
    address = os.path.join(str(tmp_path), "s")
    process = subprocess.Popen(
        [sys.executable, "-m", "gkeflow.pipelines.targets.fork_server", address, "tensorflow",
         str(os.getpid()), "--no-preload"], stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not os.path.exists(address):
        assert process.poll() is None and time.monotonic() < deadline, "no server"
        time.sleep(0.02)
    yield address, process
    process.kill()
    process.wait()


def _client(tmp_path, address, *arguments, env=None, **options):
    (tmp_path / "probe_step.py").write_text(PROBE)
    return subprocess.Popen(
        [sys.executable, "-m", local_forks.CLIENT_MODULE, address, "probe_step", *arguments],
        cwd=tmp_path, env={**os.environ, "PROBE_MARKER": "m", **(env or {})},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **options)


def test_a_step_handed_to_the_server_runs_forked_and_exits_as_the_process_would(tmp_path,
                                                                              server):
    address, process = server
    done = _client(tmp_path, address, "3")
    out, err = done.communicate(timeout=60)
    seen = json.loads(out)
    assert done.returncode == 3 and "to stderr" in err
    assert seen["ppid"] == process.pid and seen["pid"] != done.pid  # a fork of the server
    assert (seen["argv"], seen["cwd"], seen["marker"]) == (["3"], str(tmp_path), "m")


def test_without_a_server_the_step_runs_the_ordinary_way(tmp_path):
    done = _client(tmp_path, str(tmp_path / "none"), "4")
    out, _ = done.communicate(timeout=60)
    assert done.returncode == 4 and json.loads(out)["pid"] == done.pid  # itself, exec'd


def test_a_step_with_other_import_time_settings_is_declined(tmp_path, server):
    address, process = server
    done = _client(tmp_path, address, "0", env={"TF_ENABLE_ONEDNN_OPTS": "0"
                                                if os.environ.get("TF_ENABLE_ONEDNN_OPTS")
                                                != "0" else "1"})
    out, _ = done.communicate(timeout=60)
    assert done.returncode == 0 and json.loads(out)["ppid"] != process.pid


def test_sigterm_to_the_step_process_reaches_the_forked_step(tmp_path, server):
    address, _ = server
    done = _client(tmp_path, address, "wait")
    deadline = time.monotonic() + 30
    while not (tmp_path / "started").exists():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    forked = json.loads(done.stdout.readline())["pid"]
    done.send_signal(signal.SIGTERM)
    assert done.wait(timeout=30) == -signal.SIGTERM
    deadline = time.monotonic() + 10
    while alive(forked):
        assert time.monotonic() < deadline, "the forked step outlived its process"
        time.sleep(0.02)


def test_the_server_ends_with_the_process_it_watches(tmp_path):
    address = str(tmp_path / "s")
    watched = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    process = subprocess.Popen([sys.executable, "-m", "gkeflow.pipelines.targets.fork_server",
                                address, "tensorflow", str(watched.pid), "--no-preload"])
    deadline = time.monotonic() + 30
    while not os.path.exists(address):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    watched.kill()
    watched.wait()
    assert process.wait(timeout=10) == 0 and not os.path.exists(address)


COMMAND = ["sh", "-ec", 'program_path=$(mktemp -d)\nprintf "%s" "$0" > '
           '"$program_path/ephemeral_component.py"\n_KFP_RUNTIME=true /venv/bin/python -m '
           'kfp.dsl.executor_main    --component_module_path '
           '"$program_path/ephemeral_component.py" "$@"\n', "source", "--executor_input"]


@pytest.mark.parametrize("backend, environ, flavour, forked", [
    ("", {}, "tensorflow", True),
    ("tensorflow", {}, "tensorflow", True),
    ("auto", {}, "tensorflow", True),
    ("jax", {}, "tensorflow", False),
    ("jax", {}, "jax", True),
    ("", {"KERAS_BACKEND": "jax"}, "jax", True),
    ("", {}, "jax", False),
    ("auto", {}, "jax", False),
    ("auto", {"KERAS_BACKEND": "jax"}, "tensorflow", True),  # auto off a TPU: TensorFlow
])
def test_a_step_is_handed_over_only_to_the_server_of_its_keras_backend(backend, environ,
                                                                        flavour, forked):
    command = COMMAND + ([json.dumps({"backend": backend})] if backend else ["{}"])
    changed = local_forks.rewrite(command, "/tmp/x y/s", flavour, environ)
    assert (changed != command) is forked
    if forked:
        assert (f"-m {local_forks.CLIENT_MODULE} '/tmp/x y/s' kfp.dsl.executor_main "
                in changed[2]) and changed[3:] == command[3:]


def test_a_command_not_started_as_kfp_local_starts_steps_is_left_as_it_is():
    command = ["python", "-m", "kfp.dsl.executor_main", "--executor_input", "{}"]
    assert local_forks.rewrite(command, "/tmp/s", "tensorflow", {}) == command


def test_a_step_that_installs_packages_first_starts_fresh():
    """What it installs may replace a module the server imported."""
    command = ["sh", "-c", "python3 -m pip install --quiet 'pandas==2.0' && \"$0\" \"$@\"",
               *COMMAND, "{}"]
    assert local_forks.rewrite(command, "/tmp/s", "tensorflow", {}) == command


@pytest.mark.parametrize("value, on", [("0", False), ("off", False), ("1", True), ("", True)])
def test_the_switch(value, on):
    assert local_forks.enabled({local_forks.SWITCH: value}) is on


def test_a_bad_switch_is_refused_with_its_values():
    with pytest.raises(ValueError, match="GKEFLOW_LOCAL_FORKS='maybe': set it to 1"):
        local_forks.enabled({local_forks.SWITCH: "maybe"})


def test_the_run_backend_picks_the_server(monkeypatch):
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    assert local_forks.run_flavour("", {}) == "tensorflow"
    assert local_forks.run_flavour("jax", {}) == "jax"
    assert local_forks.run_flavour("", {"KERAS_BACKEND": "jax"}) == "jax"
    assert local_forks.run_flavour("", {"KERAS_BACKEND": "torch"}) is None
    # as train-model resolves it: auto is TensorFlow off a TPU, whatever KERAS_BACKEND says
    assert local_forks.run_flavour("auto", {"KERAS_BACKEND": "jax"}) == "tensorflow"
    assert local_forks.run_flavour("bogus", {}) is None
