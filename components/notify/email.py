"""The Vertex AI Pipelines email notification: an exit task that the Vertex AI backend
carries out itself (it sends the run's final state, with a link, to up to three addresses).

The task is the same as Google Cloud Pipeline Components' ``VertexNotificationEmailOp``
(``v1.vertex_notification_email``): that component's container, command and arguments,
which Vertex AI recognises; declared here so the suite does not depend on that package
(whose current release requires google-cloud-aiplatform < 2). Kubeflow Pipelines has no
such backend task: on GKE, notifications go to a webhook.
"""

from kfp import dsl

#: The container Vertex AI recognises as its email notification (never pulled by a run).
GCPC_IMAGE = "gcr.io/ml-pipeline/google-cloud-pipeline-components:2.19.0"
#: Vertex AI sends to at most this many addresses.
MAX_RECIPIENTS = 3


@dsl.container_component
def vertex_notification_email(
    recipients: list,
    pipeline_task_final_status: dsl.PipelineTaskFinalStatus,
):
    """Emails how the run ended (Vertex AI sends it); never changes the run's outcome.

    Args:
        recipients: Up to three email addresses.
        pipeline_task_final_status: The run's final status, given by Vertex AI.
    """
    return dsl.ContainerSpec(
        image=GCPC_IMAGE,
        command=["python3", "-u", "-m",
                 "google_cloud_pipeline_components.container.v1.vertex_notification_email."
                 "executor"],
        args=["--type", "VertexNotificationEmail", "--payload", ""],
    )
