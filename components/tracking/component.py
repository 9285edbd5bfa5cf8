"""KFP shell of the run's end in its trackers: ``end_tracking``, the exit task of pipelines
compiled with tracking and no webhook notification (``notify_run`` does the same first)."""

from kfp import dsl

from gkeflow.components.images import SLIM_IMAGE


@dsl.component(base_image=SLIM_IMAGE, install_kfp_package=False)
def end_tracking(
    status: dsl.PipelineTaskFinalStatus,
    target: str,
    run_id: str,
    run_name: str,
    run_api: str = "",
    metadata_api: str = "",
) -> str:
    """Marks the run's MLflow parent run and Vertex AI experiment run with how it ended, and
    records the steps served from cache; never changes the run's outcome.

    Args:
        status: The run's final status, given by the backend.
        target: gke or vertex: the backend, whose names for the run's final state are read.
        run_id: The run's id (the backend fills it in).
        run_name: The run's name (the backend fills it in).
        run_api: Where to read the run's task details (which steps came from cache); empty:
            cached steps are not recorded.
        metadata_api: Kubeflow Pipelines: ML Metadata's gRPC-Web address, where a cached
            step's execution says so.

    Returns:
        The run's final state as the trackers were given it (SUCCEEDED, FAILED, CANCELLED),
        or UNKNOWN (then nothing was marked).
    """
    from gkeflow.components.cloud.retry import RetryPolicy
    from gkeflow.components.cloud.run_api import cached_steps_reader, tasks_reader
    from gkeflow.components.cloud.run_states import final_state
    from gkeflow.components.tracking.run_end import end_run

    state = final_state(target, status.state)
    job = status.pipeline_job_resource_name or ""
    policy = RetryPolicy(call_timeout_s=20.0, budget_s=60.0)  # the run's end is not delayed
    end_run(state, target, run_id, run_name, job,
            cached_steps=cached_steps_reader(
                target, tasks_reader(target, run_api, run_id, job, policy), metadata_api,
                policy))
    return state
