"""KFP shell of the run notification: ``notify_run``, the exit task that receives
``dsl.PipelineTaskFinalStatus``."""

from kfp import dsl

from gkeflow.components.images import SLIM_IMAGE


@dsl.component(base_image=SLIM_IMAGE, install_kfp_package=False)
def notify_run(
    status: dsl.PipelineTaskFinalStatus,
    pipeline: str,
    target: str,
    run_name: str,
    run_id: str,
    link_template: str,
    when: str = "failure",
    webhook_format: str = "generic",
    webhook_env: str = "GKEFLOW_WEBHOOK_URL",
    webhook_secret: str = "",
    parameters: str = "",
    defaults: str = "{}",
    run_api: str = "",
    metadata_api: str = "",
    step_rates: str = "{}",
) -> str:
    """Sends how the run ended to a webhook, and marks the run's tracked runs with it;
    never changes the run's outcome.

    Args:
        status: The run's final status (state, failed task, error), given by the backend.
        pipeline: The pipeline's name.
        target: gke, vertex or local: the backend, whose names for the run's final state
            are read (KFP: COMPLETE; Vertex AI: SUCCEEDED).
        run_name: The run's name (the backend fills it in).
        run_id: The run's id (the backend fills it in).
        link_template: The run's page, with {run_id} and {run_name} to fill in.
        when: failure, success or always.
        webhook_format: generic (JSON with every field), slack or google-chat.
        webhook_env: The environment variable holding the webhook URL (GKE: set from a
            Kubernetes Secret; never the URL itself).
        webhook_secret: Vertex AI: the Secret Manager secret version holding the URL
            (projects/P/secrets/S/versions/V); empty elsewhere.
        parameters: The run's parameters as name/value pairs (filled in by the backend).
        defaults: The pipeline's default parameter values, as JSON.
        run_api: Where to read the run's task details for the failed step, its error,
            the run's duration and the gate (KFP API URL or Vertex AI endpoint); empty:
            the status alone.
        metadata_api: Kubeflow Pipelines: ML Metadata's gRPC-Web address, for the
            registered version; empty: none.
        step_rates: Each step's hourly list price as the pipeline was compiled (JSON); the
            message gives each step's duration x rate and the run's total; "{}": none.

    Returns:
        One line: what was sent, or why nothing was.
    """
    import json

    from gkeflow.components.cloud.run_api import (
        apply_run,
        kfp_history,
        kfp_registered_version,
        vertex_history,
    )
    from gkeflow.components.notify.logic import (
        RunReport,
        changed_parameters,
        cost_lines,
        failed_task_from_message,
        final_state,
        notify,
        now,
        parse_parameters,
        send_policy,
    )

    # Each backend names the end its own way (KFP: COMPLETE; Vertex AI: SUCCEEDED).
    report = RunReport(
        pipeline=pipeline, run=run_name, target=target,
        link=link_template.format(run_id=run_id, run_name=run_name),
        state=final_state(target, status.state), backend_state=str(status.state or ""),
        failed_task=failed_task_from_message(status.error_message or ""),
        error=status.error_message or "",
        parameters=changed_parameters(parse_parameters(parameters), json.loads(defaults)))
    # the run's end in its trackers first (a no-op unless tracking was compiled in)
    from gkeflow.components.cloud.run_api import cached_steps_reader, tasks_reader
    from gkeflow.components.tracking.run_end import end_run

    policy = send_policy()
    job = status.pipeline_job_resource_name or ""
    read_tasks = tasks_reader(target, run_api, run_id, job, policy)  # read once, for both
    end_run(report.state, target, run_id, run_name, job,
            cached_steps=cached_steps_reader(target, read_tasks, metadata_api, policy))
    history = []  # earlier runs' step durations: the expected cost
    if read_tasks is not None:
        try:
            started, tasks = read_tasks()
            apply_run(report, started, tasks, now())
        except Exception as exc:  # noqa: BLE001 - the status alone still makes a message
            print(f"could not read the run's task details: {type(exc).__name__}")
        else:
            if target == "gke" and metadata_api and report.gate.startswith("passed"):
                try:
                    report.registered_version = kfp_registered_version(metadata_api, tasks,
                                                                       policy)
                except Exception as exc:  # noqa: BLE001 - the version is a detail
                    print(f"could not read the registered version: {type(exc).__name__}")
            if step_rates and step_rates != "{}":
                try:
                    history = (kfp_history(run_api, run_id, policy) if target == "gke" else
                               vertex_history(run_api, job, policy))
                except Exception as exc:  # noqa: BLE001 - the expected cost is a detail
                    print(f"could not read the earlier runs: {type(exc).__name__}")
    report.cost = cost_lines(json.loads(step_rates or "{}"), report.step_durations, history)
    outcome = notify(report, when=when, shape=webhook_format, env_name=webhook_env,
                     secret_version=webhook_secret, policy=policy)
    print(outcome)
    return outcome
