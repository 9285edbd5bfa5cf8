"""``gkeflow.yaml``: configuration as code, validated at the edge with clear errors.

The file is optional; every key has a default in code. Sections:

``compute``
    per-step overrides of :class:`gkeflow.pipelines.compute.profiles.ComputeProfile` fields, e.g.::

        compute:
          train-model: {accelerator: nvidia-l4, accelerator_count: 1, spot: true}

``registry``
    the model registry ``gkeflow models`` uses (:class:`RegistryConfig`).

``targets``
    where `gkeflow submit` / `gkeflow schedule` send pipelines: ``gke`` (Kubeflow Pipelines
    API) and ``vertex`` (Vertex AI Pipelines).

``parameters``
    pipeline parameters per environment (``default``, ``dev``, ``prod``...).

``schedules``
    recurring runs: name, pipeline, target, 5-field cron, time zone, parameters, ...

``sweep``
    the hyperparameter search space of the sweep pipeline
    (:class:`gkeflow.pipelines.sweep_config.SweepConfig`).

``preparation``
    one pod, or fan-out over groups of input files in the training and sweep pipelines
    (:class:`gkeflow.pipelines.preparation.PreparationSettings`): fanout, groups, parallelism.

``workspace``
    the GKE run's volume for prepared shards and checkpoints when the pipeline root is not
    gs:// (:class:`gkeflow.pipelines.workspace_config.WorkspaceSettings`): size, storage_class,
    access_mode, enabled.

``notifications`` / ``retention``
    a webhook message when a run ends (per environment and per schedule) and how long
    finished runs keep their resources (:mod:`gkeflow.pipelines.operations_config`).

``monitoring``
    Cloud Monitoring alerts on idle GPUs per environment (`gkeflow monitoring apply`,
    :mod:`gkeflow.pipelines.monitoring_config`).

``tracking``
    where runs are tracked per environment: MLflow and/or Vertex AI Experiments
    (:mod:`gkeflow.pipelines.tracking_config`).
``budget``
    the most one run may cost at list prices, per environment and per schedule
    (:mod:`gkeflow.pipelines.budget_config`; docs/costs.md).

``images``
    the registry the pipelines' images are built into and pulled from, extra packages and
    the user's own code they carry, the lock file of built digests
    (:class:`gkeflow.pipelines.images_config.ImagesConfig`; `gkeflow images build`).

`gkeflow init` writes a commented example of every section.

Longer than most modules on purpose: gkeflow.yaml is one document, and its sections, their
cross-checks and the commented example `gkeflow init` writes stay side by side.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gkeflow.components.did_you_mean import did_you_mean
from gkeflow.pipelines.budget_config import BudgetSettings
from gkeflow.pipelines.deploy_config import DeployConfig
from gkeflow.pipelines.gcsfuse_config import GcsFuseSettings
from gkeflow.pipelines.images_config import BASE_DIR, ImagesConfig
from gkeflow.pipelines.monitoring_config import MonitoringSettings
from gkeflow.pipelines.operations_config import NotificationSettings, RetentionSettings
from gkeflow.pipelines.preparation_settings import PreparationSettings
from gkeflow.pipelines.sweep_config import SweepConfig
from gkeflow.pipelines.tracking_config import TrackingSettings
from gkeflow.pipelines.validation import validation_message
from gkeflow.pipelines.workspace_config import WorkspaceSettings

DEFAULT_CONFIG_FILE = Path("gkeflow.yaml")


#: The pipelines gkeflow builds, by short name (their builders: targets.compile.PIPELINES).
PIPELINE_NAMES = ("training", "prediction", "sweep", "fanout-prepare")


class ConfigError(ValueError):
    """``gkeflow.yaml`` is invalid; the message names the file, the key and the problem."""


#: The port of an MLflow tracking server unless registry.port says otherwise.
MLFLOW_PORT = 5000


class RegistryConfig(BaseModel):
    """``registry:``: which model registry ``gkeflow models`` talks to, and how to reach it.

    Example::

        registry:
          backend: vertex            # local | vertex | kubeflow | mlflow
          project: my-project
          location: europe-west4

    Secrets are not configuration: Vertex AI uses Application Default Credentials, the
    Kubeflow Model Registry client the token file named by KF_PIPELINES_SA_TOKEN_PATH, an
    MLflow server MLFLOW_TRACKING_TOKEN or MLFLOW_TRACKING_USERNAME/PASSWORD.
    """

    model_config = ConfigDict(extra="forbid")

    backend: Literal["local", "vertex", "kubeflow", "mlflow"] = "local"
    #: A full registry URI; when set it wins over the fields below.
    uri: str = ""
    #: local: the SQLite file.
    path: str = "gkeflow-output/registry.db"
    #: vertex: project, region, optional API endpoint and serving container.
    project: str = ""
    location: str = "us-central1"
    api_endpoint: str = ""
    serving_image: str = ""
    #: kubeflow, mlflow: the registry's REST address (mlflow: port 5000 unless set).
    host: str = ""
    port: int = Field(default=8080, ge=1, le=65535)
    secure: bool = False
    author: str = "gkeflow"

    def registry_uri(self) -> str:
        """The URI for :func:`gkeflow.components.register.backends.open_registry`."""
        if self.uri:
            return self.uri
        if self.backend == "vertex":
            if not self.project:
                raise ConfigError("registry.project is required for the vertex backend")
            return f"vertex://projects/{self.project}/locations/{self.location}"
        if self.backend == "kubeflow":
            if not self.host:
                raise ConfigError("registry.host is required for the kubeflow backend")
            scheme = "https" if self.secure else "http"
            return f"{scheme}://{self.host}:{self.port}"
        if self.backend == "mlflow":
            if not self.host:
                raise ConfigError("registry.host is required for the mlflow backend "
                                  "(or set registry.uri: mlflow://host:port)")
            port = self.port if "port" in self.model_fields_set else MLFLOW_PORT
            return f"{'mlflow+https' if self.secure else 'mlflow'}://{self.host}:{port}"
        return f"sqlite:///{self.path}"


class GkeflowConfig(BaseModel):
    """The whole of ``gkeflow.yaml``."""

    model_config = ConfigDict(extra="forbid")

    #: Written on every schedule `schedule apply` makes, so that ``--prune`` deletes only
    #: this file's; unset: the name of the folder holding gkeflow.yaml (see schedule_owner).
    name: str = Field("", validate_default=True)
    compute: dict[str, dict[str, Any]] = {}
    registry: RegistryConfig = RegistryConfig()
    targets: Targets = Field(default_factory=lambda: Targets())
    parameters: dict[str, dict[str, ParameterValue]] = {}
    schedules: list[ScheduleConfig] = []
    sweep: SweepConfig | None = None
    workspace: WorkspaceSettings = WorkspaceSettings()
    gcsfuse: GcsFuseSettings = GcsFuseSettings()  # buckets mounted: gcsfuse_config.py
    preparation: PreparationSettings = PreparationSettings()
    notifications: dict[str, NotificationSettings] = {}  # per environment (operations.py)
    retention: RetentionSettings = RetentionSettings()
    #: Validated even when absent, so its paths start from gkeflow.yaml's directory.
    images: ImagesConfig = Field(default={}, validate_default=True)
    _notify: NotificationSettings | None = PrivateAttr(default=None)  # operations.select
    _directory: Path | None = PrivateAttr(default=None)  # load_config: gkeflow.yaml's folder
    _tracking: TrackingSettings | None = PrivateAttr(default=None)  # operations.select
    deploy: DeployConfig = {}  # per environment: pipelines/deploy_config.py
    monitoring: dict[str, MonitoringSettings] = {}  # per environment: monitoring_config.py
    tracking: dict[str, TrackingSettings] = {}  # per environment: tracking_config.py
    budget: dict[str, BudgetSettings] = {}  # per environment: budget_config.py

    @field_validator("name")
    @classmethod
    def _name(cls, value: str, info: ValidationInfo) -> str:
        if value:
            if not _NAME_RE.match(value):
                raise ValueError(f"{value!r} must be 1-63 lowercase letters, digits and "
                                 "hyphens, starting with a letter")
            return value
        context = info.context if isinstance(info.context, dict) else {}
        base = context.get(BASE_DIR)
        return schedule_owner(Path(base).name) if base is not None else ""

    @property
    def schedule_owner(self) -> str:
        """The owner written on this file's schedules: ``name``, else ``default``."""
        return self.name or DEFAULT_OWNER

    @model_validator(mode="after")
    def _check_references(self):
        from gkeflow.pipelines.budget_config import check_budget_environments
        from gkeflow.pipelines.monitoring_config import check_monitoring_environments
        from gkeflow.pipelines.operations_config import check_environments
        from gkeflow.pipelines.tracking_config import check_tracking_environments

        return check_budget_environments(check_tracking_environments(
            check_monitoring_environments(check_environments(
                _targets_model_validator(self)))))

    def gke_workspace(self) -> WorkspaceSettings:
        """``workspace:``, off when unset and the GKE target's pipeline root is gs:// (shards
        and checkpoints then go to Cloud Storage); unset otherwise means on wherever a
        workspace can serve (not for JobSet training, see
        :class:`~gkeflow.pipelines.compute.workspace.PipelineStorage`)."""
        gke = self.targets.gke
        return self.workspace.for_root(gke.pipeline_root if gke else None)

    def compute_overrides(self, defaults) -> dict:
        """Per-step :class:`ComputeProfile` objects: ``defaults`` with this file's overrides
        (each profile validates its own, see ``ComputeProfile.configured``)."""
        profiles = dict(defaults)
        for step, changes in self.compute.items():
            if step not in profiles:
                raise ConfigError(
                    f"compute.{step}: unknown step{did_you_mean(step, profiles)}; steps are "
                    f"{', '.join(profiles)}"
                )
            profiles[step] = profiles[step].configured(step, changes)
        return profiles


