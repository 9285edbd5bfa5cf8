"""KServe on GKE: one InferenceService per model (``serving.kserve.io/v1beta1``) served by
the ``kserve-tensorflow-serving`` runtime, with canary traffic, promotion and rollback in
both deployment modes.

- **Serverless** (Knative; what Kubeflow's KServe runs by default): the predictor serves
  the newest version; ``spec.predictor.canaryTrafficPercent: N`` gives it N% and the rest
  stays with the last rolled-out revision. At most two versions serve at once; a rollback
  after a promotion rolls the stable version out again, waits for that, then adds the
  canary (:meth:`InferenceServices.rollback`).
- **Standard** (annotation ``serving.kserve.io/deploymentMode: Standard``): the predictor
  serves the stable version and ``spec.canary[]`` lists the other versions as named
  predictors with a ``trafficPercent`` (fixed replicas: no ``maxReplicas``). Only on KServe
  releases whose CRD has ``spec.canary``: :func:`canary_list_supported` reads it first.

The versions, the split and the split before the last change are kept in the annotation
``gkeflow.dev/traffic`` (JSON); the spec is derived from it by :func:`manifest`, so every
change is one replace of the object (with its ``resourceVersion``: a concurrent change
answers 409 and is re-read). Each version is served from ``<base>/<version>/`` as
TensorFlow Serving reads it (``storageUri`` = ``<base>``, holding ``<version>/saved_model.pb``);
``runtimeVersion`` is the TensorFlow Serving release of the training TensorFlow.

Every call goes through :class:`~gkeflow.components.cloud.retry.RetryPolicy`; a create
whose answer is lost is followed by a GET (a second create of the same name is refused
with 409, never made).
"""

from __future__ import annotations

import copy
import json
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from gkeflow.components.cloud.retry import RetryPolicy, is_transient
from gkeflow.components.deploy import traffic as tr

GROUP, VERSION, PLURAL = "serving.kserve.io", "v1beta1", "inferenceservices"
API_VERSION = f"{GROUP}/{VERSION}"
RUNTIME = "kserve-tensorflow-serving"
MODE_ANNOTATION = "serving.kserve.io/deploymentMode"
STATE_ANNOTATION = "gkeflow.dev/traffic"
MODES = ("serverless", "standard")
CRD_NAME = "inferenceservices.serving.kserve.io"
_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


class KServeError(RuntimeError):
    """A deployment that cannot be carried out; the message says why and what to do."""


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


# ---------------------------------------------------------------------------------------------
# the Kubernetes API


