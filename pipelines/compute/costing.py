"""What a run costs at list prices: per step, its hourly rate, its ceiling at its timeout, the
expected cost from earlier runs' median durations, and the estimate after a run.

Pure arithmetic over :func:`gkeflow.pipelines.compute.prices.hourly_rate`: a figure that
cannot be computed (a missing price, no timeout, reserved capacity) is ``None`` with the
reason, never guessed. A step of ``replicas`` nodes costs ``replicas`` x the rate of one.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import date

from gkeflow.components.notify.logic import LAUNCHER_SUFFIX
from gkeflow.pipelines.compute import derived_rates, pod_rules, tpu_profile
from gkeflow.pipelines.compute.derived_rates import Cluster
from gkeflow.pipelines.compute.prices import (
    VERTEX_PIPELINES_MACHINES,
    Price,
    Rate,
    combine_basis,
    find_price,
    hourly_rate,
)
from gkeflow.pipelines.compute.profiles import ComputeProfile, fitting_shape
from gkeflow.pipelines.compute.units import cpu_cores, memory_bytes
from gkeflow.pipelines.settings.platforms import platform

#: The label every cost figure carries.
LIST_PRICE_LABEL = "estimate from list prices"
DEFAULT_REGION = "us-central1"


def price_region(config, region: str | None = None) -> str:
    """The region prices are read for: ``region``, else the Vertex AI target's region
    (either target), else us-central1."""
    if region:
        return region
    vertex = getattr(getattr(config, "targets", None), "vertex", None)
    return vertex.region if vertex is not None else DEFAULT_REGION


def step_rates(run: RunCost) -> dict:
    """What a run notification needs to price a run after it ends: each step's hourly
    rate (or why none), source and date read, the region, the run fee and the run's ceiling
    (None when it could not be computed)."""
    return {"region": run.region, "run_fee_usd": run.run_fee_usd,
            "ceiling_usd": run.ceiling_usd,
            "steps": {s.step: {"usd_per_hour": s.usd_per_hour,
                               "reason": "reserved" if s.reserved else s.reason,
                               "source": s.source, "date_read": s.date_read,
                               "data_date": s.data_date, "basis": s.basis,
                               "derived": s.derived}
                      for s in run.steps}}


@dataclass(frozen=True)
class StepCost:
    """One step's cost figures (USD); None where a figure cannot be computed (``reason``)."""

    step: str
    nodes: int
    usd_per_hour: float | None
    ceiling_usd: float | None
    timeout_s: int
    source: str = ""
    #: When gkeflow read the oldest of its prices (ISO date).
    date_read: str = ""
    stale: bool = False
    reserved: bool = False
    reason: str = ""
    on_demand_usd_per_hour: float | None = None
    saving_pct: float | None = None
    median_s: float | None = None
    expected_usd: float | None = None
    #: How the rate was derived (empty: read from the catalogue as it is).
    derived: str = ""
    #: The machine type the step is priced as (empty: a share of a GKE node pool).
    machine: str = ""
    #: What ``nodes`` counts: nodes, or a TPU step's slices (each priced per chip).
    unit: str = "node"
    #: The oldest date its prices' data was published or observed (staleness follows it);
    #: empty when a source does not say (``date_read`` then stands in for it).
    data_date: str = ""
    #: ``published``, ``billed``, ``published and billed`` or ``derived``.
    basis: str = ""
    #: Its prices' sources in full (``source`` holds their short references).
    sources: tuple[str, ...] = ()

    @property
    def estimate(self) -> bool:
        return bool(self.derived)

    def as_json(self) -> dict:
        return {**asdict(self), "estimate": self.estimate}


