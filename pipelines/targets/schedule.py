"""`gkeflow schedule`: make the schedules in ``gkeflow.yaml`` real on each target.

``apply`` is idempotent. Each schedule is found on its target by name among the schedules
gkeflow manages (KFP: recurring runs in the experiment whose description starts with
``gkeflow schedule <name>;``; Vertex: schedules whose pipeline job carries the label
``gkeflow-schedule=<name>``); schedules made by anything else are never touched. Then:

* missing -> created (KFP: pinned to the uploaded pipeline version, ``no_catchup`` unless
  ``catch_up: true``; Vertex: ``TZ=<zone> <cron>``, ``max_concurrent_run_count``);
* the pipeline version or parameters changed (a fingerprint stored with the schedule) ->
  replaced: the new one is created first, then the old one deleted;
* cron / max concurrency changed -> Vertex updates the schedule in place; KFP has no update
  call for recurring runs, so it is replaced;
* ``enabled`` changed -> paused or resumed;
* more than one with the same name (e.g. an interrupted replacement) -> the extras deleted;
* on the target but no longer in the file -> reported, and deleted only with ``--prune``.

Each schedule carries its owner, the ``name`` of the gkeflow.yaml that made it (KFP: in the
description; Vertex: the label ``gkeflow-owner``). ``--prune`` deletes only this file's
schedules, so several gkeflow.yaml files can share an experiment or a region; schedules of
other files are not reported. A schedule of this file's names with another owner (or none:
made before owners were written) is replaced once, with a warning when another file owned
it. One with no owner that is not in the file is reported, never pruned: `gkeflow schedule
delete NAME` deletes it. ``pause``, ``resume`` and ``delete`` act on this file's schedules,
those without an owner, and those of the names this file declares; a name only another file
owns is refused, naming that file. A replaced KFP schedule remembers the ids of those it
replaced, so `runs list --schedule` keeps its history.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gkeflow.pipelines.definitions.operations import (
    notification_notes,
    notifications_key,
    select,
)
from gkeflow.pipelines.definitions.operations import of as operations_of
from gkeflow.pipelines.settings.config import ConfigError, GkeflowConfig, ScheduleConfig
from gkeflow.pipelines.settings.cron import (
    kfp_cron,
    vertex_cron,
)
from gkeflow.pipelines.settings.remote_config import DEFAULT_ENVIRONMENT
from gkeflow.pipelines.settings.tracking_config import tracking_for
from gkeflow.pipelines.targets.backend_choice import make_backend
from gkeflow.pipelines.targets.backends import RemoteSchedule, ScheduleRequest, lineage
from gkeflow.pipelines.targets.submit import (
    SubmitError,
    prepare_pipeline,
    refuse_unbuilt_images,
    resolve_parameters,
)


@dataclass
class Action:
    """One thing ``apply`` did (or, with ``--dry-run``, would do)."""

    target: str
    schedule: str
    kind: str  # create | replace | update | pause | resume | delete | unchanged | kept | note
    detail: str = ""


@dataclass
class ApplyResult:
    actions: list[Action] = field(default_factory=list)
    planned: list = field(default_factory=list)  # PlannedRequest, with --dry-run

    @property
    def changed(self) -> bool:
        return any(a.kind not in ("unchanged", "kept", "warning") for a in self.actions)


def job_fingerprint(target: str, version_name: str, parameters: dict[str, Any],
                    job_settings: dict[str, Any]) -> str:
    """What the runs a schedule starts depend on, besides its timing: a short hash."""
    text = json.dumps({"target": target, "version": version_name, "parameters": parameters,
                       "settings": job_settings}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def compiled_for(config: GkeflowConfig, schedule: ScheduleConfig) -> tuple[GkeflowConfig, tuple]:
    """The configuration a schedule's pipeline compiles with (its notifications, and its
    parameters choosing the training pipeline's candidate steps) and what tells two such
    compilations apart."""
    chosen = select(config, schedule=schedule).for_run(
        {**config.parameters.get(DEFAULT_ENVIRONMENT, {}),
         **config.parameters.get(schedule.environment, {}), **schedule.parameters})
    families = chosen.training_families() if schedule.pipeline == "training" else ()
    return chosen, (schedule.pipeline, notifications_key(chosen), families)


def build_request(schedule: ScheduleConfig, config: GkeflowConfig, prepared, *,
                  at: dt.datetime | None = None) -> ScheduleRequest:
    """The target form of one schedule (cron converted, parameters resolved)."""
    parameters = resolve_parameters(config, prepared, schedule.environment, schedule.parameters,
                                    override_source=f"schedules {schedule.name!r} parameters")
    target_config = getattr(config.targets, schedule.target)
    offset = None
    if schedule.target == "gke":
        converted = kfp_cron(schedule.cron, schedule.time_zone, at=at)
        cron, offset = converted.cron, converted.utc_offset_minutes
        plugins = tracking_for(config.tracking, schedule.environment).plugins_input()
        settings = {"service_account": target_config.service_account,
                    "pipeline_root": target_config.pipeline_root,
                    **({"plugins_input": plugins} if plugins else {})}
    else:
        cron = vertex_cron(schedule.cron, schedule.time_zone)
        settings = target_config.model_dump(include={
            "service_account", "network", "encryption_key", "labels", "enable_caching",
            "pipeline_root"})
    return ScheduleRequest(
        name=schedule.name, cron=cron, local_cron=schedule.cron, time_zone=schedule.time_zone,
        max_concurrency=schedule.max_concurrency, catch_up=schedule.catch_up,
        enabled=schedule.enabled, parameters=parameters,
        job_fingerprint=job_fingerprint(schedule.target, prepared.version_name, parameters,
                                        settings),
        utc_offset_minutes=offset, owner=config.schedule_owner,
        plugins_input=settings.get("plugins_input", {}))


def targets_in_use(config: GkeflowConfig, target: str | None,
                    all_configured: bool = True) -> list[str]:
    """``target`` alone, or the targets that schedules use (plus, with ``all_configured``,
    every configured target, so that lists and prunes see everything)."""
    if target:
        if getattr(config.targets, target) is None:
            raise ConfigError(f"targets.{target} is not configured in gkeflow.yaml")
        return [target]
    used = {s.target for s in config.schedules}
    return [t for t in ("gke", "vertex")
            if t in used or (all_configured and getattr(config.targets, t) is not None)]


def _compile_checked(config: GkeflowConfig, workdir: Path, targets: list[str],
                     version: str | None, dry_run: bool = False,
                     flag=None) -> dict[tuple[str, str, str], Any]:
    """(target, pipeline, notifications key) -> the prepared pipeline of every schedule,
    compiled before any change is made; refuses images never built for the configured
    registry (``dry_run``: hands ``flag(target, pipeline, line)`` the problem instead) and
    notifications the target cannot send (naming the schedule)."""
    compiled: dict[tuple[str, str, str], Any] = {}
    for target_name in targets:
        for index, schedule in enumerate(config.schedules):
            if schedule.target != target_name:
                continue
            chosen, key = compiled_for(config, schedule)
            key = (target_name, *key)
            if key in compiled:
                continue
            try:
                operations_of(chosen, target_name)  # notifications the target cannot send
            except ConfigError as exc:
                raise ConfigError(f"schedules.{index} ({schedule.name}): {exc}") from None
            prepared = prepare_pipeline(schedule.pipeline, target_name,
                                        workdir / target_name / str(len(compiled)),
                                        version=version, config=chosen)
            flagged = refuse_unbuilt_images(config, Path(prepared.path),
                                            f"send {schedule.pipeline} to {target_name}",
                                            dry_run=dry_run)
            if flagged and flag:
                flag(target_name, schedule.pipeline, flagged)
            compiled[key] = prepared
    return compiled


def _vertex_experiment(backend, schedule: ScheduleConfig, config: GkeflowConfig,
                       experiment: str, record) -> None:
    """A Vertex AI schedule's runs join ``experiment`` from their exit task (a schedule has
    no experiment field): the experiment is made (or checked) now, before the schedule;
    with an email notification, whose task is Vertex AI's own, they cannot join."""
    settings = schedule.notifications or config.notifications.get(schedule.environment)
    if settings is not None and settings.email is not None:
        record(Action("vertex", schedule.name, "warning",
                      f"its runs are not in Vertex AI experiment {experiment!r}: its email "
                      "notification takes the exit task that adds them (use a webhook)"))
        return
    from gkeflow.pipelines.targets.vertex_experiments import ensure_experiment

    ensure_experiment(backend, experiment)


