"""Run the training pipeline on this machine with ``kfp.local`` and summarise what happened.

Each step runs as a subprocess of the current Python (``SubprocessRunner``, no Docker):
the suite's package must be importable here, exactly as it is in the suite's image.
The full log goes to ``<output>/logs/<run>.log``; progress events and a per-step log
tail are kept so a failure can be reported with its step and error.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
import sys
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ANSI = re.compile(r"\x1b\[[0-9;]*m")
EXECUTING = re.compile(r"Executing task '([^']+)'")
FINISHED = re.compile(r"Task '([^']+)' finished with status (\w+)")
PIPELINE_FINISHED = re.compile(r"Pipeline '[^']+' finished with status (\w+)")
LOG_TAIL_LINES = 25


@dataclass
class StepReport:
    name: str
    status: str = "RUNNING"
    started: float = 0.0
    finished: float = 0.0
    log: list[str] = field(default_factory=list)

    @property
    def duration_s(self) -> float:
        return max(0.0, (self.finished or time.time()) - self.started)

    def error_lines(self, limit: int = 8) -> list[str]:
        """The end of the step's own output: its traceback and exception, when it failed."""
        lines = [line for line in self.log if line.strip()]
        for index in range(len(lines) - 1, -1, -1):
            if lines[index].lstrip().startswith("Traceback (most recent call last)"):
                tail = lines[index:]
                return tail[-limit:]
        return lines[-limit:]


@dataclass
class LocalRunResult:
    ok: bool
    run_dir: Path | None
    log_path: Path
    steps: list[StepReport]
    duration_s: float
    error: str = ""
    #: task -> outputs of steps served from cache (their files stay in the run that made them)
    cached_outputs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def step(self, name: str) -> StepReport | None:
        return next((s for s in self.steps if s.name == name), None)

    @property
    def failed_step(self) -> StepReport | None:
        return next((s for s in self.steps if s.status == "FAILURE"), None)

    def output_dir(self, task: str, output: str) -> Path | None:
        """Where ``task`` wrote ``output``: in this run, or (served from cache) in the run
        that made it."""
        path = self.run_dir / task / output if self.run_dir is not None else None
        if (path is None or not path.exists()) and self._cached_artifact(task, output).get("uri"):
            path = Path(self._cached_artifact(task, output)["uri"])
        return path if path is not None and path.exists() else None

    def _cached_artifact(self, task: str, output: str) -> dict[str, Any]:
        return self.cached_outputs.get(task, {}).get("artifacts", {}).get(output, {})

    def executor_output(self, task: str) -> dict[str, Any]:
        if self.run_dir is None:
            return {}
        path = self.run_dir / task / "executor_output.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def artifact_metadata(self, task: str, output: str) -> dict[str, Any]:
        artifacts = self.executor_output(task).get("artifacts", {})
        entries = artifacts.get(output, {}).get("artifacts", [])
        if entries:
            return dict(entries[0].get("metadata", {}))
        return dict(self._cached_artifact(task, output).get("metadata") or {})

    def parameter_outputs(self, task: str) -> dict[str, Any]:
        written = self.executor_output(task)
        if written:
            return dict(written.get("parameterValues", {}))
        return dict(self.cached_outputs.get(task, {}).get("parameters", {}))


