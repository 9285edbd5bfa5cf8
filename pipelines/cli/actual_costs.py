"""What a run did cost (`gkeflow runs show`, `runs bill`) and what a schedule costs a month."""

from __future__ import annotations

from collections.abc import Mapping

from gkeflow.pipelines.cli.costs import cluster_of, pipeline_profiles, price_region, step_durations
from gkeflow.pipelines.compute.costing import LIST_PRICE_LABEL, format_usd, median_durations
from gkeflow.pipelines.settings.config import config_directory
from gkeflow.pipelines.settings.platforms import platform


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
    return actual_cost(durations, profiles, config.platform_of(info.target),
                       price_region(config, info.target),
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
    cost = run_cost(profiles, config.platform_of(schedule.target),
                    price_region(config, schedule.target),
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
    """Mean GPU utilisation, or TPU duty cycle, (%) over the epochs the training step
    sampled; None when none."""
    values = [value for name, value in metrics.items()
              if name.startswith("epoch_") and name.endswith(("_gpu_utilisation_mean_pct",
                                                              "_tpu_utilisation_mean_pct"))]
    return round(sum(values) / len(values), 1) if values else None


def billed_report(info, estimate, why: str, bill, key: str, value: str, *, settle=None,
                  export: str = "detailed", export_note: str = "") -> dict:
    """`runs cost`: the export's actual cost beside the list-price estimate, per step, with
    how complete the export is for this run and what the two figures mean."""
    import datetime as dt

    settle = settle if settle is not None else dt.timedelta(hours=24)
    complete = bill.complete_after(info.end, settle)
    latest = bill.export_latest.isoformat() if bill.export_latest else None
    if info.end is None:
        status = "partial: the run has not ended"
    elif complete:
        status = "complete"
    else:
        wanted = (info.end + settle).isoformat()
        status = (f"partial: the export's newest rows were written {latest or 'never'}, "
                  f"before the run's end plus {settle.total_seconds() / 3600:g} h ({wanted}); "
                  "Google gives the export no latency guarantee: run again later")
    if bill.lines:
        actual_reason = ""
    elif not complete:
        actual_reason = f"no row of the export carries the run's label yet ({status})"
    else:
        actual_reason = ("the export has been written past the run's end and no row carries "
                         "the run's label" + (
                             ": turn on GKE cost allocation (gcloud container clusters update "
                             "CLUSTER --enable-cost-allocation)" if platform(info.target).kubernetes
                             else ": check the run id"))
    notes = [export_note] if export_note else []
    if platform(info.target).kubernetes:
        notes.append("GKE's figure allocates each node's cost to pods by their resource "
                     "requests; the estimate prices the whole nodes the steps run on: they "
                     "differ in kind, not only in amount")
    per_step = bill.per_step()
    estimated = {step: usd for step, _s, usd, _r in (estimate.steps if estimate else [])}
    steps = sorted(set(per_step) | set(estimated), key=lambda s: (s == "", s))
    return {
        "run": info.id, "target": info.target, "label": {"key": key, "value": value},
        "currency": bill.currency, "export": export,
        "actual_usd": bill.net if bill.lines else None,
        "actual_status": status, "complete": complete, "export_latest": latest,
        "actual_reason": actual_reason,
        "estimated_usd": estimate.total_usd if estimate else None,
        "estimated_reason": (estimate.reason if estimate else why) or "",
        "estimate_label": LIST_PRICE_LABEL,
        "gpu_duty_cycle_pct": duty_cycle(info.metrics),
        "first_usage": bill.first_usage.isoformat() if bill.first_usage else None,
        "last_usage": bill.last_usage.isoformat() if bill.last_usage else None,
        "notes": notes,
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
    partial = "" if report["complete"] else " (partial)"
    actual = (f"{format_usd(report['actual_usd'])} {currency}{partial}"
              if report["actual_usd"] is not None else f"missing ({report['actual_reason']})")
    estimated = (format_usd(report["estimated_usd"]) if report["estimated_usd"] is not None
                 else f"missing ({report['estimated_reason']})")
    lines.append(f"actual (Cloud Billing export, credits included): {actual}")
    lines.append(f"export: {report['actual_status']}")
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
    lines += [f"note: {note}" for note in report["notes"]]
    return lines
