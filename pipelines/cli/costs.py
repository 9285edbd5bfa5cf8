"""Cost figures as `gkeflow plan`, `submit`, `schedule` and `runs show` print them."""

from __future__ import annotations

from collections.abc import Mapping

import click

from gkeflow.pipelines.compute import costing
from gkeflow.pipelines.compute.costing import (
    LIST_PRICE_LABEL,
    RunCost,
    StepCost,
    format_usd,
    median_durations,
)
from gkeflow.pipelines.compute.prices import STALE_AFTER_DAYS
from gkeflow.pipelines.settings.config import config_directory

DEFAULT_REGION = costing.DEFAULT_REGION
STALE_DAYS = STALE_AFTER_DAYS


def price_region(config, target: str, region: str | None = None) -> str:
    """The region prices are read for: ``--region``, else the Vertex AI target's region
    (either target), else us-central1."""
    return costing.price_region(config, region)


#: A stale price is flagged when its step carries at least this share of the run's ceiling.
MATTERS_SHARE = 0.05


def rate_cell(step: StepCost) -> str:
    """``$4.00/h`` (with its saving against on demand), ``reserved`` or ``missing``."""
    if step.reserved and step.usd_per_hour is None:
        return "reserved"
    if step.usd_per_hour is None:
        return "missing"
    marks = [mark for mark, on in (("stale", step.stale), ("estimate", step.estimate),
                                   ("reserved: fee only", step.reserved)) if on]
    text = f"{format_usd(step.usd_per_hour)}/h" + (f" ({', '.join(marks)})" if marks else "")
    if step.nodes > 1:
        text += f" ({step.nodes} {step.unit}s)"
    if step.saving_pct is not None:
        on_demand = format_usd(step.on_demand_usd_per_hour)
        text += f", {step.saving_pct:g}% under on demand {on_demand}/h"
    return text


def ceiling_cell(step: StepCost) -> str:
    """The step's ceiling at its timeout, ``reserved``, ``unbounded`` or ``missing``."""
    if step.reserved and step.usd_per_hour is None:
        return "reserved"
    if step.ceiling_usd is None:
        return "unbounded" if step.usd_per_hour is not None else "missing"
    return format_usd(step.ceiling_usd)


def cost_cells(run: RunCost) -> dict[str, dict[str, str]]:
    """step -> the plan table's ``cost/h``, ``ceiling`` and ``expected`` cells."""
    return {step.step: {"cost/h": rate_cell(step), "ceiling": ceiling_cell(step),
                        "expected": format_usd(step.expected_usd) if step.median_s is not None
                        else "-"} for step in run.steps}


def provenance(step: StepCost) -> str:
    """``published, data of 2026-07-30: Cyclenerd/... pricing.yml@fd66b26`` for one line."""
    when = (f"data of {step.data_date}" if step.data_date
            else f"read {step.date_read}, data date unknown")
    return f"{step.basis or 'published'}, {when}: {step.source}"


def stale_that_matter(run: RunCost) -> tuple[list[StepCost], int]:
    """Steps whose prices are stale and carry at least :data:`MATTERS_SHARE` of the priced
    ceiling (or of the hourly total when no ceiling is known), and how many other steps'
    prices are stale."""
    stale = [step for step in run.steps if step.stale and step.usd_per_hour is not None]
    weight = {step.step: step.ceiling_usd if step.ceiling_usd is not None
              else step.usd_per_hour for step in run.steps if step.usd_per_hour is not None}
    total = sum(weight.values())
    matter = [step for step in stale if total and weight[step.step] >= MATTERS_SHARE * total]
    return matter, len(stale) - len(matter)


def prices_as_of(run: RunCost) -> str:
    """One line: the span of the data dates of the prices this run uses, and when read."""
    dates = sorted({step.data_date or step.date_read for step in run.steps
                    if step.usd_per_hour is not None and (step.data_date or step.date_read)})
    reads = sorted({step.date_read for step in run.steps if step.date_read})
    if not dates:
        return "prices as of: no step is priced"
    span = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    read = f"; read {reads[-1]}" if reads else ""
    return (f"prices as of {span} (the dates their data was published or billed{read}; "
            "`--sources` lists the sources)")


def source_lines(run: RunCost) -> list[str]:
    """``source REF: FULL SOURCE`` once per source the run's figures use (``--sources``)."""
    from gkeflow.pipelines.compute.prices import short_ref, source_url

    found = {source for step in run.steps for source in step.sources}
    if run.run_fee_source:
        found.add(run.run_fee_source)
    return [f"source {short_ref(source)}: {source_url(source)}" for source in sorted(
        found, key=short_ref)]


