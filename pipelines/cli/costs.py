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
from gkeflow.pipelines.settings.config import config_directory

DEFAULT_REGION = costing.DEFAULT_REGION


def price_region(config, target: str, region: str | None = None) -> str:
    """The region prices are read for: ``--region``, else the Vertex AI target's region
    (either target), else us-central1."""
    return costing.price_region(config, region)


def rate_cell(step: StepCost) -> str:
    """``$4.00/h`` (with its saving against on demand), ``reserved`` or ``missing``."""
    if step.reserved:
        return "reserved"
    if step.usd_per_hour is None:
        return "missing"
    marks = [mark for mark, on in (("stale", step.stale), ("estimate", step.estimate)) if on]
    text = f"{format_usd(step.usd_per_hour)}/h" + (f" ({', '.join(marks)})" if marks else "")
    if step.nodes > 1:
        text += f" ({step.nodes} {step.unit}s)"
    if step.saving_pct is not None:
        on_demand = format_usd(step.on_demand_usd_per_hour)
        text += f", {step.saving_pct:g}% under on demand {on_demand}/h"
    return text


def ceiling_cell(step: StepCost) -> str:
    """The step's ceiling at its timeout, ``reserved``, ``unbounded`` or ``missing``."""
    if step.reserved:
        return "reserved"
    if step.ceiling_usd is None:
        return "unbounded" if step.usd_per_hour is not None else "missing"
    return format_usd(step.ceiling_usd)


def cost_cells(run: RunCost) -> dict[str, dict[str, str]]:
    """step -> the plan table's ``cost/h``, ``ceiling`` and ``expected`` cells."""
    return {step.step: {"cost/h": rate_cell(step), "ceiling": ceiling_cell(step),
                        "expected": format_usd(step.expected_usd) if step.median_s is not None
                        else "-"} for step in run.steps}


def cost_lines(run: RunCost, history_runs: int = 0) -> list[str]:
    """The lines under the plan table: totals, price sources with their dates, and why a
    figure is missing."""
    if run.ceiling_usd is not None:
        ceiling = format_usd(run.ceiling_usd)
    elif run.priced_ceiling_usd:
        ceiling = (f"missing ({run.ceiling_reason}); at least "
                   f"{format_usd(run.priced_ceiling_usd)} from the priced steps")
    else:  # nothing priced: a "$0.00" floor would read as a price
        ceiling = f"missing ({run.ceiling_reason}); no step of this run is priced"
    lines = [f"cost ({LIST_PRICE_LABEL}, {run.region}): ceiling per run {ceiling}"]
    if history_runs:
        expected = (format_usd(run.expected_usd) if run.expected_usd is not None
                    else f"missing ({run.expected_reason})")
        lines.append(f"cost: expected per run {expected} (median step durations of "
                     f"{history_runs} earlier runs)")
    for step in run.steps:
        if step.usd_per_hour is not None:
            ceiling = (f"ceiling {format_usd(step.ceiling_usd)}" if step.ceiling_usd is not None
                       else "no ceiling")
            lines.append(f"cost of {step.step}: {rate_cell(step)}, {ceiling} (prices: "
                         f"{step.source}, read {step.date_read})")
    if run.run_fee_usd:
        lines.append(f"cost: run fee {format_usd(run.run_fee_usd)} per run, in the ceiling "
                     f"(prices: {run.run_fee_source})")
    for source, read in sorted({(s.source, s.date_read) for s in run.steps if s.source}):
        lines.append(f"prices: {source} (read {read})")
    stale = [step.step for step in run.steps if step.stale]
    if stale:
        lines.append(f"note: stale prices (read over 90 days ago) for {', '.join(stale)}; "
                     "`gkeflow prices refresh` updates them")
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
    if pipeline == "prediction":
        from gkeflow.pipelines.definitions.prediction import resolve_compute
    elif pipeline == "fanout-prepare":
        from gkeflow.pipelines.definitions.fanout import resolve_compute
    elif pipeline == "sweep":
        from gkeflow.pipelines.definitions.sweep import default_sweep, resolve_sweep_compute

        engine = (config.sweep or default_sweep()).engine
        return resolve_sweep_compute(target, compute, engine, config.preparation)
    else:
        from gkeflow.pipelines.definitions.training import resolve_compute as training_compute

        return training_compute(target, compute, config.preparation)
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
    cost = run_cost(profiles, target, price_region(config, target), medians=medians,
                    prices=current_prices(config_directory(config)), cluster=cluster_of(config))
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


