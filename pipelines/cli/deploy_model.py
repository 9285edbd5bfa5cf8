"""`gkeflow deploy NAME[@VERSION|@ALIAS]`: check a registered version is servable, then
deploy it with a canary share on the target (or show the change with --dry-run)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import click

from gkeflow.pipelines.cli.deploy_context import (
    DeployContext,
    deploy_errors,
    echo_err,
    fail,
    target_options,
)
from gkeflow.pipelines.settings.platforms import platform


@click.command("model", hidden=True)
@click.argument("model_ref", metavar="NAME[@VERSION|@ALIAS]")
@target_options
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

    context = DeployContext(target, environment, config_path, output, endpoint, namespace, traffic)
    registry_uri = context.registry_uri()
    try:
        ref = parse_model_ref(model_ref)
        if platform(target).managed:
            _vertex_credentials_for(context, ref, registry_uri)
        version, how = resolve_version(registry_uri, ref, context.registry())
    except PredictError as exc:
        raise click.ClickException(str(exc)) from exc
    except deploy_errors() as exc:
        raise fail(exc) from exc
    registered = {"modelName": version.name, "version": version.version,
                  "resourceName": version.resource_name, "modelUri": version.uri}
    echo_err(f"{version.name} version {version.version} ({how}): {version.uri}")
    with tempfile.TemporaryDirectory(prefix="gkeflow-deploy-") as scratch:
        model_dir = _local_model(version.uri, Path(scratch))
        checked = _check(model_dir, evaluation)
        echo_err(checked)
        if dry_run:
            _dry_run(context, model_dir, registered)
            return
        from gkeflow.components.deploy.logic import deploy_version

        try:
            outcome = deploy_version(target, model_dir, registered, context.settings,
                                     context.compute, registry_uri, checked, echo=echo_err,
                                     kube_api=(context.kube_api()
                                               if platform(target).kubernetes else None),
                                     policy=context.policy())
        except click.ClickException:
            raise
        except deploy_errors() as exc:
            raise fail(exc) from exc
    click.echo(f"{outcome.endpoint}: {outcome.split_text}")


def _vertex_credentials_for(context: DeployContext, ref, registry_uri: str) -> None:
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
                                           f"reading the model at {uri}", on_retry=echo_err)
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


def _dry_run(context: DeployContext, model_dir: Path, registered: dict[str, Any]) -> None:
    """Show the change without making it (reads the current state where it can)."""
    from gkeflow.components.deploy import traffic as tr

    settings, name = context.settings, context.settings.endpoint or registered["modelName"]
    version = int(registered["version"])
    if platform(context.target).managed:
        from google.cloud import aiplatform_v1

        from gkeflow.components.deploy.logic import vertex_parts

        api, resource, machine = vertex_parts(registered, settings, context.compute, echo=echo_err,
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
    elif platform(context.target).kubernetes:
        import yaml

        from gkeflow.components.deploy import kserve
        from gkeflow.components.deploy.logic import kserve_parts

        services, served, placement, namespace = kserve_parts(
            model_dir, registered, settings, context.compute, context.kube_api(), echo_err,
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