@dataclass(frozen=True)
class RunCost:
    """A run's steps and totals; a total is None when one of its steps' figures is."""

    steps: list[StepCost]
    region: str
    ceiling_usd: float | None
    ceiling_reason: str
    expected_usd: float | None
    expected_reason: str
    label: str = LIST_PRICE_LABEL
    run_fee_usd: float = 0.0
    run_fee_source: str = ""
    run_fee_date: str = ""

    @property
    def priced_ceiling_usd(self) -> float:
        """The sum of the ceilings that are known (and the run fee): a lower bound when one is
        missing."""
        return _money(self.run_fee_usd + sum(s.ceiling_usd for s in self.steps
                                             if s.ceiling_usd is not None))

    @property
    def priced_expected_usd(self) -> float:
        """The sum of the expected costs that are known: a lower bound when one is missing."""
        return _money(sum(s.expected_usd for s in self.steps if s.expected_usd is not None))

    @property
    def costliest(self) -> StepCost | None:
        """The step with the highest ceiling (or hourly rate when no ceiling is known)."""
        priced = [s for s in self.steps if s.ceiling_usd is not None or s.usd_per_hour]
        return max(priced, key=lambda s: (s.ceiling_usd or 0.0, s.usd_per_hour or 0.0),
                   default=None)

    def as_json(self) -> dict:
        return {"region": self.region, "label": self.label, "ceiling_usd": self.ceiling_usd,
                "ceiling_reason": self.ceiling_reason,
                "priced_ceiling_usd": self.priced_ceiling_usd, "expected_usd": self.expected_usd,
                "expected_reason": self.expected_reason, "run_fee_usd": self.run_fee_usd,
                "run_fee_source": self.run_fee_source,
                "steps": [step.as_json() for step in self.steps]}


def machine_type(profile: ComputeProfile, target: str) -> str:
    """The machine type a step is priced as: a GPU step's host, a TPU slice's VM, a Vertex AI
    Pipelines step's machine (Vertex AI's choice, see :mod:`derived_rates`); empty for a CPU
    step on GKE (a share of a node pool)."""
    if profile.uses_tpu:
        return tpu_profile.shape(profile, target).machine_type
    if not profile.uses_gpu:
        if not platform(target).managed:
            return ""
        return derived_rates.vertex_pipeline_machine(cpu_cores(profile.cpu),
                                                     memory_bytes(profile.memory) / 2**30)
    shape = fitting_shape(profile, target)
    return shape.name if shape else ""


def node_rate(profile: ComputeProfile, target: str, region: str, capacity: str | None = None,
              *, today: date | None = None, prices: tuple[Price, ...] | None = None,
              cluster: Cluster | None = None) -> Rate:
    """The hourly rate of one node (one TPU slice) of ``profile`` under ``capacity`` (default
    its own); ``cluster`` says how GKE bills a CPU step (default: e2 node pools)."""
    capacity = capacity or profile.scheduling
    where = platform(target)
    profile = pod_rules.fitted(profile, target)  # billed as the platform schedules it
    per_pod = where.kubernetes and (where.pod_prices or (cluster is not None
                                                         and cluster.autopilot))
    if capacity == "reservation" and not where.managed:
        return hourly_rate(target, "", None, 0, capacity, region, today=today, prices=prices)
    if per_pod and (profile.uses_gpu or profile.uses_tpu):
        return derived_rates.autopilot_accelerator_rate(profile.accelerator, capacity, region,
                                                        prices)
    if profile.uses_tpu:  # per chip, the host VMs included
        chips = tpu_profile.shape(profile, target).chips
        if where.managed:
            return derived_rates.vertex_rate("", profile.accelerator, chips, capacity, region,
                                             prices, today)
        return hourly_rate(target, "", profile.accelerator, chips, capacity, region,
                           today=today, prices=prices)
    if not profile.uses_gpu and not where.managed:
        billing = replace(cluster or Cluster(), autopilot=per_pod)
        return derived_rates.gke_cpu_rate(cpu_cores(profile.cpu),
                                          memory_bytes(profile.memory) / 2**30,
                                          billing, capacity, region, prices, today)
    machine = machine_type(profile, target)
    if not machine:
        if profile.uses_gpu:
            return Rate(None, reason=f"no machine shape hosts {profile.accelerator_count} x "
                                     f"{profile.accelerator}")
        return Rate(None, reason="no Vertex AI Pipelines machine type holds "
                                 f"{profile.cpu} vCPU and {profile.memory} "
                                 f"({VERTEX_PIPELINES_MACHINES})")
    accelerator = profile.accelerator if profile.uses_gpu else None
    count = profile.accelerator_count if profile.uses_gpu else 0
    if where.managed:
        rate = derived_rates.vertex_rate(machine, accelerator, count, capacity, region, prices,
                                         today)
        if not profile.uses_gpu and not rate.missing:
            choice = f"{machine}, Vertex AI's choice for these limits"
            rate = replace(rate, derived=f"{choice}; {rate.derived}" if rate.derived
                           else choice)
        return rate
    return derived_rates.compute_engine_rate(machine, accelerator, count, capacity, region,
                                             prices, today)


