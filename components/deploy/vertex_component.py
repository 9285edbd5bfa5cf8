"""The deploy step for Vertex AI Pipelines: it takes the ``google.VertexModel`` the Vertex
registration step emits and outputs a ``google.VertexEndpoint``. Same inputs and behaviour
as :func:`gkeflow.components.deploy.component.deploy_model` (and the same component name,
so the task is ``deploy-model`` on every target).
"""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Artifact, Input, Markdown, Model, Output

from gkeflow.components.deploy.artifact_types import VertexEndpoint
from gkeflow.components.images import CPU_IMAGE
from gkeflow.components.register.artifact_types import VertexModel


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def deploy_model(
    model: Input[Model],
    evaluation: Input[Artifact],
    registered_model: Input[VertexModel],
    deployment: Output[VertexEndpoint],
    summary: Output[Markdown],
    target: str = "vertex",
    registry_uri: str = "",
    serving_compute: str = "{}",
    deploy_settings: str = "",
    traffic: int = 0,
) -> NamedTuple("DeployOutputs", endpoint=str, model_version=int, traffic_split=str):
    """Serves the registered version on a Vertex AI Endpoint behind a servability check.

    Args:
        model: SavedModel that was evaluated and registered.
        evaluation: The evaluation's evidence; its sample rows and predictions are sent to
            the model through TensorFlow Serving's REST mapping before anything changes.
        registered_model: The registered Vertex AI model version (metadata resourceName).
        deployment: The endpoint (metadata resourceName, modelVersion, trafficSplit).
        summary: The deployment and its traffic split, rendered in the UI.
        target: vertex.
        registry_uri: The registry holding the version.
        serving_compute: Serving machine from the deploy-model compute profile (JSON).
        deploy_settings: gkeflow.yaml deploy: settings as JSON (endpoint, traffic, keep,
            min_replicas, max_replicas, service_account); empty for the defaults.
        traffic: Percent of requests the new version gets (1-100); 0: deploy_settings'
            traffic (default 10). The first version of an endpoint gets 100.

    Returns:
        endpoint: The endpoint's resource name.
        model_version: The version deployed.
        traffic_split: Who gets what share now, e.g. "penguins@3 90%, penguins@4 10%".
    """
    from collections import namedtuple
    from pathlib import Path

    from gkeflow.components._atomic import write_text_atomic
    from gkeflow.components.deploy.logic import deploy_tracked
    from gkeflow.components.deploy.vertex_endpoint import endpoint_uri

    registered = dict(registered_model.metadata)
    outcome = deploy_tracked(
        model_path=model.path, evaluation_path=evaluation.path, registered=registered,
        target=target, registry_uri=registry_uri, serving_compute=serving_compute,
        settings=deploy_settings, traffic=traffic,
    )
    deployment.uri = endpoint_uri(outcome.resource)
    deployment.metadata.update(outcome.metadata())
    write_text_atomic(Path(summary.path), outcome.markdown())
    outputs = namedtuple("DeployOutputs", ["endpoint", "model_version", "traffic_split"])
    return outputs(outcome.resource, outcome.model_version, outcome.split_text)