def apply(config: GkeflowConfig, *, workdir: Path, target: str | None = None,
          prune: bool = False, dry_run: bool = False, backends: dict | None = None,
          version: str | None = None, at: dt.datetime | None = None,
          on_action=None) -> ApplyResult:
    """Make the target(s) match ``config.schedules``; see the module docstring."""
    result = ApplyResult()
    backends = backends or {}

    def record(action: Action) -> None:
        result.actions.append(action)
        if on_action:
            on_action(action)

    targets = targets_in_use(config, target, prune)
    compiled = _compile_checked(
        config, workdir, targets, version, dry_run,
        lambda target_name, pipeline, line: record(Action(target_name, pipeline, "warning", line)))
    if not dry_run:  # the tracking servers the scheduled runs will log to, asked once each
        from gkeflow.pipelines.targets.tracking_probe import is_warning, probe

        asked: set[str] = set()
        for schedule in config.schedules:
            mlflow = tracking_for(config.tracking, schedule.environment).mlflow
            uri = mlflow.tracking_uri if mlflow is not None else ""
            if schedule.target in targets and uri and uri not in asked:
                asked.add(uri)
                found = probe(uri)
                if is_warning(uri, found):  # a cluster-internal name was not asked
                    record(Action(schedule.target, schedule.name, "warning", found))
    # Every schedule in its target's form (crons converted, parameters checked) before any
    # change: one that cannot be converted stops the apply before the first change, not
    # half-way through the file.
    requests: dict[tuple[str, str], ScheduleRequest] = {}
    for index, schedule in enumerate(config.schedules):
        if schedule.target not in targets:
            continue
        chosen, key = compiled_for(config, schedule)
        prepared = compiled[(schedule.target, *key)]
        for note in notification_notes(chosen, schedule.target):
            record(Action(schedule.target, schedule.name, "note", note))
        try:
            requests[(schedule.target, schedule.name)] = build_request(
                schedule, config, prepared, at=at)
        except (ValueError, SubmitError) as exc:  # the schedule's own cron or parameters
            raise ConfigError(f"schedules.{index} ({schedule.name}): {exc}") from exc
    for target_name in targets:
        wanted = [s for s in config.schedules if s.target == target_name]
        backend = backends.get(target_name) or make_backend(config, target_name, dry_run=dry_run)
        existing: dict[str, list[RemoteSchedule]] = {}
        for remote in backend.list_schedules():
            existing.setdefault(remote.name, []).append(remote)
        prepared_by_pipeline: dict[str, Any] = {}
        for schedule in wanted:
            chosen, key = compiled_for(config, schedule)
            if key not in prepared_by_pipeline:
                prepared = compiled[(target_name, *key)]
                ids = None
                if target_name == "gke":
                    from gkeflow.pipelines.targets.backend_version import check_backend

                    warning = check_backend(backend, prepared)
                    if warning:
                        record(Action(target_name, schedule.pipeline, "warning", warning))
                    pipeline_id, version_id, notes = backend.ensure_pipeline_version(prepared)
                    ids = (pipeline_id, version_id)
                    for note in notes:
                        if note.startswith("uploaded"):
                            record(Action(target_name, schedule.pipeline, "upload", note))
                prepared_by_pipeline[key] = (prepared, ids)
            prepared, ids = prepared_by_pipeline[key]
            request = requests[(target_name, schedule.name)]
            experiments = tracking_for(config.tracking, schedule.environment).vertex_experiments
            if target_name == "vertex" and experiments is not None:
                _vertex_experiment(backend, schedule, config, experiments.experiment, record)
            if target_name == "gke" and request.plugins_input:
                from gkeflow.pipelines.definitions.tracking_tasks import direct_mlflow
                from gkeflow.pipelines.targets.backend_version import (
                    MLFLOW_PLUGIN,
                    check_backend,
                    supports,
                )

                direct = direct_mlflow(tracking_for(config.tracking, schedule.environment))
                if direct is not None and not supports(backend, MLFLOW_PLUGIN):
                    request = replace(request, plugins_input={})  # the steps track themselves
                    record(Action(target_name, schedule.name, "warning",
                                  "no MLflow plugin on this Kubeflow Pipelines (2.17+): its "
                                  f"runs' steps track in MLflow at {direct.tracking_uri} "
                                  "themselves (direct mode)"))
                else:
                    check_backend(backend, prepared, (MLFLOW_PLUGIN,))  # warned about above
            _apply_one(backend, target_name, request, prepared, ids,
                       existing.pop(schedule.name, []), record)
        for name, remotes in sorted(existing.items()):
            for remote in remotes:
                if remote.owner and remote.owner != config.schedule_owner:
                    continue  # another gkeflow.yaml's
                if not remote.owner:
                    record(Action(target_name, name, "kept",
                                  "not in gkeflow.yaml, and made before schedules named their "
                                  f"gkeflow.yaml; `gkeflow schedule delete {name}` deletes it"))
                elif prune:
                    backend.delete_schedule(remote)
                    record(Action(target_name, name, "delete", "not in gkeflow.yaml (--prune)"))
                else:
                    record(Action(target_name, name, "kept",
                                  "on the target but not in gkeflow.yaml; --prune deletes it"))
        result.planned.extend(backend.planned)
    return result


