"""`gkeflow init`, `gkeflow submit` and `gkeflow schedule`: shipping pipelines to Kubeflow
Pipelines on GKE and Vertex AI (registered on the `gkeflow` group in :mod:`cli`).

Failures of remote work (refused or unreachable servers, missing credentials, bad config)
become one line naming the fix and exit 1 (:func:`.common.remote_errors`); `gkeflow --debug`
shows the traceback.
"""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from gkeflow.pipelines.cli.common import (
    config_option,
    remote_errors,
    require_config,
    stdout_console,
)
from gkeflow.pipelines.cli.costs import over_budget_option
from gkeflow.pipelines.cli.params import NonEmptyPath


def _check_budget(config, pipeline, target, environment, **options) -> str:
    """:func:`~gkeflow.pipelines.cli.costs.check_budget`, a refused compute in one line."""
    from gkeflow.pipelines.cli.costs import check_budget
    from gkeflow.pipelines.compute.profiles import ComputeError

    try:
        return check_budget(config, pipeline, target, environment, **options)
    except ComputeError as exc:
        raise click.ClickException(str(exc)) from exc


def _print_planned(console: Console, planned) -> None:
    console.print(f"[bold]--dry-run[/bold]: {len(planned)} request(s) would be sent; "
                  "nothing was changed")
    for request in planned:
        console.print(request.render(), markup=False, soft_wrap=True)


@click.command("init")
@click.option("--path", type=NonEmptyPath(dir_okay=False, path_type=Path),
              default=Path("gkeflow.yaml"), show_default=True, help="File to write.")
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
def init_command(path: Path, force: bool) -> None:
    """Write a commented example gkeflow.yaml: images, targets, parameters, schedules.

    Set images.registry and run `gkeflow images build`, edit the other values, then
    `gkeflow submit --target gke|vertex` or `gkeflow schedule apply`.
    The example is valid as written (it is checked before it is written).
    """
    from gkeflow.pipelines.settings.config import EXAMPLE_CONFIG, ConfigError, load_config

    if path.exists() and not force:
        raise click.ClickException(f"{path} already exists; pass --force to overwrite it")
    import os
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(EXAMPLE_CONFIG)
        try:
            load_config(tmp)
        except ConfigError as exc:  # pragma: no cover - guarded by a unit test
            raise click.ClickException(f"internal error: the example is invalid: {exc}") from exc
        from gkeflow.components._atomic import plain_mode

        plain_mode(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    stdout_console().print(f"wrote {path}; set images.registry and edit targets, parameters and "
                     "schedules, then run `gkeflow images build` and `gkeflow submit --target "
                     "gke|vertex`", markup=False, soft_wrap=True)


@click.command("submit")
@click.argument("pipeline", default="training")
@click.option("--target", type=click.Choice(["gke", "vertex"]), required=True,
              help="gke: Kubeflow Pipelines (targets.gke; compiled for GKE Autopilot when "
                   "targets.gke.autopilot is true); vertex: Vertex AI (targets.vertex).")
@click.option("--env", "environment", default="default", show_default=True,
              help="Which `parameters:` section of gkeflow.yaml to use.")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE",
              help="A pipeline parameter (repeatable); wins over the environment's value.")
@click.option("--wait", is_flag=True,
              help="Follow the run: print each step's state changes, exit 1 unless it "
                   "succeeds.")
@click.option("--poll", "poll_s", type=click.FloatRange(min=0.01), default=10.0,
              show_default=True, help="Seconds between status checks with --wait.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=24 * 3600.0,
              show_default=True, help="Give up waiting after this many seconds (the run "
                                      "continues).")
@click.option("--dry-run", is_flag=True,
              help="Offline: print the requests that would create the run (server-assigned "
                   "ids as placeholders), flagging images not built or pushed yet; needs no "
                   "token, credentials or network.")
