"""The tests' fork server for pipeline steps (tests/step_site/step_zygote.py): a forked step
must be indistinguishable, to kfp.local and to the tests, from the process it replaces."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.step_site import step_zygote

COMPONENT = textwrap.dedent("""
    def probe(mode: str, backend: str = "tensorflow") -> str:
        import json, os, signal, sys, time
        print("PROBE", json.dumps({"pid": os.getpid(), "cwd": os.getcwd(),
                          "marker": os.environ.get("PROBE_MARKER")}), flush=True)
        print("to stderr", file=sys.stderr, flush=True)
        if mode == "fail":
            raise RuntimeError("the probe failed")
        if mode == "exit":
            sys.exit(3)
        if mode in ("term", "wait"):
            def stop(number, frame):
                open(os.environ["PROBE_STOPPED"], "w").write("stopped")
                sys.exit(143)
            signal.signal(signal.SIGTERM, stop)
            print("ready", flush=True)
            time.sleep(60)
        return "done"
""")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A server without the TensorFlow preload: what is under test is the handover."""
    folder = tmp_path_factory.mktemp("zygote")
    address = str(Path("/tmp") / f"gkeflow-zygote-test-{os.getpid()}")
    process = subprocess.Popen([sys.executable, "-m", "step_zygote", address, "--no-preload"],
                               cwd=folder, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not os.path.exists(address):
        assert process.poll() is None and time.monotonic() < deadline, "server did not start"
        time.sleep(0.05)
    yield address
    process.kill()
    process.wait()
    os.unlink(address)


def start_step(tmp_path: Path, address: str, mode: str, python: str = sys.executable,
               parameters: dict | None = None, **environ) -> subprocess.Popen:
    (tmp_path / "component.py").write_text(COMPONENT)
    executor_input = {"inputs": {"parameterValues": {"mode": mode, **(parameters or {})}},
                      "outputs": {
        "parameters": {"Output": {"outputFile": str(tmp_path / "Output")}},
        "outputFile": str(tmp_path / "executor_output.json")}}
    env = {**os.environ, step_zygote.ADDRESS_VARIABLE: address, "_KFP_RUNTIME": "true",
           "PROBE_MARKER": mode, "PROBE_STOPPED": str(tmp_path / "stopped"), **environ}
    return subprocess.Popen(
        [python, "-m", "kfp.dsl.executor_main", "--component_module_path",
         str(tmp_path / "component.py"), "--function_to_execute", "probe",
         "--executor_input", json.dumps(executor_input)],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def probe_of(stdout: str) -> dict:
    return next(json.loads(line.split(" ", 1)[1]) for line in stdout.splitlines()
                if line.startswith("PROBE "))


#: kfp.local's command says python3, and the tests' Python may be called python
PYTHONS = sorted({sys.executable, *[str(p) for p in [Path(sys.executable).with_name("python3")]
                                    if p.exists()]})


@pytest.mark.parametrize("python", PYTHONS)
def test_a_forked_step_writes_its_outputs_streams_and_status_as_the_process_would(
        tmp_path, server, python):
    step = start_step(tmp_path, server, "ok", python=python)
    out, err = step.communicate(timeout=60)
    assert step.returncode == 0, err
    probe = probe_of(out)
    assert probe["pid"] != step.pid  # it ran in a fork of the server
    assert probe == {"pid": probe["pid"], "cwd": str(tmp_path), "marker": "ok"}
    assert "to stderr" in err and "Wrote executor output file" in out
    assert json.loads((tmp_path / "executor_output.json").read_text()) == {
        "parameterValues": {"Output": "done"}}


@pytest.mark.parametrize("mode, code, text", [("fail", 1, "RuntimeError: the probe failed"),
                                              ("exit", 3, "")])
def test_a_forked_steps_failure_is_the_processs_exit_status(tmp_path, server, mode, code,
                                                              text):
    step = start_step(tmp_path, server, mode)
    out, err = step.communicate(timeout=60)
    assert probe_of(out)["pid"] != step.pid
    assert step.returncode == code and text in err
    assert not (tmp_path / "executor_output.json").exists()


def wait_until_ready(step: subprocess.Popen) -> dict:
    lines = []
    while not lines or lines[-1].strip() != "ready":
        lines.append(step.stdout.readline())
        assert lines[-1], "".join(lines)
    return probe_of("".join(lines))


def test_sigterm_to_the_step_process_reaches_the_forked_step(tmp_path, server):
    step = start_step(tmp_path, server, "term")
    probe = wait_until_ready(step)
    step.send_signal(signal.SIGTERM)
    step.wait(timeout=30)
    assert probe["pid"] != step.pid
    assert step.returncode == 143 and (tmp_path / "stopped").read_text() == "stopped"


def test_a_step_process_killed_takes_the_forked_step_with_it(tmp_path, server):
    step = start_step(tmp_path, server, "wait")
    forked = wait_until_ready(step)["pid"]
    step.kill()
    step.wait(timeout=30)
    deadline = time.monotonic() + 10
    while alive(forked):
        assert time.monotonic() < deadline, "the forked step outlived its process"
        time.sleep(0.05)
    assert not (tmp_path / "stopped").exists()  # SIGKILL: no clean-up, as for the process


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("environ", [{"KERAS_BACKEND": "jax"}, {"TF_CPP_MIN_LOG_LEVEL": "0"}],
                         ids=["another Keras backend", "another TensorFlow log level"])
def test_a_step_with_other_import_time_settings_runs_the_ordinary_way(tmp_path, server,
                                                                       environ):
    step = start_step(tmp_path, server, "ok", **environ)
    out, err = step.communicate(timeout=60)
    assert step.returncode == 0, err
    assert probe_of(out)["pid"] == step.pid


@pytest.mark.parametrize("parameters, environ", [
    ({"backend": "jax"}, {}), ({"backend": "auto"}, {"TPU_ACCELERATOR_TYPE": "v6e-8"})],
    ids=["jax", "auto on a TPU"])
def test_a_step_that_may_pick_the_jax_backend_itself_runs_the_ordinary_way(
        tmp_path, server, parameters, environ):
    step = start_step(tmp_path, server, "ok", parameters=parameters, **environ)
    out, err = step.communicate(timeout=60)
    assert step.returncode == 0, err
    assert probe_of(out)["pid"] == step.pid


def test_without_a_server_the_step_runs_the_ordinary_way(tmp_path):
    step = start_step(tmp_path, str(tmp_path / "no-server"), "ok")
    out, err = step.communicate(timeout=60)
    assert step.returncode == 0, err
    assert probe_of(out)["pid"] == step.pid