def _create(backend, target_name, request, prepared, ids) -> str:
    if target_name == "gke":
        return backend.create_schedule(request, prepared, *ids)
    labels = {"gkeflow-pipeline": prepared.name, "gkeflow-version": prepared.version_name}
    return backend.create_schedule(request, prepared, labels)


def _replacing(backend, remote: RemoteSchedule, request: ScheduleRequest) -> list[str]:
    """Why ``remote`` must be replaced to become ``request``: the target's reasons, or an
    owner to write (the owner is fixed when a schedule is created)."""
    changes = backend.needs_replacement(remote, request)
    if remote.owner != request.owner:
        changes = [*changes, f"owner {remote.owner or '(none)'} -> {request.owner}"]
    return changes


def _apply_one(backend, target_name: str, request: ScheduleRequest, prepared, ids,
               remotes: list[RemoteSchedule], record) -> None:
    if not remotes:
        _create(backend, target_name, request, prepared, ids)
        record(Action(target_name, request.name, "create", request.cron))
        return
    # Keep the one that needs the least work; extras (an interrupted replace) go. Another
    # gkeflow.yaml's schedule of this name is never deleted as an extra; it is taken over
    # (replaced) only when this file has none of its own: one schedule per name.
    remotes = sorted(remotes, key=lambda r: (bool(_replacing(backend, r, request)),
                                             bool(backend.updatable_changes(r, request))))
    mine = [r for r in remotes if r.owner in ("", request.owner)]
    foreign = [r for r in remotes if r.owner not in ("", request.owner)]
    current, extras = (mine[0], mine[1:]) if mine else (foreign[0], [])
    for other in sorted({r.owner for r in foreign}):
        done = "now this file's" if other == current.owner else "left alone"
        record(Action(target_name, request.name, "warning",
                      f"gkeflow.yaml {other!r} has a schedule of this name ({done}); give both "
                      "files the same `name:`, or rename one of the schedules"))
    changes = _replacing(backend, current, request)
    if changes:
        # The replacement remembers what it replaces: their runs stay its history.
        _create(backend, target_name, replace(request, previous_ids=lineage(current, extras)),
                prepared, ids)
        backend.delete_schedule(current)
        record(Action(target_name, request.name, "replace", "; ".join(changes)))
    else:
        updates = backend.updatable_changes(current, request)
        if updates:
            backend.update_schedule(current, request)
            record(Action(target_name, request.name, "update", "; ".join(updates)))
        if current.enabled != request.enabled:
            backend.set_enabled(current, request.enabled, catch_up=request.catch_up)
            record(Action(target_name, request.name, "resume" if request.enabled else "pause",
                          "enabled in gkeflow.yaml" if request.enabled
                          else "disabled in gkeflow.yaml"))
        if not updates and current.enabled == request.enabled:
            record(Action(target_name, request.name, "unchanged", request.cron))
    for extra in extras:
        backend.delete_schedule(extra)
        record(Action(target_name, request.name, "delete", "duplicate of the same name"))


