"""KFP shells of the registration step.

:func:`register_model` writes a generic ``system.Artifact`` describing the registered
version; :mod:`gkeflow.components.register.vertex_component` holds the same step with a
``google.VertexModel`` output for Vertex AI Pipelines. Both run
:func:`gkeflow.components.register.logic.register_for_pipeline`.
"""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Artifact, Input, Metrics, Model, Output

from gkeflow.components.images import SLIM_IMAGE


@dsl.component(base_image=SLIM_IMAGE, install_kfp_package=False)
def register_model(
    model: Input[Model],
    metrics: Input[Metrics],
    registered_model: Output[Artifact],
    model_name: str,
    pipeline_run_id: str,
    pipeline_task_name: str = "register-model",
    registry_uri: str = "sqlite:///gkeflow-registry.db",
    labels: str = "",
    aliases: str = "",
    data_uri: str = "",
    serving_image: str = "",
    training_inputs: str = "",
) -> NamedTuple("RegistrationOutputs", model_version=int, resource_name=str):
    """Records the model as a new version in the model registry (once per pipeline run and task).

    Args:
        model: SavedModel to register.
        metrics: Evaluation metrics stored with the version.
        registered_model: The registered version; metadata holds resourceName, version, backend.
        model_name: Registered model name (lower-case letters, digits, '-').
        pipeline_run_id: Run that produced the model; a retry of the same run and task
            reuses its version.
        pipeline_task_name: Task registering the model (part of the retry key).
        registry_uri: sqlite:///<path> (embedded), vertex://projects/<p>/locations/<l>
            (Vertex AI), kubeflow://host:port (Kubeflow Model Registry) or
            mlflow://host:port, mlflow+https://host[:port][/path] (MLflow Model Registry).
        labels: Extra key=value labels, comma-separated (lower-case letters, digits, '_', '-').
        aliases: Aliases to point at the new version, comma-separated (e.g. candidate).
        data_uri: Data the model was trained on, recorded as lineage.
        serving_image: Vertex AI prediction container; empty: the TensorFlow 2 prebuilt one.
        training_inputs: What the model was trained on and with (data fingerprint,
            parameters, code); when an existing version was trained on the same, that
            version is passed on ("unchanged: same as version N") instead of a copy.
            Empty: always a new version.

    Returns:
        model_version: The version number in the registry.
        resource_name: The registry's name for this version.
    """
    from collections import namedtuple

    from gkeflow.components.register.logic import register_for_pipeline
    from gkeflow.components.tracking.pipeline_run import open_step_run
    from gkeflow.components.tracking.steps import logged_model_run, track_registration

    tracker = open_step_run("register-model")
    outcome = register_for_pipeline(
        model_path=model.path, model_uri=model.uri, metrics_metadata=dict(metrics.metadata),
        model_name=model_name, run_id=pipeline_run_id, task_key=pipeline_task_name,
        registry_uri=registry_uri, labels=labels, aliases=aliases, data_uri=data_uri,
        serving_image=serving_image, training_inputs=training_inputs,
        logged_by=logged_model_run(tracker, model.uri),  # the MLflow model, uploaded once
    )
    registered_model.uri = outcome.artifact_uri or registered_model.uri
    registered_model.metadata.update(outcome.metadata)
    print(outcome.message)
    passed = metrics.metadata.get("passed")
    track_registration(outcome, None if passed is None else bool(passed), tracker=tracker)
    outputs = namedtuple("RegistrationOutputs", ["model_version", "resource_name"])
    return outputs(outcome.version.version, outcome.version.resource_name)
