"""``tracking:`` in gkeflow.yaml: where runs are tracked, per environment (docs/tracking.md).

Example::

    tracking:
      default:                           # an environment of parameters: (or default)
        mlflow:
          experiment: penguins           # the MLflow experiment (created if missing)
          tracking_uri: https://mlflow.example.com   # local runs; GKE: the plugin's server
          credentials:
            token_env: MLFLOW_TOKEN      # names of variables, never their values
        vertex_experiments:
          experiment: penguins           # Vertex AI Experiments (scheduled runs too)

Imports nothing from gkeflow: the root model in :mod:`gkeflow.pipelines.settings.config`
attaches it.
"""

from __future__ import annotations

import os
import re
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from gkeflow.components.tracking.vertex_run import TENSORBOARD
from gkeflow.pipelines.settings.platforms import platform

DEFAULT_ENVIRONMENT = "default"
#: The KFP run API's plugin key and field (v2beta1 ``plugins_input``).
MLFLOW_PLUGIN = "mlflow"

_ENV_VAR = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_SECRET_MANAGER = re.compile(
    r"^projects/[^/\s]+/secrets/[A-Za-z0-9_-]+(/versions/[A-Za-z0-9_-]+)?$")
#: The keys of ``credentials.gke_secret`` and the MLflow variables they become in a step.
#: The Secret's keys and the variables a compiled GKE step gets them in: not MLflow's own
#: names, which Kubeflow Pipelines' MLflow plugin (2.17+) sets in the same pod; the step
#: copies them into MLflow's names only where the plugin set none
#: (``gkeflow.components.tracking.pipeline_run.load_credentials``).
GKE_SECRET_KEYS = {"token": "GKEFLOW_MLFLOW_TRACKING_TOKEN",
                   "username": "GKEFLOW_MLFLOW_TRACKING_USERNAME",
                   "password": "GKEFLOW_MLFLOW_TRACKING_PASSWORD"}
#: Vertex AI's rule for experiment names (aiplatform's metadata resource ids).
_VERTEX_EXPERIMENT = re.compile(r"^[a-z0-9][a-z0-9-]{0,127}$")