def run_actual_cost(config, info):
    """Each step's duration x rate of a finished or running run (`runs show`), at the compute
    gkeflow.yaml declares now; None and why when the pipeline is not one of gkeflow's."""
    from gkeflow.pipelines.compute.costing import actual_cost
    from gkeflow.pipelines.compute.prices import current_prices
    from gkeflow.pipelines.compute.profiles import ComputeError
    from gkeflow.pipelines.targets.compile import PIPELINES

    if info.pipeline not in PIPELINES:
        return None, f"no cost: pipeline {info.pipeline or 'unknown'!r} is not one of gkeflow's"
    try:
        profiles = pipeline_profiles(config, info.pipeline, info.target)
    except ComputeError as exc:
        return None, f"no cost: {exc}"
    durations = {step: seconds for step, seconds in step_durations(info.tasks).items()
                 if step in profiles}
    return actual_cost(durations, profiles, info.target, price_region(config, info.target),
                       prices=current_prices(config_directory(config)),
                       cluster=cluster_of(config)), ""


def actual_cost_json(cost, reason: str, region: str) -> dict:
    """`runs show --output json`'s ``cost``."""
    if cost is None:
        return {"total_usd": None, "reason": reason}
    return {"label": cost.label, "region": region, "total_usd": cost.total_usd,
            "reason": cost.reason,
            "steps": [{"step": step, "duration_s": seconds, "usd": usd, "reason": why}
                      for step, seconds, usd, why in cost.steps]}


def actual_cost_cells(cost) -> dict[str, str]:
    """step -> the `runs show` table's cost cell."""
    if cost is None:
        return {}
    return {step: ("reserved" if why == "reserved" else format_usd(usd))
            for step, _seconds, usd, why in cost.steps}


def actual_cost_lines(cost, reason: str, region: str) -> list[str]:
    """The total under the `runs show` table, and why a figure is missing."""
    if cost is None:
        return [f"cost: {reason}"]
    total = (format_usd(cost.total_usd) if cost.total_usd is not None
             else f"missing ({cost.reason})")
    lines = [f"cost ({cost.label}, {region}, at the compute gkeflow.yaml declares now): "
             f"total {total}"]
    reasons: dict[str, list[str]] = {}
    for step, _seconds, usd, why in cost.steps:
        if usd is None and why:
            reasons.setdefault(why, []).append(step)
    return lines + [f"note: cost of {', '.join(steps)}: {why}" for why, steps in reasons.items()]


def schedule_history(runs_reader, schedule: str, limit: int = 5) -> list[dict]:
    """step -> duration of each of the newest ``limit`` succeeded runs ``schedule`` started."""
    from gkeflow.pipelines.targets.runs import step_key

    found = []
    for run in runs_reader.list(schedule=schedule, limit=limit):
        if run.state == "SUCCEEDED":
            info = run if run.tasks else runs_reader.show(run.id)
            found.append({step_key(t.name): t.duration_s for t in info.tasks
                          if t.state == "SUCCEEDED"})
    return found


def monthly_estimate(config, schedule, history: list[dict], today=None) -> tuple[str, str]:
    """(table cell, note) of one schedule's monthly cost: runs per month from its cron x the
    expected cost at its runs' median durations, else x the ceiling (an upper bound)."""
    from datetime import date

    from gkeflow.pipelines.compute.costing import run_cost, runs_per_month
    from gkeflow.pipelines.compute.prices import current_prices
    from gkeflow.pipelines.compute.profiles import ComputeError

    per_month = runs_per_month(schedule.cron, schedule.time_zone, today or date.today())
    try:
        profiles = pipeline_profiles(config, schedule.pipeline, schedule.target)
    except ComputeError as exc:
        return "missing", str(exc)
    cost = run_cost(profiles, schedule.target, price_region(config, schedule.target),
                    medians=median_durations(history),
                    prices=current_prices(config_directory(config)), cluster=cluster_of(config))
    runs = f"{per_month:.1f} runs"
    if history and cost.expected_usd is not None:
        return (f"{format_usd(per_month * cost.expected_usd)} ({runs} x "
                f"{format_usd(cost.expected_usd)})"), ""
    if cost.ceiling_usd is not None:
        return (f"at most {format_usd(per_month * cost.ceiling_usd)} ({runs} x ceiling "
                f"{format_usd(cost.ceiling_usd)})"), ""
    reason = cost.expected_reason if history else cost.ceiling_reason
    known = cost.priced_expected_usd if history else cost.priced_ceiling_usd
    if known:
        what = "expected" if history else "ceiling"
        return (f"at least {format_usd(per_month * known)} ({runs} x {what} of the priced "
                f"steps {format_usd(known)})"), reason
    return f"missing ({runs})", reason


