"""``gkeflow.yaml``'s ``targets:`` and ``schedules:``: where `gkeflow submit` and `gkeflow
schedule` send pipelines (Kubeflow Pipelines on GKE, Vertex AI Pipelines) and the recurring
runs they make. The root model in :mod:`gkeflow.pipelines.settings.config` attaches these sections.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from gkeflow.components.did_you_mean import did_you_mean
from gkeflow.pipelines.settings.budget_config import BudgetSettings
from gkeflow.pipelines.settings.operations_config import NotificationSettings

#: The pipelines gkeflow builds, by short name (their builders: targets.compile.PIPELINES).
PIPELINE_NAMES = ("training", "prediction", "sweep", "fanout-prepare")


#: Targets that `gkeflow submit` and `gkeflow schedule` talk to.
REMOTE_TARGETS = ("gke", "vertex")
DEFAULT_ENVIRONMENT = "default"
NAME_RE = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")
_ENV_VAR_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_KMS_KEY_RE = re.compile(r"^projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+$")
_NETWORK_RE = re.compile(r"^projects/[^/]+/global/networks/[^/]+$")
_SERVICE_ACCOUNT_RE = re.compile(r"^[^@\s]+@[^@\s]+\.iam\.gserviceaccount\.com$")
_REGION_RE = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GkeAuth(_Strict):
    """How `gkeflow` authenticates to the Kubeflow Pipelines API on GKE.

    Exactly one of: ``token_env`` (a bearer token read from that environment variable),
    ``iap_client_id`` (Google credentials exchanged for an IAP ID token), ``google: true``
    (Google application-default credentials' access token), or nothing (no authentication,
    e.g. through ``kubectl port-forward``).
    """

    token_env: str | None = None
    iap_client_id: str | None = None
    google: bool = False

    @field_validator("token_env")
    @classmethod
    def _env_var_name(cls, value):
        if value is not None and not _ENV_VAR_RE.match(value):
            # not echoed: what is here by mistake is often the token itself
            raise ValueError("is not an environment variable name (letters, digits and _, "
                             "not starting with a digit); put the variable's name here, "
                             "never the token itself")
        return value

    @model_validator(mode="after")
    def _one_method(self):
        chosen = [k for k in ("token_env", "iap_client_id") if getattr(self, k)]
        if self.google:
            chosen.append("google")
        if len(chosen) > 1:
            raise ValueError(f"choose one authentication method, not {' and '.join(chosen)}")
        return self


class GkeTarget(_Strict):
    """Kubeflow Pipelines on GKE (the open-source KFP API, v2beta1)."""

    host: str
    namespace: str = "kubeflow"
    experiment: str = "gkeflow"
    ui_url: str | None = None
    service_account: str | None = None
    pipeline_root: str | None = None
    auth: GkeAuth = GkeAuth()
    timeout_s: float = Field(30.0, gt=0)
    retries: int = Field(4, ge=0, le=10)
    #: Machine family of the node pools CPU-only steps run on (their cost: requests x the
    #: family's per-vCPU and per-GiB rates); GKE's default node pools are e2.
    cpu_machine_family: Literal["e2", "n1", "n2", "n2d", "n4"] = "e2"
    #: An Autopilot cluster bills pods by their requests at Autopilot's rates.
    autopilot: bool = False

    @field_validator("host", "ui_url")
    @classmethod
    def _url(cls, value):
        if value is None:
            return value
        if "@" in re.sub(r"^\w+://", "", value).split("/", 1)[0]:
            # not echoed: a password in the URL would be printed wherever the host is
            raise ValueError("must not hold a user name or password; give credentials in "
                             "targets.gke.auth (e.g. token_env), never in the URL")
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError("not an http(s) URL (e.g. https://kfp.example.com)")
        return value.rstrip("/")

    @field_validator("experiment")
    @classmethod
    def _experiment(cls, value):
        if not value.strip():
            raise ValueError("must not be empty")
        return value


def normalise_gcs_uri(value: str) -> str:
    """``gs://bucket/path/`` -> ``gs://bucket/path``; raises ValueError for anything else."""
    value = value.strip()
    match = re.match(r"^gs://([a-z0-9][a-z0-9._-]{1,221}[a-z0-9])(/.*)?$", value)
    if not match:
        raise ValueError("not a gs://BUCKET[/PATH] URI")
    path = re.sub(r"/{2,}", "/", match.group(2) or "").rstrip("/")
    return f"gs://{match.group(1)}{path}"


