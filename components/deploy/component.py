"""KFP shells of the deploy step.

:func:`deploy_model` writes a generic ``system.Artifact`` naming the endpoint or
InferenceService, the version and the split; :mod:`gkeflow.components.deploy.vertex_component`
holds the same step with a ``google.VertexEndpoint`` output for Vertex AI Pipelines. Both
run :func:`gkeflow.components.deploy.logic.deploy_for_pipeline`.
"""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Artifact, Input, Markdown, Model, Output

from gkeflow.components.images import CPU_IMAGE


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def deploy_model(
    model: Input[Model],
    evaluation: Input[Artifact],
    registered_model: Input[Artifact],
    deployment: Output[Artifact],
    summary: Output[Markdown],
    target: str = "local",
    registry_uri: str = "sqlite:///gkeflow-registry.db",
    serving_compute: str = "{}",
    deploy_settings: str = "",
    traffic: int = 0,
) -> NamedTuple("DeployOutputs", endpoint=str, model_version=int, traffic_split=str):
    """Serves the registered version behind a servability check, with a canary share of traffic.

    Args:
        model: SavedModel that was evaluated and registered.
        evaluation: The evaluation's evidence; its sample rows and predictions are sent to
            the model through TensorFlow Serving's REST mapping before anything changes.
        registered_model: The registered version (metadata modelName, version, resourceName).
        deployment: What serves now: metadata endpoint, resourceName, modelVersion,
            trafficSplit.
        summary: The deployment and its traffic split, rendered in the UI.
        target: local (loopback stand-in), gke (KServe InferenceService) or vertex
            (Vertex AI Endpoint).
        registry_uri: The registry holding the version (local deployments live beside it).
        serving_compute: Serving machine from the deploy-model compute profile (JSON).
        deploy_settings: gkeflow.yaml deploy: settings as JSON (endpoint, traffic, keep,
            min_replicas, max_replicas, kserve_mode, namespace, storage_root,
            service_account); empty for the defaults.
        traffic: Percent of requests the new version gets (1-100); 0: deploy_settings'
            traffic (default 10). The first version of an endpoint gets 100.

    Returns:
        endpoint: The endpoint or InferenceService serving the model.
        model_version: The version deployed.
        traffic_split: Who gets what share now, e.g. "penguins@3 90%, penguins@4 10%".
    """
    from collections import namedtuple
    from pathlib import Path

    from gkeflow.components._atomic import write_text_atomic
    from gkeflow.components.deploy.logic import deploy_tracked

    registered = dict(registered_model.metadata)
    outcome = deploy_tracked(
        model_path=model.path, evaluation_path=evaluation.path, registered=registered,
        target=target, registry_uri=registry_uri, serving_compute=serving_compute,
        settings=deploy_settings, traffic=traffic,
    )
    deployment.metadata.update(outcome.metadata())
    write_text_atomic(Path(summary.path), outcome.markdown())
    outputs = namedtuple("DeployOutputs", ["endpoint", "model_version", "traffic_split"])
    return outputs(outcome.resource, outcome.model_version, outcome.split_text)
