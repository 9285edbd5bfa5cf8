"""``gkeflow monitoring``: Cloud Monitoring alert policies for gkeflow's training jobs."""

from __future__ import annotations

import sys
from pathlib import Path

import click


@click.group("monitoring")
def monitoring_group() -> None:
    """Cloud Monitoring alerts for gkeflow's training jobs (the monitoring: section).

    \b
    gkeflow monitoring apply [--env ENV] [--dry-run]   create/update the alert policies
    """


@monitoring_group.command("apply")
@click.option("--env", "environment", default="default", show_default=True,
              help="Which `monitoring:` section of gkeflow.yaml to apply.")
@click.option("--project", metavar="PROJECT",
              help="Project of the policies (default: monitoring.<env>.project, else "
                   "targets.vertex.project).")
@click.option("--api-endpoint", metavar="URL",
              help="Monitoring API endpoint (default: monitoring.<env>.api_endpoint, else "
                   "https://monitoring.googleapis.com).")
@click.option("--dry-run", is_flag=True,
              help="Offline: print every request apply would send (the look-up, then a "
                   "create or an update per policy); needs no credentials or network.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("gkeflow.yaml"), show_default=True,
              help="The configuration file (`gkeflow init` writes an example).")
def monitoring_apply(environment: str, project: str | None, api_endpoint: str | None,
                     dry_run: bool, config_path: Path) -> None:
    """Create or update the alert policies on idle GPUs (idempotent).

    One policy per target: GKE (kubernetes.io/container/accelerator/duty_cycle of the
    pods labelled app.kubernetes.io/managed-by=gkeflow, per pod) and Vertex AI
    (ml.googleapis.com/training/accelerator/utilization of custom training jobs, per
    job). An incident opens when the mean stays below gpu_idle.threshold_percent
    (default 40) for gpu_idle.duration_minutes (default 30) and goes to
    notification_channels. Policies are found by display name and the user label
    managed-by=gkeflow: a missing one is created, a different one updated, an equal one
    left alone, so running it twice leaves one policy per name. A policy of the same
    name without the label is refused, never overwritten. 429, 5xx and lost connections
    are retried a bounded number of times; a create whose answer was lost is looked up
    before any retry. See docs/costs.md, "Alerts on idle GPUs".
    """
    from gkeflow.pipelines.settings.config import ConfigError, load_config
    from gkeflow.pipelines.settings.monitoring_config import DEFAULT_ENVIRONMENT, MonitoringSettings
    from gkeflow.pipelines.targets import monitoring

    if not config_path.exists() and config_path != Path("gkeflow.yaml"):
        raise click.ClickException(f"{config_path} not found; `gkeflow init` writes a "
                                   "commented example")
    try:
        config = load_config(config_path if config_path.exists() else None)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    if environment in config.monitoring:
        settings = config.monitoring[environment]
    elif environment == DEFAULT_ENVIRONMENT:
        settings = MonitoringSettings()
    else:
        known = ", ".join(config.monitoring) or "none"
        raise click.ClickException(f"no monitoring.{environment} in {config_path} "
                                   f"(environments there: {known}); add it or pick --env")
    vertex = config.targets.vertex
    try:
        project = project or monitoring.resolve_project(
            settings, vertex.project if vertex else "", environment)
    except monitoring.MonitoringError as exc:
        raise click.ClickException(str(exc)) from None
    desired = monitoring.desired_policies(settings, environment)
    if not desired:
        click.echo(f"monitoring.{environment}: gke and vertex are both disabled; nothing to "
                   "apply")
        return
    policies = monitoring.AlertPolicies(project, (api_endpoint or settings.api_endpoint))
    if dry_run:
        planned = monitoring.planned_requests(policies, desired)
        click.echo(f"--dry-run: up to {len(desired) + 1} request(s) would be sent "
                   f"({len(desired)} polic{'y' if len(desired) == 1 else 'ies'}); nothing "
                   "was changed")
        for request in planned:
            click.echo(request.render())
        return
    try:
        outcomes = monitoring.apply_policies(policies, desired)
    except monitoring.MonitoringError as exc:
        raise click.ClickException(str(exc)) from None
    for outcome in outcomes:
        detail = f"  ({', '.join(outcome.fields)})" if outcome.fields else ""
        click.echo(f"{outcome.action:>9} {outcome.display_name}  {outcome.name}{detail}")
    if not settings.notification_channels:
        click.echo(f"note: monitoring.{environment}.notification_channels is empty: "
                   "incidents show in the Cloud console only", file=sys.stderr)
