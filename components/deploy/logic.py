"""The deploy step over plain values: check, then serve on the target, then describe.

:func:`deploy_for_pipeline` runs, in this order, and changes nothing when an earlier part
fails:

1. the settings are parsed and checked (:class:`DeploySettings`);
2. the servability check (:func:`~gkeflow.components.deploy.servable.check_servable`)
   answers the evaluation's sample rows through TensorFlow Serving's REST mapping;
3. the registered version is deployed with a canary share of the traffic:
   ``local``: recorded for the loopback stand-in (:mod:`.local_server`);
   ``vertex``: on a Vertex AI Endpoint (:mod:`.vertex_endpoint`);
   ``gke``: the model is copied to ``<storage_root>/<endpoint>-v<N>/<N>/`` (the layout
   TensorFlow Serving reads) and served by a KServe InferenceService (:mod:`.kserve`);
4. the outcome names the endpoint or InferenceService, the version and the split, for the
   step's output artifact and its Markdown summary.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from gkeflow.components.deploy import traffic as tr

TARGETS = ("local", "vertex", "gke")


class DeploySettingsError(ValueError):
    """Deploy settings that cannot work; the message names the field and the fix."""


@dataclass(frozen=True)
class DeploySettings:
    """How the deploy step serves a model (gkeflow.yaml ``deploy:``, as JSON in the step).

    Attributes:
        endpoint: Vertex AI endpoint / InferenceService / local endpoint name; empty: the
            model name.
        traffic: Percent of requests the new version gets (the first version gets 100).
        keep: Previous versions kept deployed after a promotion, for a rollback.
        min_replicas: Serving replicas at least.
        max_replicas: Serving replicas at most (autoscaling).
        kserve_mode: serverless (canaryTrafficPercent) or standard (spec.canary[]).
        namespace: Kubernetes namespace of the InferenceService; empty: the step's own.
        storage_root: gs:// (or s3://) prefix the model is copied under for KServe; empty:
            next to the model artifact when that is in Cloud Storage.
        service_account: Service account the serving replicas run as; empty: the default.
        api_endpoint: Vertex AI API endpoint other than the regional one.
    """

    endpoint: str = ""
    traffic: int = 10
    keep: int = 1
    min_replicas: int = 1
    max_replicas: int = 1
    kserve_mode: str = "serverless"
    namespace: str = ""
    storage_root: str = ""
    service_account: str = ""
    api_endpoint: str = ""

    def __post_init__(self):
        try:
            tr.check_percent(self.traffic)
        except tr.TrafficError as exc:
            raise DeploySettingsError(f"deploy.traffic: {exc}") from None
        if not isinstance(self.keep, int) or self.keep < 0:
            raise DeploySettingsError(f"deploy.keep must be 0 or more; got {self.keep!r}")
        if self.min_replicas < 1 or self.max_replicas < self.min_replicas:
            raise DeploySettingsError(
                f"deploy: 1 <= min_replicas ({self.min_replicas}) <= max_replicas "
                f"({self.max_replicas}) is required")
        if self.kserve_mode not in ("serverless", "standard"):
            raise DeploySettingsError(f"deploy.kserve_mode must be serverless or standard; "
                                      f"got {self.kserve_mode!r}")
        if self.storage_root and not self.storage_root.startswith(("gs://", "s3://")):
            raise DeploySettingsError(f"deploy.storage_root must be gs://... or s3://... (what "
                                      f"KServe's storage initializer reads); got "
                                      f"{self.storage_root!r}")

    @classmethod
    def from_json(cls, text: str, **overrides) -> DeploySettings:
        try:
            values = json.loads(text) if text and text.strip() else {}
        except ValueError as exc:
            raise DeploySettingsError(f"deploy settings are not JSON: {exc}") from None
        if not isinstance(values, dict):
            raise DeploySettingsError("deploy settings must be a JSON object")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise DeploySettingsError(f"unknown deploy setting(s) {', '.join(unknown)}; valid: "
                                      f"{', '.join(sorted(known))}")
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


@dataclass
class DeployOutcome:
    """What the step reports."""

    target: str
    endpoint: str  # the name people use
    resource: str  # the target's name for it (Vertex resource, namespace/name, a file)
    model_name: str
    model_version: int
    split: dict[str, int]
    servability: str
    notes: list[str] = field(default_factory=list)
    serving_image: str = ""  # the container that answers ("" when not known)

    @property
    def split_text(self) -> str:
        return tr.describe(self.split)

    def metadata(self) -> dict[str, Any]:
        return {"target": self.target, "endpoint": self.endpoint, "resourceName": self.resource,
                "modelName": self.model_name, "modelVersion": self.model_version,
                "trafficSplit": dict(self.split), "servability": self.servability}

    def markdown(self) -> str:
        where = {"vertex": "Vertex AI Endpoint", "gke": "KServe InferenceService",
                 "local": "local endpoint (loopback stand-in)"}[self.target]
        rows = "\n".join(f"| {k} | {v}% |" for k, v in sorted(
            self.split.items(), key=lambda kv: -kv[1]))
        notes = "".join(f"\n- {n}" for n in self.notes)
        return (f"# Deployed {self.model_name} version {self.model_version}\n\n"
                f"- **Where**: {where} `{self.endpoint}` (`{self.resource}`)\n"
                f"- **Check**: {self.servability}\n{notes}\n\n"
                f"| serving | traffic |\n|---|---|\n{rows}\n")


def load_sample(evaluation_path: Path) -> dict | None:
    """``sample_predictions`` of the evaluation step's evaluation.json."""
    path = Path(evaluation_path)
    if path.is_dir():
        path = path / "evaluation.json"
    if not path.exists():
        return None
    return json.loads(path.read_text(encoding="utf-8")).get("sample_predictions")


