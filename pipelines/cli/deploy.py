"""`gkeflow deploy`: serve a registered model version on Vertex AI, GKE (KServe) or the local
stand-in, with canary traffic, promotion and rollback; `gkeflow deploy local` answers
TensorFlow Serving REST requests on loopback.

Connection settings come from gkeflow.yaml: ``targets.vertex`` (project, region,
api_endpoint) for Vertex AI, the kubeconfig (or the pod's service account) for GKE,
``deploy.<env>`` for the endpoint's settings and ``compute.deploy-model`` for the serving
machines; locally, the ``--output`` directory of `gkeflow run`.

Longer than most modules on purpose: the deploy commands (deploy, promote, rollback,
status, local) share one option set and one way of resolving a model and a target.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from gkeflow.pipelines.cli.params import NonEmptyPath

TARGETS = ("local", "vertex", "gke")
DEFAULT_OUTPUT = Path("gkeflow-output")


class DeployGroup(click.Group):
    """``gkeflow deploy NAME@VERSION ...`` runs the hidden ``model`` command; the other
    words are subcommands (promote, rollback, status, local)."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["model", *args]
        return super().parse_args(ctx, args)

    def format_usage(self, ctx, formatter):
        formatter.write_usage("gkeflow deploy", "NAME[@VERSION|@ALIAS] --target T [--traffic N] "
                              "[--dry-run] | promote|rollback|status|local NAME ...")

    def format_options(self, ctx, formatter):
        """The group's options, then those of ``gkeflow deploy NAME``: the command most
        calls run, which has no name of its own to ask --help of."""
        super().format_options(ctx, formatter)
        deploy = self.commands["model"]
        records = [record for param in deploy.get_params(ctx)
                   if isinstance(param, click.Option) and not param.hidden
                   and (record := param.get_help_record(ctx)) is not None
                   and not record[0].startswith("-h")]
        with formatter.section("Options of gkeflow deploy NAME[@VERSION|@ALIAS]"):
            formatter.write_dl(records)


def _target_options(func):
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


@click.group(cls=DeployGroup)
def deploy_group() -> None:
    """Serve a registered model: canary traffic, promotion, rollback, status.

    \b
      gkeflow deploy penguins-classifier@3 --target vertex --traffic 10
      gkeflow deploy penguins-classifier@champion --target gke --dry-run
      gkeflow deploy promote penguins-classifier --target vertex   # 100%, keep 1 previous
      gkeflow deploy rollback penguins-classifier --target vertex  # the split before
      gkeflow deploy status penguins-classifier --target gke
      gkeflow deploy local penguins-classifier --request request.json
      gkeflow deploy local penguins-classifier --serve --port 8501

    A model is checked before anything changes: its serving_default signature answers
    through TensorFlow Serving's REST mapping ({"instances": [{input: value}, ...]}), with
    the inputs and dtypes it was trained with.
    """


# ---------------------------------------------------------------------------------------------
# settings


