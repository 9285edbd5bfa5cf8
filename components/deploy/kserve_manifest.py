"""The InferenceService manifest gkeflow writes (``serving.kserve.io/v1beta1``) and the
traffic state it records in the annotation ``gkeflow.dev/traffic``; see :mod:`.kserve` for
how it is applied."""

from __future__ import annotations

import copy
import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from gkeflow.components.deploy import traffic as tr
from gkeflow.components.deploy.kserve_errors import KServeError

GROUP, VERSION, PLURAL = "serving.kserve.io", "v1beta1", "inferenceservices"
API_VERSION = f"{GROUP}/{VERSION}"
RUNTIME = "kserve-tensorflow-serving"
MODE_ANNOTATION = "serving.kserve.io/deploymentMode"
STATE_ANNOTATION = "gkeflow.dev/traffic"
MODES = ("serverless", "standard")
CRD_NAME = "inferenceservices.serving.kserve.io"
_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class ModelVersion:
    """One version as the InferenceService serves it."""

    key: str  # predictor name: v<version>
    version: int
    storage_uri: str  # <base>, holding <version>/saved_model.pb
    runtime_version: str  # tensorflow/serving tag
    model: str = ""  # the registry's name for it


@dataclass
class Placement:
    """Resources, node selector and tolerations of the serving pods (the deploy-model
    profile through the GKE compute rules), and the replica range."""

    resources: dict[str, Any] = field(default_factory=dict)
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    min_replicas: int = 1
    max_replicas: int = 1

    @classmethod
    def of(cls, values: dict[str, Any] | None) -> Placement:
        values = dict(values or {})
        unknown = sorted(set(values) - {f for f in cls.__dataclass_fields__})
        if unknown:
            raise KServeError(f"unknown placement field(s) {unknown}")
        placement = cls(**values)
        if placement.min_replicas < 1 or placement.max_replicas < placement.min_replicas:
            raise KServeError("replicas must satisfy 1 <= min <= max")
        return placement

    @property
    def gpu(self) -> bool:
        return bool((self.resources.get("limits") or {}).get("nvidia.com/gpu"))


@dataclass
class State:
    """What the annotation records."""

    versions: list[ModelVersion] = field(default_factory=list)  # oldest first
    split: dict[str, int] = field(default_factory=dict)
    previous: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({"versions": [asdict(v) for v in self.versions],
                           "split": self.split, "previous": self.previous}, sort_keys=True)

    @classmethod
    def of(cls, isvc: dict | None) -> State:
        text = ((isvc or {}).get("metadata", {}).get("annotations") or {}).get(STATE_ANNOTATION)
        if not text:
            return cls()
        data = json.loads(text)
        return cls([ModelVersion(**v) for v in data.get("versions", [])],
                   {k: int(v) for k, v in data.get("split", {}).items()},
                   {k: int(v) for k, v in data.get("previous", {}).items()})

    def version(self, key: str) -> ModelVersion:
        return next(v for v in self.versions if v.key == key)

    def describe(self) -> str:
        return tr.describe(self.split)


def version_key(version: int) -> str:
    return f"v{int(version)}"


def check_name(name: str) -> str:
    if not _NAME.match(name or ""):
        raise KServeError(f"InferenceService name {name!r} must be a DNS label: lower-case "
                          "letters, digits and '-', starting with a letter (at most 63)")
    return name


# ---------------------------------------------------------------------------------------------
# the manifest


def _predictor(version: ModelVersion, placement: Placement, *, fixed: bool) -> dict[str, Any]:
    model: dict[str, Any] = {
        "modelFormat": {"name": "tensorflow", "version": "2"},
        "runtime": RUNTIME,
        "runtimeVersion": version.runtime_version,
        "storageUri": version.storage_uri,
        "protocolVersion": "v1",
    }
    if placement.resources:
        model["resources"] = copy.deepcopy(placement.resources)
    predictor: dict[str, Any] = {"model": model, "minReplicas": placement.min_replicas}
    if not fixed:
        predictor["maxReplicas"] = placement.max_replicas
    if placement.node_selector:
        predictor["nodeSelector"] = dict(placement.node_selector)
    if placement.tolerations:
        predictor["tolerations"] = copy.deepcopy(placement.tolerations)
    return predictor


def manifest(name: str, namespace: str, state: State, placement: Placement, mode: str,
             labels: dict[str, str] | None = None) -> dict[str, Any]:
    """The InferenceService serving ``state.split`` in ``mode`` (serverless or standard)."""
    check_name(name)
    if mode not in MODES:
        raise KServeError(f"unknown KServe mode {mode!r}; use {' or '.join(MODES)}")
    split = tr.check_split(state.split)
    if not split:
        raise KServeError("nothing to serve: the traffic split is empty")
    order = [v.key for v in state.versions]
    stable = tr.stable_of(split, order)
    annotations = {STATE_ANNOTATION: state.to_json()}
    spec: dict[str, Any]
    if mode == "serverless":
        serving = [k for k, v in split.items() if v]
        if len(serving) > 2:
            raise KServeError("Serverless mode serves at most two versions (the rolled-out one "
                              f"and a canary); the split {split} needs Standard mode")
        canary = next((k for k in serving if k != stable), None)
        newest = canary or stable
        spec = {"predictor": _predictor(state.version(newest), placement, fixed=False)}
        if canary is not None:
            spec["predictor"]["canaryTrafficPercent"] = split[canary]
    else:
        annotations[MODE_ANNOTATION] = "Standard"
        spec = {"predictor": _predictor(state.version(stable), placement, fixed=True)}
        canaries = []
        for key in order:
            if key == stable or key not in split:
                continue
            predictor = _predictor(state.version(key), placement, fixed=True)
            predictor["name"] = key
            predictor["model"]["name"] = "kserve-container"  # required in canary predictors
            canaries.append({"predictor": predictor, "trafficPercent": split[key]})
        if canaries:
            spec["canary"] = canaries
    return {
        "apiVersion": API_VERSION,
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations,
                     "labels": {"app.kubernetes.io/managed-by": "gkeflow", **(labels or {})}},
        "spec": spec,
    }