class VertexTarget(_Strict):
    """Vertex AI Pipelines."""

    project: str
    region: str
    pipeline_root: str
    service_account: str
    network: str | None = None
    encryption_key: str | None = None
    labels: dict[str, str] = {}
    enable_caching: bool | None = None
    api_endpoint: str | None = None
    timeout_s: float = Field(60.0, gt=0)
    retries: int = Field(4, ge=0, le=10)

    @field_validator("project")
    @classmethod
    def _project(cls, value):
        if not re.match(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$", value):
            raise ValueError("not a Google Cloud project id "
                             "(6-30 lowercase letters, digits, hyphens)")
        return value

    @field_validator("region")
    @classmethod
    def _region(cls, value):
        if not _REGION_RE.match(value):
            raise ValueError("not a region (e.g. us-central1)")
        return value

    @field_validator("pipeline_root")
    @classmethod
    def _root(cls, value):
        return normalise_gcs_uri(value)

    @field_validator("service_account")
    @classmethod
    def _sa(cls, value):
        if not _SERVICE_ACCOUNT_RE.match(value):
            raise ValueError("not a service account e-mail "
                             "(NAME@PROJECT.iam.gserviceaccount.com)")
        return value

    @field_validator("network")
    @classmethod
    def _network(cls, value):
        if value is not None and not _NETWORK_RE.match(value):
            raise ValueError("not a network name "
                             "(projects/PROJECT_NUMBER/global/networks/NETWORK)")
        return value

    @field_validator("encryption_key")
    @classmethod
    def _key(cls, value):
        if value is not None and not _KMS_KEY_RE.match(value):
            raise ValueError("not a Cloud KMS key "
                             "(projects/P/locations/L/keyRings/R/cryptoKeys/K)")
        return value

    @field_validator("api_endpoint")
    @classmethod
    def _endpoint(cls, value):
        if value is not None and not re.match(r"^(https?://)?[^/\s]+$", value):
            raise ValueError("not a host[:port] or http(s)://host[:port]")
        return value


class Targets(_Strict):
    gke: GkeTarget | None = None
    vertex: VertexTarget | None = None


def _joined(value):
    """A YAML list of plain values (``candidates: [gbdt, linear]``, ``hidden_units: [64,
    32]``) as the comma-separated text the pipeline parameter takes; anything else as it
    is (a list holding mappings or lists is refused by the type below)."""
    if isinstance(value, list) and all(isinstance(v, str | int | float) and
                                       not isinstance(v, bool) for v in value):
        return ",".join(str(v) for v in value)
    return value


#: A pipeline parameter's value in gkeflow.yaml (a list of plain values is joined by commas).
ParameterValue = Annotated[bool | int | float | str, BeforeValidator(_joined)]


class ScheduleConfig(_Strict):
    """One recurring run of a pipeline on one target."""

    name: str
    pipeline: str = "training"
    target: Literal["gke", "vertex"]
    cron: str
    time_zone: str = "UTC"
    environment: str = DEFAULT_ENVIRONMENT
    parameters: dict[str, ParameterValue] = {}
    max_concurrency: int = Field(1, ge=1, le=10)
    catch_up: bool = False
    enabled: bool = True
    notifications: NotificationSettings | None = None  # else its environment's
    budget: BudgetSettings | None = None  # else its environment's (budget_config.py)

    @field_validator("name")
    @classmethod
    def _name(cls, value):
        if not NAME_RE.match(value):
            raise ValueError("must be 1-63 lowercase letters, digits and hyphens, "
                             "starting with a letter")
        return value

    @field_validator("pipeline")
    @classmethod
    def _pipeline(cls, value):
        if value not in PIPELINE_NAMES:
            raise ValueError(f"unknown pipeline {value!r}{did_you_mean(value, PIPELINE_NAMES)}; "
                             f"pipelines are {', '.join(PIPELINE_NAMES)}")
        return value

    @field_validator("cron")
    @classmethod
    def _cron(cls, value):
        from gkeflow.pipelines.settings.cron import CronError, CronExpression

        try:
            CronExpression.parse(value)
        except CronError as exc:
            raise ValueError(str(exc)) from None
        return " ".join(value.split())

    @field_validator("time_zone")
    @classmethod
    def _tz(cls, value):
        from gkeflow.pipelines.settings.cron import CronError, zone

        try:
            zone(value)
        except CronError as exc:
            raise ValueError(str(exc)) from None
        return value


def check_schedules(config):
    """``config`` (a :class:`~gkeflow.pipelines.settings.config.GkeflowConfig`) when every
    schedule's name is unique and its target and environment are configured; raises ValueError."""
    seen: set[str] = set()
    for index, schedule in enumerate(config.schedules):
        where = f"schedules.{index}"
        if schedule.name in seen:
            raise ValueError(f"{where}.name: {schedule.name!r} is used by another schedule; "
                             "schedule names must be unique")
        seen.add(schedule.name)
        if getattr(config.targets, schedule.target) is None:
            raise ValueError(f"{where}.target: {schedule.target!r} is not configured under "
                             f"targets.{schedule.target}")
        if (schedule.environment != DEFAULT_ENVIRONMENT
                and schedule.environment not in config.parameters):
            raise ValueError(
                f"{where}.environment: {schedule.environment!r} is not under parameters"
                f"{did_you_mean(schedule.environment, [DEFAULT_ENVIRONMENT, *config.parameters])}"
                f" (environments: {', '.join(config.parameters) or 'none'})")
    return config
