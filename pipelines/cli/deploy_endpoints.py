"""`gkeflow deploy promote|rollback|status NAME`: move or show an endpoint's traffic."""

from __future__ import annotations

import click

from gkeflow.pipelines.cli.deploy_context import (
    DeployContext,
    deploy_errors,
    echo_err,
    fail,
    target_options,
)
from gkeflow.pipelines.settings.platforms import platform


def _show(target: str, state) -> str:
    return "nothing deployed" if state is None else state.describe()


@click.command("promote")
@click.argument("name")
@target_options
@click.option("--keep", type=click.IntRange(min=0),
              help="Previous versions kept deployed for a rollback (default: deploy.<env>.keep, "
                   "1).")
def promote_command(name, target, environment, config_path, output, endpoint, namespace,
                    keep) -> None:
    """Give the newest version of endpoint NAME 100% and undeploy beyond --keep."""
    context = DeployContext(target, environment, config_path, output, endpoint or name, namespace,
                            keep=keep)
    _change_traffic(context, target, "promote", keep=context.settings.keep)


@click.command("rollback")
@click.argument("name")
@target_options
def rollback_command(name, target, environment, config_path, output, endpoint,
                     namespace) -> None:
    """Restore endpoint NAME's split from before its last change."""
    context = DeployContext(target, environment, config_path, output, endpoint or name, namespace)
    _change_traffic(context, target, "rollback")


def _change_traffic(context: DeployContext, target: str, action: str, **options) -> None:
    """``promote`` or ``rollback`` the endpoint on ``target`` (each backend's method of that
    name), record a KServe change in the Model Registry, and print the new split."""
    name = context.settings.endpoint
    try:
        if platform(target).managed:
            state = getattr(context.vertex_endpoints(), action)(name, **options)
        elif platform(target).kubernetes:
            services = context.inference_services()
            before = services.status(name)
            state = getattr(services, action)(name, _placement(context), **options)
            _record(context, services, name, before, state)
        else:
            state = getattr(context.local_endpoints(), action)(name, **options)
    except deploy_errors() as exc:
        raise fail(exc) from exc
    click.echo(f"{name}: {_show(target, state)}")


@click.command("status")
@click.argument("name")
@target_options
def status_command(name, target, environment, config_path, output, endpoint,
                   namespace) -> None:
    """Show what serves on endpoint NAME and with what share."""
    context = DeployContext(target, environment, config_path, output, endpoint or name, namespace)
    name = context.settings.endpoint
    try:
        if platform(target).managed:
            state = context.vertex_endpoints().state(name)
        elif platform(target).kubernetes:
            state = context.inference_services().status(name)
        else:
            state = context.local_endpoints().get(name)
    except deploy_errors() as exc:
        raise fail(exc) from exc
    click.echo(f"{name}: {_show(target, state)}")


def _record(context: DeployContext, services, name: str, before, state) -> None:
    """With the Kubeflow Model Registry (registry: in gkeflow.yaml): record the change."""
    from gkeflow.components.deploy.logic import record_in_model_registry

    record_in_model_registry(context.registry_uri(), services.namespace, name, before, state,
                             echo=echo_err)


def _placement(context: DeployContext):
    from gkeflow.components.deploy.kserve import Placement

    return Placement.of({**context.compute.get("gke", {}),
                         "min_replicas": context.settings.min_replicas,
                         "max_replicas": context.settings.max_replicas})