@over_budget_option
@config_option
@remote_errors
def submit_command(pipeline, target, environment, params, wait, poll_s, timeout_s, dry_run,
                   config_path, over_budget=False) -> None:
    """Compile PIPELINE (default: training) for a target and start a run there.

    \b
    gke:    uploads the pipeline once and a version named after the git commit (or the
            package version) plus a hash of the spec, creates the run in the configured
            experiment (created if needed) and prints the run's Kubeflow UI URL.
    vertex: creates a PipelineJob with the configured service account, network, CMEK key,
            labels and pipeline root, and prints the Cloud console URL.

    Parameters: the pipeline's defaults, then parameters.<--env> from gkeflow.yaml, then
    --param. Connection errors and 5xx answers are retried with backoff; every call has a
    timeout and at most (retries + 1) x timeout_s plus backoff in all; a retried create
    never makes a second run. Bearer tokens are read from the environment and never
    printed. notifications.<--env> of gkeflow.yaml is compiled in (docs/operating.md);
    on GKE the backend's version is read first and a pipeline it cannot run is refused.
    """
    import tempfile

    from gkeflow.pipelines.targets.submit import parse_param_options, submit, wait_for_run

    if dry_run and wait:
        raise click.UsageError("--wait follows a run, and --dry-run starts none; drop one")
    config = require_config(config_path)
    console = stdout_console()
    overrides = parse_param_options(params)
    console.print(f"[bold]gkeflow submit[/bold]: {pipeline} -> {target} (environment "
                  f"{environment})")
    medians, history_runs = {}, 0
    if not dry_run:  # the expected cost from earlier runs (a dry run reads nothing)
        from gkeflow.pipelines.cli.costs import earlier_medians

        medians, history_runs = earlier_medians(config, target, pipeline)
    # refused before anything is sent; said only once the run was submitted (or planned)
    warning = _check_budget(config, pipeline, target, environment, over_budget=over_budget,
                            verb="would be submitted" if dry_run else "submitted",
                            medians=medians, history_runs=history_runs)
    with tempfile.TemporaryDirectory(prefix="gkeflow-submit-") as workdir:
        submission, backend = submit(config, pipeline, target, environment=environment,
                                     overrides=overrides, workdir=Path(workdir),
                                     dry_run=dry_run)
    if warning:
        console.print(f"  {warning}", markup=False, soft_wrap=True)
    for note in submission.notes:
        console.print(f"  {note}", markup=False, soft_wrap=True)
    if dry_run:
        from gkeflow.pipelines.settings.config_example import unfilled_placeholders

        targets = getattr(config.targets, target, None)
        for key in unfilled_placeholders(targets, f"targets.{target}"):
            console.print(f"  note: {key} still holds the example value `gkeflow init` "
                          "wrote; set your own before submitting", markup=False,
                          soft_wrap=True)
        _print_planned(console, backend.planned)
        return
    console.print(f"  version:    {submission.version_name}", markup=False)
    console.print(f"  run:        {submission.run_id}", markup=False)
    console.print(f"  parameters: {submission.parameters}", markup=False)
    console.print(f"Run URL: {submission.url}", markup=False, soft_wrap=True)
    if not wait:
        return

    def on_change(task, old, new):
        if not task:
            console.print(f"run {new.lower()}", markup=False)
            return
        mark = {"SUCCEEDED": "[green]✓[/green]", "FAILED": "[red]✗[/red]",
                "RUNNING": "[cyan]…[/cyan]"}.get(new, "·")
        console.print(f"  {mark} {task} {new.lower()}")

    status = wait_for_run(backend, submission.run_id, poll_s=poll_s, timeout_s=timeout_s,
                          on_change=on_change)
    if status.state != "SUCCEEDED":
        detail = f": {status.error}" if status.error else ""
        raise click.ClickException(f"run {submission.run_id} ended {status.state}{detail} "
                                   f"(see {submission.url})")
    console.print(f"[green bold]SUCCEEDED[/green bold]: {submission.url}")


@click.group("schedule")
def schedule_group() -> None:
    """Recurring runs from the `schedules:` section of gkeflow.yaml, on GKE and Vertex.

    \b
    gkeflow schedule apply [--prune] [--dry-run]   make the targets match the file
    gkeflow schedule list                          what is scheduled, next run times
    gkeflow schedule pause|resume|delete NAME
    """


def _target_option(func):
    return click.option("--target", type=click.Choice(["gke", "vertex"]),
                        help="Only this target (default: every configured target).")(func)


@schedule_group.command("apply")
@click.option("--prune", is_flag=True,
              help="Also delete gkeflow schedules that are no longer in the file.")
@click.option("--dry-run", is_flag=True,
              help="Offline: print the requests that would create the schedules (nothing is "
                   "read, so it shows creates), flagging images not built or pushed yet; "
                   "needs no token, credentials or network.")
@over_budget_option
@_target_option
@config_option
@remote_errors
def schedule_apply(prune, dry_run, target, config_path, over_budget=False) -> None:
    """Create, update or replace the schedules of gkeflow.yaml on their targets (idempotent).

    Running it twice leaves one schedule per name. A schedule whose pipeline version or
    parameters changed is replaced (KFP: also when its cron, max_concurrency or catch_up
    changed, since KFP cannot update a recurring run); on Vertex a changed cron or
    max_concurrency is updated in place; enabled: false pauses. Schedules on a target
    that are not in the file are only reported, unless --prune. KFP runs the cron in UTC:
    the time zone is converted with its current UTC offset (re-run apply after a
    daylight-saving change; `schedule list` warns when needed).
    """
    import tempfile

    from gkeflow.pipelines.targets.schedule import apply

    config = require_config(config_path)
    console = stdout_console()
    styles = {"create": "green", "replace": "yellow", "update": "yellow", "delete": "red",
              "pause": "yellow", "resume": "green", "upload": "cyan", "unchanged": "dim",
              "kept": "magenta", "warning": "yellow", "note": "cyan"}

    def on_action(action) -> None:
        style = styles.get(action.kind, "white")
        verb = action.kind if not dry_run or action.kind in ("unchanged", "kept", "warning",
                                                              "note") \
            else f"would {action.kind}"
        console.print(f"  [{style}]{verb:>16}[/{style}] {action.target}/{action.schedule}"
                      + (f"  ({action.detail})" if action.detail else ""))

    if not config.schedules and not prune:
        console.print("no schedules in the file; nothing to apply (add `schedules:` or use "
                      "--prune to remove gkeflow schedules from the targets)")
        return
    warnings = []  # refused before anything is sent; said once the schedules were applied
    for schedule in config.schedules:
        if target in (None, schedule.target) and schedule.enabled:
            warnings.append(_check_budget(
                config, schedule.pipeline, schedule.target, schedule.environment,
                over_budget=over_budget, schedule=schedule,
                verb="would be scheduled" if dry_run else "scheduled"))
    with tempfile.TemporaryDirectory(prefix="gkeflow-schedule-") as workdir:
        result = apply(config, workdir=Path(workdir), target=target, prune=prune,
                       dry_run=dry_run, on_action=on_action)
    for warning in filter(None, warnings):
        console.print(f"  {warning}", markup=False, soft_wrap=True)
    if dry_run:
        _print_planned(console, result.planned)
    elif not result.changed:
        console.print("everything already matches gkeflow.yaml")