def tf_version_of(model_dir: Path) -> str:
    from gkeflow.components.deploy.servable import METADATA_FILE

    metadata = json.loads((Path(model_dir) / METADATA_FILE).read_text(encoding="utf-8"))
    return str(metadata.get("framework_version") or "")


def serving_base(model_uri: str, settings: DeploySettings, endpoint: str, version: int) -> str:
    """Where KServe reads the model from: ``<root>/<endpoint>-v<N>`` (holding ``<N>/``)."""
    root = settings.storage_root.rstrip("/")
    if not root:
        if not model_uri.startswith("gs://"):
            raise DeploySettingsError(
                f"the model is at {model_uri!r}, which KServe cannot read: set deploy."
                "storage_root to a gs:// prefix the serving pods can read")
        root = model_uri.rstrip("/").rsplit("/", 1)[0] + "/serving"
    return f"{root}/{endpoint}-v{version}"


def deploy_for_pipeline(
    model_path: str,
    evaluation_path: str,
    registered: dict[str, Any],
    target: str,
    registry_uri: str,
    serving_compute: str,
    settings: str,
    traffic: int = 0,
    *,
    echo=print,
    kube_api=None,
    credentials=None,
) -> DeployOutcome:
    """The deploy step: check, deploy the registered version, describe.

    Args:
        model_path: Local copy of the SavedModel.
        evaluation_path: The evaluation step's evaluation.json (its sample predictions).
        registered: The registration step's output metadata (modelName, version,
            resourceName, modelUri, backend).
        target: local, vertex or gke.
        registry_uri: The registry the version is in (local deployments live beside it).
        serving_compute: JSON from the deploy-model compute profile: ``vertex`` (machine)
            or ``gke`` (resources, node_selector, tolerations).
        settings: :class:`DeploySettings` as JSON.
        traffic: Percent for the new version; 0: the settings' traffic.
        echo: Progress lines.
        kube_api: A ``kubernetes`` ApiClient (default: in-cluster configuration).
        credentials: Vertex AI credentials (default: the environment's).
    """
    from gkeflow.components.deploy.servable import check_servable

    if target not in TARGETS:
        raise DeploySettingsError(f"unknown deploy target {target!r}; use {', '.join(TARGETS)}")
    config = DeploySettings.from_json(settings, traffic=traffic or None)
    compute = json.loads(serving_compute or "{}")
    if not registered.get("modelName") or int(registered.get("version") or 0) < 1:
        raise DeploySettingsError("the registered model names no model and version; deploy "
                                  "runs after register_model")
    report = check_servable(Path(model_path), load_sample(Path(evaluation_path)),
                            serving_tf_version=serving_tf_version(target, registered,
                                                                  Path(model_path), compute))
    echo(report.line)
    return deploy_version(target, Path(model_path), registered, config, compute,
                          registry_uri, report.line, echo=echo, kube_api=kube_api,
                          credentials=credentials)


