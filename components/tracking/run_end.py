"""A compiled pipeline run's end, written where it is tracked: the exit task (it runs
whatever happened to the steps) gives the run's parent MLflow run and its Vertex AI
experiment run the run's final state, which no step can know.

- **MLflow, direct mode**: the parent run the steps made (found by
  ``gkeflow.pipeline_run_id``; none is made here) ends ``FINISHED``, ``FAILED`` or
  ``KILLED``; nested runs a killed step left ``RUNNING`` end with it; each step served
  from cache (read from the run's backend, :mod:`gkeflow.components.cloud.run_api`) gets its
  nested run all the same, tagged cached (:mod:`cached`). Under Kubeflow
  Pipelines' MLflow plugin (``MLFLOW_RUN_ID``) the backend ends its own runs and nothing is
  done here.
- **Vertex AI Experiments, GKE**: the experiment run the steps log to is marked
  ``COMPLETE``, ``FAILED`` or ``CANCELLED``.
- **Vertex AI Experiments, Vertex AI**: the run's own ``system.PipelineRun`` context is
  added to the experiment (:mod:`vertex_pipeline_run`), so runs a schedule creates join it
  as submitted ones do; Vertex AI keeps that context's state itself.

A run whose end the backend did not name (``UNKNOWN``) is left as the steps left it: a
state is never guessed. Best effort like every tracking call: bounded, one line on failure.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from gkeflow.components.cloud.run_states import CANCELLED, FAILED, SUCCEEDED  # noqa: E402
from gkeflow.components.tracking import client as base
from gkeflow.components.tracking import pipeline_run as names
from gkeflow.components.tracking import vertex_run

#: The run's final state (gkeflow.components.cloud.run_states.final_state) in MLflow's words.
MLFLOW_STATUS = {SUCCEEDED: "FINISHED", FAILED: "FAILED", CANCELLED: "KILLED"}
#: ... and in Vertex ML Metadata's (``Execution.State``).
VERTEX_STATE = {SUCCEEDED: "COMPLETE", FAILED: "FAILED", CANCELLED: "CANCELLED"}


#: Reads the steps of the run served from cache: step -> its model's URI ("" for none).
CachedSteps = Callable[[], Mapping[str, str]]


def end_mlflow_parent(state: str, run_id: str,
                      environ: dict[str, str] | None = None,
                      log: Callable[[str], None] = print,
                      cached_steps: CachedSteps | None = None) -> str:
    """End the parent MLflow run of pipeline run ``run_id`` in ``state``, after recording
    the steps ``cached_steps`` names; returns the parent's id ("" when MLflow is not tracked
    here, or could not be reached)."""
    env = os.environ if environ is None else environ
    uri, experiment = env.get(names.ENV_URI, ""), env.get(names.ENV_EXPERIMENT, "")
    status = MLFLOW_STATUS.get(state)
    if env.get(base.ENV_RUN_ID) or not (uri and experiment and run_id and status):
        return ""
    names.load_credentials(env, log)
    client = base.mlflow_client(uri, log)
    if client is None:
        return ""
    tracker = base.Tracker(client, "pending", limits=base.Limits.from_env(env), log=log,
                           scope="the run's end")
    parent = tracker.call(f"finding the parent run in experiment {experiment!r}",
                          find_parent, client, experiment, run_id)
    if not parent:
        if not tracker.failed:
            log(f"mlflow: no step of run {run_id} logged to experiment {experiment!r}; "
                "nothing to end")
        return ""
    if cached_steps is not None:
        record_cached(client, parent, cached_steps, log)
    if status != "FINISHED":
        left = tracker.call("finding the steps' runs left running", running_children,
                            client, parent) or []
        for child in left:
            tracker.call("ending a step's run", client.set_terminated, child, status)
    tracker.call("ending the parent run", client.set_terminated, parent, status)
    if tracker.failed:
        return ""
    log(f"mlflow: run {run_id} ended {status} (parent run {parent})")
    return parent


def record_cached(client, parent: str, cached_steps: CachedSteps,
                  log: Callable[[str], None]) -> list[str]:
    """A nested run, tagged cached, under ``parent`` for each step ``cached_steps`` reads
    (one line names them); never raises."""
    from gkeflow.components.tracking.cached import record_cached_steps

    try:
        steps = dict(cached_steps())
    except Exception as exc:  # the backend could not say: nothing is guessed
        log(f"mlflow: the steps served from cache were not read ({base.one_line(exc)}); "
            "they have no runs")
        return []
    try:  # a step that logged (or an exit task run twice) keeps its one run
        already = {run.data.tags.get(base.TASK_TAG) for run in client.search_runs(
            [client.get_run(parent).info.experiment_id], max_results=200,
            filter_string=f"tags.`{base.PARENT_TAG}` = '{parent}'")} if steps else set()
    except Exception as exc:
        log(f"mlflow: the cached steps were not recorded ({base.one_line(exc)})")
        return []
    steps = {step: uri for step, uri in steps.items() if step not in already}
    recorded = record_cached_steps("", parent, list(steps), steps, log=log, client=client)
    if recorded:
        log(f"mlflow: served from cache, recorded as cached runs: {', '.join(recorded)}")
    return recorded


def find_parent(client, experiment: str, run_id: str) -> str:
    """The parent run of pipeline run ``run_id`` the steps made (the oldest, as they chose),
    or "": none is created here, where a run that never logged (or whose steps logged
    through Kubeflow Pipelines' plugin) would get an empty one."""
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return ""
    runs = names.candidates(client, found.experiment_id, run_id)
    return runs[0].info.run_id if runs else ""


def running_children(client, parent_run_id: str) -> list[str]:
    """The nested runs of ``parent_run_id`` still ``RUNNING`` (a step killed mid-way)."""
    parent = client.get_run(parent_run_id)
    found = client.search_runs(
        [parent.info.experiment_id], max_results=200,
        filter_string=(f"tags.`{base.PARENT_TAG}` = '{parent_run_id}' "
                       "and attributes.status = 'RUNNING'"))
    return [run.info.run_id for run in found]


def end_run(state: str, target: str, run_id: str, run_name: str = "",
            job_resource_name: str = "", environ: dict[str, str] | None = None,
            log: Callable[[str], None] = print,
            cached_steps: CachedSteps | None = None) -> None:
    """Write the run's end (``state``: SUCCEEDED, FAILED, CANCELLED or UNKNOWN) into each
    tracker this task's environment names, with the steps ``cached_steps`` reads as cached
    runs; never raises."""
    env = dict(os.environ if environ is None else environ)
    tracked = any(env.get(key) for key in (names.ENV_URI, vertex_run.ENV_EXPERIMENT))
    if not tracked:
        return
    if state not in MLFLOW_STATUS:
        log(f"tracking: the run's end is {state}, not a known end; its tracked runs are "
            "left as the steps left them")
        return
    try:
        end_mlflow_parent(state, run_id, env, log, cached_steps)
    except Exception as exc:  # best effort: the exit task's own work goes on
        log(f"mlflow: the run's end was not recorded ({base.one_line(exc)})")
    if not env.get(vertex_run.ENV_EXPERIMENT):
        return
    if target == "vertex":
        from gkeflow.components.tracking.vertex_pipeline_run import add_to_experiment

        add_to_experiment(job_resource_name, env, log)
    elif run_id:
        env[names.ENV_RUN_ID_FIELD] = run_id
        vertex_run.log_step("run", {}, {}, environ=env, argv=[], log=log,
                            state=VERTEX_STATE[state])
