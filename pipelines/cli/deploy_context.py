"""What the `gkeflow deploy` commands share: the target options, the context that reads
gkeflow.yaml's deploy settings and serving compute for one target, and the deploy steps'
errors as one-line failures."""

from __future__ import annotations

import json
from pathlib import Path

import click

from gkeflow.pipelines.cli.params import NonEmptyPath
from gkeflow.pipelines.settings.platforms import platform

TARGETS = ("local", "vertex", "gke")
DEFAULT_OUTPUT = Path("gkeflow-output")


def target_options(func):
    options = [
        click.option("--target", type=click.Choice(TARGETS), default="local", show_default=True,
                     help="local: the loopback stand-in (under --output); vertex: a Vertex AI "
                          "Endpoint (targets.vertex in gkeflow.yaml); gke: a KServe "
                          "InferenceService (your kubeconfig)."),
        click.option("--env", "environment", default="default", show_default=True,
                     help="The deploy.<env> entry of gkeflow.yaml to use."),
        click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
                     help="gkeflow.yaml (default: ./gkeflow.yaml when present)."),
        click.option("--output", type=NonEmptyPath(file_okay=False, path_type=Path),
                     default=DEFAULT_OUTPUT, show_default=True,
                     help="local: the --output directory of `gkeflow run`."),
        click.option("--endpoint", metavar="NAME",
                     help="Endpoint / InferenceService name (default: deploy.<env>.endpoint, "
                          "else the model name)."),
        click.option("--namespace", metavar="NS", help="gke: namespace of the InferenceService."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


class DeployContext:
    """gkeflow.yaml, the deploy settings and the serving compute for one target."""

    def __init__(self, target: str, environment: str, config_path: Path | None, output: Path,
                 endpoint: str | None, namespace: str | None, traffic: int | None = None,
                 keep: int | None = None):
        from gkeflow.components.deploy.logic import DeploySettings, DeploySettingsError
        from gkeflow.pipelines.compute.profiles import ComputeError
        from gkeflow.pipelines.definitions.deploy_stage import (
            DEPLOY_STEP,
            SERVING_PROFILE,
            serving_compute,
        )
        from gkeflow.pipelines.settings.config import ConfigError, load_config
        from gkeflow.pipelines.settings.deploy_config import DeployEnvironment

        try:
            self.config = load_config(config_path)
            entry = self.config.deploy.get(environment)
            if entry is None and environment != "default":
                from gkeflow.components.did_you_mean import did_you_mean

                hint = did_you_mean(environment, [*self.config.deploy, *self.config.parameters])
                raise click.ClickException(f"no deploy.{environment} in gkeflow.yaml{hint} "
                                           f"(entries: {', '.join(self.config.deploy) or 'none'})")
            entry = entry or DeployEnvironment()
            api_endpoint = ""
            if platform(target).managed and self.config.targets.vertex is not None:
                api_endpoint = self.config.targets.vertex.api_endpoint or ""
            self.settings = DeploySettings.from_json(
                entry.settings_json(), traffic=traffic or entry.traffic, keep=keep,
                endpoint=endpoint, namespace=namespace,
                api_endpoint=api_endpoint or None)
            profiles = self.config.compute_overrides({DEPLOY_STEP: SERVING_PROFILE})
            self.profile = profiles[DEPLOY_STEP]
            self.compute = json.loads(serving_compute(self.profile, target))
        except (ConfigError, ComputeError, DeploySettingsError) as exc:
            raise click.ClickException(str(exc)) from exc
        self.target, self.output, self.environment = target, Path(output), environment

    def registry_uri(self) -> str:
        from gkeflow.pipelines.settings.config import ConfigError

        if platform(self.target).local:
            from gkeflow.pipelines.settings.tracking_config import (
                mlflow_registry_uri,
                tracking_for,
            )

            mlflow = tracking_for(self.config.tracking, self.environment).mlflow
            if mlflow is not None and mlflow.tracking_uri and \
                    "registry" not in self.config.model_fields_set:
                # where `gkeflow run --env ENV` registered: the tracking server's registry
                return mlflow_registry_uri(mlflow.tracking_uri)
            return f"sqlite:///{(self.output / 'registry.db').resolve()}"
        if platform(self.target).managed:
            vertex = self._vertex()
            return f"vertex://projects/{vertex.project}/locations/{vertex.region}"
        try:
            return self.config.registry.registry_uri()
        except ConfigError as exc:
            raise click.ClickException(str(exc)) from exc

    def registry(self):
        """The registry versions are resolved in (Vertex AI: through targets.vertex's API
        endpoint)."""
        from gkeflow.components.register.backends import RegistrySettings, open_registry

        api_endpoint = ""
        if platform(self.target).managed:
            api_endpoint = self._vertex().api_endpoint or ""
        elif platform(self.target).kubernetes:
            api_endpoint = self.config.registry.api_endpoint
        return open_registry(self.registry_uri(), RegistrySettings(
            serving_image=self.config.registry.serving_image, api_endpoint=api_endpoint,
            author=self.config.registry.author))

    def _vertex(self):
        vertex = self.config.targets.vertex
        if vertex is None:
            raise click.ClickException("--target vertex needs targets.vertex (project, region) "
                                       "in gkeflow.yaml; `gkeflow init` writes an example")
        return vertex

    def policy(self):
        """The retry policy of a command at a terminal: the target's ``timeout_s`` per
        call, retried for as long as the target's ``retries`` allow (not the pipeline
        steps' 15 minutes)."""
        from gkeflow.components.cloud.retry import RetryPolicy
        from gkeflow.pipelines.targets.transport import RetryPolicy as CallPolicy
        from gkeflow.pipelines.targets.transport import max_total_s

        settings = self.config.targets.vertex if platform(self.target).managed else \
            self.config.targets.gke
        calls = CallPolicy() if settings is None else CallPolicy(
            attempts=settings.retries + 1, timeout_s=settings.timeout_s)
        return RetryPolicy.from_env(call_timeout_s=calls.timeout_s,
                                    budget_s=max_total_s(calls))

    def vertex_endpoints(self):
        from gkeflow.components.deploy.vertex_endpoint import VertexEndpoints

        vertex = self._vertex()
        return VertexEndpoints(vertex.project, vertex.region, policy=self.policy(),
                               api_endpoint=vertex.api_endpoint or "", echo=echo_err)

    def kube_api(self):
        return kube_api()

    def inference_services(self):
        from gkeflow.components.deploy.kserve import InferenceServices, KServeApi

        namespace = self.settings.namespace or "default"
        return InferenceServices(KServeApi(self.kube_api(), policy=self.policy(), echo=echo_err),
                                 namespace, self.settings.kserve_mode)

    def local_endpoints(self):
        from gkeflow.components.deploy.local_server import LocalEndpoints

        return LocalEndpoints(self.output / "deployments")


def kube_api():
    """A Kubernetes API client from the kubeconfig (KUBECONFIG), else the pod's account."""
    import os

    from kubernetes import client
    from kubernetes import config as kube_config

    try:
        kube_config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None)
    except Exception:  # noqa: BLE001 - no kubeconfig: try the pod's service account
        try:
            kube_config.load_incluster_config()
        except Exception as exc:
            raise click.ClickException(
                "--target gke needs a kubeconfig (gcloud container clusters "
                "get-credentials CLUSTER) or to run in the cluster") from exc
    return client.ApiClient()