class EventStream(io.TextIOBase):
    """Receives everything kfp.local prints; logs it, tracks steps, optionally echoes it."""

    def __init__(self, log_file, echo, on_event: Callable[[StepReport], None] | None):
        self._log_file = log_file
        self._echo = echo
        self._on_event = on_event
        self._pending: dict[int, str] = {}
        self.steps: dict[str, StepReport] = {}
        self._current: StepReport | None = None
        #: thread -> the step it runs: steps run side by side print from their own threads
        self._by_thread: dict[int, StepReport] = {}
        self._lock = threading.RLock()
        self.pipeline_status = ""
        self.pipeline_finished = 0.0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        with self._lock:
            # whole lines only, kept per thread: steps side by side (and ParallelFor
            # iterations) write parts of lines from their own threads at once
            thread = threading.get_ident()
            pending = self._pending.get(thread, "") + text
            if "\n" in pending:
                whole, pending = pending.rsplit("\n", 1)
                self._emit(whole + "\n")
                for line in whole.split("\n"):
                    self._line(ANSI.sub("", line))
            self._pending[thread] = pending
        return len(text)

    def _emit(self, text: str) -> None:
        self._log_file.write(text)
        self._log_file.flush()
        if self._echo is not None:
            self._echo.write(text)
            self._echo.flush()

    def flush(self) -> None:
        self._log_file.flush()

    def finish(self) -> None:
        """Write what is left of each thread's last line (once the run ended)."""
        with self._lock:
            for thread, pending in list(self._pending.items()):
                if pending:
                    self._emit(pending)
                    self._line(ANSI.sub("", pending))
                self._pending[thread] = ""
            self._log_file.flush()

    def _line(self, line: str) -> None:
        from gkeflow.pipelines.targets.local_cache import CACHE_HIT

        if line.startswith(CACHE_HIT):
            now = time.time()
            step = StepReport(name=line[len(CACHE_HIT):].strip(), status="CACHED", started=now,
                              finished=now)
            self.steps[step.name] = step
            if self._on_event:
                self._on_event(step)
            return
        if match := EXECUTING.search(line):
            name, n = match.group(1), 1
            while name in self.steps:  # a ParallelFor runs the same task once per item
                n += 1
                name = f"{match.group(1)} #{n}"
            step = StepReport(name=name, started=time.time())
            self.steps[step.name] = step
            self._current = self._by_thread[threading.get_ident()] = step
            if self._on_event:
                self._on_event(step)
            return
        if match := PIPELINE_FINISHED.search(line):
            self.pipeline_status, self.pipeline_finished = match.group(1), time.time()
            return
        if match := FINISHED.search(line):
            step = self._by_thread.get(threading.get_ident())
            if step is None or step.status != "RUNNING" \
                    or step.name.split(" #")[0] != match.group(1):
                step = next((s for key, s in self.steps.items() if s.status == "RUNNING"
                             and key.split(" #")[0] == match.group(1)), None)
            if step:
                step.status = match.group(2)
                step.finished = time.time()
                self._by_thread.pop(threading.get_ident(), None)
                if self._current is step:
                    self._current = None
                if self._on_event:
                    self._on_event(step)
            return
        from gkeflow.components.progress import progress_text

        current = self._by_thread.get(threading.get_ident(), self._current)
        said = progress_text(line)
        if said and current is not None and self._on_event:
            self._on_event(StepReport(name=current.name, status="PROGRESS",
                                      started=current.started, log=[said]))
        if current is not None:
            current.log.append(line)


#: kfp.local's SubprocessRunner rewrites every "python3" in a step's arguments to the path
#: of the interpreter, paths inside parameter values included.
_REWRITTEN_WORD = "python3"


class LocalRunError(ValueError):
    """The local run cannot start; the message says why."""


def stage_local_inputs(arguments: dict[str, Any], output_dir: Path) -> dict[str, Any]:
    """Link local input files whose path kfp.local would corrupt to a safe path under output."""
    staged = dict(arguments)
    for key, value in arguments.items():
        if isinstance(value, str) and _REWRITTEN_WORD in value and Path(value).exists():
            source = Path(value).resolve()
            digest = hashlib.sha256(str(source).encode()).hexdigest()[:8]  # stable across runs
            link = output_dir / "inputs" / f"{digest}-{source.name}"
            if _REWRITTEN_WORD in str(link):
                raise LocalRunError(f"cannot stage {source}: its file name contains "
                                    f"{_REWRITTEN_WORD!r}; rename or copy the file")
            link.parent.mkdir(parents=True, exist_ok=True)
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(source)
            staged[key] = str(link)
    return staged


def trust_suite_images() -> None:
    """Silence kfp.local's warning that a step's image may not match this Python environment
    ("custom or non-Python base image ... Consider using the DockerRunner") for the suite's
    own images, and only them: they hold the same gkeflow and kfp as the environment that
    runs the steps. Other images still warn. (A filter of the warnings module: it lasts until
    the caller's ``warnings.catch_warnings`` block, if any, ends.)"""
    from gkeflow.components.images import IMAGES, repository

    for image in IMAGES:
        warnings.filterwarnings(
            "ignore", category=RuntimeWarning,
            message=rf'.*non-Python base image "{re.escape(repository(image))}[:@]')


def init_local(**settings) -> None:
    """``kfp.local.init`` with the subprocess runner of this Python (``settings``: the rest of
    ``local.init``'s arguments), trusting the suite's images (:func:`trust_suite_images`)."""
    from kfp import local

    trust_suite_images()
    local.init(runner=local.SubprocessRunner(use_venv=False), **settings)


