"""Runs and recurring runs with ``plugins_input`` (Kubeflow Pipelines >= 2.17, e.g. the
MLflow plugin's experiment), which ``kfp.Client`` cannot set yet (kubeflow/pipelines#14114):
the bodies ``run_pipeline`` / ``create_recurring_run`` send, plus that field."""

from __future__ import annotations

from typing import Any


def _job_config(client: Any, kwargs: dict):
    return client._create_job_config(
        params=kwargs["params"], pipeline_package_path=None, pipeline_id=kwargs["pipeline_id"],
        version_id=kwargs["version_id"], enable_caching=None, cache_key="",
        pipeline_root=kwargs["pipeline_root"])


def create_run_with_plugins(client: Any, experiment_id: str, run_name: str,
                            plugins_input: dict, **kwargs):
    """``client.run_pipeline(experiment_id, run_name, **kwargs)`` with ``plugins_input``."""
    import kfp_server_api

    job = _job_config(client, kwargs)
    body = kfp_server_api.V2beta1Run(
        experiment_id=experiment_id, display_name=run_name, pipeline_spec=job.pipeline_spec,
        pipeline_version_reference=job.pipeline_version_reference,
        runtime_config=job.runtime_config, service_account=kwargs["service_account"],
        plugins_input=plugins_input)
    return client._run_api.run_service_create_run(run=body)


def create_recurring_run_with_plugins(client: Any, experiment_id: str, name: str,
                                      plugins_input: dict, **kwargs):
    """``client.create_recurring_run(experiment_id, name, **kwargs)`` (a cron trigger) with
    ``plugins_input``, which every run it starts inherits."""
    import kfp_server_api

    job = _job_config(client, kwargs)
    mode = (kfp_server_api.RecurringRunMode.ENABLE if kwargs["enabled"]
            else kfp_server_api.RecurringRunMode.DISABLE)
    trigger = kfp_server_api.V2beta1Trigger(
        cron_schedule=kfp_server_api.V2beta1CronSchedule(cron=kwargs["cron_expression"]))
    body = kfp_server_api.V2beta1RecurringRun(
        experiment_id=experiment_id, mode=mode, display_name=name,
        description=kwargs["description"], no_catchup=kwargs["no_catchup"],
        max_concurrency=kwargs["max_concurrency"], trigger=trigger,
        pipeline_spec=job.pipeline_spec,
        pipeline_version_reference=job.pipeline_version_reference,
        runtime_config=job.runtime_config, service_account=kwargs["service_account"],
        plugins_input=plugins_input)
    return client._recurring_run_api.recurring_run_service_create_recurring_run(
        recurring_run=body)
