"""KFP shell of scoring through a Vertex AI BatchPredictionJob (Vertex AI Pipelines only)."""

from kfp import dsl
from kfp.dsl import Artifact, Output

from gkeflow.components.images import SLIM_IMAGE


@dsl.component(base_image=SLIM_IMAGE, install_kfp_package=False)
def batch_predict_vertex(
    batch_job: Output[Artifact],
    gcp_resources: dsl.OutputPath(str),
    registry_uri: str,
    model: str,
    data_uri: str,
    output_uri: str,
    pipeline_run_id: str,
    model_version: int = 0,
    model_alias: str = "",
    key_column: str = "",
    machine_type: str = "n1-standard-4",
    accelerator_type: str = "",
    accelerator_count: int = 0,
    starting_replica_count: int = 1,
    max_replica_count: int = 1,
    service_account: str = "",
    poll_s: float = 30.0,
    timeout_s: float = 86400.0,
    call_timeout_s: float = 0.0,
    retry_budget_s: float = 0.0,
):
    """Scores rows with a Vertex AI BatchPredictionJob for a model in the Vertex AI Model Registry.

    Args:
        batch_job: The job; metadata holds resourceName, state and where predictions are.
        gcp_resources: The job's resource (cancelled with the pipeline run).
        registry_uri: vertex://projects/<p>/locations/<l>.
        model: Registered model: NAME, NAME@VERSION or NAME@ALIAS (default alias: champion).
        model_version: Version to use; 0 = by alias.
        model_alias: Alias to use; empty = champion (the newest version when none was
            promoted).
        data_uri: gs:// JSONL file(s) (one object per line), comma-separated, or
            bq://project.dataset.table.
        output_uri: gs:// prefix or bq://project[.dataset] for the predictions.
        pipeline_run_id: Run id; a retried step finds the job it created.
        key_column: Column returned with each prediction to identify the row.
        machine_type: Machine type of the prediction nodes.
        accelerator_type: GPU per node in Vertex spelling (NVIDIA_TESLA_T4...); empty: none.
        accelerator_count: GPUs per node.
        starting_replica_count: Nodes the job starts with.
        max_replica_count: Nodes the job may scale to.
        service_account: Service account the job runs as; empty: Vertex AI's default.
        poll_s: Seconds between status checks.
        timeout_s: Seconds after which the step gives up and cancels the job.
        call_timeout_s: Seconds before a call to Vertex AI is abandoned and retried; 0 =
            $GKEFLOW_CALL_TIMEOUT_S or 60.
        retry_budget_s: Seconds one failing operation is retried before the step gives up
            and cancels the job; 0 = $GKEFLOW_RETRY_BUDGET_S or 900.
    """
    from gkeflow.components.cloud.follow import run_step
    from gkeflow.components.cloud.options import policy_from
    from gkeflow.components.predict.vertex_batch import BatchJobSpec, run_batch_prediction

    outcome = run_step(lambda: run_batch_prediction(
        registry_uri=registry_uri, model=model, data_uri=data_uri, output_uri=output_uri,
        run_id=pipeline_run_id, key_column=key_column,
        model_version=model_version, model_alias=model_alias,
        spec=BatchJobSpec(machine_type=machine_type, accelerator_type=accelerator_type,
                          accelerator_count=accelerator_count,
                          starting_replica_count=starting_replica_count,
                          max_replica_count=max_replica_count),
        service_account=service_account, poll_s=poll_s, timeout_s=timeout_s,
        policy=policy_from(call_timeout_s, retry_budget_s), gcp_resources_path=gcp_resources,
        echo=lambda line: print(line, flush=True)))
    location = outcome.job_name.split("/locations/", 1)[1].split("/", 1)[0]
    batch_job.uri = f"https://{location}-aiplatform.googleapis.com/v1/{outcome.job_name}"
    batch_job.metadata.update({"resourceName": outcome.job_name, "state": outcome.state,
                               "output": outcome.output, "createdNow": outcome.created})
    print(f"batch prediction job {outcome.job_name}: {outcome.state}; predictions in "
          f"{outcome.output}")