def _money(value: float) -> float:
    return round(value, 4)




def launchers(profiles: Mapping[str, ComputeProfile], target: str) -> dict[str,
                                                                            ComputeProfile]:
    """The pods that launch and follow a training job (a Vertex AI CustomJob, a GKE JobSet)
    as profiles to price: the launcher's small CPU pod, alive while the job queues and runs,
    so its timeout is the job's plus its longest wait (``max_wait``, or GKE's provisioning
    allowance)."""
    from gkeflow.pipelines.compute.engines import (
        launcher_profile,
        training_engine,
        training_steps,
    )
    from gkeflow.pipelines.compute.engines.gke import launcher_deadline_s
    from gkeflow.pipelines.compute.profiles import to_seconds

    found = {}
    where = platform(target)
    if where.local:
        return found
    for step in training_steps(profiles):
        profile = profiles[step]
        if training_engine(target, profile) is None:
            continue
        if where.kubernetes:
            alive = launcher_deadline_s(profile)
        else:
            waiting = to_seconds("max_wait", profile.max_wait) if profile.max_wait else 0
            alive = profile.timeout_s + waiting if profile.timeout_s else 0
        found[step + LAUNCHER_SUFFIX] = replace(launcher_profile(profile), timeout_s=alive)
    return found


def step_cost(step: str, profile: ComputeProfile, target: str, region: str, *,
              median_s: float | None = None, today: date | None = None,
              prices: tuple[Price, ...] | None = None,
              cluster: Cluster | None = None) -> StepCost:
    """Hourly rate, ceiling at the step's timeout, saving against on demand and the
    expected cost at ``median_s`` of one step, all nodes multiplied out (mixed capacity:
    the chief at ``chief_scheduling``'s rate, the other nodes at ``scheduling``'s)."""
    nodes = max(1, profile.replicas)
    rate = node_rate(profile, target, region, today=today, prices=prices, cluster=cluster)
    machine = machine_type(profile, target)
    reserved = profile.scheduling == "reservation"
    if not rate.missing and profile.chief_scheduling and nodes > 1:
        chief = node_rate(profile, target, region, profile.chief_scheduling, today=today,
                          prices=prices, cluster=cluster)
        rate = _mixed(chief, rate, nodes)
        nodes_rate = rate.usd_per_hour
    else:
        nodes_rate = None if rate.missing else rate.usd_per_hour * nodes
    unit = "slice" if profile.uses_tpu else "node"
    if rate.missing:
        return StepCost(step, nodes, None, None, profile.timeout_s, reserved=reserved,
                        reason=rate.reason, median_s=median_s, machine=machine, unit=unit)
    hourly = nodes_rate
    ceiling, reason = None, ""
    if profile.timeout_s:
        ceiling = _money(hourly * profile.timeout_s / 3600)
    else:
        reason = "no timeout_s: the ceiling is unbounded"
    on_demand = saving = None
    if profile.scheduling in ("spot", "flex-start"):
        standard = node_rate(profile, target, region, "standard", today=today, prices=prices,
                             cluster=cluster)
        if not standard.missing:
            on_demand = _money(standard.usd_per_hour * nodes)
            if on_demand > 0:
                saving = round(100 * (1 - hourly / on_demand), 1)
    expected = _money(hourly * median_s / 3600) if median_s is not None else None
    return StepCost(step, nodes, _money(hourly), ceiling, profile.timeout_s, rate.source,
                    _iso(rate.read_on or rate.date_read), rate.stale, reserved=reserved,
                    reason=reason, on_demand_usd_per_hour=on_demand, saving_pct=saving,
                    median_s=median_s, expected_usd=expected, derived=rate.derived,
                    machine=machine, unit=unit,
                    data_date=_iso(rate.date_read) if rate.data_dated else "",
                    basis=rate.basis, sources=rate.sources)


