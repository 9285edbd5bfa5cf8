"""KFP shell of the registration step."""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Input, Metrics, Model

from components.images import CPU_IMAGE


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def register_model(
    model: Input[Model],
    metrics: Input[Metrics],
    model_name: str,
    pipeline_run_id: str,
    registry_uri: str = "sqlite:///gkeflow-registry.db",
    labels: str = "",
) -> NamedTuple("RegistrationOutputs", model_version=int, resource_name=str):
    """Records the model as a new version in the model registry (once per pipeline run).

    Args:
        model: SavedModel to register.
        metrics: Evaluation metrics stored with the version.
        model_name: Registered model name (lower-case letters, digits, '-').
        pipeline_run_id: Run that produced the model; a retry of the same run reuses its version.
        registry_uri: Registry to write to: sqlite:///<path> for the embedded registry.
        labels: Extra key=value labels, comma-separated.

    Returns:
        model_version: The version number in the registry.
        resource_name: The registry's name for this version.
    """
    from collections import namedtuple
    from pathlib import Path

    from components.register.logic import parse_labels, register

    version, created = register(
        model_dir=Path(model.path),
        model_uri=model.uri,
        model_name=model_name,
        metrics={k: float(v) for k, v in metrics.metadata.items()
                 if isinstance(v, (int, float))},
        run_id=pipeline_run_id,
        registry_uri=registry_uri,
        labels=parse_labels(labels),
    )
    print(("registered" if created else "already registered by this run:")
          + f" {version.name} version {version.version} ({version.resource_name})")
    outputs = namedtuple("RegistrationOutputs", ["model_version", "resource_name"])
    return outputs(version.version, version.resource_name)