def deploy_tracked(model_path: str, evaluation_path: str, registered: dict[str, Any],
                   target: str, registry_uri: str, serving_compute: str, settings: str,
                   traffic: int = 0) -> DeployOutcome:
    """:func:`deploy_for_pipeline` with its outcome (or its error, then raised again) logged
    where the run is tracked: the deploy components' shared body."""
    from gkeflow.components.tracking.more_steps import track_deployment

    try:
        outcome = deploy_for_pipeline(
            model_path=model_path, evaluation_path=evaluation_path, registered=registered,
            target=target, registry_uri=registry_uri, serving_compute=serving_compute,
            settings=settings, traffic=traffic)
    except Exception as exc:
        track_deployment(target=target, registered=registered, traffic=traffic, error=exc)
        raise
    track_deployment(outcome, target=target, registered=registered, traffic=traffic)
    return outcome


def serving_tf_version(target: str, registered: dict[str, Any], model_path: Path,
                       compute: dict[str, Any]) -> str:
    """The TensorFlow of the runtime that will answer: the registered Vertex AI container's,
    KServe's ``tensorflow/serving`` release, this machine's for the local stand-in; "" when
    unknown (a container of your own).

    Raises:
        DeploySettingsError: the model's TensorFlow has no known serving runtime.
    """
    from gkeflow.components.serving.runtimes import (
        RuntimeMismatch,
        image_tf_version,
        kserve_runtime_version,
    )

    if target == "vertex":
        return image_tf_version(str(registered.get("servingImage") or ""))
    if target == "gke":
        try:
            return kserve_runtime_version(tf_version_of(model_path), gpu=False)
        except RuntimeMismatch as exc:
            raise DeploySettingsError(str(exc)) from None
    import tensorflow as tf

    return tf.__version__


def deploy_version(target: str, model_path: Path, registered: dict[str, Any],
                   config: DeploySettings, compute: dict[str, Any], registry_uri: str,
                   checked: str, *, echo=print, kube_api=None, credentials=None,
                   policy=None) -> DeployOutcome:
    """Deploy a checked, registered version on ``target`` (see :func:`deploy_for_pipeline`);
    ``policy``: how remote calls are retried (default: the steps' policy, from the
    environment)."""
    model_name = str(registered.get("modelName") or "")
    version = int(registered.get("version") or 0)
    endpoint = config.endpoint or model_name
    if target == "local":
        from gkeflow.components.deploy.local_server import LocalEndpoints
        from gkeflow.components.register.local_registry import registry_path

        root = registry_path(registry_uri).resolve().parent / "deployments"
        model_dir = Path(str(registered.get("modelUri") or model_path))
        if not (model_dir / "saved_model.pb").exists():
            model_dir = Path(model_path)
        state = LocalEndpoints(root).deploy(endpoint, version, model_dir, config.traffic)
        split = {f"{model_name}@{k[1:]}": v for k, v in state.split.items()}
        resource = str(root / f"{endpoint}.json")
        image = "local stand-in (this machine's TensorFlow Serving mapping)"
    elif target == "vertex":
        api, resource_name, machine = vertex_parts(registered, config, compute, credentials,
                                                   echo, policy)
        state = api.deploy(endpoint, resource_name, machine, config.traffic,
                           labels={"gkeflow-model": model_name[:63]},
                           service_account=config.service_account)
        split = {f"{model_name}@{d.model.rsplit('@', 1)[1]}": d.percent for d in state.deployed}
        resource = state.name
        image = str(registered.get("servingImage") or "")
    else:
        from gkeflow.components.scaleout.storage import publish

        services, served, placement, namespace = kserve_parts(
            model_path, registered, config, compute, kube_api, echo, policy)
        from gkeflow.components.cloud.retry import RetryPolicy

        (policy or RetryPolicy.from_env()).call(
            lambda: publish(Path(model_path), f"{served.storage_uri}/{version}",
                            {"model": model_name, "version": version}),
            f"copying the model to {served.storage_uri}/{version}", on_retry=echo)
        echo(f"copied the model to {served.storage_uri}/{version}/ (the layout TensorFlow "
             "Serving reads)")
        before = services.status(endpoint)
        state = services.deploy(endpoint, served, placement, config.traffic)
        split = {f"{model_name}@{k[1:]}": v for k, v in state.split.items()}
        resource = f"{namespace}/{endpoint}"
        image = f"tensorflow/serving:{served.runtime_version}"
        record_in_model_registry(registry_uri, namespace, endpoint, before, state, echo)
    outcome = DeployOutcome(target, endpoint, resource, model_name, version, split, checked,
                            serving_image=image)
    echo(f"deployed {model_name} version {version} to {endpoint}: {outcome.split_text}")
    return outcome