class MlflowCredentials(BaseModel):
    """Where the MLflow credentials come from, never the values themselves.

    Attributes:
        token_env, username_env, password_env: Local runs: names of environment variables
            holding a bearer token, or a user name and password; read when a run starts and
            handed to its steps as ``MLFLOW_TRACKING_TOKEN`` / ``_USERNAME`` / ``_PASSWORD``.
        gke_secret: Compiled GKE pipelines: a Kubernetes Secret in the run's namespace whose
            keys ``token`` (or ``username`` and ``password``) become those variables (unless
            Kubeflow Pipelines' MLflow plugin gives the step its own).
        vertex_secret: Compiled Vertex AI pipelines: a Secret Manager secret holding the
            token, ``projects/P/secrets/S[/versions/V]``, read by each step when it starts.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    token_env: str = ""
    username_env: str = ""
    password_env: str = ""
    gke_secret: str = ""
    vertex_secret: str = ""

    @field_validator("gke_secret")
    @classmethod
    def _k8s_secret(cls, value: str) -> str:
        if value and not _K8S_NAME.match(value):
            raise ValueError("not a Kubernetes Secret name (its keys token, "
                             "or username and password, hold the credentials)")
        return value

    @field_validator("vertex_secret")
    @classmethod
    def _secret_manager(cls, value: str) -> str:
        if value and not _SECRET_MANAGER.match(value):
            raise ValueError("is not projects/PROJECT/secrets/SECRET[/versions/VERSION] "
                             "(name the Secret Manager secret, never the token itself)")
        return value

    @field_validator("token_env", "username_env", "password_env")
    @classmethod
    def _name(cls, value: str) -> str:
        if value and not _ENV_VAR.match(value):
            # not echoed: what is here by mistake is often the secret itself
            raise ValueError("is not an environment variable name (letters, digits and _, "
                             "not starting with a digit); put the variable's name here, "
                             "never the secret itself")
        return value

    @model_validator(mode="after")
    def _one_method(self):
        if self.token_env and (self.username_env or self.password_env):
            raise ValueError("choose token_env or username_env/password_env, not both")
        if bool(self.username_env) != bool(self.password_env):
            raise ValueError("username_env and password_env go together")
        return self

    def environment(self, environ: dict[str, str] | None = None) -> dict[str, str]:
        """MLflow's own variables for the steps, from the named ones; a named variable that
        is unset raises ValueError naming it (never its value)."""
        env = os.environ if environ is None else environ
        wanted = {"MLFLOW_TRACKING_TOKEN": self.token_env,
                  "MLFLOW_TRACKING_USERNAME": self.username_env,
                  "MLFLOW_TRACKING_PASSWORD": self.password_env}
        out: dict[str, str] = {}
        for target, name in wanted.items():
            if not name:
                continue
            if not env.get(name):
                raise ValueError(f"tracking.mlflow.credentials names ${name}, which is not "
                                 f"set; export {name} or remove it from gkeflow.yaml")
            out[target] = env[name]
        return out


class MlflowTracking(BaseModel):
    """An MLflow experiment the runs of an environment are tracked in.

    Attributes:
        experiment: The experiment's name (created if missing).
        tracking_uri: The tracking server, ``http(s)://HOST[:PORT][/PATH]``: used by local
            runs (direct mode). On GKE the Kubeflow Pipelines plugin logs to the server it
            is configured with, and only the experiment name is sent.
        credentials: Where local runs read their credentials from.
        allow_local_uri: Let a loopback or link-local ``tracking_uri`` (127.0.0.0/8, ::1,
            localhost, 169.254.0.0/16) into pipelines compiled for GKE or Vertex AI, whose
            pods cannot reach it; only for a server port-forwarded into the cluster.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    experiment: str
    tracking_uri: str = ""
    credentials: MlflowCredentials = MlflowCredentials()
    allow_local_uri: bool = False

    def unreachable_from(self, target: str) -> str:
        """Why pods on ``target`` (gke, vertex) cannot reach ``tracking_uri``; '' when they
        may (local runs, a routable host, or ``allow_local_uri``)."""
        if not platform(target).cloud or not self.tracking_uri or self.allow_local_uri:
            return ""
        host = urlsplit(self.tracking_uri).hostname or ""
        kind = local_address_kind(host)
        if not kind:
            return ""
        where = "a GKE pod" if platform(target).kubernetes else "Vertex AI"
        return (f"tracking.mlflow.tracking_uri {self.tracking_uri} is a {kind} address, which "
                f"{where} cannot reach: give the server's address as the {target} runs see it, "
                "or set tracking.mlflow.allow_local_uri: true for a server port-forwarded into "
                "the cluster")

    @field_validator("experiment")
    @classmethod
    def _experiment(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("must not be empty")
        if len(value) > 500:
            raise ValueError("is longer than 500 characters")
        return value

    @field_validator("tracking_uri")
    @classmethod
    def _uri(cls, value: str) -> str:
        value = value.strip().rstrip("/")
        if not value:
            return value
        if "@" in re.sub(r"^\w+://", "", value).split("/", 1)[0]:
            # not echoed: a password in the URL would be printed wherever the URI is
            raise ValueError("must not hold a user name or password; name the variables "
                             "holding them in tracking.mlflow.credentials")
        if not re.match(r"^https?://[^/\s]+(/\S*)?$", value):
            raise ValueError("not an http(s) URL "
                             "(e.g. http://mlflow.example.com:5000)")
        return value


def local_address_kind(host: str) -> str:
    """"loopback" or "link-local" for such a host (name or address); '' for any other."""
    import ipaddress

    name = host.strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return "loopback"
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return ""
    if address.is_loopback:
        return "loopback"
    return "link-local" if address.is_link_local else ""


def mlflow_registry_uri(tracking_uri: str) -> str:
    """The MLflow Model Registry at a tracking server: ``mlflow://`` for http,
    ``mlflow+https://`` for https (the registry URIs of ``registry_uri``); "" for none."""
    if not tracking_uri:
        return ""
    scheme, rest = tracking_uri.split("://", 1)
    return f"{'mlflow+https' if scheme.lower() == 'https' else 'mlflow'}://{rest}"


class VertexExperiments(BaseModel):
    """A Vertex AI Experiments experiment that Vertex AI pipeline runs are submitted into."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    experiment: str
    #: The Vertex AI TensorBoard instance backing the experiment, where local and GKE runs
    #: write train-model's per-epoch curves as the run's time series; empty: final metrics
    #: only (Vertex AI keeps time series in a TensorBoard instance).
    tensorboard: str = ""

    @field_validator("experiment")
    @classmethod
    def _experiment(cls, value: str) -> str:
        if not _VERTEX_EXPERIMENT.match(value):
            raise ValueError("not a Vertex AI experiment name (1-128 lowercase "
                             "letters, digits and hyphens, starting with a letter or digit)")
        return value

    @field_validator("tensorboard")
    @classmethod
    def _tensorboard(cls, value: str) -> str:
        if value and not TENSORBOARD.match(value):
            raise ValueError("not a TensorBoard instance: give its resource "
                             "name, projects/PROJECT/locations/REGION/tensorboards/ID")
        return value


class TrackingSettings(BaseModel):
    """One environment's tracking: MLflow and/or Vertex AI Experiments."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mlflow: MlflowTracking | None = None
    vertex_experiments: VertexExperiments | None = None

    def plugins_input(self) -> dict:
        """The KFP run's ``plugins_input`` (KFP >= 2.17): the MLflow experiment, or {}."""
        if self.mlflow is None:
            return {}
        return {MLFLOW_PLUGIN: {"experiment_name": self.mlflow.experiment}}

    def describe(self, target: str) -> list[str]:
        """Where a run on ``target`` (local, gke, vertex) is tracked, one line each."""
        lines: list[str] = []
        mlflow = self.mlflow
        if mlflow is not None:
            where = f"MLflow experiment {mlflow.experiment!r}"
            uri = mlflow.tracking_uri
            if platform(target).kubernetes and uri:
                lines.append(f"tracking: {where}, through Kubeflow Pipelines' MLflow plugin "
                             f"(Kubeflow Pipelines >= 2.17), else by the steps themselves at "
                             f"{uri} (a parent run, a nested run per step)")
            elif platform(target).kubernetes:
                lines.append(f"tracking: {where}, through Kubeflow Pipelines' MLflow plugin "
                             "(its server; needs Kubeflow Pipelines >= 2.17)")
            elif uri:
                lines.append(f"tracking: {where} at {uri} (a parent run, a nested run per "
                             "step)")
            else:
                lines.append(f"tracking: not in MLflow: tracking.mlflow.tracking_uri is "
                             f"unset, which {target} runs need for {where}")
        experiments = self.vertex_experiments
        if experiments is not None:
            where = f"Vertex AI experiment {experiments.experiment!r}"
            if platform(target).managed:
                lines.append(f"tracking: {where} (the run is submitted into it; its "
                             "parameters and metrics appear in the experiment's comparison)")
            elif platform(target).local:
                lines.append(f"tracking: {where} (the run's parameters and metrics, as an "
                             "experiment run, when it ends)")
            else:
                lines.append(f"tracking: {where} (each step adds its parameters and metrics "
                             "to the run's experiment run; needs targets.vertex and Google "
                             "credentials in the pods)")
        return lines or ["tracking: off (no tracking: for this environment in gkeflow.yaml)"]


def tracking_for(tracking: dict[str, TrackingSettings], environment: str) -> TrackingSettings:
    """``tracking.<environment>``; nothing tracked when the environment has none."""
    return tracking.get(environment) or TrackingSettings()


def plan_lines(tracking: dict[str, TrackingSettings], target: str) -> list[str]:
    """What `gkeflow plan` says of tracking on ``target``: per environment of ``tracking:``."""
    if not tracking:
        return TrackingSettings().describe(target)
    return [line.replace("tracking:", f"tracking ({environment}):", 1)
            for environment, settings in tracking.items()
            for line in settings.describe(target)]


def check_tracking_environments(config):
    """Every ``tracking.<environment>`` is ``default`` or an environment of ``parameters:``;
    a TensorBoard instance lies in ``targets.vertex``'s project and region, as Vertex AI
    requires of an experiment's."""
    for environment, settings in config.tracking.items():
        if environment != DEFAULT_ENVIRONMENT and environment not in config.parameters:
            known = ", ".join(config.parameters) or "none"
            raise ValueError(f"tracking.{environment}: no such environment under "
                             f"parameters (environments: {known})")
        experiments = settings.vertex_experiments
        if experiments is None or not experiments.tensorboard:
            continue
        vertex = config.targets.vertex
        project, region, _ = TENSORBOARD.match(experiments.tensorboard).groups()
        if vertex is None or (project, region) != (vertex.project, vertex.region):
            where = (f"{vertex.project}/{vertex.region}" if vertex is not None
                     else "nowhere: targets.vertex is missing")
            raise ValueError(f"tracking.{environment}.vertex_experiments.tensorboard is in "
                             f"{project}/{region}, the experiment in {where}: Vertex AI "
                             "needs the TensorBoard in the experiment's project and region")
    return config
