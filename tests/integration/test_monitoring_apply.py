"""`gkeflow monitoring apply` against a strict fake of the Monitoring v3 AlertPolicy API."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner
from google.cloud import monitoring_v3
from google.protobuf import json_format

from gkeflow.pipelines.cli.main import main
from gkeflow.pipelines.settings.monitoring_config import MonitoringSettings
from gkeflow.pipelines.targets import monitoring
from gkeflow.pipelines.targets.transport import RemoteError, RetryPolicy
from tests.integration.fake_monitoring import FakeMonitoring

PROJECT = "test-project"
CHANNEL = f"projects/{PROJECT}/notificationChannels/42"
GKE = "gkeflow: idle GPUs in GKE training"
VERTEX = "gkeflow: idle GPUs in Vertex AI training"


@pytest.fixture
def fake():
    with FakeMonitoring(project=PROJECT, channels={CHANNEL}) as server:
        yield server


def _config(tmp_path, **settings):
    section = {"project": PROJECT, "notification_channels": [CHANNEL], **settings}
    path = tmp_path / "gkeflow.yaml"
    path.write_text(yaml.safe_dump({"monitoring": {"default": section}}))
    return path


def _apply(config, fake, *extra):
    result = CliRunner().invoke(main, ["monitoring", "apply", "--config", str(config),
                                       "--api-endpoint", fake.url, *extra])
    return result


def test_apply_twice_leaves_one_policy_per_name(tmp_path, fake):
    config = _config(tmp_path)
    first = _apply(config, fake)
    assert first.exit_code == 0, first.output
    assert first.output.count("created") == 2
    writes = len(fake.writes())
    second = _apply(config, fake)
    assert second.exit_code == 0, second.output
    assert second.output.count("unchanged") == 2
    assert len(fake.writes()) == writes  # nothing sent the second time
    assert [len(fake.named(GKE)), len(fake.named(VERTEX))] == [1, 1]
    assert fake.violations == []


def test_policies_watch_the_gpu_metrics_of_gkeflow_jobs(tmp_path, fake):
    assert _apply(_config(tmp_path), fake).exit_code == 0
    gke, = fake.named(GKE)
    threshold = gke["conditions"][0]["conditionThreshold"]
    assert 'metric.type = "kubernetes.io/container/accelerator/duty_cycle"' in threshold["filter"]
    assert 'resource.type = "k8s_container"' in threshold["filter"]
    # the label gkeflow puts on its JobSet pods (components/scaleout/jobset.py)
    assert 'metadata.user_labels."app.kubernetes.io/managed-by" = "gkeflow"' in \
        threshold["filter"]
    assert (threshold["comparison"], threshold["thresholdValue"], threshold["duration"]) == \
        ("COMPARISON_LT", 40.0, "1800s")
    assert gke["notificationChannels"] == [CHANNEL]
    assert gke["userLabels"]["managed-by"] == "gkeflow"
    vertex, = fake.named(VERTEX)
    threshold = vertex["conditions"][0]["conditionThreshold"]
    assert 'metric.type = "ml.googleapis.com/training/accelerator/utilization"' in \
        threshold["filter"]
    assert threshold["thresholdValue"] == 0.4  # a fraction on Vertex AI


def test_a_changed_threshold_is_patched_with_the_differing_fields_only(tmp_path, fake):
    assert _apply(_config(tmp_path), fake).exit_code == 0
    before = {p["name"] for p in fake.policies.values()}
    changed = _config(tmp_path, gpu_idle={"threshold_percent": 25})
    result = _apply(changed, fake)
    assert result.exit_code == 0, result.output
    patches = [path for method, path in fake.requests if method == "PATCH"]
    assert len(patches) == 2
    assert all(p.endswith("updateMask=documentation%2Cconditions") or
               p.endswith("updateMask=documentation,conditions") for p in patches), patches
    assert {p["name"] for p in fake.policies.values()} == before
    gke, = fake.named(GKE)
    assert gke["conditions"][0]["conditionThreshold"]["thresholdValue"] == 25.0
    assert fake.violations == []


def test_a_removed_channel_is_cleared(tmp_path, fake):
    assert _apply(_config(tmp_path), fake).exit_code == 0
    result = _apply(_config(tmp_path, notification_channels=[]), fake)
    assert result.exit_code == 0, result.output
    assert "notificationChannels" in result.output
    assert all(not p.get("notificationChannels") for p in fake.policies.values())


def test_policies_are_found_across_pages(tmp_path, fake):
    for i in range(5):  # someone else's policies, before and after ours in the listing
        fake.add({"displayName": f"other {i}", "combiner": "OR", "conditions": [{
            "displayName": "c", "conditionAbsent": {"filter": 'metric.type = "x"',
                                                    "duration": "120s"}}]})
    assert _apply(_config(tmp_path), fake).exit_code == 0
    assert _apply(_config(tmp_path), fake).exit_code == 0
    assert [len(fake.named(GKE)), len(fake.named(VERTEX))] == [1, 1]
    assert any("pageToken" in path for _, path in fake.requests)


def test_a_lost_create_answer_is_looked_up_not_repeated(tmp_path, fake):
    fake.lose_next_create()
    result = _apply(_config(tmp_path), fake)
    assert result.exit_code == 0, result.output
    assert [len(fake.named(GKE)), len(fake.named(VERTEX))] == [1, 1]


def test_429_and_503_are_retried(tmp_path, fake):
    fake.fail(429, method="GET")
    fake.fail(503, method="POST")
    result = _apply(_config(tmp_path), fake)
    assert result.exit_code == 0, result.output
    assert [len(fake.named(GKE)), len(fake.named(VERTEX))] == [1, 1]


def test_retries_are_bounded():
    with FakeMonitoring(project=PROJECT) as fake:
        fake.fail(503, times=100)
        policies = monitoring.AlertPolicies(PROJECT, fake.url, sleep=lambda s: None,
                                            policy=RetryPolicy(attempts=3, timeout_s=5))
        with pytest.raises(RemoteError, match="HTTP 503.*after 3 attempts"):
            policies.list()
        assert len(fake.requests) == 3


def test_a_foreign_policy_of_the_same_name_is_refused(tmp_path, fake):
    fake.add({"displayName": GKE, "combiner": "OR", "conditions": [{
        "displayName": "c", "conditionAbsent": {"filter": 'metric.type = "x"',
                                                "duration": "120s"}}]})
    result = _apply(_config(tmp_path), fake)
    assert result.exit_code == 1
    assert "without the label managed-by=gkeflow" in result.output
    assert "Traceback" not in result.output
    assert fake.writes() == []  # neither policy is written
    assert not fake.named(VERTEX)


def test_a_refusal_is_one_line(tmp_path, fake):
    fake.channels.clear()  # the configured channel does not exist
    result = _apply(_config(tmp_path), fake)
    assert result.exit_code == 1
    assert "does not exist" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_dry_run_sends_nothing_and_prints_valid_bodies(tmp_path, fake):
    result = _apply(_config(tmp_path), fake, "--dry-run")
    assert result.exit_code == 0, result.output
    assert fake.requests == []
    assert result.output.count("POST ") == 2 and "GET " in result.output
    bodies = monitoring.desired_policies(MonitoringSettings(notification_channels=[CHANNEL]),
                                         "default")
    for body in bodies:
        json_format.ParseDict(body, monitoring_v3.AlertPolicy.pb()(),
                              ignore_unknown_fields=False)
        assert json.dumps(body["displayName"]) in result.output


def test_dry_run_needs_no_credentials(tmp_path, monkeypatch):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    result = CliRunner().invoke(main, ["monitoring", "apply", "--config",
                                       str(_config(tmp_path)), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "https://monitoring.googleapis.com/v3/projects/test-project/alertPolicies" in \
        result.output


def test_environments_get_their_own_policies(tmp_path, fake):
    path = tmp_path / "gkeflow.yaml"
    path.write_text(yaml.safe_dump({
        "parameters": {"prod": {}},
        "monitoring": {"default": {"project": PROJECT},
                       "prod": {"project": PROJECT, "gpu_idle": {"threshold_percent": 60},
                                "vertex": {"enabled": False}}}}))
    assert _apply(path, fake).exit_code == 0
    result = _apply(path, fake, "--env", "prod")
    assert result.exit_code == 0, result.output
    assert len(fake.named(f"{GKE} (prod)")) == 1 and len(fake.named(GKE)) == 1
    assert not fake.named(f"{VERTEX} (prod)")
    missing = _apply(path, fake, "--env", "staging")
    assert missing.exit_code == 1 and "no monitoring.staging" in missing.output


def test_a_config_without_project_is_one_line(tmp_path):
    path = tmp_path / "gkeflow.yaml"
    path.write_text(yaml.safe_dump({"monitoring": {"default": {}}}))
    result = CliRunner().invoke(main, ["monitoring", "apply", "--config", str(path),
                                       "--dry-run"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "Error: no project for the alert policies: set monitoring.default.project (or "
        "targets.vertex.project) in gkeflow.yaml, or pass --project"]


def test_an_invalid_section_is_refused_before_any_request(tmp_path, fake):
    path = tmp_path / "gkeflow.yaml"
    path.write_text(yaml.safe_dump({"monitoring": {"default": {
        "project": PROJECT, "notification_channels": ["42"]}}}))
    result = _apply(path, fake)
    assert result.exit_code == 1
    assert "not a notification channel name" in result.output
    assert fake.requests == []