def record_in_model_registry(registry_uri: str, namespace: str, endpoint: str, before, state,
                             echo=print) -> None:
    """With the Kubeflow Model Registry: record what ``endpoint`` serves now (every version
    of the states ``before`` and after the change)."""
    from gkeflow.components.register.backends import backend_of

    if not registry_uri or backend_of(registry_uri) != "kubeflow":
        return
    from gkeflow.components.deploy.model_registry_record import ModelRegistryRecorder

    versions = {v.version: v.model for v in (before.versions if before else [])}
    versions.update({v.version: v.model for v in state.versions})
    split = {int(k[1:]): v for k, v in state.split.items()}
    ModelRegistryRecorder(registry_uri, echo=echo).record(
        namespace, endpoint, split, {n for n in split if not split[n]}, versions)


def vertex_parts(registered: dict[str, Any], config: DeploySettings, compute: dict[str, Any],
                 credentials=None, echo=print, policy=None):
    """(VertexEndpoints, the version's resource name, the Machine), checked."""
    from gkeflow.components.deploy.vertex_endpoint import Machine, VertexEndpoints
    from gkeflow.components.serving.runtimes import is_gpu_image

    resource_name = str(registered.get("resourceName") or "")
    parts = resource_name.split("/")
    if len(parts) < 6 or parts[0] != "projects":
        raise DeploySettingsError(f"the registered version {resource_name!r} is not in the "
                                  "Vertex AI Model Registry; register with "
                                  "registry_uri=vertex://projects/P/locations/L")
    machine = Machine(**compute.get("vertex", {}), min_replicas=config.min_replicas,
                      max_replicas=config.max_replicas)
    image = str(registered.get("servingImage") or "")
    if machine.accelerator_count and image and not is_gpu_image(image):
        raise DeploySettingsError(
            f"deploy-model asks for {machine.accelerator_type} but the version was "
            f"registered with the CPU-only container {image}: set registry.serving_image "
            "to a tf2-gpu container of the model's TensorFlow, or drop the accelerator from "
            "compute.deploy-model")
    api = VertexEndpoints(parts[1], parts[3], policy=policy, api_endpoint=config.api_endpoint,
                          credentials=credentials, echo=echo)
    return api, resource_name, machine


def kserve_parts(model_path: Path, registered: dict[str, Any], config: DeploySettings,
                 compute: dict[str, Any], kube_api=None, echo=print, policy=None):
    """(InferenceServices, the ModelVersion to serve, the Placement, the namespace)."""
    from gkeflow.components.deploy import kserve
    from gkeflow.components.serving.runtimes import RuntimeMismatch, kserve_runtime_version

    model_name = str(registered.get("modelName") or "")
    version = int(registered.get("version") or 0)
    endpoint = config.endpoint or model_name
    placement = kserve.Placement.of({**compute.get("gke", {}),
                                     "min_replicas": config.min_replicas,
                                     "max_replicas": config.max_replicas})
    base = serving_base(str(registered.get("modelUri") or ""), config, endpoint, version)
    if kube_api is None:
        from kubernetes import client
        from kubernetes import config as kube_config

        kube_config.load_incluster_config()
        kube_api = client.ApiClient()
    namespace = config.namespace or _pod_namespace()
    services = kserve.InferenceServices(kserve.KServeApi(kube_api, policy=policy, echo=echo),
                                        namespace, config.kserve_mode)
    try:
        runtime_version = kserve_runtime_version(tf_version_of(Path(model_path)), placement.gpu)
    except RuntimeMismatch as exc:
        raise DeploySettingsError(str(exc)) from None
    served = kserve.ModelVersion(
        kserve.version_key(version), version, base, runtime_version,
        str(registered.get("resourceName") or f"{model_name}/{version}"))
    return services, served, placement, namespace


def _pod_namespace() -> str:
    path = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
    return path.read_text().strip() if path.exists() else "default"


def outcome_json(outcome: DeployOutcome) -> str:
    return json.dumps(asdict(outcome), sort_keys=True)