def duty_cycle(metrics: Mapping[str, float]) -> float | None:
    """Mean GPU utilisation (%) over the epochs the training step sampled; None when none."""
    values = [value for name, value in metrics.items()
              if name.startswith("epoch_") and name.endswith("_gpu_utilisation_mean_pct")]
    return round(sum(values) / len(values), 1) if values else None


def billed_report(info, estimate, why: str, bill, key: str, value: str) -> dict:
    """`runs cost`: the export's actual cost beside the list-price estimate, per step."""
    per_step = bill.per_step()
    estimated = {step: usd for step, _s, usd, _r in (estimate.steps if estimate else [])}
    steps = sorted(set(per_step) | set(estimated), key=lambda s: (s == "", s))
    return {
        "run": info.id, "target": info.target, "label": {"key": key, "value": value},
        "currency": bill.currency,
        "actual_usd": bill.net if bill.lines else None,
        "actual_reason": "" if bill.lines else (
            "no row of the export carries the run's label yet: the export lags by up to a "
            "day" + ("; on GKE, turn on cost allocation (gcloud container clusters update "
                     "CLUSTER --enable-cost-allocation)" if info.target == "gke" else "")),
        "estimated_usd": estimate.total_usd if estimate else None,
        "estimated_reason": (estimate.reason if estimate else why) or "",
        "estimate_label": LIST_PRICE_LABEL,
        "gpu_duty_cycle_pct": duty_cycle(info.metrics),
        "first_usage": bill.first_usage.isoformat() if bill.first_usage else None,
        "last_usage": bill.last_usage.isoformat() if bill.last_usage else None,
        "steps": [{"step": step or None, "actual_usd": per_step.get(step),
                   "estimated_usd": estimated.get(step)} for step in steps],
        "skus": [{"step": line.step or None, "sku": line.sku, "cost": line.cost,
                  "credits": line.credits} for line in bill.lines],
    }


def billed_lines(report: dict) -> list[str]:
    """The lines `runs cost` prints for people."""
    label = report["label"]
    lines = [f"run {report['run']} on {report['target']} (billing export rows labelled "
             f"{label['key']}={label['value']})"]
    currency = report["currency"]
    actual = (f"{format_usd(report['actual_usd'])} {currency}" if report["actual_usd"]
              is not None else f"missing ({report['actual_reason']})")
    estimated = (format_usd(report["estimated_usd"]) if report["estimated_usd"] is not None
                 else f"missing ({report['estimated_reason']})")
    lines.append(f"actual (Cloud Billing export, credits included): {actual}")
    lines.append(f"estimate ({report['estimate_label']}): {estimated}")
    for row in report["steps"]:
        name = row["step"] or "(no step label)"
        lines.append(f"  {name}: actual {format_usd(row['actual_usd'])}, estimate "
                     f"{format_usd(row['estimated_usd'])}")
    unlabelled = [sku for sku in report["skus"] if sku["step"] is None]
    for sku in unlabelled:
        lines.append(f"    {sku['sku']}: {format_usd(sku['cost'] + sku['credits'])}")
    duty = report["gpu_duty_cycle_pct"]
    lines.append("GPU duty cycle during training: " + (
        f"{duty:g}% (mean of the epochs the training step sampled)" if duty is not None
        else "not recorded (a CPU or TPU run, or the step could not sample its GPUs)"))
    return lines
