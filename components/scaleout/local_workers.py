"""Several training workers as processes on this machine, talking over loopback.

The same ``TF_CONFIG`` construction as a GKE JobSet (:mod:`gkeflow.components.scaleout.cluster`)
and the same worker entrypoint, so a local run exercises multi-worker training end to end.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from gkeflow.components.scaleout import cluster, storage
from gkeflow.components.tracking.client import ENV_TRAINING_RUN


class WorkersFailed(RuntimeError):
    """A worker exited non-zero; the message names it and ends with its log."""


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports that are free now."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def jax_process_env(hosts: list[str], index: int) -> dict[str, str]:
    """Keras' variables joining worker ``index`` to the others (``keras.distribution``)."""
    from gkeflow.components.train import jax_runtime as jr

    return {jr.ADDRESSES_VAR: ",".join(hosts), jr.PROCESS_COUNT_VAR: str(len(hosts)),
            jr.PROCESS_ID_VAR: str(index)}


def run_local_workers(dataset: str, schema: str, params: dict, replicas: int,
                      checkpoint_root: str = "", run_id: str = "", task_name: str = "",
                      echo=print, timeout_s: float | None = None,
                      log_dir: Path | None = None,
                      checkpoint_uri: str = "",
                      chief_env: dict[str, str] | None = None) -> tuple[dict, Path]:
    """Train with ``replicas`` worker processes; returns (chief's summary, published model dir).

    The caller owns the returned directory's parent (a temporary directory) and removes it.
    With ``log_dir`` each worker's whole log is also written to ``worker-<index>.log`` there.
    ``chief_env``: variables for worker 0 only (the MLflow run it logs training into,
    :mod:`gkeflow.components.tracking.handoff`); the other workers never see the run.
    """
    if replicas < 2:
        raise ValueError(f"local workers need replicas >= 2; got {replicas}")
    staging = Path(tempfile.mkdtemp(prefix="gkeflow-local-workers-"))
    try:  # the caller removes the folder after success; a failure leaves nothing
        output = staging / "model"
        hosts = cluster.loopback_hosts(free_ports(replicas))
        workers = []
        for index in range(replicas):
            env = {**os.environ, cluster.HOSTS_ENV: ",".join(hosts),
                   cluster.INDEX_ENV: str(index), "TF_CPP_MIN_LOG_LEVEL": "2"}
            env.pop("TF_CONFIG", None)
            env.pop(ENV_TRAINING_RUN, None)
            if params.get("backend") == "jax":  # Keras on JAX: the first host coordinates
                env.update(jax_process_env(hosts, index))
            if index == 0:
                env.update(chief_env or {})
            workers.append(([sys.executable, "-m", "gkeflow.components.scaleout.worker",
                             "--dataset", dataset, "--schema", schema, "--output", str(output),
                             "--params", json.dumps(params), "--checkpoint-root",
                             checkpoint_root, "--run-id", run_id, "--task-name", task_name,
                             "--checkpoint-uri", checkpoint_uri], env))
        codes, logs = run_processes(workers, echo, timeout_s)
        if log_dir is not None:
            Path(log_dir).mkdir(parents=True, exist_ok=True)
            for index, lines in enumerate(logs):
                (Path(log_dir) / f"worker-{index}.log").write_text("\n".join(lines) + "\n")
        failed = [i for i, code in enumerate(codes) if code != 0]
        if failed:
            index = failed[0]
            tail = "\n".join(logs[index][-30:])
            raise WorkersFailed(f"worker {index} of {replicas} exited with "
                                f"{codes[index]}:\n{tail}")
        summary = storage.published_summary(str(output))
        if summary is None:
            raise WorkersFailed("the chief exited without publishing its model")
        return summary, output
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def run_processes(commands: list[tuple[list[str], dict[str, str]]], echo=print,
                  timeout_s: float | None = None) -> tuple[list[int], list[list[str]]]:
    """Run ``(command, environment)`` pairs side by side; their exit codes and output lines
    (the first one's also passed to ``echo``). However this ends (a timeout, a process
    that cannot start, an interrupt), no process it started is left running."""
    processes: list[subprocess.Popen] = []
    logs: list[list[str]] = [[] for _ in commands]
    threads: list[threading.Thread] = []

    def pump(index: int) -> None:
        for line in processes[index].stdout:
            logs[index].append(line.rstrip("\n"))
            if index == 0:  # the chief's log is the step's log
                echo(line.rstrip("\n"))

    try:
        for index, (command, env) in enumerate(commands):
            processes.append(subprocess.Popen(command, stdout=subprocess.PIPE,
                                              stderr=subprocess.STDOUT, text=True, env=env))
            threads.append(threading.Thread(target=pump, args=(index,), daemon=True))
            threads[-1].start()
        for process in processes:
            process.wait(timeout=timeout_s)
    finally:
        for process in processes:
            if process.poll() is None:
                process.terminate()
                process.wait()
        for thread in threads:
            thread.join(timeout=10)
    return [process.returncode for process in processes], logs