DEFAULT_OWNER = "default"


def schedule_owner(text: str) -> str:
    """``text`` (a folder name) as a schedule owner: lowercase letters, digits and hyphens,
    starting with a letter, at most 63; ``default`` when nothing is left."""
    clean = re.sub(r"[^a-z0-9]+", "-", text.lower())
    clean = re.sub(r"^[^a-z]+", "", clean)[:63].strip("-")
    return clean or DEFAULT_OWNER


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (YAML would keep the
    last silently: an edit that seems to change a setting would not)."""

    def construct_mapping(self, node, deep=False):
        seen: set = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def _yaml_place(exc: yaml.YAMLError) -> str:
    """`` at line L, column C: what is wrong`` from a YAML error, on one line."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    return f"{where}: {problem}"


def load_config(path: Path | str | None = None) -> GkeflowConfig:
    """Read and validate ``path`` (default ``./gkeflow.yaml``); a missing default file is empty."""
    explicit = path is not None
    path = Path(path) if path is not None else DEFAULT_CONFIG_FILE
    if not path.exists():
        if explicit:
            raise ConfigError(f"config file not found: {path}")
        return GkeflowConfig()
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader) or {}
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}); save it as UTF-8"
                          ) from exc
    except IsADirectoryError as exc:
        raise ConfigError(f"{path} is a directory; name the gkeflow.yaml file") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML{_yaml_place(exc)}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(raw).__name__}")
    try:
        config = GkeflowConfig.model_validate(raw, context={BASE_DIR: path.resolve().parent})
    except ValidationError as exc:
        raise ConfigError(validation_message(exc, GkeflowConfig, f"{path}: ")) from exc
    config._directory = path.resolve().parent
    return config


