"""Independent steps of a local run side by side, as a cluster runs them.

kfp.local runs a pipeline's tasks one after another in a topological order, so a local
``model_type: auto`` run pays each candidate's start (a Python process, TensorFlow's
import, a SavedModel) in turn although nothing orders them. While :func:`side_by_side`
lasts, each time kfp.local asks for a task of a DAG, the other tasks of that DAG whose
upstream tasks have all succeeded start too, each in a thread of its own that runs
kfp.local's own task executor (a subprocess, its cache, its retries); when kfp.local asks
for one of them, it gets that task's result. At most ``workers`` run at once per DAG.

Only plain tasks start early: a container step with no condition, no loop and no exit-handler
trigger, whose upstream tasks kfp.local has already been given as succeeded, so a task never
starts before its inputs exist, nor when kfp.local would skip it. A DAG's early tasks are
waited for before the DAG returns: nothing outlives the run. Steps that install packages
with pip (``packages_to_install``) still run one at a time: kfp.local holds a lock for them.
Where kfp.local's orchestrator is not the one this was written for (its functions renamed),
the run is one task at a time. Side by side, the steps' OpenMP threads wait passively
(``OMP_WAIT_POLICY=PASSIVE`` unless set): spinning, they take the cores the others need.

kfp.local's logging context and indented ``print`` are process-wide swaps that tasks in
threads undo for each other (lost "finished" lines, ``print`` left indented); while this
lasts, the first task in installs them and the last one out restores them.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import threading
from typing import Any

#: The most steps a local run starts at once by default: the machine's cores, at most 4.
DEFAULT_WORKERS = max(1, min(4, os.cpu_count() or 1))

#: OpenMP's setting for idle threads, ``PASSIVE`` for the steps of a run whose steps run side
#: by side (unless set already): threads that spin while they wait take the cores the other
#: steps need (XGBoost's training took twice as long beside two other steps).
WAIT_POLICY = "OMP_WAIT_POLICY"

_LOCAL = threading.local()
_LOCK = threading.Lock()
#: Runs in progress in this process (patches are installed by the first, removed by the
#: last) and kfp.local's own functions, saved before the first patch.
_ACTIVE: list[object] = []
_ORIGINAL: dict[str, Any] = {}
#: Environment variables the first run set (and the last one removes).
_SET_HERE: set[str] = set()


def default_workers() -> int:
    """``GKEFLOW_LOCAL_STEPS`` when set (a whole number of at least 1), else
    :data:`DEFAULT_WORKERS`."""
    value = os.environ.get("GKEFLOW_LOCAL_STEPS", "").strip()
    if not value:
        return DEFAULT_WORKERS
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"GKEFLOW_LOCAL_STEPS must be a whole number of at least 1, "
                         f"not {value!r}")
    return int(value)


class _Dag:
    """One DAG being run by kfp.local: its tasks, which of them kfp.local has been given as
    succeeded, and the ones started early."""

    def __init__(self, dag_spec, components, workers: int) -> None:
        self.tasks = dict(dag_spec.tasks)
        self.components = components
        self.succeeded: set[str] = set()
        self.started: dict[str, concurrent.futures.Future] = {}
        self.pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix="gkeflow-step")

    def plain(self, name: str) -> bool:
        """Whether ``name`` is a container step kfp.local runs unconditionally once its
        upstream tasks have succeeded."""
        from kfp.pipeline_spec import pipeline_spec_pb2

        spec = self.tasks.get(name)
        if spec is None or spec.trigger_policy.condition or spec.WhichOneof("iterator"):
            return False
        strategy = pipeline_spec_pb2.PipelineTaskSpec.TriggerPolicy.TriggerStrategy
        if spec.trigger_policy.strategy not in (strategy.TRIGGER_STRATEGY_UNSPECIFIED,
                                                strategy.ALL_UPSTREAM_TASKS_SUCCEEDED):
            return False
        component = self.components.get(spec.component_ref.name)
        return component is not None and component.WhichOneof("implementation") == \
            "executor_label"

    def ready(self) -> list[str]:
        """Plain tasks not started whose upstream tasks all succeeded, in name order."""
        return [name for name in sorted(self.tasks)
                if name not in self.started and name not in self.succeeded
                and self.plain(name)
                and all(dep in self.succeeded for dep in self.tasks[name].dependent_tasks)]

    def start(self, name: str, arguments: dict[str, Any]) -> None:
        self.started[name] = self.pool.submit(
            _ORIGINAL["execute_single_task"],
            **{**arguments, "task_name": name, "task_spec": self.tasks[name]})

    def close(self) -> None:
        """Wait for every task running (none outlives its DAG); those still queued are not
        started: kfp.local returned without them (a failed task, an interruption)."""
        self.pool.shutdown(wait=True, cancel_futures=True)


def _stack() -> list[_Dag]:
    if not hasattr(_LOCAL, "dags"):
        _LOCAL.dags = []
    return _LOCAL.dags


def _execute_single_task(*args, **arguments):
    """kfp.local's ``execute_single_task``, starting the DAG's other ready tasks beside it."""
    from kfp.local import status

    dags = _stack()
    dag = dags[-1] if dags else None
    name = arguments.get("task_name")
    if args or dag is None or name not in dag.tasks:
        return _ORIGINAL["execute_single_task"](*args, **arguments)
    if name not in dag.started and not dag.plain(name):  # kfp.local's own way, in turn
        outputs, state = _ORIGINAL["execute_single_task"](**arguments)
    else:
        if name not in dag.started:
            dag.start(name, arguments)
        for other in dag.ready():
            dag.start(other, arguments)
        outputs, state = dag.started[name].result()
    if state == status.Status.SUCCESS:
        dag.succeeded.add(name)
    return outputs, state


def _dag_runner(original, workers: int):
    def run(*args, **arguments):
        if workers <= 1 or args or "dag_component_spec" not in arguments:
            return original(*args, **arguments)
        dag = _Dag(arguments["dag_component_spec"].dag, arguments["components"], workers)
        _stack().append(dag)
        try:
            return original(**arguments)
        finally:
            _stack().pop()
            dag.close()
    return run


class _Shared:
    """A process-wide context manager of kfp.local's (``logging_utils``) made safe for
    threads: the first thread in enters it, the last one out leaves it. kfp.local's own
    swap the root logger's handlers and ``print`` for the task's span and restore what they
    found, so two tasks at once (side by side, or ParallelFor iterations) drop each other's
    "finished" lines or leave ``print`` indented."""

    def __init__(self, original) -> None:
        self.original = original
        self.depth = 0
        self.entered = None
        self.lock = threading.Lock()

    @contextlib.contextmanager
    def __call__(self, *args, **kwargs):
        with self.lock:
            if self.depth == 0:
                self.entered = self.original(*args, **kwargs)
                self.entered.__enter__()
            self.depth += 1
        try:
            yield
        finally:
            with self.lock:
                self.depth -= 1
                if self.depth == 0:
                    entered, self.entered = self.entered, None
                    entered.__exit__(None, None, None)


def _targets():
    from kfp.local import logging_utils
    from kfp.local.orchestrator import dag_orchestrator, enhanced_dag_orchestrator, task_executor

    return {"execute_single_task": task_executor, "run_dag": dag_orchestrator,
            "run_enhanced_dag": enhanced_dag_orchestrator,
            "local_logger_context": logging_utils, "indented_print": logging_utils}


def _replacements(workers: int) -> dict:
    return {"execute_single_task": _execute_single_task,
            "run_dag": _dag_runner(_ORIGINAL["run_dag"], workers),
            "run_enhanced_dag": _dag_runner(_ORIGINAL["run_enhanced_dag"], workers),
            "local_logger_context": _Shared(_ORIGINAL["local_logger_context"]),
            "indented_print": _Shared(_ORIGINAL["indented_print"])}


@contextlib.contextmanager
def side_by_side(workers: int | None = None):
    """Run independent plain tasks of kfp.local runs started while this lasts side by side,
    at most ``workers`` (default :func:`default_workers`) at once per DAG; 1: one at a time,
    as kfp.local does. Either way, kfp.local's logging is made safe for tasks in threads
    (its ParallelFor iterations run in threads)."""
    workers = default_workers() if workers is None else workers
    try:
        modules = _targets()
    except ImportError:
        yield
        return
    if not all(callable(getattr(module, name, None)) for name, module in modules.items()):
        yield
        return
    token = object()
    with _LOCK:
        if not _ACTIVE:
            _ORIGINAL.update({name: getattr(module, name) for name, module in modules.items()})
            for name, replacement in _replacements(workers).items():
                setattr(modules[name], name, replacement)
            if workers > 1 and WAIT_POLICY not in os.environ:
                os.environ[WAIT_POLICY] = "PASSIVE"
                _SET_HERE.add(WAIT_POLICY)
        _ACTIVE.append(token)
    try:
        yield
    finally:
        with _LOCK:
            _ACTIVE.remove(token)
            if not _ACTIVE:
                for name, module in modules.items():
                    setattr(module, name, _ORIGINAL[name])
                for name in _SET_HERE:
                    os.environ.pop(name, None)
                _SET_HERE.clear()