def _iso(day: date | None) -> str:
    return day.isoformat() if day else ""


def _mixed(chief: Rate, worker: Rate, nodes: int) -> Rate:
    """All ``nodes`` of a mixed-capacity step: one chief plus ``nodes - 1`` workers."""
    if chief.missing:
        return Rate(None, reason=f"chief on demand: {chief.reason}")
    sources = " + ".join(sorted({part for rate in (chief, worker)
                                 for part in rate.source.split(" + ") if part}))
    derived = "; ".join(dict.fromkeys(r.derived for r in (chief, worker) if r.derived))
    return Rate(chief.usd_per_hour + worker.usd_per_hour * (nodes - 1), sources,
                min(chief.date_read, worker.date_read), chief.stale or worker.stale,
                currency=chief.currency, derived=derived,
                basis="derived" if derived else combine_basis(
                    part for r in (chief, worker) for part in r.basis.split(" and ")),
                sources=tuple(sorted(set(chief.sources) | set(worker.sources))),
                read_on=min((r.read_on for r in (chief, worker) if r.read_on), default=None),
                data_dated=chief.data_dated and worker.data_dated)


def _total(figures: Iterable[tuple[str, float | None, str]], what: str) -> tuple[
        float | None, str]:
    figures = list(figures)
    missing = [(step, reason) for step, value, reason in figures if value is None]
    if missing:
        step, reason = missing[0]
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        return None, f"no {what} for {step}{more}: {reason or 'no earlier run'}"
    return _money(sum(value for _step, value, _reason in figures)), ""


def run_cost(profiles: Mapping[str, ComputeProfile], target: str, region: str, *,
             medians: Mapping[str, float] | None = None, today: date | None = None,
             prices: tuple[Price, ...] | None = None,
             cluster: Cluster | None = None) -> RunCost:
    """:func:`step_cost` of every step, and the run's ceiling and expected totals (steps on
    reserved capacity are left out of the totals, the reservation being paid for anyway, but
    for what is billed on top of it: Vertex AI's management fee)."""
    medians = medians or {}
    steps = [step_cost(step, profile, target, region, median_s=medians.get(step),
                       today=today, prices=prices, cluster=cluster)
             for step, profile in profiles.items()]
    for step, profile in launchers(profiles, target).items():
        steps.append(step_cost(step, profile, target, region,
                               median_s=medians.get(step.removesuffix(LAUNCHER_SUFFIX)),
                               today=today, prices=prices, cluster=cluster))
    # a reservation is paid for already; on Vertex AI its management fee is not
    paid = [s for s in steps if not s.reserved or s.usd_per_hour is not None]
    ceiling, ceiling_reason = _total(
        [(s.step, s.ceiling_usd, s.reason) for s in paid], "ceiling")
    expected, expected_reason = _total(
        [(s.step, s.expected_usd, s.reason if s.usd_per_hour is None else "")
         for s in paid], "expected cost")
    fee, fee_source, fee_date = run_fee(target, region, prices)
    return RunCost(steps, region, None if ceiling is None else _money(ceiling + fee),
                   ceiling_reason, None if expected is None else _money(expected + fee),
                   expected_reason, run_fee_usd=fee, run_fee_source=fee_source,
                   run_fee_date=fee_date)


