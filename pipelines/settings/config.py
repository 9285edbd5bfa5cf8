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
    (:class:`gkeflow.pipelines.settings.sweep_config.SweepConfig`).

``preparation``
    one pod, or fan-out over groups of input files in the training and sweep pipelines
    (:class:`gkeflow.pipelines.definitions.preparation.PreparationSettings`): fanout, groups,
    parallelism.

``candidates``
    the model families ``model_type: auto`` trains, each in a task of the training pipeline
    beside the others, e.g. ``candidates: [gbdt, mlp]`` (default: gbdt, mlp, linear; see
    :mod:`gkeflow.pipelines.definitions.candidates_stage`).

``workspace``
    the GKE run's volume for prepared shards and checkpoints when the pipeline root is not
    gs:// (:class:`gkeflow.pipelines.settings.workspace_config.WorkspaceSettings`): size,
    storage_class, access_mode, enabled.

``gcsfuse`` / ``lustre``
    Cloud Storage buckets and existing Managed Lustre instances mounted into the steps that
    use them (:mod:`gkeflow.pipelines.settings.gcsfuse_config`,
    :mod:`gkeflow.pipelines.settings.lustre_config`).

``notifications`` / ``retention``
    a webhook message when a run ends (per environment and per schedule) and how long
    finished runs keep their resources (:mod:`gkeflow.pipelines.settings.operations_config`).

``monitoring``
    Cloud Monitoring alerts on idle GPUs per environment (`gkeflow monitoring apply`,
    :mod:`gkeflow.pipelines.settings.monitoring_config`).

``tracking``
    where runs are tracked per environment: MLflow and/or Vertex AI Experiments
    (:mod:`gkeflow.pipelines.settings.tracking_config`).
``budget``
    the most one run may cost at list prices, per environment and per schedule
    (:mod:`gkeflow.pipelines.settings.budget_config`; docs/costs.md).
``billing``
    the Cloud Billing export to BigQuery that `gkeflow runs cost` reads
    (:mod:`gkeflow.pipelines.settings.billing_config`).

``images``
    the registry the pipelines' images are built into and pulled from, extra packages and
    the user's own code they carry, the lock file of built digests
    (:class:`gkeflow.pipelines.settings.images_config.ImagesConfig`; `gkeflow images build`).

`gkeflow init` writes a commented example of every section
(:mod:`gkeflow.pipelines.settings.config_example`); ``targets`` and ``schedules`` are modelled in
:mod:`gkeflow.pipelines.settings.remote_config`.
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
from gkeflow.pipelines.settings.billing_config import BillingSettings
from gkeflow.pipelines.settings.budget_config import BudgetSettings
from gkeflow.pipelines.settings.config_example import EXAMPLE_CONFIG as EXAMPLE_CONFIG
from gkeflow.pipelines.settings.deploy_config import DeployConfig
from gkeflow.pipelines.settings.gcsfuse_config import GcsFuseSettings
from gkeflow.pipelines.settings.images_config import BASE_DIR, ImagesConfig
from gkeflow.pipelines.settings.lustre_config import LustreSettings
from gkeflow.pipelines.settings.monitoring_config import MonitoringSettings
from gkeflow.pipelines.settings.operations_config import NotificationSettings, RetentionSettings
from gkeflow.pipelines.settings.preparation_settings import PreparationSettings
from gkeflow.pipelines.settings.remote_config import (
    NAME_RE,
    ParameterValue,
    ScheduleConfig,
    Targets,
    check_schedules,
)
from gkeflow.pipelines.settings.sweep_config import SweepConfig
from gkeflow.pipelines.settings.tracking_config import TrackingSettings
from gkeflow.pipelines.settings.validation import validation_message
from gkeflow.pipelines.settings.workspace_config import WorkspaceSettings

