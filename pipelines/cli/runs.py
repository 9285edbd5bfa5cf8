"""`gkeflow runs`: the history of runs on Kubeflow Pipelines (GKE) and Vertex AI.

Registered on the `gkeflow` group in :mod:`gkeflow.pipelines.cli.main`; reading and acting is
:mod:`gkeflow.pipelines.targets.runs` (one shape for both targets).
"""

from __future__ import annotations

import json
import re

import click
from rich.table import Table
from rich.text import Text

from gkeflow.pipelines.cli.common import (
    config_option,
    remote_errors,
    require_config,
    stdout_console,
)
from gkeflow.pipelines.settings.platforms import names, platform
from gkeflow.pipelines.targets.backend_choice import reader
from gkeflow.pipelines.targets.runs import format_duration, format_time, step_key, target_of


def _target(func):
    return click.option("--target", type=click.Choice(["gke", "vertex"]),
                        help="The target to read (default: every configured target for "
                             "`list`; for a RUN, Vertex when it is a projects/... name, "
                             "else the only configured target, else gke).")(func)


def _json_option(func):
    return click.option("--output", "output", type=click.Choice(["table", "json"]),
                        default="table", show_default=True,
                        help="json: one JSON document on stdout, for scripts.")(func)


@click.group("runs")
def runs_group() -> None:
    """Past and running runs on the targets of gkeflow.yaml: list, show, logs, cancel, retry,
    cost.

    \b
    gkeflow runs list [--pipeline P] [--schedule S] [--limit N]
    gkeflow runs show RUN                 steps, durations, errors, metrics, gate
    gkeflow runs logs RUN [STEP] [--follow]
    gkeflow runs cancel RUN
    gkeflow runs retry RUN                KFP: retry in place; Vertex: a new job, same inputs
    gkeflow runs cost RUN                 what it really cost (the Cloud Billing export)

    RUN is the KFP run id, or the Vertex PipelineJob id or resource name, as `runs list`
    shows it.
    """


@runs_group.command("list")
@click.option("--pipeline", metavar="NAME", help="Only runs of this pipeline (e.g. training).")
@click.option("--schedule", metavar="NAME", help="Only runs started by this gkeflow schedule.")
@click.option("--limit", type=click.IntRange(1, 500), default=20, show_default=True,
              help="The newest N runs per target.")
@_target
@_json_option
@config_option
@remote_errors
def runs_list(pipeline, schedule, limit, target, output, config_path) -> None:
    """List the newest runs: state, start, duration, the failed step, link."""
    config = require_config(config_path)
    targets = [target] if target else [t for t in names() if platform(t).cloud
                                       and getattr(config.targets, t, None) is not None]
    if not targets:
        raise click.ClickException(f"{config_path}: no targets configured; add targets.gke "
                                   "and/or targets.vertex (`gkeflow init` shows how)")
    runs = []
    for name in targets:
        runs += reader(config, name).list(pipeline=pipeline, schedule=schedule, limit=limit)
    if output == "json":
        click.echo(json.dumps([r.as_json() for r in runs], indent=2))
        return
    console = stdout_console()
    if not runs:
        console.print("no runs found", markup=False)
        return
    table = Table()
    for column, options in (("target", {}), ("run", {"overflow": "fold"}),
                            ("pipeline", {}), ("schedule", {}), ("state", {}),
                            ("start (UTC)", {"no_wrap": True}), ("duration", {}),
                            ("failed step", {}), ("link", {"overflow": "fold"})):
        table.add_column(column, **options)
    for run in runs:
        failed = run.failed_step
        table.add_row(run.target, Text(run.id.rsplit("/", 1)[-1]), Text(run.pipeline or "-"),
                      Text(run.schedule or "-"), _state(run.state), format_time(run.start),
                      format_duration(run.duration_s), Text(failed.name if failed else ""),
                      Text(run.url))
    console.print(table)


def _state(state: str) -> str:
    style = {"SUCCEEDED": "green", "FAILED": "red", "RUNNING": "cyan",
             "CANCELLED": "yellow"}.get(state, "white")
    return f"[{style}]{state.lower()}[/{style}]"


_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*$")


def _run_id(_ctx, _param, value: str) -> str:
    """RUN as `runs list` shows it: a KFP run id, a Vertex AI job id or resource name."""
    value = value.strip()
    if not _RUN_ID.match(value) or ".." in value:
        raise click.BadParameter(f"{value!r} is not a run id; `gkeflow runs list` shows them",
                                 param_hint="RUN")
    return value