class KServeApi:
    """The few calls made, through the ``kubernetes`` client and the retry policy."""

    def __init__(self, api_client, policy: RetryPolicy | None = None,
                 echo: Callable[[str], None] = print):
        from kubernetes import client

        self.custom = client.CustomObjectsApi(api_client)
        self.extensions = client.ApiextensionsV1Api(api_client)
        self.policy = policy or RetryPolicy.from_env()
        self.echo = echo

    def _call(self, operation, what: str):
        return self.policy.call(operation, what, on_retry=self.echo)

    def get(self, namespace: str, name: str) -> dict | None:
        from kubernetes.client.exceptions import ApiException

        def get():
            try:
                return self.custom.get_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, name,
                    _request_timeout=self.policy.call_timeout_s)
            except ApiException as exc:
                if exc.status == 404:
                    return None
                raise

        return self._call(get, f"reading InferenceService {namespace}/{name}")

    def list(self, namespace: str) -> list[dict]:
        return self._call(lambda: self.custom.list_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL,
            label_selector="app.kubernetes.io/managed-by=gkeflow",
            _request_timeout=self.policy.call_timeout_s).get("items", []),
            f"listing InferenceServices in {namespace}")

    def create(self, body: dict) -> dict:
        """Create ``body`` once: a lost answer is followed by a GET; 409 means it exists."""
        from kubernetes.client.exceptions import ApiException

        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]

        def create_or_find():
            try:
                return self.custom.create_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, body,
                    _request_timeout=self.policy.call_timeout_s)
            except ApiException as exc:
                if exc.status == 409:
                    raise KServeError(f"InferenceService {namespace}/{name} was created by "
                                      "someone else meanwhile; run the command again") from exc
                if not is_transient(exc):
                    raise
                found = self.get(namespace, name)
                if found is not None and State.of(found).to_json() == State.of(body).to_json():
                    self.echo(f"the create's answer was lost; found InferenceService {name}")
                    return found
                raise
            except Exception as exc:
                if not is_transient(exc):
                    raise
                found = self.get(namespace, name)
                if found is not None and State.of(found).to_json() == State.of(body).to_json():
                    self.echo(f"the create's answer was lost; found InferenceService {name}")
                    return found
                raise

        return self._call(create_or_find, f"creating InferenceService {namespace}/{name}")

    def replace(self, current: dict, body: dict) -> dict:
        """Replace ``current`` with ``body`` (optimistic: with ``current``'s resourceVersion).
        A lost answer is followed by a GET: the change is there or it is tried again."""
        from kubernetes.client.exceptions import ApiException

        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        body = copy.deepcopy(body)
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        wanted = State.of(body).to_json()

        def replace():
            try:
                return self.custom.replace_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, name, body,
                    _request_timeout=self.policy.call_timeout_s)
            except Exception as exc:
                if isinstance(exc, ApiException) and exc.status == 409:
                    found = self.get(namespace, name)
                    if found is not None and State.of(found).to_json() == wanted:
                        return found  # an earlier try carried it out
                    raise KServeError(f"InferenceService {namespace}/{name} changed meanwhile; "
                                      "run the command again") from exc
                if not is_transient(exc):
                    raise
                found = self.get(namespace, name)
                if found is not None and State.of(found).to_json() == wanted:
                    self.echo(f"the update's answer was lost; InferenceService {name} has it")
                    return found
                raise

        return self._call(replace, f"updating InferenceService {namespace}/{name}")

    def canary_list_supported(self) -> bool | None:
        """Whether the cluster's InferenceService CRD has ``spec.canary`` (Standard-mode
        canaries); None when the CRD cannot be read (not installed, or not allowed)."""
        from kubernetes.client.exceptions import ApiException

        def read():
            try:  # raw JSON: the CRD is megabytes, too big to turn into client models
                response = self.extensions.read_custom_resource_definition(
                    CRD_NAME, _preload_content=False,
                    _request_timeout=self.policy.call_timeout_s)
                return json.loads(response.data)
            except ApiException as exc:
                if exc.status in (403, 404):
                    return None
                raise

        crd = self._call(read, f"reading the CRD {CRD_NAME}")
        if crd is None:
            return None
        for version in crd.get("spec", {}).get("versions", []):
            if version.get("name") == VERSION:
                spec = version.get("schema", {}).get("openAPIV3Schema", {}).get(
                    "properties", {}).get("spec", {})
                return "canary" in spec.get("properties", {})
        return False


# ---------------------------------------------------------------------------------------------
# deploy, promote, rollback


def serving_shares(api: KServeApi, namespace: str) -> list[tuple[str, int, str, int]]:
    """(model, version, "namespace/name", percent) of every version that gkeflow's
    InferenceServices in ``namespace`` serve or keep (model: the ``gkeflow-model`` label)."""
    shares = []
    for isvc in api.list(namespace):
        metadata = isvc.get("metadata", {})
        model = (metadata.get("labels") or {}).get("gkeflow-model", "")
        state = State.of(isvc)
        for version in state.versions:
            shares.append((model, version.version, f"{namespace}/{metadata.get('name', '')}",
                           state.split.get(version.key, 0)))
    return shares