def run_fee(target: str, region: str, prices: tuple[Price, ...] | None = None) -> tuple[
        float, str, str]:
    """The per-run fee of ``target`` (Vertex AI Pipelines' run execution fee), its source and
    its data date; (0.0, "", "") where none is charged or none was read."""
    if not platform(target).managed:
        return 0.0, "", ""
    row = find_price("vertex-pipelines", "run", "standard", region, prices)
    if row is None or row.usd_per_hour is None:
        return 0.0, "", ""
    return row.usd_per_hour, row.source, row.as_of.isoformat()


def median_durations(runs: Iterable[Mapping[str, float | None]]) -> dict[str, float]:
    """step -> median duration (seconds) over earlier runs (each a step -> duration map)."""
    seen: dict[str, list[float]] = {}
    for run in runs:
        for step, seconds in run.items():
            if seconds is not None:
                seen.setdefault(step, []).append(float(seconds))
    return {step: statistics.median(values) for step, values in seen.items()}


@dataclass(frozen=True)
class ActualCost:
    """After a run: each step's duration x rate and the total (None when one is missing)."""

    steps: list[tuple[str, float | None, float | None, str]] = field(default_factory=list)
    total_usd: float | None = None
    reason: str = ""
    label: str = LIST_PRICE_LABEL


def actual_cost(durations: Mapping[str, float | None], profiles: Mapping[str, ComputeProfile],
                target: str, region: str, *, today: date | None = None,
                prices: tuple[Price, ...] | None = None,
                cluster: Cluster | None = None) -> ActualCost:
    """Duration x hourly rate of each step that ran (steps without a profile are skipped
    with a reason); ``(step, duration_s, usd, reason)`` rows."""
    rows: list[tuple[str, float | None, float | None, str]] = []
    durations, launched = dict(durations), launchers(profiles, target)
    for step in launched:
        if step.removesuffix(LAUNCHER_SUFFIX) in durations:
            durations[step] = durations[step.removesuffix(LAUNCHER_SUFFIX)]
    profiles = {**profiles, **launched}
    for step, seconds in durations.items():
        profile = profiles.get(step)
        if profile is None:
            rows.append((step, seconds, None, "not a step of this pipeline's compute"))
            continue
        cost = step_cost(step, profile, target, region, median_s=seconds, today=today,
                         prices=prices, cluster=cluster)
        if cost.reserved:
            rows.append((step, seconds, 0.0, "reserved"))
            continue
        reason = cost.reason if cost.usd_per_hour is None else (
            "" if seconds is not None else "no duration")
        rows.append((step, seconds, cost.expected_usd, reason))
    total, reason = _total([(s, usd, r) for s, _d, usd, r in rows], "cost")
    return ActualCost(rows, total, reason)


def format_usd(value: float | None) -> str:
    """``$12.34`` (``$0.0042`` below a cent); ``missing`` for None."""
    if value is None:
        return "missing"
    return f"${value:,.2f}" if value >= 0.01 or value == 0 else f"${value:.4f}"


def runs_per_month(cron: str, time_zone: str, start: date) -> float:
    """How many times a 5-field ``cron`` fires in an average month of the year from
    ``start`` (its days x its times; a time a daylight-saving change skips still counts)."""
    from datetime import timedelta

    from gkeflow.pipelines.settings.cron import CronExpression, zone

    zone(time_zone)  # an unknown zone is refused as the schedule would be
    expression = CronExpression.parse(cron)
    per_day = len(expression.hours) * len(expression.minutes)
    days = sum(expression.matches_day(start + timedelta(days=n)) for n in range(365))
    return days * per_day / 12
