"""``monitoring:`` in gkeflow.yaml: Cloud Monitoring alerts on idle GPUs (`gkeflow monitoring
apply`, :mod:`gkeflow.pipelines.targets.monitoring`).

Example::

    monitoring:
      default:                       # an environment of parameters: (or default)
        project: my-project          # default: targets.vertex.project
        notification_channels: [projects/my-project/notificationChannels/1234567890]
        gpu_idle:
          threshold_percent: 40      # alert below this mean GPU duty cycle ...
          duration_minutes: 30       # ... held this long
          alignment_minutes: 5       # each point is the mean over this window
        gke: {enabled: true}         # k8s_container duty cycle of gkeflow's labelled pods
        vertex: {enabled: true}      # Vertex AI custom training accelerator utilisation

Imports nothing from gkeflow: the root model in :mod:`gkeflow.pipelines.settings.config`
attaches it.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

DEFAULT_ENVIRONMENT = "default"
#: What GKE JobSet pods of gkeflow carry (components/scaleout/jobset.py,
#: pipelines/compute/engines/gke.py); GKE exports pod labels as metadata.user_labels.
GKE_POD_LABELS = {"app.kubernetes.io/managed-by": "gkeflow"}

_CHANNEL = re.compile(r"^projects/[^/\s]+/notificationChannels/[^/\s]+$")
_PROJECT = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
_ENVIRONMENT = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
# Kubernetes label: optional DNS-subdomain prefix, then a name of at most 63 characters.
_K8S_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_K8S_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


class GpuIdleSettings(BaseModel):
    """When a training job's GPUs count as idle.

    Attributes:
        threshold_percent: Alert when the mean GPU duty cycle is below this (0-100).
        duration_minutes: How long it must stay below before an incident opens.
        alignment_minutes: The window each point is averaged over.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    threshold_percent: float = Field(default=40.0, gt=0, le=100)
    duration_minutes: int = Field(default=30, ge=1, le=1440)
    alignment_minutes: int = Field(default=5, ge=1, le=1440)


class GkeAlertSettings(BaseModel):
    """The GKE policy: ``kubernetes.io/container/accelerator/duty_cycle`` of the pods that
    carry every label of ``pod_labels``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    pod_labels: dict[str, str] = Field(default_factory=lambda: dict(GKE_POD_LABELS))

    @field_validator("pod_labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        if not value:
            raise ValueError("name at least one pod label, or the alert would watch every "
                             "GPU container of the project (default: "
                             "app.kubernetes.io/managed-by: gkeflow)")
        for key, label in value.items():
            if not _K8S_LABEL_KEY.match(key) or len(key) > 316:
                raise ValueError(f"{key!r} is not a Kubernetes label key")
            if not _K8S_LABEL_VALUE.match(label):
                raise ValueError(f"label {key}: its value is not a Kubernetes label value")
        return value


class VertexAlertSettings(BaseModel):
    """The Vertex AI policy: ``ml.googleapis.com/training/accelerator/utilization`` of
    custom training jobs (resource ``cloudml_job``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True


class MonitoringSettings(BaseModel):
    """One environment's alert policies.

    Attributes:
        project: The project the policies live in (and whose metrics they watch); default:
            targets.vertex.project.
        api_endpoint: Another Monitoring endpoint than https://monitoring.googleapis.com.
        notification_channels: ``projects/P/notificationChannels/ID`` names; none means
            incidents show in the console only.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    project: str = ""
    api_endpoint: str = ""
    notification_channels: list[str] = []
    gpu_idle: GpuIdleSettings = GpuIdleSettings()
    gke: GkeAlertSettings = GkeAlertSettings()
    vertex: VertexAlertSettings = VertexAlertSettings()

    @field_validator("project")
    @classmethod
    def _project(cls, value: str) -> str:
        if value and not _PROJECT.match(value):
            raise ValueError("not a Google Cloud project id")
        return value

    @field_validator("api_endpoint")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        value = value.rstrip("/")
        if value and not re.match(r"^https?://[^/\s]+$", value):
            raise ValueError("not a scheme://host[:port] endpoint")
        return value

    @field_validator("notification_channels")
    @classmethod
    def _channels(cls, value: list[str]) -> list[str]:
        bad = [str(i) for i, channel in enumerate(value, 1) if not _CHANNEL.match(channel)]
        if bad:
            raise ValueError(f"not a notification channel name: entry {', '.join(bad)}; "
                             "use projects/PROJECT/notificationChannels/ID "
                             "(`gcloud beta monitoring channels list`)")
        if len(set(value)) != len(value):
            raise ValueError("a notification channel is named twice")
        return value


def check_monitoring_environments(config):
    """Every ``monitoring.<environment>`` is ``default`` or an environment of
    ``parameters:``, and usable as a label value."""
    for environment in config.monitoring:
        if not _ENVIRONMENT.match(environment):
            raise ValueError(f"monitoring.{environment}: an environment name is lower-case "
                             "letters, digits, '-' and '_', starting with a letter")
        if environment != DEFAULT_ENVIRONMENT and environment not in config.parameters:
            known = ", ".join(config.parameters) or "none"
            raise ValueError(f"monitoring.{environment}: no such environment under "
                             f"parameters (environments: {known})")
    return config