def config_directory(config: GkeflowConfig) -> Path:
    """The folder of the gkeflow.yaml ``config`` was read from (files kept beside it, such as
    the refreshed price cache, live there); the current folder where there was none."""
    return config._directory or Path.cwd()


# ---------------------------------------------------------------------------------------------
# Targets, per-environment parameters and schedules (`gkeflow submit`, `gkeflow schedule`).
#
# These sections are optional and independent of ``compute``; they are declared as separate
# models and attached to :class:`GkeflowConfig` below so the file keeps one root model.


#: Targets that `gkeflow submit` and `gkeflow schedule` talk to.
REMOTE_TARGETS = ("gke", "vertex")
DEFAULT_ENVIRONMENT = "default"
_NAME_RE = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")
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
            raise ValueError(f"{value!r} is not an http(s) URL (e.g. https://kfp.example.com)")
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
        raise ValueError(f"{value!r} is not a gs://BUCKET[/PATH] URI")
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
            raise ValueError(f"{value!r} is not a Google Cloud project id "
                             "(6-30 lowercase letters, digits, hyphens)")
        return value

    @field_validator("region")
    @classmethod
    def _region(cls, value):
        if not _REGION_RE.match(value):
            raise ValueError(f"{value!r} is not a region (e.g. us-central1)")
        return value

    @field_validator("pipeline_root")
    @classmethod
    def _root(cls, value):
        return normalise_gcs_uri(value)

    @field_validator("service_account")
    @classmethod
    def _sa(cls, value):
        if not _SERVICE_ACCOUNT_RE.match(value):
            raise ValueError(f"{value!r} is not a service account e-mail "
                             "(NAME@PROJECT.iam.gserviceaccount.com)")
        return value

    @field_validator("network")
    @classmethod
    def _network(cls, value):
        if value is not None and not _NETWORK_RE.match(value):
            raise ValueError(f"{value!r} is not a network name "
                             "(projects/PROJECT_NUMBER/global/networks/NETWORK)")
        return value

    @field_validator("encryption_key")
    @classmethod
    def _key(cls, value):
        if value is not None and not _KMS_KEY_RE.match(value):
            raise ValueError(f"{value!r} is not a Cloud KMS key "
                             "(projects/P/locations/L/keyRings/R/cryptoKeys/K)")
        return value

    @field_validator("api_endpoint")
    @classmethod
    def _endpoint(cls, value):
        if value is not None and not re.match(r"^(https?://)?[^/\s]+$", value):
            raise ValueError(f"{value!r} is not a host[:port] or http(s)://host[:port]")
        return value