@runs_group.command("show")
@click.argument("run", callback=_run_id)
@_target
@_json_option
@config_option
@remote_errors
def runs_show(run, target, output, config_path) -> None:
    """Show RUN: its steps with states, durations and errors; a training run's metrics and
    gate decision."""
    config = require_config(config_path)
    info = reader(config, target_of(config, run, target)).show(run)
    from gkeflow.pipelines.cli import actual_costs
    from gkeflow.pipelines.cli.costs import price_region

    cost, why = actual_costs.run_actual_cost(config, info)
    region = price_region(config, info.target)
    if output == "json":
        click.echo(json.dumps({**info.as_json(),
                               "cost": actual_costs.actual_cost_json(cost, why, region)}, indent=2))
        return
    console = stdout_console()
    console.print(Text.assemble(
        f"run {info.name} ({info.pipeline or 'unknown pipeline'} on {info.target}): ",
        Text.from_markup(_state(info.state))))
    console.print(f"  started {format_time(info.start)} UTC, took "
                  f"{format_duration(info.duration_s)}"
                  + (f", schedule {info.schedule}" if info.schedule else ""), markup=False)
    console.print(f"  {info.url}", markup=False, soft_wrap=True)
    table = Table(title="Steps", title_justify="left")
    for column in ("step", "state", "start (UTC)", "duration", "cost", "error"):
        table.add_column(column, overflow="fold")
    cells = actual_costs.actual_cost_cells(cost)
    for task in sorted(info.tasks, key=lambda t: (t.start is None, t.start or 0, t.name)):
        table.add_row(Text(task.name), _state(task.state), format_time(task.start),
                      format_duration(task.duration_s), cells.get(step_key(task.name), "-"),
                      Text(task.error or ""))
    console.print(table)
    for line in actual_costs.actual_cost_lines(cost, why, region):
        console.print(line, markup=False, soft_wrap=True)
    if info.metrics:
        shown = ", ".join(f"{k} {v:.4g}" for k, v in sorted(info.metrics.items()))
        console.print(f"metrics: {shown}", markup=False, soft_wrap=True)
    if info.gate:
        console.print(f"gate: {info.gate}", markup=False)
    if info.note:
        console.print(f"note: {info.note}", markup=False, soft_wrap=True)
    if info.error:
        console.print(Text.assemble(("error", "red"), f": {info.error}"), soft_wrap=True)


@runs_group.command("logs")
@click.argument("run", callback=_run_id)
@click.argument("step", required=False)
@click.option("--follow", "-f", is_flag=True, help="Keep printing new lines until the run ends.")
@_target
@config_option
@remote_errors
def runs_logs(run, step, follow, target, config_path) -> None:
    """Print the log of STEP of RUN (default: every step that ran), each line prefixed with
    its step."""
    config = require_config(config_path)
    for name, line in reader(config, target_of(config, run, target)).logs(
            run, step, follow=follow):
        click.echo(f"{name}: {line}" if step is None else line)


@runs_group.command("cancel")
@click.argument("run", callback=_run_id)
@_target
@config_option
@remote_errors
def runs_cancel(run, target, config_path) -> None:
    """Cancel RUN (KFP: terminate; Vertex AI: cancel the PipelineJob and its jobs)."""
    config = require_config(config_path)
    stdout_console().print(reader(config, target_of(config, run, target)).cancel(run), markup=False)


@runs_group.command("retry")
@click.argument("run", callback=_run_id)
@_target
@config_option
@remote_errors
def runs_retry(run, target, config_path) -> None:
    """Retry RUN: KFP re-runs its failed steps in place; Vertex AI starts a new PipelineJob
    with the same spec, parameters and settings."""
    config = require_config(config_path)
    stdout_console().print(reader(config, target_of(config, run, target)).retry(run), markup=False)


@runs_group.command("cost")
@click.argument("run", callback=_run_id)
@_target
@_json_option
@config_option
@remote_errors
def runs_cost(run, target, output, config_path) -> None:
    """What RUN really cost, from the Cloud Billing export to BigQuery (billing.export_table),
    beside the estimate at list prices, per step where the export allows, with the GPU
    utilisation the training step recorded.

    \b
    GKE: needs GKE cost allocation on the cluster and the detailed usage cost export
    (gcp_billing_export_resource_v1_*): only it carries the pods' labels. GKE allocates a
    node's cost by resource requests; the estimate prices whole nodes.
    Vertex AI: the run's vertex-ai-pipelines-run-billing-id label.
    Google gives no latency guarantee for the export: the actual cost is marked partial
    until the export has been written billing.settle_hours (24) past the run's end.
    """
    import datetime as dt

    from gkeflow.pipelines.cli import actual_costs
    from gkeflow.pipelines.targets import billing

    config = require_config(config_path)
    if config.billing is None:
        raise click.ClickException(f"no billing export in {config_path or 'gkeflow.yaml'}: "
                                   f"{billing.ENABLE_EXPORT}")
    info = reader(config, target_of(config, run, target)).show(run)
    estimate, why = actual_costs.run_actual_cost(config, info)
    try:
        export_note = billing.check_export(config.billing.export_table, info.target)
        key, value = billing.run_label(info.target, info.id, info.labels)
        since = (info.start or dt.datetime.now(dt.UTC)) - dt.timedelta(
            days=config.billing.lookback_days)
        bill = billing.read_bill(config.billing, info.target, key, value, since)
    except billing.BillingError as exc:
        raise click.ClickException(str(exc)) from None
    report = actual_costs.billed_report(
        info, estimate, why, bill, key, value,
        settle=dt.timedelta(hours=config.billing.settle_hours),
        export=billing.export_kind(config.billing.export_table), export_note=export_note)
    if output == "json":
        click.echo(json.dumps(report, indent=2))
        return
    console = stdout_console()
    for line in actual_costs.billed_lines(report):
        console.print(line, markup=False, soft_wrap=True)
