"""Two gkeflow.yaml files in one experiment (KFP) or region (Vertex AI): each schedule
carries the ``name`` of the file that made it, and ``--prune`` deletes only that file's.
Schedules made before owners were written are reported, never pruned."""

from __future__ import annotations

import json

import pytest

from gkeflow.pipelines.targets.kfp import KfpBackend
from gkeflow.pipelines.targets.schedule import apply
from gkeflow.pipelines.targets.vertex import VertexBackend
from tests.integration.conftest import FAST


class _Kfp:
    target = "gke"

    def __init__(self, server):
        self.server = server

    def config(self, make_config, **extra):
        return make_config(self.server.url, None, **extra)

    def backend(self, config):
        return KfpBackend(config.targets.gke, policy=FAST)

    def names(self) -> list[str]:
        return sorted(r["display_name"] for r in self.server.recurring_runs.values())

    def owners(self) -> dict[str, str]:
        return {r["display_name"]: json.loads(r["description"].split("; ", 1)[1]).get("owner", "")
                for r in self.server.recurring_runs.values()}

    def forget_owner(self, name: str) -> None:
        """The schedule as gkeflow wrote it before owners were written."""
        for recurring in self.server.recurring_runs.values():
            if recurring["display_name"] == name:
                head, fields = recurring["description"].split("; ", 1)
                fields = json.loads(fields)
                del fields["owner"]
                recurring["description"] = f"{head}; {json.dumps(fields, sort_keys=True)}"


class _Vertex:
    target = "vertex"

    def __init__(self, server):
        self.server = server

    def config(self, make_config, **extra):
        return make_config(None, self.server.url, **extra)

    def backend(self, config):
        return VertexBackend(config.targets.vertex, policy=FAST)

    def _labels(self, schedule):
        return schedule.create_pipeline_job_request.pipeline_job.labels

    def names(self) -> list[str]:
        return sorted(s.display_name for s in self.server.schedules.values())

    def owners(self) -> dict[str, str]:
        return {s.display_name: self._labels(s).get("gkeflow-owner", "")
                for s in self.server.schedules.values()}

    def forget_owner(self, name: str) -> None:
        for schedule in self.server.schedules.values():
            if schedule.display_name == name:
                del self._labels(schedule)["gkeflow-owner"]


@pytest.fixture(params=["gke", "vertex"])
def target(request, make_config, token_env):
    fixture = "kfp_server" if request.param == "gke" else "vertex_server"
    server = request.getfixturevalue(fixture)
    return _Kfp(server) if request.param == "gke" else _Vertex(server)


def _apply(target, config, workdir, **kwargs):
    return apply(config, workdir=workdir, backends={target.target: target.backend(config)},
                 version="g1", **kwargs)


def _schedule(target, name, cron="0 2 * * *"):
    return {"name": name, "target": target.target, "cron": cron}


def test_prune_deletes_only_this_files_schedules(target, make_config, tmp_path):
    team_a = target.config(make_config, name="team-a",
                           schedules=[_schedule(target, "nightly"), _schedule(target, "hourly")])
    team_b = target.config(make_config, name="team-b",
                           schedules=[_schedule(target, "weekly", "0 6 * * 1")])
    _apply(target, team_a, tmp_path / "a1")
    _apply(target, team_b, tmp_path / "b1")
    assert target.owners() == {"nightly": "team-a", "hourly": "team-a", "weekly": "team-b"}

    # team-a drops "hourly" and prunes: its own schedule goes, team-b's stays, unreported.
    fewer = target.config(make_config, name="team-a", schedules=[_schedule(target, "nightly")])
    result = _apply(target, fewer, tmp_path / "a2", prune=True)
    assert sorted((a.schedule, a.kind) for a in result.actions) == [
        ("hourly", "delete"), ("nightly", "unchanged")]
    assert target.names() == ["nightly", "weekly"]
    again = _apply(target, team_b, tmp_path / "b2", prune=True)
    assert [(a.schedule, a.kind) for a in again.actions] == [("weekly", "unchanged")]
    assert target.names() == ["nightly", "weekly"]


def test_schedules_made_before_owners_are_adopted_by_name_and_never_pruned(
        target, make_config, tmp_path):
    old = target.config(make_config, name="team-a",
                        schedules=[_schedule(target, "nightly"), _schedule(target, "legacy")])
    _apply(target, old, tmp_path / "1")
    target.forget_owner("nightly")
    target.forget_owner("legacy")

    now = target.config(make_config, name="team-a", schedules=[_schedule(target, "nightly")])
    result = _apply(target, now, tmp_path / "2", prune=True)
    actions = {a.schedule: a for a in result.actions}
    assert actions["nightly"].kind == "replace" and "owner (none) -> team-a" in \
        actions["nightly"].detail
    assert actions["legacy"].kind == "kept"
    assert "gkeflow schedule delete legacy" in actions["legacy"].detail
    assert target.owners() == {"nightly": "team-a", "legacy": ""}


def test_a_schedule_of_the_same_name_in_another_file_is_taken_over_not_duplicated(
        target, make_config, tmp_path):
    team_a = target.config(make_config, name="team-a", schedules=[_schedule(target, "nightly")])
    team_b = target.config(make_config, name="team-b", schedules=[_schedule(target, "nightly")])
    _apply(target, team_a, tmp_path / "a")
    result = _apply(target, team_b, tmp_path / "b")
    kinds = [(a.kind, a.detail) for a in result.actions if a.schedule == "nightly"]
    assert kinds[0][0] == "warning" and "'team-a'" in kinds[0][1] and "`name:`" in kinds[0][1]
    assert kinds[1][0] == "replace"
    assert target.owners() == {"nightly": "team-b"}


def test_pause_resume_and_delete_leave_another_files_schedule_alone(target, make_config,
                                                                    tmp_path):
    from gkeflow.pipelines.targets.schedule import delete, set_enabled

    team_a = target.config(make_config, name="team-a", schedules=[_schedule(target, "nightly")])
    team_b = target.config(make_config, name="team-b",
                           schedules=[_schedule(target, "weekly", "0 6 * * 1")])
    _apply(target, team_a, tmp_path / "a")
    _apply(target, team_b, tmp_path / "b")
    backends = {target.target: target.backend(team_b)}
    for action in (lambda: set_enabled(team_b, "nightly", False, backends=backends),
                   lambda: delete(team_b, "nightly", backends=backends)):
        with pytest.raises(LookupError, match=r"'nightly' belongs to another gkeflow.yaml "
                                              r"\(\w+: 'team-a'\).*'team-b'.*--config"):
            action()
    assert target.names() == ["nightly", "weekly"]
    # its own, one made before owners were written, and one of a name it declares: done
    assert set_enabled(team_b, "weekly", False, backends=backends) == [
        f"{target.target}: weekly paused"]
    target.forget_owner("weekly")
    assert delete(team_b, "weekly", backends=backends) == [f"{target.target}: weekly deleted"]
    claims = target.config(make_config, name="team-b", schedules=[_schedule(target, "nightly")])
    assert delete(claims, "nightly", backends=backends) == [f"{target.target}: nightly deleted"]
    assert target.names() == []