class Targets(_Strict):
    gke: GkeTarget | None = None
    vertex: VertexTarget | None = None


ParameterValue = bool | int | float | str


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
        if not _NAME_RE.match(value):
            raise ValueError(f"{value!r} must be 1-63 lowercase letters, digits and hyphens, "
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
        from gkeflow.pipelines.cron import CronError, CronExpression

        try:
            CronExpression.parse(value)
        except CronError as exc:
            raise ValueError(str(exc)) from None
        return " ".join(value.split())

    @field_validator("time_zone")
    @classmethod
    def _tz(cls, value):
        from gkeflow.pipelines.cron import CronError, zone

        try:
            zone(value)
        except CronError as exc:
            raise ValueError(str(exc)) from None
        return value


def _targets_model_validator(config: GkeflowConfig) -> GkeflowConfig:
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


# The root model refers to the models above by name; resolve those names now.
GkeflowConfig.model_rebuild()


#: What `gkeflow init` writes: every section, commented, valid as it stands.
EXAMPLE_CONFIG = '''\
# gkeflow.yaml: configuration as code for gkeflow (validated on every command).
# Keep it in git; secrets never go here, only the names of environment variables.

# Your container registry: `gkeflow images build` builds the CPU and GPU images into it
# (with your extra packages and code) and records their digests in the lock file; every
# compiled step then pulls them by digest. Paths are relative to this file.
# images:
#   registry: europe-west4-docker.pkg.dev/my-project/ml   # REGION-docker.pkg.dev/PROJECT/REPO
#   # tag: 0.1.0                         # default: the gkeflow version
#   # requirements: requirements.txt     # extra pip packages for every image
#   # include: [my_features, my_components.py]   # your packages/modules, importable in steps
#   # lock: gkeflow.lock                 # default: next to this file

# Per-step compute overrides (see `gkeflow compile --help`), e.g.:
# compute:
#   train-model: {accelerator: nvidia-l4, accelerator_count: 1, spot: true}
# Multi-node training on GKE (a JobSet; see docs/jobset.md): its pods run as their own
# Kubernetes service account, which needs no permission (deploy/rbac/jobset-worker.yaml):
#   train-model: {replicas: 4, worker_service_account: gkeflow-worker}

targets:
  # Kubeflow Pipelines on GKE: `gkeflow submit --target gke`.
  gke:
    host: https://kfp.example.com/pipeline   # the KFP API (and UI) URL
    namespace: kubeflow                      # your profile namespace on multi-user installs
    experiment: gkeflow                      # runs and schedules go here; created if missing
    # ui_url: https://kfp.example.com        # if the UI lives elsewhere than host
    # service_account: pipeline-runner       # Kubernetes service account for the runs
    # pipeline_root: gs://my-bucket/kfp-root
    auth:
      token_env: KFP_TOKEN                   # bearer token read from $KFP_TOKEN (never logged)
      # or: iap_client_id: 1234-abc.apps.googleusercontent.com   (IAP, Google credentials)
      # or: google: true                     (Google application-default credentials)
    timeout_s: 30                            # per request; 5xx/connection errors are retried
    retries: 4

  # Vertex AI Pipelines: `gkeflow submit --target vertex`.
  vertex:
    project: my-project
    region: us-central1
    pipeline_root: gs://my-bucket/vertex-root
    service_account: pipelines@my-project.iam.gserviceaccount.com
    # network: projects/123456789/global/networks/my-vpc   # private services access
    # encryption_key: projects/my-project/locations/us-central1/keyRings/ml/cryptoKeys/pipelines
    labels:                                  # sanitised to Vertex's label rules
      team: ml-platform
    # enable_caching: false                  # default: as compiled (per step)
    timeout_s: 60
    retries: 4

# The GKE run's volume for prepared shards and checkpoints (KFP >= 2.14 workspace), used
# when targets.gke.pipeline_root is not gs:// (KFP's default MinIO root): the launcher then
# stages only shard manifests, never the dataset. Size it for the prepared data (about the
# input compressed) plus checkpoints; ReadWriteMany (e.g. standard-rwx, Filestore) lets
# parallel sweep trials share it across nodes.
# workspace:
#   size: 200Gi
#   storage_class: standard-rwo
#   access_mode: ReadWriteOnce
#   # enabled: false                       # default: on unless the GKE root is gs://

# Data preparation in the training and sweep pipelines: one pod (default), or fanned out
# over groups of input files (or bq:// row ranges) for inputs of many millions of rows.
# preparation:
#   fanout: true
#   groups: 16                           # default of the prepare_groups pipeline parameter
#   parallelism: 8                       # group pods at once

# Serving the blessed, registered model at the end of training (docs/serving.md), per
# environment: a canary share first, then `gkeflow deploy promote`.
# deploy:
#   prod:
#     enabled: true
#     traffic: 10                        # percent for the new version; the rest stays put
#     keep: 1                            # previous versions kept deployed after a promote
#     min_replicas: 1
#     max_replicas: 2
#     # storage_root: gs://my-bucket/serving   # GKE: where KServe reads the model from

# When a run ends, a webhook message or (Vertex AI) email (docs/operating.md): per
# environment, or per schedule with its own notifications:. The URL lives in a secret.
# notifications:
#   prod:
#     when: failure                      # failure | success | always
#     webhook:
#       format: slack                    # generic | slack | google-chat
#       gke_secret: gkeflow-webhook      # Kubernetes Secret with key url
#       vertex_secret: projects/my-project/secrets/gkeflow-webhook
#   # or, Vertex AI only, mail on every end of a run: when: always, email: {recipients: [...]}
# retention:
#   days: 7                              # GKE: finished runs' pods and workspace (KFP >= 2.17)

# Cloud Monitoring alerts on idle GPUs, per environment (docs/costs.md):
# `gkeflow monitoring apply [--env prod]`.
# monitoring:
#   default:
#     project: my-project                # default: targets.vertex.project
#     notification_channels: [projects/my-project/notificationChannels/1234567890]
#     gpu_idle: {threshold_percent: 40, duration_minutes: 30}

# Experiment tracking per environment (docs/tracking.md): MLflow (local runs and the steps of
# compiled pipelines log to tracking_uri; GKE runs through Kubeflow Pipelines >= 2.17's MLflow
# plugin where it is there) and Vertex AI Experiments (Vertex AI runs are submitted into it,
# local runs log their parameters and metrics to it).
# tracking:
#   default:
#     mlflow:
#       experiment: penguins
#       tracking_uri: http://127.0.0.1:5000
#       # credentials: {token_env: MLFLOW_TOKEN}   # or username_env + password_env
#       # GKE: {gke_secret: mlflow-credentials}; Vertex AI: {vertex_secret: projects/P/secrets/S}
#     vertex_experiments:
#       experiment: penguins

# The most one run may cost at list prices, per environment (a schedule may set its own):
# `submit` and `schedule apply` refuse a run whose ceiling exceeds it unless --over-budget
# (docs/costs.md).
# budget:
#   default: {max_run_usd: 50}

# Pipeline parameters per environment: `gkeflow submit --env prod`.
# "default" is used when no --env is given; --param KEY=VALUE wins over these.
parameters:
  default:
    epochs: 20
  dev:
    epochs: 2
    min_accuracy: 0.5
  prod:
    epochs: 50
    min_accuracy: 0.9
    model_name: penguins-classifier

# Recurring runs: `gkeflow schedule apply` makes these real (idempotent).
# cron: 5 fields (minute hour day-of-month month day-of-week) in time_zone.
# On GKE, KFP runs crons in UTC: the time zone is converted with its current UTC offset;
# re-run `gkeflow schedule apply` after a daylight-saving change (see pipelines/cron.py).
schedules:
  - name: nightly-training
    pipeline: training
    target: vertex
    cron: "0 2 * * *"
    time_zone: Europe/Berlin
    environment: prod
    parameters: {}                           # on top of parameters.<environment>
    max_concurrency: 1
    catch_up: false                          # do not backfill runs missed while paused
    enabled: true
  - name: weekly-training-gke
    target: gke
    cron: "30 6 * * 1"
    time_zone: UTC
    environment: prod
  - name: nightly-scoring                    # score the day's rows with the champion
    pipeline: prediction
    target: vertex
    cron: "0 4 * * *"
    time_zone: Europe/Berlin
    parameters:
      data_uri: gs://my-bucket/incoming/*.csv
      key_column: id
      output_uri: bq://my-project.scoring.penguins
      bq_write_mode: append
'''