def cost_lines(run: RunCost, history_runs: int = 0, *, sources: bool = False) -> list[str]:
    """The lines under the plan table: totals, one "prices as of" line, each step's rate
    with its label and short sources, the stale prices that matter for this run, why a
    figure is missing, and with ``sources`` each source in full once."""
    if run.ceiling_usd is not None:
        ceiling = format_usd(run.ceiling_usd)
    elif run.priced_ceiling_usd:
        ceiling = (f"missing ({run.ceiling_reason}); at least "
                   f"{format_usd(run.priced_ceiling_usd)} from the priced steps")
    else:  # nothing priced: a "$0.00" floor would read as a price
        ceiling = f"missing ({run.ceiling_reason}); no step of this run is priced"
    lines = [f"cost ({LIST_PRICE_LABEL}, {run.region}): ceiling per run {ceiling}",
             prices_as_of(run)]
    if history_runs:
        expected = (format_usd(run.expected_usd) if run.expected_usd is not None
                    else f"missing ({run.expected_reason})")
        lines.append(f"cost: expected per run {expected} (median step durations of "
                     f"{history_runs} earlier runs)")
    for step in run.steps:
        if step.usd_per_hour is not None:
            ceiling = (f"ceiling {format_usd(step.ceiling_usd)}" if step.ceiling_usd is not None
                       else "no ceiling")
            lines.append(f"cost of {step.step}: {rate_cell(step)}, {ceiling} "
                         f"[{provenance(step)}]")
    if run.run_fee_usd:
        from gkeflow.pipelines.compute.prices import short_ref

        lines.append(f"cost: run fee {format_usd(run.run_fee_usd)} per run, in the ceiling "
                     f"[published, data of {run.run_fee_date}: "
                     f"{short_ref(run.run_fee_source)}]")
    matter, others = stale_that_matter(run)
    if matter:
        named = ", ".join(f"{step.step} (data of {step.data_date or 'an unknown date'})"
                          for step in matter)
        more = (f"; {others} smaller step(s) use stale prices too, under "
                f"{MATTERS_SHARE:.0%} of the ceiling each") if others else ""
        lines.append(f"note: stale prices (data over {STALE_DAYS} days old) for {named}"
                     f"{more}; `gkeflow prices refresh` reads current ones")
    elif others:
        lines.append(f"note: {others} step(s) use stale prices (data over {STALE_DAYS} days "
                     f"old), each under {MATTERS_SHARE:.0%} of the ceiling")
    reasons: dict[str, list[str]] = {}
    for step in run.steps:
        if step.reason:
            reasons.setdefault(step.reason, []).append(step.step)
    lines += [f"note: cost of {', '.join(steps)}: {reason}" for reason, steps in reasons.items()]
    rules: dict[str, list[str]] = {}
    for step in run.steps:
        if step.derived:
            rules.setdefault(step.derived, []).append(step.step)
    lines += [f"note: rate of {', '.join(steps)} is an {rule}" if rule.startswith("estimate")
              else f"note: rate of {', '.join(steps)}: {rule}" for rule, steps in rules.items()]
    if sources:
        lines += source_lines(run)
    return lines


def history_medians(config, target: str, pipeline: str, limit: int) -> tuple[
        dict[str, float], int]:
    """Median step durations over the newest ``limit`` succeeded runs of ``pipeline`` on
    ``target``, and how many runs they come from."""
    from gkeflow.pipelines.targets.backend_choice import reader
    from gkeflow.pipelines.targets.runs import step_key

    runs = reader(config, target)
    done = [run for run in runs.list(pipeline=pipeline, limit=limit)
            if run.state == "SUCCEEDED"]
    durations = []
    for run in done:
        info = run if run.tasks else runs.show(run.id)
        durations.append({step_key(task.name): task.duration_s for task in info.tasks
                          if task.state == "SUCCEEDED"})
    return median_durations(durations), len(done)


#: Earlier runs `submit` reads for the expected cost.
SUBMIT_HISTORY_RUNS = 5


def earlier_medians(config, target: str, pipeline: str,
                    limit: int = SUBMIT_HISTORY_RUNS) -> tuple[dict[str, float], int]:
    """:func:`history_medians`, or ({}, 0) when the runs cannot be read: the expected cost
    is then left out, never guessed, and the submission goes on."""
    try:
        return history_medians(config, target, pipeline, limit)
    except Exception:  # noqa: BLE001 - any failure only leaves the figure out
        return {}, 0


def expected_text(run: RunCost, history_runs: int) -> str:
    """``; expected $Y (median step durations of N earlier runs)``, or '' without one."""
    if not history_runs or run.expected_usd is None:
        return ""
    return (f"; expected {format_usd(run.expected_usd)} (median step durations of "
            f"{history_runs} earlier run{'s' if history_runs != 1 else ''})")