@schedule_group.command("list")
@click.option("--next", "count", type=click.IntRange(1, 20), default=1, show_default=True,
              help="How many upcoming run times to show per schedule.")
@_target_option
@config_option
@remote_errors
def schedule_list(count, target, config_path) -> None:
    """List gkeflow's schedules on the targets with their next run times and last run.

    Times are shown in the schedule's own time zone. A KFP schedule converted with a UTC
    offset that no longer holds (daylight saving changed) is flagged.
    """
    from gkeflow.pipelines.targets.schedule_list import list_schedules

    config = require_config(config_path)
    if config.targets.gke is None and config.targets.vertex is None:
        raise click.ClickException(f"{config_path}: no targets configured; add targets.gke "
                                   "and/or targets.vertex (`gkeflow init` shows how)")
    rows = list_schedules(config, target=target, count=count)
    console = stdout_console()
    if not rows:
        console.print("no gkeflow schedules on the configured targets")
        return
    from gkeflow.pipelines.cli.actual_costs import monthly_estimate, schedule_history
    from gkeflow.pipelines.targets.backend_choice import last_runs, reader

    readers = {t: reader(config, t) for t in {row.target for row in rows}}
    last = last_runs(config, rows, readers)
    declared = {(s.target, s.name): s for s in config.schedules}
    monthly, cost_notes = {}, []
    for row in rows:
        schedule = declared.get((row.target, row.name))
        if schedule is not None:
            cell, note = monthly_estimate(config, schedule, schedule_history(
                readers[row.target], row.name))
            monthly[(row.target, row.name)] = cell
            if note:
                cost_notes.append(f"note: {row.target}/{row.name} monthly cost: {note}")
    table = Table(caption="monthly: estimate from list prices", caption_justify="left")
    for column in ("target", "name", "state", "cron on target", "gkeflow.yaml", "max conc.",
                   "next run", "last run", "monthly"):
        table.add_column(column)
    for row in rows:
        run = last.get((row.target, row.name))
        state = "active" if row.enabled else "paused"
        nxt = "\n".join(t.strftime("%Y-%m-%d %H:%M %Z") for t in row.next_runs) or "-"
        local = row.local if row.in_config else f"{row.local} (not in file)".strip()
        table.add_row(row.target, row.name, state, row.cron, local, str(row.max_concurrency),
                      nxt, f"{run.start:%Y-%m-%d %H:%M} {run.state.lower()}"
                      if run and run.start else (run.state.lower() if run else "-"),
                      monthly.get((row.target, row.name), "-"))
    console.print(table)
    for note in cost_notes:
        console.print(note, markup=False, soft_wrap=True)
    for row in rows:
        if row.warning:
            console.print(f"[yellow]warning[/yellow] {row.target}/{row.name}: {row.warning}",
                          soft_wrap=True)


@schedule_group.command("pause")
@click.argument("name")
@_target_option
@config_option
@remote_errors
def schedule_pause(name, target, config_path) -> None:
    """Pause schedule NAME (no new runs until resumed). `apply` would resume it while the
    file says enabled: true."""
    from gkeflow.pipelines.targets.schedule import set_enabled

    for line in set_enabled(require_config(config_path), name, False, target=target):
        stdout_console().print(line, markup=False)


@schedule_group.command("resume")
@click.argument("name")
@click.option("--catch-up", is_flag=True,
              help="Vertex: also start the runs missed while paused.")
@_target_option
@config_option
@remote_errors
def schedule_resume(name, catch_up, target, config_path) -> None:
    """Resume paused schedule NAME."""
    from gkeflow.pipelines.targets.schedule import set_enabled

    for line in set_enabled(require_config(config_path), name, True, target=target,
                            catch_up=catch_up):
        stdout_console().print(line, markup=False)


@schedule_group.command("delete")
@click.argument("name")
@_target_option
@config_option
@remote_errors
def schedule_delete(name, target, config_path) -> None:
    """Delete schedule NAME from the target(s). `apply` recreates it while it is in the
    file."""
    from gkeflow.pipelines.targets.schedule import delete

    for line in delete(require_config(config_path), name, target=target):
        stdout_console().print(line, markup=False)
