"""The tests' fork server for pipeline steps (tests/step_site/step_zygote.py): a forked step
must be indistinguishable, to kfp.local and to the tests, from the process it replaces."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from tests.step_site import step_zygote

COMPONENT = textwrap.dedent("""
    def probe(mode: str, backend: str = "tensorflow") -> str:
        import json, os, signal, sys, tempfile, time
        print("PROBE", json.dumps({"pid": os.getpid(), "cwd": os.getcwd(),
                          "marker": os.environ.get("PROBE_MARKER"),
                          "tempdir": tempfile.gettempdir()}), flush=True)
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


def wait_until_listening(folder: str, servers: list[subprocess.Popen]) -> None:
    """Until each server has its socket in ``folder``."""
    deadline = time.monotonic() + 30
    while len(os.listdir(folder)) < len(servers):
        assert all(p.poll() is None for p in servers), "a server ended"
        assert time.monotonic() < deadline, "the servers did not start"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def server():
    """Servers without their imports: what is under test is the handover (their folder)."""
    folder = tempfile.mkdtemp(prefix="gkeflow-zygote-test-")
    env = {**os.environ, step_zygote.LOG_VARIABLE: os.path.join(folder, "forked.log")}
    processes = [subprocess.Popen(
        [sys.executable, "-m", "step_zygote", folder, flavour, "--no-preload"], cwd=folder,
        env=env, stdin=subprocess.DEVNULL) for flavour in step_zygote.FLAVOURS]
    wait_until_listening(folder, processes)
    yield folder
    for process in processes:
        process.kill()
        process.wait()
    shutil.rmtree(folder)


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
    assert probe == {"pid": probe["pid"], "cwd": str(tmp_path), "marker": "ok",
                     "tempdir": tempfile.gettempdir()}
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
    while step_zygote.alive(forked):
        assert time.monotonic() < deadline, "the forked step outlived its process"
        time.sleep(0.05)
    assert not (tmp_path / "stopped").exists()  # SIGKILL: no clean-up, as for the process


@pytest.mark.parametrize("environ", [{"PYTHONHASHSEED": "7"}, {"TF_CPP_MIN_LOG_LEVEL": "0"}],
                         ids=["another hash seed", "another TensorFlow log level"])
def test_a_step_with_other_import_time_settings_runs_the_ordinary_way(tmp_path, server,
                                                                       environ):
    step = start_step(tmp_path, server, "ok", **environ)
    out, err = step.communicate(timeout=60)
    assert step.returncode == 0, err
    assert probe_of(out)["pid"] == step.pid


def test_a_step_on_a_tpu_host_that_leaves_the_backend_to_auto_runs_the_ordinary_way(
        tmp_path, server):
    step = start_step(tmp_path, server, "ok", parameters={"backend": "auto"},
                      TPU_ACCELERATOR_TYPE="v6e-8")
    out, err = step.communicate(timeout=60)
    assert step.returncode == 0, err
    assert probe_of(out)["pid"] == step.pid


@pytest.mark.parametrize("argv, environ, flavour", [
    (["-m", "kfp.dsl.executor_main", '{"backend": "jax"}'], {}, "jax"),
    (["-m", "kfp.dsl.executor_main", '{"backend": "tensorflow"}'], {"KERAS_BACKEND": "jax"},
     "tensorflow"),
    (["-m", "kfp.dsl.executor_main", "{}"], {"KERAS_BACKEND": "jax"}, "jax"),
    # `auto` off a TPU is TensorFlow, whatever KERAS_BACKEND says (select_backend sets it)
    (["-m", "kfp.dsl.executor_main", '{"backend": "auto"}'], {"KERAS_BACKEND": "jax"},
     "tensorflow"),
    (["-m", "kfp.dsl.executor_main", "{}"], {"TPU_ACCELERATOR_TYPE": "v6e-8"}, None),
    (["-m", "gkeflow.components.scaleout.worker", "--params", '{"backend":"jax"}'], {}, "jax"),
    (["-m", "tests.unit.training_runner", "{}"], {}, "tensorflow"),
    (["/venv/bin/gkeflow", "run"], {"KERAS_BACKEND": "jax"}, "cli"),
    (["/venv/lib/ray/_private/workers/default_worker.py", "--node-ip-address=1"], {},
     "tensorflow"),
    (["-m", "gkeflow.pipelines.cli.main", "deploy"], {}, "cli"),
    (["-m", "kfp.dsl.executor_main", '{"backend": "jax"}', '{"backend": "tensorflow"}'], {},
     None),
    (["-c", "import kfp"], {}, "not run"), (["-X", "importtime", "-m", "kfp.dsl.executor_main"],
                                            {}, "not run"),
])
def test_each_process_goes_to_the_server_of_its_keras_backend(argv, environ, flavour):
    orig_argv = ["/venv/bin/python", *argv]
    runs = step_zygote.what_runs(orig_argv)
    if flavour == "not run":
        assert runs is None
        return
    assert step_zygote.flavour_of(runs[1], orig_argv, environ) == flavour


