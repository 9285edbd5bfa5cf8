"""`gkeflow models list` and `gkeflow models promote`: the models in a registry (the local
one `gkeflow run` writes, Vertex AI Model Registry or Kubeflow Model Registry)."""

from __future__ import annotations

from pathlib import Path

import click

from gkeflow.pipelines.cli.common import DEFAULT_RUN_OUTPUT, REGISTRY_FILE, stdout_console
from gkeflow.pipelines.cli.params import NonEmptyPath
from gkeflow.pipelines.cli.tables import (
    MODEL_COLUMNS,
    MODEL_WIDE_COLUMNS,
    format_options,
    print_json,
    print_table,
    version_record,
    version_row,
)


@click.group()
def models() -> None:
    """Inspect and promote models in the registry."""


def _registry_option(func):
    """The connection options shared by the ``models`` commands."""
    options = [
        click.option("--backend", type=click.Choice(["local", "vertex", "kubeflow", "mlflow"]),
                     help="Registry to use. Default: registry.backend in gkeflow.yaml, else "
                          "the MLflow Model Registry of tracking.ENV.mlflow (where `gkeflow "
                          "run --env ENV` registers), else local."),
        click.option("--env", "environment", default="default", show_default=True,
                     metavar="ENV",
                     help="The environment whose tracking.ENV.mlflow registry is the default."),
        click.option("--registry", metavar="URI",
                     help="Registry URI, overriding everything else: sqlite:///<path>, "
                          "vertex://projects/<p>/locations/<l>, kubeflow://host:port, "
                          "mlflow://host:port. "
                          f"Default for local: sqlite:///{DEFAULT_RUN_OUTPUT / REGISTRY_FILE} "
                          "(what `gkeflow run` writes)."),
        click.option("--project", metavar="PROJECT", help="Vertex AI: Google Cloud project."),
        click.option("--location", metavar="REGION", help="Vertex AI: region, e.g. us-central1."),
        click.option("--api-endpoint", metavar="HOST",
                     help="Vertex AI: API endpoint other than the regional default."),
        click.option("--host", metavar="HOST",
                     help="Kubeflow Model Registry or MLflow: host (e.g. "
                          "model-registry-service.kubeflow.svc.cluster.local)."),
        click.option("--port", type=click.IntRange(1, 65535),
                     help="Kubeflow Model Registry or MLflow: port (default 8080; MLflow 5000)."),
        click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
                     help="Config file with a registry: section. Default: ./gkeflow.yaml if "
                          "present."),
        click.option("--output", "run_output", type=NonEmptyPath(file_okay=False, path_type=Path),
                     help="The --output directory of `gkeflow run`: use its local registry "
                          f"(OUTPUT/{REGISTRY_FILE})."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _open_cli_registry(backend, registry, project, location, api_endpoint, host, port,
                       config_path, run_output=None, environment="default"):
    """Flags over gkeflow.yaml's ``registry:`` over the MLflow registry of
    ``tracking.<environment>.mlflow`` over defaults -> (registry, URI, backend)."""
    from gkeflow.components.register.backends import LOCAL_REGISTRY

    if run_output is not None:
        if registry or (backend and backend != LOCAL_REGISTRY):
            raise click.UsageError("--output names a local registry; drop --registry/--backend")
        registry = f"sqlite:///{Path(run_output).resolve() / REGISTRY_FILE}"
    from gkeflow.components.register.backends import RegistrySettings, backend_of, open_registry
    from gkeflow.components.register.local_registry import RegistryError, registry_path
    from gkeflow.pipelines.settings.config import ConfigError, load_config

    try:
        config = load_config(config_path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    configured = config.registry
    if not (registry or backend or "registry" in config.model_fields_set):
        from gkeflow.pipelines.settings.tracking_config import (
            mlflow_registry_uri,
            tracking_for,
        )

        mlflow = tracking_for(config.tracking, environment).mlflow
        registry = mlflow_registry_uri(mlflow.tracking_uri) if mlflow is not None else ""
    changes = {k: v for k, v in {"backend": backend, "project": project, "location": location,
                                 "api_endpoint": api_endpoint, "host": host,
                                 "port": port}.items() if v is not None}
    if backend and backend != configured.backend:
        changes["uri"] = ""  # the file's URI is for another backend
    settings = configured.model_copy(update=changes)
    try:
        uri = registry or settings.registry_uri()
        kind = backend_of(uri)
        if kind == LOCAL_REGISTRY and not registry_path(uri).exists():
            raise click.ClickException(f"no registry at {registry_path(uri)}; "
                                       "run `gkeflow run` first or pass --registry")
        opened = open_registry(uri, RegistrySettings(
            serving_image=settings.serving_image, api_endpoint=settings.api_endpoint,
            author=settings.author))
    except (ConfigError, RegistryError) as exc:
        raise click.ClickException(str(exc)) from exc
    return opened, uri, kind


@models.command("list")
@click.option("--name", metavar="NAME", help="Only this model's versions.")
@format_options("--format")
@_registry_option
def models_list(name: str | None, wide: bool = False, output_format: str = "table",
                **connection) -> None:
    """List models, their versions, key metrics and aliases.

    Works with every registry: the embedded one `gkeflow run` writes (default), Vertex AI
    Model Registry (--backend vertex --project P --location L) and Kubeflow Model Registry
    (--backend kubeflow --host H --port N) and the MLflow Model Registry
    (--backend mlflow --host H); settings may also come from gkeflow.yaml's
    registry: section. The table fits COLUMNS (or the terminal), wrapping long URIs;
    --wide adds the run id and labels; --format json prints every field.
    """
    from gkeflow.components.register.local_registry import RegistryError

    registry, uri, kind = _open_cli_registry(**connection)
    console = stdout_console()
    try:
        with console.status(f"reading the {kind} registry…"):
            versions = registry.list(name=name)
            from gkeflow.pipelines.cli.deploy_serving import serving_by_version

            serving = serving_by_version(kind, uri, connection.get("api_endpoint") or "",
                                         _serving_namespaces(connection.get("config_path")))
    except RegistryError as exc:
        raise click.ClickException(str(exc)) from exc
    if output_format == "json":
        print_json([{**version_record(v), "serving": serving.get((v.name, v.version), "")}
                    for v in versions])
        return
    if not versions:
        console.print("no models registered" + (f" under {name!r}" if name else ""))
        return
    rows = [{**version_row(v), "serving": serving.get((v.name, v.version), "")}
            for v in versions]
    print_table(rows, MODEL_COLUMNS, MODEL_WIDE_COLUMNS, wide, no_wrap=("version",))


def _serving_namespaces(config_path) -> list[str]:
    """Where `gkeflow deploy --target gke` puts InferenceServices: each deploy: entry's
    namespace (default: default)."""
    from gkeflow.pipelines.settings.config import ConfigError, load_config

    try:
        deploy = load_config(config_path).deploy
    except ConfigError:
        return ["default"]
    return list(dict.fromkeys(entry.namespace or "default" for entry in deploy.values())) or [
        "default"]


@models.command("promote")
@click.argument("name")
@click.argument("version", type=int)
@click.option("--alias", default="champion", show_default=True,
              help="Alias to point at VERSION (moved from any other version).")
@_registry_option
def models_promote(name: str, version: int, alias: str, **connection) -> None:
    """Point an alias (default: champion) at VERSION of model NAME.

    The alias moves from whichever version held it. Same connection options as
    `gkeflow models list`.
    """
    from gkeflow.components.register.local_registry import RegistryError

    registry, _, kind = _open_cli_registry(**connection)
    try:
        with stdout_console().status(f"promoting {name} version {version} in the {kind} registry…"):
            promoted = registry.set_alias(name, version, alias)
    except RegistryError as exc:
        raise click.ClickException(str(exc)) from exc
    stdout_console().print(f"{promoted.name} version {promoted.version} is now {alias!r} "
                     f"({promoted.resource_name})", markup=False)
