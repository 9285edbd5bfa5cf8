"""The feature -> minimum backend table, read from compiled specs."""

from __future__ import annotations

import pytest

from gkeflow.pipelines.targets.backend_version import (
    BackendTooOld,
    check,
    describe,
    minimum,
    parse_version,
    requirements,
)

WORKSPACE = {"pipelineConfig": {"workspace": {"size": "10Gi"}}}
TTL = {"pipelineConfig": {"resourceTtlOnCompletion": 86400}}
PASSTHROUGH = {"components": {"comp-train": {"taskConfigPassthroughs": [
    {"field": "RESOURCES", "applyToTask": False}]}}}
FINAL_STATUS = {"components": {"comp-notify": {"inputDefinitions": {"parameters": {
    "status": {"parameterType": "TASK_FINAL_STATUS"}}}}}}


@pytest.mark.parametrize("tag, expected", [
    ("2.16.0", (2, 16, 0)), ("v2.14.3", (2, 14, 3)), ("2.15.0-rc.1", (2, 15, 0)),
    ("2.17", (2, 17, 0)), ("unknown", None), ("", None), (None, None), ("dev", None),
    ("0a1b2c3d", None),
])
def test_versions_parse_or_are_unknown(tag, expected):
    assert parse_version(tag) == expected


def test_each_feature_is_found_in_the_compiled_spec():
    assert requirements({}, {}) == []
    platform = {"pipelineConfig": {**WORKSPACE["pipelineConfig"], **TTL["pipelineConfig"]}}
    spec = {"components": {**PASSTHROUGH["components"], **FINAL_STATUS["components"]}}
    names = [r.feature.name for r in requirements(spec, platform)]
    assert names == ["PipelineConfig time-to-live (retention)",
                     "TaskConfig pass-through (JobSet training)",
                     "run workspace (PipelineConfig.workspace)",
                     "exit handler with PipelineTaskFinalStatus (notifications)"]
    assert minimum(requirements({}, WORKSPACE)) == (2, 14)
    assert minimum(requirements(PASSTHROUGH, WORKSPACE)) == (2, 15)
    assert minimum(requirements({}, TTL)) == (2, 17)
    assert describe(requirements(PASSTHROUGH, {})).startswith("Kubeflow Pipelines >= 2.15")


def test_a_too_old_backend_is_refused_with_the_setting_that_avoids_the_feature():
    with pytest.raises(BackendTooOld) as refused:
        check("2.13.1", requirements({}, WORKSPACE), pipeline="training", host="http://kfp")
    message = str(refused.value)
    assert "\n" not in message
    assert "2.13.1" in message and "needs 2.14" in message
    assert "workspace.enabled: false" in message


def test_the_newest_missing_feature_is_named_first_and_the_others_follow():
    with pytest.raises(BackendTooOld) as refused:
        check("2.14.0", requirements(PASSTHROUGH, TTL), pipeline="training", host="h")
    message = str(refused.value)
    assert message.index("time-to-live") < message.index("TaskConfig")
    assert "retention.days unset" in message and "replicas: 1" in message


@pytest.mark.parametrize("tag", ["2.14.0", "2.16.0", "2.17.3"])
def test_new_enough_backends_pass(tag):
    assert check(tag, requirements(FINAL_STATUS, WORKSPACE), pipeline="p", host="h") == ""


@pytest.mark.parametrize("tag", ["unknown", "", "dev-build"])
def test_an_unknown_version_warns_instead_of_refusing(tag):
    warning = check(tag, requirements({}, TTL), pipeline="training", host="http://kfp")
    assert "cannot check" in warning and ">= 2.17" in warning


def test_run_ids_pick_their_target_and_api_times_parse():
    import datetime as dt

    from gkeflow.pipelines.settings.config import GkeflowConfig
    from gkeflow.pipelines.targets.runs import parse_time, target_of

    both = GkeflowConfig.model_validate({"targets": {
        "gke": {"host": "http://kfp"},
        "vertex": {"project": "my-project", "region": "us-central1",
                   "pipeline_root": "gs://my-bucket/r",
                   "service_account": "p@my-project.iam.gserviceaccount.com"}}})
    assert target_of(both, "projects/p/locations/l/pipelineJobs/j", None) == "vertex"
    assert target_of(both, "3f2a-uuid", None) == "gke"
    assert target_of(both, "3f2a-uuid", "vertex") == "vertex"
    assert parse_time("2026-03-02T02:00:00Z") == dt.datetime(2026, 3, 2, 2, tzinfo=dt.UTC)
    assert parse_time("1970-01-01T00:00:00Z") is None and parse_time("") is None