# ---------------------------------------------------------------------------------------------
# list / pause / resume / delete


def _find(config: GkeflowConfig, name: str, target: str | None, backends: dict | None):
    backends = backends or {}
    found = []
    targets = targets_in_use(config, target)
    if not targets:
        raise ConfigError("no target is configured in gkeflow.yaml (targets.gke or "
                          "targets.vertex); `gkeflow init` writes an example")
    for target_name in targets:
        backend = backends.get(target_name) or make_backend(config, target_name)
        found += [(backend, r) for r in backend.list_schedules() if r.name == name]
    if not found:
        where = f"on {target}" if target else "on any configured target"
        raise LookupError(f"no schedule named {name!r} {where}; `gkeflow schedule list` shows "
                          "them")
    declared = name in {s.name for s in config.schedules}
    mine = [(b, r) for b, r in found
            if declared or r.owner in ("", config.schedule_owner)]
    if not mine:
        owners = ", ".join(sorted({f"{r.target}: {r.owner!r}" for _, r in found}))
        raise LookupError(
            f"schedule {name!r} belongs to another gkeflow.yaml ({owners}), not to this one "
            f"({config.schedule_owner!r}); run the command with that file's --config")
    return mine


def set_enabled(config: GkeflowConfig, name: str, enabled: bool, *, target: str | None = None,
                catch_up: bool = False, backends: dict | None = None) -> list[str]:
    """Pause (``enabled=False``) or resume a schedule by name; returns what was done."""
    done = []
    for backend, remote in _find(config, name, target, backends):
        if remote.enabled == enabled:
            done.append(f"{remote.target}: {name} already {'active' if enabled else 'paused'}")
            continue
        backend.set_enabled(remote, enabled, catch_up=catch_up)
        done.append(f"{remote.target}: {name} {'resumed' if enabled else 'paused'}")
    return done


def delete(config: GkeflowConfig, name: str, *, target: str | None = None,
           backends: dict | None = None) -> list[str]:
    done = []
    for backend, remote in _find(config, name, target, backends):
        backend.delete_schedule(remote)
        done.append(f"{remote.target}: {name} deleted")
    return done