def budget_refusal(run: RunCost, max_run_usd: float, where: str) -> str:
    """Why a run over ``max_run_usd`` (``where``: the budget's name) breaks it, naming the
    step that costs most; empty when its ceiling is within it."""
    known = run.ceiling_usd is not None
    ceiling = run.ceiling_usd if known else run.priced_ceiling_usd
    if ceiling > max_run_usd:  # over even when some steps' prices are missing
        top = run.costliest
        most = f"; most from {top.step} ({format_usd(top.ceiling_usd)})" if top else ""
        what = "ceiling" if known else "ceiling of its priced steps"
        return (f"the run's {what} {format_usd(ceiling)} exceeds {where} "
                f"({format_usd(max_run_usd)}){most}")
    if not known:
        return (f"cannot check the run against {where} ({format_usd(max_run_usd)}): "
                f"{run.ceiling_reason}")
    return ""


def over_budget_option(func):
    """``--over-budget``: submit even when the ceiling exceeds the budget or is unknown."""
    return click.option("--over-budget", is_flag=True,
                        help="Submit even when the run's cost ceiling exceeds the "
                             "environment's (or schedule's) budget, or cannot be computed "
                             "(docs/costs.md).")(func)


def step_durations(tasks) -> Mapping[str, float | None]:
    """step -> duration of the steps of a run (`runs show`)."""
    from gkeflow.pipelines.targets.runs import step_key

    return {step_key(task.name): task.duration_s for task in tasks}


def plan_cost(config, target: str, pipeline: str, profiles, region: str | None,
              history: int) -> tuple[RunCost, int]:
    """The run's cost figures for `gkeflow plan`, and how many earlier runs gave medians."""
    from gkeflow.pipelines.compute.costing import run_cost
    from gkeflow.pipelines.compute.prices import current_prices

    medians, runs = history_medians(config, target, pipeline, history) if history else ({}, 0)
    return run_cost(profiles, target, price_region(config, target, region), medians=medians,
                    prices=current_prices(config_directory(config)),
                    cluster=cluster_of(config)), runs


def pipeline_profiles(config, pipeline: str, target: str) -> dict:
    """The validated per-step compute ``pipeline`` compiles with on ``target`` (defaults,
    then gkeflow.yaml), as `gkeflow compile` and `submit` resolve it."""
    from gkeflow.pipelines.targets.compile import default_compute, pipeline_compute

    compute = pipeline_compute(pipeline, config.compute_overrides(default_compute()))
    target = config.platform_of(target)  # targets.gke.autopilot: GKE Autopilot's rules
    if pipeline == "prediction":
        from gkeflow.pipelines.definitions.prediction import resolve_compute
    elif pipeline == "fanout-prepare":
        from gkeflow.pipelines.definitions.fanout import resolve_compute
    elif pipeline == "sweep":
        from gkeflow.pipelines.definitions.sweep import default_sweep, resolve_sweep_compute

        sweep = config.sweep or default_sweep()
        return resolve_sweep_compute(target, compute, sweep.engine, config.preparation, sweep)
    else:
        from gkeflow.pipelines.definitions.training import resolve_compute as training_compute

        return training_compute(target, compute, config.preparation,
                                    config.training_families())
    return resolve_compute(target, compute)


def cluster_of(config):
    """How the GKE target bills a CPU step (``targets.gke.cpu_machine_family`` /
    ``autopilot``); the default e2 node pools without a GKE target."""
    from gkeflow.pipelines.compute.derived_rates import Cluster

    gke = getattr(getattr(config, "targets", None), "gke", None)
    if gke is None:
        return Cluster()
    return Cluster(family=gke.cpu_machine_family, autopilot=gke.autopilot)


def budget_verdict(run: RunCost, max_run_usd: float, where: str) -> tuple[str, dict]:
    """One line and the JSON of how a run's ceiling stands against ``where``'s
    ``max_run_usd``: under (by how much), over (by how much, most from which step) or
    unknown (why)."""
    limit = format_usd(max_run_usd)
    if run.ceiling_usd is None and run.priced_ceiling_usd <= max_run_usd:
        return (f"budget: cannot check the run against {where} ({limit}): "
                f"{run.ceiling_reason}; submit needs --over-budget"), {
            "budget": where, "max_run_usd": max_run_usd, "verdict": "unknown",
            "reason": run.ceiling_reason}
    ceiling = run.ceiling_usd if run.ceiling_usd is not None else run.priced_ceiling_usd
    margin = round(max_run_usd - ceiling, 4)
    data = {"budget": where, "max_run_usd": max_run_usd, "ceiling_usd": ceiling,
            "verdict": "under" if margin >= 0 else "over", "margin_usd": margin}
    if margin >= 0:
        return (f"budget: ceiling {format_usd(ceiling)} is under {where} ({limit}) by "
                f"{format_usd(margin)}: submit needs no flag"), data
    top = run.costliest
    most = f", most from {top.step} ({format_usd(top.ceiling_usd)})" if top else ""
    data["costliest_step"] = top.step if top else None
    return (f"budget: ceiling {format_usd(ceiling)} is over {where} ({limit}) by "
            f"{format_usd(-margin)}{most}: submit needs --over-budget"), data


