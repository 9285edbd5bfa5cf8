"""KFP shell of the model lookup that lets the KFP launcher fetch a registered model."""

from kfp import dsl

from gkeflow.components.images import SLIM_IMAGE


@dsl.component(base_image=SLIM_IMAGE, install_kfp_package=False)
def resolve_model(model: str, registry_uri: str, model_version: int = 0,
                  model_alias: str = "") -> str:
    """Looks a registered model up and returns the URI of its files, for dsl.importer.

    On Kubeflow Pipelines the registered URI may be in the cluster's MinIO (minio://), which
    only the KFP launcher can read: importing the URI as a Model artifact has the launcher
    download it for the scoring step.

    Args:
        model: Registered model: NAME, NAME@VERSION or NAME@ALIAS.
        registry_uri: sqlite:///<path>, vertex://projects/<p>/locations/<l> or
            kubeflow://host:port.
        model_version: Registered version to use; 0 = by alias.
        model_alias: Registry alias to use; empty = champion (the newest version when no
            champion was promoted).

    Returns:
        The URI of the chosen version's SavedModel.
    """
    from gkeflow.components.predict.resolve import parse_model_ref, resolve_version

    version, selected_by = resolve_version(
        registry_uri, parse_model_ref(model, model_version, model_alias))
    print(f"{version.name} version {version.version} ({selected_by}) at {version.uri}")
    return version.uri