DEFAULT_CONFIG_FILE = Path("gkeflow.yaml")


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
        return {"vertex": self._vertex_uri, "kubeflow": self._kubeflow_uri,
                "mlflow": self._mlflow_uri}.get(self.backend, self._local_uri)()

    def _vertex_uri(self) -> str:  # Vertex AI Model Registry
        if not self.project:
            raise ConfigError("registry.project is required for the vertex backend")
        return f"vertex://projects/{self.project}/locations/{self.location}"

    def _kubeflow_uri(self) -> str:  # Kubeflow Model Registry
        if not self.host:
            raise ConfigError("registry.host is required for the kubeflow backend")
        scheme = "https" if self.secure else "http"
        return f"{scheme}://{self.host}:{self.port}"

    def _local_uri(self) -> str:
        return f"sqlite:///{self.path}"

    def _mlflow_uri(self) -> str:  # an MLflow server's Model Registry
        if not self.host:
            raise ConfigError("registry.host is required for the mlflow backend "
                              "(or set registry.uri: mlflow://host:port)")
        port = self.port if "port" in self.model_fields_set else MLFLOW_PORT
        return f"{'mlflow+https' if self.secure else 'mlflow'}://{self.host}:{port}"


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
    lustre: LustreSettings = LustreSettings()  # Managed Lustre mounted: lustre_config.py
    preparation: PreparationSettings = PreparationSettings()
    #: model_type auto's families, each a task of the training pipeline (default: gbdt, mlp,
    #: linear; one family: one train-model task)
    candidates: tuple[str, ...] | None = None
    notifications: dict[str, NotificationSettings] = {}  # per environment (operations.py)
    retention: RetentionSettings = RetentionSettings()
    #: Validated even when absent, so its paths start from gkeflow.yaml's directory.
    images: ImagesConfig = Field(default={}, validate_default=True)
    _notify: NotificationSettings | None = PrivateAttr(default=None)  # operations.select
    _directory: Path | None = PrivateAttr(default=None)  # load_config: gkeflow.yaml's folder
    _tracking: TrackingSettings | None = PrivateAttr(default=None)  # operations.select
    _run_arguments: dict | None = PrivateAttr(default=None)  # for_run: one run's parameters
    deploy: DeployConfig = {}  # per environment: pipelines/settings/deploy_config.py
    monitoring: dict[str, MonitoringSettings] = {}  # per environment: monitoring_config.py
    tracking: dict[str, TrackingSettings] = {}  # per environment: tracking_config.py
    budget: dict[str, BudgetSettings] = {}  # per environment: budget_config.py
    billing: BillingSettings | None = None  # the billing export: billing_config.py

    @field_validator("name")
    @classmethod
    def _name(cls, value: str, info: ValidationInfo) -> str:
        if value:
            if not NAME_RE.match(value):
                raise ValueError("must be 1-63 lowercase letters, digits and "
                                 "hyphens, starting with a letter")
            return value
        context = info.context if isinstance(info.context, dict) else {}
        base = context.get(BASE_DIR)
        return schedule_owner(Path(base).name) if base is not None else ""

    @field_validator("candidates", mode="before")
    @classmethod
    def _candidates(cls, value):
        from gkeflow.components.train.families import parse_candidates

        if value is None:
            return None
        if isinstance(value, str):
            value = value.split(",")
        if not isinstance(value, (list, tuple)) or not value:
            raise ValueError("a list of model families, e.g. [gbdt, mlp, linear]")
        return parse_candidates(",".join(str(v) for v in value))

    def training_families(self, arguments: dict | None = None) -> tuple[str, ...]:
        """The families the training pipeline gives a task each (see
        :func:`~gkeflow.pipelines.settings.parameters.run_families`): ``arguments``' (by
        default those of :meth:`for_run`, else the ``default`` environment's parameters)
        with ``candidates:``."""
        from gkeflow.pipelines.settings.parameters import run_families

        given = arguments
        if given is None:
            given = (self._run_arguments if self._run_arguments is not None
                     else self.parameters.get("default", {}))
        return run_families(given, self.candidates)

    def for_run(self, arguments: dict) -> GkeflowConfig:
        """This configuration compiling for one run (a submission, a schedule) with
        ``arguments``: its model type, candidates and module decide the training pipeline's
        candidate steps, so a run asking for one family starts no step for the others."""
        copy = self.model_copy()
        copy._run_arguments = dict(arguments)
        return copy

    @property
    def schedule_owner(self) -> str:
        """The owner written on this file's schedules: ``name``, else ``default``."""
        return self.name or DEFAULT_OWNER

    @model_validator(mode="after")
    def _check_references(self):
        from gkeflow.pipelines.settings.budget_config import check_budget_environments
        from gkeflow.pipelines.settings.monitoring_config import check_monitoring_environments
        from gkeflow.pipelines.settings.operations_config import check_environments
        from gkeflow.pipelines.settings.tracking_config import check_tracking_environments

        overlap = self.lustre.overlapping({b.path: f"gcsfuse bucket {b.bucket}"
                                           for b in self.gcsfuse.buckets})
        if overlap:
            raise ValueError(overlap)
        return check_budget_environments(check_tracking_environments(
            check_monitoring_environments(check_environments(
                check_schedules(self)))))

    def platform_of(self, target: str) -> str:
        """The platform a run on ``target`` uses: the one its ``targets:`` section selects
        (``targets.gke.autopilot: true``: GKE Autopilot), else ``target`` itself."""
        from gkeflow.pipelines.settings.platforms import platform_for

        return platform_for(target, getattr(self.targets, target, None)).name

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
        fix = ("; YAML indents with spaces, never tabs: replace the tab with spaces"
               if "'\\t'" in str(exc) or "\t" in str(getattr(exc, "problem", "")) else "")
        raise ConfigError(f"{path}: not valid YAML{_yaml_place(exc)}{fix}") from exc
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