class InferenceServices:
    """Canary, promotion and rollback of one model's InferenceService."""

    def __init__(self, api: KServeApi, namespace: str, mode: str = "serverless",
                 rollout_timeout_s: float = 900.0, poll_s: float = 5.0):
        if mode not in MODES:
            raise KServeError(f"unknown KServe mode {mode!r}; use {' or '.join(MODES)}")
        self.api, self.namespace, self.mode = api, namespace, mode
        self.rollout_timeout_s, self.poll_s = rollout_timeout_s, poll_s
        self._checked_mode = False

    def _check_mode(self) -> None:
        if self.mode == "standard" and not self._checked_mode:
            supported = self.api.canary_list_supported()
            if supported is None:
                raise KServeError(
                    f"cannot read the CRD {CRD_NAME} to check for spec.canary (Standard-mode "
                    "canaries): apply deploy/rbac/kserve-deployer.yaml, or use kserve mode "
                    "serverless")
            if not supported:
                raise KServeError(
                    "this cluster's KServe has no spec.canary (Standard-mode canaries; KServe "
                    "main after v0.19): use kserve mode serverless (canaryTrafficPercent)")
            self._checked_mode = True

    def _write(self, name: str, current: dict | None, state: State, placement: Placement,
               labels: dict[str, str] | None = None) -> dict:
        if labels is None and current is not None:  # promote, rollback: keep the model's
            labels = dict(current.get("metadata", {}).get("labels") or {})
        body = manifest(name, self.namespace, state, placement, self.mode, labels)
        if current is None:
            return self.api.create(body)
        return self.api.replace(current, body)

    def deploy(self, name: str, version: ModelVersion, placement: Placement,
               percent: int = 10, labels: dict[str, str] | None = None) -> State:
        """Serve ``version`` with ``percent`` of the traffic (100 when it is the first)."""
        check_name(name)
        tr.check_percent(percent)
        self._check_mode()
        current = self.api.get(self.namespace, name)
        state = State.of(current)
        if current is not None and not state.versions:
            raise KServeError(f"InferenceService {self.namespace}/{name} exists but was not "
                              "made by gkeflow; choose another name or delete it")
        versions = [v for v in state.versions if v.key != version.key] + [version]
        order = [v.key for v in versions]
        split = tr.canary(state.split, version.key, percent, order)
        if self.mode == "serverless":
            # One canary at a time: a version that has 0% now leaves.
            split = {k: v for k, v in split.items() if v}
        if split == state.split and version in state.versions:
            return state  # a retry: nothing to change
        new = State([v for v in versions if v.key in split], split, state.split)
        return State.of(self._write(name, current, new, placement, labels))

    def promote(self, name: str, placement: Placement, keep: int = 1) -> State:
        """The newest version gets 100%; ``keep`` previous ones stay recorded at 0% (Standard
        mode: still running as 0% canaries; Serverless mode: what a rollback returns to)."""
        current, state = self._require(name)
        newest = state.versions[-1].key
        promotion = tr.promote(state.split, newest, [v.key for v in state.versions], keep)
        if promotion.split == state.split:
            return state
        new = State([v for v in state.versions if v.key in promotion.split], promotion.split,
                    state.split)
        return State.of(self._write(name, current, new, placement))

    def rollback(self, name: str, placement: Placement) -> State:
        """Restore the split before the last change.

        Serverless mode sends a canary share only against the revision last rolled out at
        100%; when the split to restore has a canary and its stable version is not the one
        rolled out now, that version is rolled out first, then the canary is added once
        the rollout is done (at most ``rollout_timeout_s``)."""
        current, state = self._require(name)
        try:
            back = tr.rollback(state.split, state.previous)
        except tr.TrafficError as exc:
            raise KServeError(f"InferenceService {name}: {exc}") from exc
        order = [v.key for v in state.versions]
        split = {k: v for k, v in back.split.items() if v} if self.mode == "serverless" \
            else back.split
        stable = tr.stable_of(split, order)
        if self.mode == "serverless" and len(split) > 1 and \
                stable != tr.stable_of(state.split, order):
            # Recorded with the split to restore as its "previous": a rollback run again
            # after this step alone (a timeout, a lost connection) completes this one.
            held = {key: (100 if key == stable else 0) for key in split}  # 0%: still known
            first = State([v for v in state.versions if v.key in split], held, split)
            written = self._write(name, current, first, placement)
            current = self._wait_rolled_out(name, written, f"{stable} at 100%")
        new = State([v for v in state.versions if v.key in split], split, state.split)
        return State.of(self._write(name, current, new, placement))

    def _wait_rolled_out(self, name: str, written: dict, what: str) -> dict:
        """Until the controller has rolled out the revision of ``written`` (status:
        observedGeneration caught up, latest revision rolled out); returns the object read
        then (its resourceVersion is the one the next replace needs)."""
        generation = int(written.get("metadata", {}).get("generation") or 0)
        deadline = time.monotonic() + self.rollout_timeout_s
        while True:
            isvc = self.api.get(self.namespace, name) or written
            status = isvc.get("status") or {}
            predictor = (status.get("components") or {}).get("predictor") or {}
            created = predictor.get("latestCreatedRevision")
            if int(status.get("observedGeneration") or 0) >= generation and created and \
                    predictor.get("latestRolledoutRevision") == created:
                return isvc
            if time.monotonic() >= deadline:
                raise KServeError(
                    f"InferenceService {self.namespace}/{name} serves {what} but its revision "
                    f"was not rolled out within {self.rollout_timeout_s:.0f} s, so the canary "
                    "was not restored; check `kubectl get isvc` and run the rollback again")
            time.sleep(self.poll_s)

    def status(self, name: str) -> State | None:
        current = self.api.get(self.namespace, name)
        return None if current is None else State.of(current)

    def _require(self, name: str) -> tuple[dict, State]:
        check_name(name)
        self._check_mode()
        current = self.api.get(self.namespace, name)
        state = State.of(current)
        if current is None or not state.versions:
            raise KServeError(f"no InferenceService {self.namespace}/{name} made by gkeflow; "
                              "deploy a model first (gkeflow deploy NAME --target gke)")
        return current, state