def check_budget(config, pipeline: str, target: str, environment: str, *,
                 over_budget: bool, schedule=None, verb: str = "submitted",
                 medians: Mapping[str, float] | None = None, history_runs: int = 0) -> str:
    """Raise a one-line ClickException when a run of ``pipeline`` would exceed its budget
    (or its ceiling cannot be computed), or a schedule's month its monthly budget, and
    ``over_budget`` is not given; returns the line to print: the approval (under by how
    much), or the warning when ``over_budget`` let it through (``verb``: what happened to
    the run, e.g. "would be submitted" for a dry run); without a budget, the ceiling. With
    ``medians`` of ``history_runs`` earlier runs, the line gives the expected cost too."""
    from gkeflow.pipelines.compute.costing import run_cost
    from gkeflow.pipelines.compute.prices import current_prices
    from gkeflow.pipelines.compute.profiles import ComputeError
    from gkeflow.pipelines.settings.budget_config import budget_for

    budget, where = budget_for(config, environment, schedule)
    try:
        profiles = pipeline_profiles(config, pipeline, target)
    except ComputeError:
        if budget is None:  # compiling refuses it, in the words compile uses
            return ""
        raise
    cost = run_cost(profiles, config.platform_of(target), price_region(config, target),
                    medians=medians, prices=current_prices(config_directory(config)),
                    cluster=cluster_of(config))
    expected = expected_text(cost, history_runs)
    if budget is None:
        name = f"schedule {schedule.name}: " if schedule is not None else ""
        ceiling = (format_usd(cost.ceiling_usd) if cost.ceiling_usd is not None
                   else f"missing ({cost.ceiling_reason})")
        return (f"{name}cost: ceiling {ceiling} per run ({LIST_PRICE_LABEL}, {cost.region})"
                f"{expected}; no budget: set one under budget: to have it checked")
    refusals, approvals, unknown = [], [], False
    if budget.max_run_usd is not None:
        refusal = budget_refusal(cost, budget.max_run_usd, where)
        if refusal:
            refusals.append(refusal)
            unknown = (cost.ceiling_usd is None
                       and cost.priced_ceiling_usd <= budget.max_run_usd)
        else:
            approvals.append(budget_verdict(cost, budget.max_run_usd, where)[0]
                             .removeprefix("budget: ").removesuffix(": submit needs no flag"))
    if schedule is not None and budget.max_month_usd is not None:
        refusal, approval = _month_check(schedule, cost, budget.max_month_usd, where)
        (refusals if refusal else approvals).append(refusal or approval)
    name = f"schedule {schedule.name}: " if schedule is not None else ""
    if not refusals:
        return f"{name}budget: {'; '.join(approvals)}{expected}"
    refusal = "; ".join(refusals)
    if not over_budget:
        fix = ("pass --over-budget to submit anyway" if unknown else
               "lower its timeouts or compute, raise the budget, or pass --over-budget")
        raise click.ClickException(f"{name}{pipeline} on {target}: {refusal}; {fix}")
    return f"warning: {name}{verb} with --over-budget: {refusal}"


def _month_check(schedule, cost: RunCost, max_month_usd: float, where: str) -> tuple[str, str]:
    """(refusal, approval) of a schedule's month: runs per month from its cron x the run's
    ceiling (an upper bound), against ``max_month_usd``."""
    from datetime import date

    from gkeflow.pipelines.compute.costing import runs_per_month

    per_month = runs_per_month(schedule.cron, schedule.time_zone, date.today())
    limit = format_usd(max_month_usd)
    if cost.ceiling_usd is None:
        return (f"cannot check a month of runs against {where} ({limit} a month): "
                f"{cost.ceiling_reason}"), ""
    month = per_month * cost.ceiling_usd
    figure = (f"{per_month:.1f} runs a month x ceiling {format_usd(cost.ceiling_usd)} = at most "
              f"{format_usd(month)}")
    if month > max_month_usd:
        return f"{figure}, over {where} ({limit} a month)", ""
    return "", f"{figure}, within {where} ({limit} a month)"