def test_a_command_runs_forked_from_the_commands_server(tmp_path, server):
    env = {**os.environ, step_zygote.ADDRESS_VARIABLE: server}
    script = shutil.which("gkeflow", path=str(Path(sys.executable).parent))
    done = subprocess.run([script, "--version"], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=60, check=False)
    fresh = subprocess.run([script, "--version"], capture_output=True, text=True,
                           env={**env, step_zygote.ADDRESS_VARIABLE: ""}, cwd=tmp_path,
                           timeout=60, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (
        fresh.returncode, fresh.stdout, fresh.stderr) and done.returncode == 0
    forked = Path(server, "forked.log").read_text().splitlines()
    assert [line for line in forked if line.startswith(f"cli {script} ")]


def test_without_a_server_the_step_runs_the_ordinary_way(tmp_path):
    step = start_step(tmp_path, str(tmp_path / "no-server"), "ok")
    out, err = step.communicate(timeout=60)
    assert step.returncode == 0, err
    assert probe_of(out)["pid"] == step.pid


def test_a_step_that_asks_for_jax_runs_forked_from_the_jax_server(tmp_path, server):
    step = start_step(tmp_path, server, "ok", parameters={"backend": "jax"})
    out, err = step.communicate(timeout=60)
    assert step.returncode == 0, err
    pid = probe_of(out)["pid"]
    assert pid != step.pid
    forked = Path(server, "forked.log").read_text().splitlines()
    assert f"jax kfp.dsl.executor_main {pid}" in forked


def test_servers_shared_by_a_run_end_with_the_process_they_watch(tmp_path):
    watched = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    folder = tempfile.mkdtemp(prefix="gkeflow-zygote-test-")
    servers = []
    try:
        servers = [subprocess.Popen(
            [sys.executable, "-m", "step_zygote", folder, flavour, "--no-preload", "--watch",
             str(watched.pid)], cwd=folder, stdin=subprocess.DEVNULL)
            for flavour in step_zygote.FLAVOURS]
        wait_until_listening(folder, servers)
        step = start_step(tmp_path, folder, "ok")  # they serve while it lives
        out, err = step.communicate(timeout=60)
        assert step.returncode == 0 and probe_of(out)["pid"] != step.pid, err
        watched.kill()
        watched.wait()
        assert [server.wait(timeout=30) for server in servers] == [0] * len(servers)
        assert not os.path.exists(folder)
    finally:
        for process in (watched, *servers):
            process.kill()
            process.wait()
        shutil.rmtree(folder, ignore_errors=True)


def test_a_forked_step_finds_its_temporary_folder_where_its_tmpdir_says(tmp_path):
    """The server's imports may have asked for the temporary folder (Python caches it);
    the step's own TMPDIR still decides."""
    folder = tempfile.mkdtemp(prefix="gkeflow-zygote-test-")
    code = ("import sys, tempfile, step_zygote; tempfile.gettempdir(); "
            "step_zygote.serve(sys.argv[1], 'tensorflow', load=False)")
    server = subprocess.Popen([sys.executable, "-c", code, folder], cwd=folder,
                              stdin=subprocess.DEVNULL)
    try:
        wait_until_listening(folder, [server])
        (tmp_path / "tmp").mkdir()
        step = start_step(tmp_path, folder, "ok", TMPDIR=str(tmp_path / "tmp"))
        out, err = step.communicate(timeout=60)
        assert step.returncode == 0, err
        probe = probe_of(out)
        assert probe["pid"] != step.pid and probe["tempdir"] == str(tmp_path / "tmp")
    finally:
        server.kill()
        server.wait()
        shutil.rmtree(folder, ignore_errors=True)
