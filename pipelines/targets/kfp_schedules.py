"""Kubeflow Pipelines recurring runs, the schedules of `gkeflow schedule apply`: the part of
:class:`~gkeflow.pipelines.targets.kfp.KfpBackend` that lists, creates, deletes and
pauses them (KFP cannot update one in place: a change replaces it)."""

from __future__ import annotations

import json
import uuid

from gkeflow.pipelines.targets.backends import (
    KFP_DESCRIPTION_RE,
    PreparedPipeline,
    RemoteSchedule,
    ScheduleRequest,
)
from gkeflow.pipelines.targets.kfp_pipelines import Found
from gkeflow.pipelines.targets.kfp_plugins import create_recurring_run_with_plugins
from gkeflow.pipelines.targets.transport import RemoteError


class KfpRecurringRuns:
    """Recurring runs; mixed into KfpBackend, whose ``client``, ``call``, ``once``,
    ``_plan`` and ``experiment_id`` it uses."""

    @staticmethod
    def _description(request: ScheduleRequest, version_name: str, request_id: str) -> str:
        fields = {"job": request.job_fingerprint, "cron": request.local_cron,
                  "tz": request.time_zone, "utc_offset": request.utc_offset_minutes,
                  "version": version_name, "request": request_id, "owner": request.owner}
        if request.previous_ids:
            fields["previous"] = list(request.previous_ids)
        return f"gkeflow schedule {request.name}; " + json.dumps(fields, sort_keys=True)

    def list_schedules(self, *, _call=None) -> list[RemoteSchedule]:
        experiment_id = self.experiment_id(create=False)
        if experiment_id is None:
            return []
        if self.dry_run:
            self._plan("GET", f"/apis/v2beta1/recurringruns?experiment_id={experiment_id}",
                       note="read what exists; the requests below assume none does")
            return []
        schedules: list[RemoteSchedule] = []
        token = ""
        while True:
            page = (_call or self.call)(
                "list recurring runs",
                lambda t=token: self.client.list_recurring_runs(
                    page_token=t, page_size=100, experiment_id=experiment_id))
            for recurring in page.recurring_runs or []:
                match = KFP_DESCRIPTION_RE.match(recurring.description or "")
                if not match:
                    continue  # not made by gkeflow: never touched
                try:
                    fields = json.loads(match.group("fields"))
                except ValueError:
                    fields = {}
                trigger = recurring.trigger
                cron = trigger.cron_schedule.cron if trigger and trigger.cron_schedule else ""
                schedules.append(RemoteSchedule(
                    id=recurring.recurring_run_id, name=match.group("name"), target="gke",
                    cron=cron or "", max_concurrency=int(recurring.max_concurrency or 1),
                    enabled=str(recurring.mode).upper().endswith("ENABLE")
                    and not str(recurring.mode).upper().endswith("DISABLE"),
                    catch_up=not bool(recurring.no_catchup),
                    job_fingerprint=str(fields.get("job", "")),
                    local_cron=str(fields.get("cron", "")), time_zone=str(fields.get("tz", "")),
                    utc_offset_minutes=fields.get("utc_offset"),
                    pipeline_version=str(fields.get("version", "")),
                    request_id=str(fields.get("request", "")),
                    owner=str(fields.get("owner", "")),
                    previous_ids=tuple(str(i) for i in fields.get("previous", []) or [])))
            token = page.next_page_token
            if not token:
                return schedules

    def create_schedule(self, request: ScheduleRequest, prepared: PreparedPipeline,
                        pipeline_id: str, version_id: str) -> str:
        experiment_id = self.experiment_id()
        request_id = uuid.uuid4().hex[:16]
        description = self._description(request, prepared.version_name, request_id)
        if self.dry_run:
            self._plan("POST", "/apis/v2beta1/recurringruns", {
                "experiment_id": experiment_id, "display_name": request.name,
                "description": description,
                "mode": "ENABLE" if request.enabled else "DISABLE",
                "trigger": {"cron_schedule": {"cron": request.cron}},
                "max_concurrency": str(request.max_concurrency),
                "no_catchup": not request.catch_up,
                "pipeline_version_reference": {"pipeline_id": pipeline_id,
                                               "pipeline_version_id": version_id},
                "runtime_config": {"parameters": request.parameters},
                **({"plugins_input": request.plugins_input} if request.plugins_input else {}),
            })
            return "<recurring_run_id>"

        def find():
            found = [r for r in self.list_schedules(_call=self.once)
                     if r.request_id == request_id]
            return Found(found[0].id, "recurring_run_id") if found else None

        recurring = self.call(
            f"create recurring run {request.name!r}",
            lambda: self._create_recurring_run(
                experiment_id, request.name, request.plugins_input, description=description,
                cron_expression=request.cron, max_concurrency=request.max_concurrency,
                no_catchup=not request.catch_up, params=request.parameters,
                pipeline_id=pipeline_id, version_id=version_id, enabled=request.enabled,
                pipeline_root=self.target.pipeline_root,
                service_account=self.target.service_account),
            idempotent=False, recover=find)
        return recurring.recurring_run_id

    def _create_recurring_run(self, experiment_id: str, name: str, plugins_input: dict,
                              **kwargs):
        if not plugins_input:
            return self.client.create_recurring_run(experiment_id, name, **kwargs)
        return create_recurring_run_with_plugins(self.client, experiment_id, name,
                                                 plugins_input, **kwargs)

    def delete_schedule(self, schedule: RemoteSchedule) -> None:
        if self.dry_run:
            return self._plan("DELETE", f"/apis/v2beta1/recurringruns/{schedule.id}")
        try:
            self.call(f"delete recurring run {schedule.name!r}",
                       lambda: self.client.delete_recurring_run(schedule.id))
        except RemoteError as exc:
            if exc.status != 404:  # gone already: an earlier try's answer was lost
                raise

    def set_enabled(self, schedule: RemoteSchedule, enabled: bool,
                    catch_up: bool = False) -> None:
        verb = "enable" if enabled else "disable"
        if self.dry_run:
            return self._plan("POST", f"/apis/v2beta1/recurringruns/{schedule.id}:{verb}")
        func = self.client.enable_recurring_run if enabled else self.client.disable_recurring_run
        self.call(f"{verb} recurring run {schedule.name!r}", lambda: func(schedule.id))

    def needs_replacement(self, remote: RemoteSchedule, request: ScheduleRequest) -> list[str]:
        """KFP cannot update a recurring run in place: any change but on/off replaces it."""
        changes = []
        if remote.job_fingerprint != request.job_fingerprint:
            changes.append("pipeline version or parameters")
        if remote.cron != request.cron:
            changes.append(f"cron {remote.cron!r} -> {request.cron!r}")
        if remote.max_concurrency != request.max_concurrency:
            changes.append(f"max_concurrency {remote.max_concurrency} -> "
                           f"{request.max_concurrency}")
        if remote.catch_up != request.catch_up:
            changes.append(f"catch_up {remote.catch_up} -> {request.catch_up}")
        return changes

    def updatable_changes(self, remote: RemoteSchedule, request: ScheduleRequest) -> list[str]:
        return []

    def update_schedule(self, remote: RemoteSchedule, request: ScheduleRequest) -> None:
        raise NotImplementedError("Kubeflow Pipelines recurring runs are replaced, not updated")