def echo_err(line: str) -> None:
    click.echo(line, err=True)


def deploy_errors() -> tuple[type[Exception], ...]:
    """The deploy steps' own errors: their message is the line a user needs. Anything else
    (credentials, a server that answers oddly, a bug) goes to the CLI's error reporting:
    one line naming the problem, the traceback with --debug."""
    from gkeflow.components.cloud.retry import GaveUp
    from gkeflow.components.deploy.kserve import KServeError
    from gkeflow.components.deploy.local_server import LocalDeployError, VersionNotServed
    from gkeflow.components.deploy.logic import DeploySettingsError
    from gkeflow.components.deploy.model_registry_record import RecordError
    from gkeflow.components.deploy.servable import NotServable, RequestError
    from gkeflow.components.deploy.traffic import TrafficError
    from gkeflow.components.deploy.vertex_endpoint import DeployError
    from gkeflow.components.register.local_registry import RegistryError

    return (GaveUp, KServeError, LocalDeployError, VersionNotServed, DeploySettingsError,
            RecordError, NotServable, RequestError, TrafficError, DeployError, RegistryError)


def fail(exc: Exception) -> click.ClickException:
    from gkeflow.components.cloud.retry import describe_error

    text = str(exc) if not hasattr(exc, "code") else describe_error(exc)
    return click.ClickException(text.splitlines()[0] if text else type(exc).__name__)
