"""``monitoring:`` in gkeflow.yaml: validated at the edge, one line per problem."""

from __future__ import annotations

import pytest
import yaml

from gkeflow.pipelines.settings.config import ConfigError, load_config


def _load(tmp_path, data):
    path = tmp_path / "gkeflow.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_config(path)


def test_defaults(tmp_path):
    settings = _load(tmp_path, {"monitoring": {"default": {}}}).monitoring["default"]
    assert settings.gpu_idle.threshold_percent == 40
    assert settings.gpu_idle.duration_minutes == 30
    assert settings.gke.pod_labels == {"app.kubernetes.io/managed-by": "gkeflow"}
    assert settings.vertex.enabled and settings.notification_channels == []


@pytest.mark.parametrize("section, fragment", [
    ({"notification_channels": ["my-channel"]}, "not a notification channel name"),
    ({"notification_channels": ["projects/p/notificationChannels/1"] * 2}, "named twice"),
    ({"gpu_idle": {"threshold_percent": 0}}, "threshold_percent"),
    ({"gpu_idle": {"threshold_percent": 140}}, "threshold_percent"),
    ({"gpu_idle": {"duration_minutes": 2000}}, "duration_minutes"),
    ({"gke": {"pod_labels": {}}}, "at least one pod label"),
    ({"gke": {"pod_labels": {"bad key!": "x"}}}, "not a Kubernetes label key"),
    ({"project": "X"}, "not a Google Cloud project id"),
    ({"api_endpoint": "monitoring.example.com"}, "scheme://host"),
    ({"threshold": 40}, "monitoring.default.threshold: unknown key; remove or rename it"),
])
def test_invalid_settings_are_refused(tmp_path, section, fragment):
    with pytest.raises(ConfigError, match=fragment):
        _load(tmp_path, {"monitoring": {"default": section}})


def test_environment_must_exist(tmp_path):
    with pytest.raises(ConfigError, match="monitoring.prod: no such environment"):
        _load(tmp_path, {"monitoring": {"prod": {}}})
    config = _load(tmp_path, {"parameters": {"prod": {}}, "monitoring": {"prod": {}}})
    assert "prod" in config.monitoring


def test_environment_names_fit_a_label_value(tmp_path):
    with pytest.raises(ConfigError, match="lower-case letters"):
        _load(tmp_path, {"parameters": {"Prod": {}}, "monitoring": {"Prod": {}}})
