"""`gkeflow schedule list`: what is on the targets, with each schedule's next run times."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from gkeflow.pipelines.settings.config import GkeflowConfig
from gkeflow.pipelines.settings.cron import (
    kfp_cron,
    kfp_cron_to_five_fields,
    next_runs,
    split_vertex_cron,
)
from gkeflow.pipelines.targets.backend_choice import make_backend
from gkeflow.pipelines.targets.backends import RemoteSchedule
from gkeflow.pipelines.targets.schedule import targets_in_use


@dataclass
class ScheduleRow:
    target: str
    name: str
    cron: str  # as on the target
    local: str  # 5-field cron and time zone from gkeflow.yaml, when known
    enabled: bool
    max_concurrency: int
    next_runs: list[dt.datetime]
    in_config: bool
    warning: str = ""


def _next_runs_for(remote: RemoteSchedule, count: int, now: dt.datetime) -> list[dt.datetime]:
    if remote.next_run_time and count == 1:
        value = remote.next_run_time
        if isinstance(value, dt.datetime):
            return [value if value.tzinfo else value.replace(tzinfo=dt.UTC)]
    try:
        if remote.target == "gke":
            runs = next_runs(kfp_cron_to_five_fields(remote.cron), "UTC", count, now)
        else:
            cron, time_zone = split_vertex_cron(remote.cron)
            runs = next_runs(cron, time_zone, count, now)
    except ValueError:
        return []
    if remote.time_zone:
        from gkeflow.pipelines.settings.cron import zone

        runs = [r.astimezone(zone(remote.time_zone)) for r in runs]
    return runs


def list_schedules(config: GkeflowConfig, *, target: str | None = None, count: int = 1,
                   backends: dict | None = None, now: dt.datetime | None = None
                   ) -> list[ScheduleRow]:
    """What is on the target(s), with the next ``count`` run times (in each schedule's zone)."""
    now = now or dt.datetime.now(dt.UTC)
    backends = backends or {}
    names = {(s.target, s.name) for s in config.schedules}
    rows = []
    for target_name in targets_in_use(config, target):
        backend = backends.get(target_name) or make_backend(config, target_name)
        for remote in sorted(backend.list_schedules(), key=lambda r: r.name):
            warning = ""
            if (target_name == "gke" and remote.time_zone and remote.local_cron
                    and remote.utc_offset_minutes is not None):
                try:
                    current = kfp_cron(remote.local_cron, remote.time_zone, at=now)
                    if current.cron != remote.cron:
                        now_offset = current.utc_offset_minutes / 60
                        warning = (f"{remote.time_zone} is now UTC{now_offset:+g}h"
                                   f" but this was converted at UTC"
                                   f"{remote.utc_offset_minutes/60:+g}h; run "
                                   "`gkeflow schedule apply`")
                except ValueError:
                    pass
            local = (f"{remote.local_cron} ({remote.time_zone})"
                     if remote.local_cron and remote.time_zone else "")
            rows.append(ScheduleRow(
                target_name, remote.name, remote.cron, local, remote.enabled,
                remote.max_concurrency,
                _next_runs_for(remote, count, now) if remote.enabled else [],
                (target_name, remote.name) in names, warning))
    return rows