class _Context:
    """gkeflow.yaml, the deploy settings and the serving compute for one target."""

    def __init__(self, target: str, environment: str, config_path: Path | None, output: Path,
                 endpoint: str | None, namespace: str | None, traffic: int | None = None,
                 keep: int | None = None):
        from gkeflow.components.deploy.logic import DeploySettings, DeploySettingsError
        from gkeflow.pipelines.compute.profiles import ComputeError
        from gkeflow.pipelines.config import ConfigError, load_config
        from gkeflow.pipelines.deploy_config import DeployEnvironment
        from gkeflow.pipelines.deploy_stage import DEPLOY_STEP, SERVING_PROFILE, serving_compute

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
            if target == "vertex" and self.config.targets.vertex is not None:
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
        self.target, self.output = target, Path(output)

    def registry_uri(self) -> str:
        from gkeflow.pipelines.config import ConfigError

        if self.target == "local":
            return f"sqlite:///{(self.output / 'registry.db').resolve()}"
        if self.target == "vertex":
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
        if self.target == "vertex":
            api_endpoint = self._vertex().api_endpoint or ""
        elif self.target == "gke":
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

        settings = self.config.targets.vertex if self.target == "vertex" else \
            self.config.targets.gke
        calls = CallPolicy() if settings is None else CallPolicy(
            attempts=settings.retries + 1, timeout_s=settings.timeout_s)
        return RetryPolicy.from_env(call_timeout_s=calls.timeout_s,
                                    budget_s=max_total_s(calls))

    def vertex_endpoints(self):
        from gkeflow.components.deploy.vertex_endpoint import VertexEndpoints

        vertex = self._vertex()
        return VertexEndpoints(vertex.project, vertex.region, policy=self.policy(),
                               api_endpoint=vertex.api_endpoint or "", echo=_echo)

    def kube_api(self):
        return kube_api()

    def inference_services(self):
        from gkeflow.components.deploy.kserve import InferenceServices, KServeApi

        namespace = self.settings.namespace or "default"
        return InferenceServices(KServeApi(self.kube_api(), policy=self.policy(), echo=_echo),
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


def _echo(line: str) -> None:
    click.echo(line, err=True)


def _deploy_errors() -> tuple[type[Exception], ...]:
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


def _fail(exc: Exception) -> click.ClickException:
    from gkeflow.components.cloud.retry import describe_error

    text = str(exc) if not hasattr(exc, "code") else describe_error(exc)
    return click.ClickException(text.splitlines()[0] if text else type(exc).__name__)


# ---------------------------------------------------------------------------------------------
# deploy NAME[@VERSION|@ALIAS]


@deploy_group.command("model", hidden=True)
@click.argument("model_ref", metavar="NAME[@VERSION|@ALIAS]")
@_target_options
@click.option("--traffic", type=click.IntRange(1, 100),
              help="Percent for the new version (default: deploy.<env>.traffic, 10); the first "
                   "version of an endpoint gets 100.")
@click.option("--evaluation", type=click.Path(exists=True, path_type=Path),
              help="evaluation.json of the run that evaluated this version: its rows are sent "
                   "to the model and must get the same predictions. Without it the signature, "
                   "input names and dtypes are checked and one request is answered.")
@click.option("--dry-run", is_flag=True,
              help="Check the model and show what would change (the request or manifest); "
                   "change nothing.")
def deploy_model_command(model_ref, target, environment, config_path, output, endpoint,
                         namespace, traffic, evaluation, dry_run) -> None:
    """Deploy NAME@VERSION (or @ALIAS; default: champion, else newest) on --target."""
    from gkeflow.components.predict.resolve import PredictError, parse_model_ref, resolve_version

    context = _Context(target, environment, config_path, output, endpoint, namespace, traffic)
    registry_uri = context.registry_uri()
    try:
        ref = parse_model_ref(model_ref)
        if target == "vertex":
            _vertex_credentials_for(context, ref, registry_uri)
        version, how = resolve_version(registry_uri, ref, context.registry())
    except PredictError as exc:
        raise click.ClickException(str(exc)) from exc
    except _deploy_errors() as exc:
        raise _fail(exc) from exc
    registered = {"modelName": version.name, "version": version.version,
                  "resourceName": version.resource_name, "modelUri": version.uri}
    _echo(f"{version.name} version {version.version} ({how}): {version.uri}")
    with tempfile.TemporaryDirectory(prefix="gkeflow-deploy-") as scratch:
        model_dir = _local_model(version.uri, Path(scratch))
        checked = _check(model_dir, evaluation)
        _echo(checked)
        if dry_run:
            _dry_run(context, model_dir, registered)
            return
        from gkeflow.components.deploy.logic import deploy_version

        try:
            outcome = deploy_version(target, model_dir, registered, context.settings,
                                     context.compute, registry_uri, checked, echo=_echo,
                                     kube_api=context.kube_api() if target == "gke" else None,
                                     policy=context.policy())
        except click.ClickException:
            raise
        except _deploy_errors() as exc:
            raise _fail(exc) from exc
    click.echo(f"{outcome.endpoint}: {outcome.split_text}")


def _vertex_credentials_for(context: _Context, ref, registry_uri: str) -> None:
    """Before Vertex AI is asked for ``ref``: the credentials to ask with, or one line
    saying that whether the model exists could not be checked, and the fix."""
    from gkeflow.pipelines.targets.credentials import (
        ADC_FIX,
        CredentialsError,
        google_credentials,
    )

    if (context._vertex().api_endpoint or "").startswith("http://"):
        return  # a local emulator: no credentials are sent to it
    try:
        google_credentials("the Vertex AI Model Registry")
    except CredentialsError as exc:
        raise click.ClickException(
            f"cannot check whether model {ref} exists in the Vertex AI Model Registry "
            f"({registry_uri.removeprefix('vertex://')}): no Google credentials found; "
            f"{ADC_FIX}") from exc


def _local_model(uri: str, scratch: Path) -> Path:
    if "://" not in uri or uri.startswith("file://"):
        path = Path(uri.removeprefix("file://"))
        if not (path / "saved_model.pb").exists():
            raise click.ClickException(f"no SavedModel at {path}")
        return path
    from gkeflow.components.cloud.retry import RetryPolicy
    from gkeflow.components.scaleout.storage import download

    try:
        return RetryPolicy.from_env().call(lambda: download(uri, scratch / "model"),
                                           f"reading the model at {uri}", on_retry=_echo)
    except Exception as exc:
        raise click.ClickException(f"cannot read the model at {uri}: {exc}") from exc


def _check(model_dir: Path, evaluation: Path | None) -> str:
    from gkeflow.components.deploy.logic import load_sample
    from gkeflow.components.deploy.servable import (
        NotServable,
        RequestError,
        ServedModel,
        ServingContract,
        check_servable,
    )
    from gkeflow.pipelines.cli.quiet import native_stderr_silenced

    try:
        if evaluation is not None:
            with native_stderr_silenced():
                return check_servable(model_dir, load_sample(evaluation)).line
        contract = ServingContract.of(model_dir)
        with native_stderr_silenced():
            served = ServedModel(model_dir)
        problems = served.contract_problems(contract)
        if problems:
            raise NotServable("the model does not match its serving contract: "
                              + "; ".join(problems))
        row = {f["name"]: None for f in contract.features}
        served.predict({"instances": contract.instances([row])})
    except (NotServable, RequestError) as exc:
        raise click.ClickException(f"not deployed: {exc}") from exc
    return (f"servable: serving_default takes {', '.join(sorted(served.inputs))} and answered "
            "a REST request (pass --evaluation to compare with the evaluation's predictions)")


def _dry_run(context: _Context, model_dir: Path, registered: dict[str, Any]) -> None:
    """Show the change without making it (reads the current state where it can)."""
    from gkeflow.components.deploy import traffic as tr

    settings, name = context.settings, context.settings.endpoint or registered["modelName"]
    version = int(registered["version"])
    if context.target == "vertex":
        from google.cloud import aiplatform_v1

        from gkeflow.components.deploy.logic import vertex_parts

        api, resource, machine = vertex_parts(registered, settings, context.compute, echo=_echo,
                                              policy=context.policy())
        state = api.state(name)
        current = state.split if state else {}
        existing = state.find(resource) if state else None
        new_key = existing.deployed_id if existing else "0"
        split = tr.canary(current, new_key, settings.traffic,
                          [d.deployed_id for d in state.deployed] if state else [])
        request = aiplatform_v1.DeployModelRequest(
            endpoint=state.name if state else f"{api.parent}/endpoints/{name}",
            deployed_model={"model": resource, "display_name": f"{name}-v{version}",
                            "dedicated_resources": machine.resources()},
            traffic_split=split)
        click.echo(f"would deploy on endpoint {name} ({'exists' if state else 'to be created'})")
        click.echo(aiplatform_v1.DeployModelRequest.to_json(request))
    elif context.target == "gke":
        import yaml

        from gkeflow.components.deploy import kserve
        from gkeflow.components.deploy.logic import kserve_parts

        services, served, placement, namespace = kserve_parts(
            model_dir, registered, settings, context.compute, context.kube_api(), _echo,
            context.policy())
        current = services.status(name) or kserve.State()
        versions = [v for v in current.versions if v.key != served.key] + [served]
        split = tr.canary(current.split, served.key, settings.traffic,
                          [v.key for v in versions])
        if settings.kserve_mode == "serverless":
            split = {k: v for k, v in split.items() if v}
        state = kserve.State([v for v in versions if v.key in split], split, current.split)
        click.echo(f"would copy the model to {served.storage_uri}/{version}/ and apply:")
        click.echo(yaml.safe_dump(kserve.manifest(name, namespace, state, placement,
                                                  settings.kserve_mode), sort_keys=False))
    else:
        endpoint = context.local_endpoints().get(name)
        current = endpoint.split if endpoint else {}
        key = f"v{version}"
        split = tr.canary(current, key, settings.traffic,
                          [v.key for v in endpoint.versions] + [key] if endpoint else [key])
        click.echo(f"would serve {registered['modelName']}@{version} locally on {name}: "
                   f"{tr.describe(split)}")


# ---------------------------------------------------------------------------------------------
# promote, rollback, status


def _show(target: str, state) -> str:
    return "nothing deployed" if state is None else state.describe()


@deploy_group.command("promote")
@click.argument("name")
@_target_options
@click.option("--keep", type=click.IntRange(min=0),
              help="Previous versions kept deployed for a rollback (default: deploy.<env>.keep, "
                   "1).")
def promote_command(name, target, environment, config_path, output, endpoint, namespace,
                    keep) -> None:
    """Give the newest version of endpoint NAME 100% and undeploy beyond --keep."""
    context = _Context(target, environment, config_path, output, endpoint or name, namespace,
                       keep=keep)
    keep = context.settings.keep
    name = context.settings.endpoint
    try:
        if target == "vertex":
            state = context.vertex_endpoints().promote(name, keep=keep)
        elif target == "gke":
            services = context.inference_services()
            before = services.status(name)
            state = services.promote(name, _placement(context), keep)
            _record(context, services, name, before, state)
        else:
            state = context.local_endpoints().promote(name, keep)
    except _deploy_errors() as exc:
        raise _fail(exc) from exc
    click.echo(f"{name}: {_show(target, state)}")


@deploy_group.command("rollback")
@click.argument("name")
@_target_options
def rollback_command(name, target, environment, config_path, output, endpoint,
                     namespace) -> None:
    """Restore endpoint NAME's split from before its last change."""
    context = _Context(target, environment, config_path, output, endpoint or name, namespace)
    name = context.settings.endpoint
    try:
        if target == "vertex":
            state = context.vertex_endpoints().rollback(name)
        elif target == "gke":
            services = context.inference_services()
            before = services.status(name)
            state = services.rollback(name, _placement(context))
            _record(context, services, name, before, state)
        else:
            state = context.local_endpoints().rollback(name)
    except _deploy_errors() as exc:
        raise _fail(exc) from exc
    click.echo(f"{name}: {_show(target, state)}")


@deploy_group.command("status")
@click.argument("name")
@_target_options
def status_command(name, target, environment, config_path, output, endpoint,
                   namespace) -> None:
    """Show what serves on endpoint NAME and with what share."""
    context = _Context(target, environment, config_path, output, endpoint or name, namespace)
    name = context.settings.endpoint
    try:
        if target == "vertex":
            state = context.vertex_endpoints().state(name)
        elif target == "gke":
            state = context.inference_services().status(name)
        else:
            state = context.local_endpoints().get(name)
    except _deploy_errors() as exc:
        raise _fail(exc) from exc
    click.echo(f"{name}: {_show(target, state)}")


def _record(context: _Context, services, name: str, before, state) -> None:
    """With the Kubeflow Model Registry (registry: in gkeflow.yaml): record the change."""
    from gkeflow.components.deploy.logic import record_in_model_registry

    record_in_model_registry(context.registry_uri(), services.namespace, name, before, state,
                             echo=_echo)


def _placement(context: _Context):
    from gkeflow.components.deploy.kserve import Placement

    return Placement.of({**context.compute.get("gke", {}),
                         "min_replicas": context.settings.min_replicas,
                         "max_replicas": context.settings.max_replicas})


# ---------------------------------------------------------------------------------------------
# local


@deploy_group.command("local")
@click.argument("name")
@click.option("--output", type=NonEmptyPath(file_okay=False, path_type=Path),
              default=DEFAULT_OUTPUT, show_default=True,
              help="The --output directory of `gkeflow run --deploy`.")
@click.option("--request", "request_file", type=click.Path(exists=True, dir_okay=False,
                                                           path_type=Path),
              help='A JSON request, {"instances": [{"<input>": value, ...}, ...]}: print the '
                   "answer and the predicted classes.")
@click.option("--version", "version", type=int,
              help="Ask this version (default: the one with the largest share).")
@click.option("--serve", is_flag=True,
              help="Serve POST /v1/models/NAME:predict on 127.0.0.1 until Ctrl-C.")
@click.option("--port", type=click.IntRange(0, 65535), default=8501, show_default=True,
              help="--serve: the port (TensorFlow Serving's REST port is 8501).")
def local_command(name, output, request_file, version, serve, port) -> None:
    """Answer TensorFlow Serving REST requests with the locally deployed NAME."""
    from gkeflow.components.deploy.local_server import (
        Answerer,
        LocalDeployError,
        LocalEndpoints,
        make_server,
    )
    from gkeflow.components.deploy.servable import NotServable, RequestError
    from gkeflow.pipelines.cli.quiet import native_stderr_silenced

    if not request_file and not serve:
        raise click.UsageError("give --request FILE or --serve")
    endpoints = LocalEndpoints(Path(output) / "deployments")
    endpoint = endpoints.get(name)
    if endpoint is None:
        known = ", ".join(e.name for e in endpoints.list()) or "none"
        raise click.ClickException(f"no local endpoint {name} under {output}/deployments "
                                   f"(endpoints: {known}); run `gkeflow run --deploy` first")
    if request_file:
        try:
            body = json.loads(request_file.read_text(encoding="utf-8"))
            with native_stderr_silenced():
                answerer = Answerer(endpoint)
                answer = answerer.predict(body, version)
        except ValueError as exc:
            raise click.ClickException(f"{request_file}: {exc}") from exc
        except (RequestError, NotServable, LocalDeployError, KeyError) as exc:
            raise click.ClickException(str(exc)) from exc
        click.echo(json.dumps(answer))
    if serve:
        try:
            with native_stderr_silenced():
                server = make_server(endpoint, port, log=_echo)
        except OSError as exc:
            raise click.ClickException(f"cannot listen on 127.0.0.1:{port}: {exc}") from exc
        host, bound = server.server_address[:2]
        click.echo(f"serving {name} ({endpoint.describe()}) at "
                   f"http://{host}:{bound}/v1/models/{name}:predict — Ctrl-C stops")
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()


# ---------------------------------------------------------------------------------------------
# `gkeflow models list`: which version serves where


def lookup_policy():
    """The serving column is a side look-up: a few seconds of retries, not a launcher's
    budget, so an unreachable cluster or endpoint never holds up `models list`."""
    from gkeflow.components.cloud.retry import RetryPolicy

    policy = RetryPolicy.from_env()
    return policy.with_(budget_s=min(policy.budget_s, 15.0),
                        call_timeout_s=min(policy.call_timeout_s, 10.0))


def serving_by_version(kind: str, registry_uri: str, api_endpoint: str = "",
                       namespaces: Sequence[str] = (), kube=None
                       ) -> dict[tuple[str, int], str]:
    """(model, version) -> "endpoint 90%, ..." for the local stand-in, Vertex AI endpoints
    and (Kubeflow Model Registry) the KServe InferenceServices in ``namespaces``, through
    ``kube`` (an API client; default: the kubeconfig's); empty when nothing can be read."""
    out: dict[tuple[str, int], list[str]] = {}
    if kind == "local":
        from gkeflow.components.deploy.local_server import LocalEndpoints
        from gkeflow.components.register.local_registry import LocalRegistry, registry_path

        root = registry_path(registry_uri).resolve().parent / "deployments"
        by_dir = {str(Path(v.uri).resolve()): (v.name, v.version)
                  for v in LocalRegistry(registry_uri).list()}
        for endpoint in LocalEndpoints(root).list():
            for version in endpoint.versions:
                key = by_dir.get(str(Path(version.model_dir).resolve()))
                if key is not None:
                    out.setdefault(key, []).append(
                        f"{endpoint.name} {endpoint.split.get(version.key, 0)}%")
    elif kind == "vertex":
        from gkeflow.components.deploy.vertex_endpoint import VertexEndpoints

        where = registry_uri.removeprefix("vertex://").split("/")
        try:
            api = VertexEndpoints(where[1], where[3], lookup_policy(),
                                  api_endpoint=api_endpoint, echo=lambda line: None)
            endpoints = api.listed()
        except Exception:  # noqa: BLE001 - the table still shows the registry
            return {}
        for endpoint in endpoints:
            state = api._state(endpoint)
            for deployed in state.deployed:
                model_name = endpoint.labels.get("gkeflow-model", "")
                version = int(deployed.model.rsplit("@", 1)[1])
                out.setdefault((model_name, version), []).append(
                    f"{endpoint.display_name} {deployed.percent}%")
    elif kind == "kubeflow":
        from gkeflow.components.deploy.kserve import KServeApi, serving_shares

        try:
            api = KServeApi(kube or kube_api(), lookup_policy(), echo=lambda line: None)
            shares = [share for namespace in dict.fromkeys(namespaces)
                      for share in serving_shares(api, namespace)]
        except Exception:  # noqa: BLE001 - no cluster at hand: the table still shows the registry
            return {}
        for model_name, version, where, percent in shares:
            out.setdefault((model_name, version), []).append(f"{where} {percent}%")
    return {k: ", ".join(v) for k, v in out.items()}


# ---------------------------------------------------------------------------------------------
# `gkeflow run --deploy`: what was deployed and how to ask it


def print_local_deployment(console, result, output: Path) -> None:
    """After a local run: the deployment, and a request file built from the evaluation's
    rows (with the classes the evaluation predicted for them) to try it with."""
    deployed = result.parameter_outputs("deploy-model")
    if not deployed:
        return
    from gkeflow.components.deploy.logic import load_sample
    from gkeflow.components.deploy.servable import ServingContract

    name = Path(str(deployed.get("endpoint", ""))).stem
    console.print(f"Deployed:  {name} (local stand-in): {deployed.get('traffic_split')}",
                  markup=False)
    from gkeflow.components.deploy.local_server import LocalEndpoints

    evaluation = result.output_dir("evaluate-model", "evaluation")
    endpoint = LocalEndpoints(Path(output) / "deployments").get(name)
    sample = load_sample(Path(evaluation)) if evaluation else None
    if not sample or endpoint is None:
        return
    contract = ServingContract.of(Path(endpoint.stable().model_dir))
    request = Path(output) / "requests" / f"{name}.json"
    request.parent.mkdir(parents=True, exist_ok=True)
    request.write_text(json.dumps({"instances": contract.instances(sample["rows"][:5])},
                                  indent=2), encoding="utf-8")
    expected = request.with_name(f"{name}.expected.json")
    expected.write_text(json.dumps({"classes": sample["classes"][:5]}), encoding="utf-8")
    console.print(f"Try:       gkeflow deploy local {name} --output {output} --request "
                  f"{request}", markup=False)
    console.print(f"           (the evaluation predicted {', '.join(sample['classes'][:5])}); "
                  f"--serve answers POST /v1/models/{name}:predict on 127.0.0.1",
                  markup=False)