def run_local(
    arguments: dict[str, Any],
    output_dir: Path,
    echo_logs: bool = False,
    on_event: Callable[[StepReport], None] | None = None,
    enable_caching: bool = True,
    compute: dict | None = None,
    pipeline: Callable[..., Any] | None = None,
    workspace_root: Path | None = None,
    preparation=None,
    candidates: tuple[str, ...] | None = None,
    parallel_steps: int | None = None,
) -> LocalRunResult:
    """Run ``pipeline`` (default: the training pipeline) with ``arguments`` under
    ``output_dir`` using kfp.local.

    ``compute``: per-step profiles of the training pipeline; ``train-model`` with
    ``replicas > 1`` trains with that many worker processes on loopback.
    ``workspace_root``: the directory of a pipeline built with a workspace (kfp.local
    removes it when the run ends); default: a temporary one.
    ``preparation``: gkeflow.yaml's ``preparation:`` (one pod or fan-out) for the training
    pipeline; default: one pod.
    ``candidates``: gkeflow.yaml's ``candidates:``, the families ``model_type: auto``
    trains, each in a task of its own (the ``candidates`` argument wins); default: gbdt,
    mlp, linear.
    ``parallel_steps``: how many independent steps run at once (1: one at a time, as
    kfp.local does); default: ``GKEFLOW_LOCAL_STEPS``, else the cores, at most 4.
    """

    if pipeline is None:
        from gkeflow.components.train.families import DEFAULT_CANDIDATES
        from gkeflow.pipelines.compute.profiles import ComputeError
        from gkeflow.pipelines.definitions.preparation import ONE_POD
        from gkeflow.pipelines.definitions.training import (
            build_training_pipeline,
            training_pipeline,
        )
        from gkeflow.pipelines.settings.parameters import ParameterError, run_families

        pipeline = training_pipeline
        try:
            families = run_families(arguments, candidates)
        except ParameterError as exc:
            raise LocalRunError(str(exc)) from exc
        if compute or (preparation is not None and preparation.fanout) \
                or families != DEFAULT_CANDIDATES:
            try:
                pipeline = build_training_pipeline("local", compute, preparation=preparation
                                                   or ONE_POD, families=families)
            except ComputeError as exc:
                raise LocalRunError(str(exc)) from exc

    from gkeflow.pipelines.targets.local_forks import enabled, forked_steps
    from gkeflow.pipelines.targets.local_parallel import default_workers, side_by_side

    try:
        parallel_steps = default_workers() if parallel_steps is None else parallel_steps
        enabled()
    except ValueError as exc:
        raise LocalRunError(str(exc)) from exc
    output_dir = Path(output_dir).resolve()
    if _REWRITTEN_WORD in str(output_dir):
        raise LocalRunError(
            f"the output directory {output_dir} contains {_REWRITTEN_WORD!r}, which kfp.local "
            "rewrites in step arguments; choose another --output"
        )
    arguments = stage_local_inputs(arguments, output_dir)
    pipeline_root = output_dir / "runs"
    logs = output_dir / "logs"
    for folder in (pipeline_root, logs):
        folder.mkdir(parents=True, exist_ok=True)
    before = set(pipeline_root.iterdir())
    log_path = logs / time.strftime("run-%Y%m%d-%H%M%S.log")

    init_local(
        pipeline_root=str(pipeline_root),
        raise_on_error=False,
        enable_caching=enable_caching,
        cache_root=str(output_dir / "cache"),
        workspace_root=str(workspace_root) if workspace_root else None,
    )
    started = time.time()
    error = ""
    from gkeflow.pipelines.targets.local_cache import CACHE_HIT, metadata_only_artifacts_hit

    with log_path.open("w", encoding="utf-8") as log_file, \
            metadata_only_artifacts_hit(lambda task: stream.write(f"{CACHE_HIT} {task}\n")) \
            as served:
        stream = EventStream(log_file, sys.__stdout__ if echo_logs else None, on_event)
        with contextlib.redirect_stdout(stream), contextlib.redirect_stderr(stream), \
                warnings.catch_warnings():
            trust_suite_images()
            warnings.filterwarnings("ignore", message=".*no effect in the current local runner.*")
            try:
                with side_by_side(parallel_steps), \
                        forked_steps(str(arguments.get("backend", ""))):
                    pipeline(**arguments)
            except Exception as exc:  # kfp.local raises for invalid arguments
                error = f"{type(exc).__name__}: {exc}"
                print(error)
            stream.finish()
    duration = time.time() - started
    new_runs = sorted(set(pipeline_root.iterdir()) - before, key=lambda p: p.stat().st_mtime)
    steps = list(stream.steps.values())
    if stream.pipeline_status == "SUCCESS":
        # a step whose "finished" line was lost (kfp.local logs it through process-wide
        # swaps; local_parallel.py makes them safe for threads): a pipeline that succeeded
        # had every task succeed.
        for step in steps:
            if step.status == "RUNNING":
                step.status, step.finished = "SUCCESS", stream.pipeline_finished
    ok = not error and bool(steps) and all(s.status in ("SUCCESS", "CACHED") for s in steps)
    if not ok and not error:
        failed = next((s for s in steps if s.status not in ("SUCCESS", "CACHED")), None)
        error = f"step {failed.name} failed" if failed else "the pipeline did not run any step"
    return LocalRunResult(
        ok=ok,
        run_dir=new_runs[-1] if new_runs else None,
        log_path=log_path,
        steps=steps,
        duration_s=duration,
        error=error,
        cached_outputs=served,
    )
