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
change is one replace of the object with its ``resourceVersion``. A 409 (the controller
writes the status all through a rollout) is met by reading the object again and re-applying
the change, a few times with backoff (:meth:`InferenceServices._apply`); refusals (401,
403, no KServe) are one line each (:mod:`.kserve_errors`). Each version is served from
``<base>/<version>/`` as TensorFlow Serving reads it (``storageUri`` = ``<base>``, holding
``<version>/saved_model.pb``);
``runtimeVersion`` is the TensorFlow Serving release of the training TensorFlow.

Every call goes through :class:`~gkeflow.components.cloud.retry.RetryPolicy`; a create
whose answer is lost is followed by a GET, and a 409 AlreadyExists by reading what is
there and reconciling: never a second object.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from typing import Any

from gkeflow.components.cloud.retry import RetryPolicy, is_transient
from gkeflow.components.deploy import kserve_errors as errors
from gkeflow.components.deploy import traffic as tr
from gkeflow.components.deploy.kserve_errors import Conflict, KServeError
from gkeflow.components.deploy.kserve_manifest import (
    API_VERSION,
    CRD_NAME,
    GROUP,
    MODE_ANNOTATION,
    MODES,
    PLURAL,
    RUNTIME,
    STATE_ANNOTATION,
    VERSION,
    ModelVersion,
    Placement,
    State,
    check_name,
    manifest,
    version_key,
)

__all__ = [  # the manifest's names are used from here too
    "API_VERSION", "CRD_NAME", "MODE_ANNOTATION", "RUNTIME", "STATE_ANNOTATION", "Conflict",
    "InferenceServices", "KServeApi", "KServeError", "ModelVersion", "Placement", "State",
    "check_name", "manifest", "serving_shares", "version_key"]

# ---------------------------------------------------------------------------------------------
# the Kubernetes API


class KServeApi:
    """The few calls made, through the ``kubernetes`` client and the retry policy. A 401,
    403 or 404 (KServe not installed) becomes a :class:`KServeError` saying what to do; a
    409 becomes :class:`Conflict` (re-read and apply again)."""

    def __init__(self, api_client, policy: RetryPolicy | None = None,
                 echo: Callable[[str], None] = print):
        from kubernetes import client

        self.custom = client.CustomObjectsApi(api_client)
        self.extensions = client.ApiextensionsV1Api(api_client)
        self.policy = policy or RetryPolicy.from_env()
        self.echo = echo

    def _call(self, operation, what: str, verb: str, namespace: str = "", crd: bool = False):
        from kubernetes.client.exceptions import ApiException

        try:
            return self.policy.call(operation, what, on_retry=self.echo)
        except ApiException as exc:
            if exc.status == 401:
                raise errors.unauthorized(exc, what) from exc
            if exc.status == 403:
                group, resource = ((errors.CRD_GROUP, "customresourcedefinitions") if crd
                                   else (GROUP, PLURAL))
                raise errors.forbidden(exc, verb, group, resource, namespace) from exc
            if exc.status == 404 and not crd:
                raise errors.not_installed(what) from exc
            raise

    def _serves(self, namespace: str) -> bool:
        """Whether the cluster serves InferenceServices at all (a 404 that does not name
        the object: one LIST tells a missing object from a missing KServe)."""
        from kubernetes.client.exceptions import ApiException

        try:
            self.custom.list_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, limit=1,
                _request_timeout=self.policy.call_timeout_s)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def get(self, namespace: str, name: str) -> dict | None:
        from kubernetes.client.exceptions import ApiException

        def get():
            try:
                return self.custom.get_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, name,
                    _request_timeout=self.policy.call_timeout_s)
            except ApiException as exc:
                if exc.status == 404 and (errors.names_object(exc, name)
                                          or self._serves(namespace)):
                    return None
                raise

        return self._call(get, f"reading InferenceService {namespace}/{name}", "get",
                          namespace)

    def list(self, namespace: str) -> list[dict]:
        return self._call(lambda: self.custom.list_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL,
            label_selector="app.kubernetes.io/managed-by=gkeflow",
            _request_timeout=self.policy.call_timeout_s).get("items", []),
            f"listing InferenceServices in {namespace}", "list", namespace)

    def _lost(self, namespace: str, name: str, wanted: str, verb: str) -> dict | None:
        """After a transient failure: the object, when it already has ``wanted``."""
        found = self.get(namespace, name)
        if found is not None and State.of(found).to_json() == wanted:
            self.echo(f"the {verb}'s answer was lost; InferenceService {name} has it")
            return found
        return None

    def create(self, body: dict) -> dict:
        """Create ``body`` once: a lost answer is followed by a GET; a 409 (it exists) raises
        :class:`Conflict`."""
        from kubernetes.client.exceptions import ApiException

        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        wanted = State.of(body).to_json()

        def create_or_find():
            try:
                return self.custom.create_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, body,
                    _request_timeout=self.policy.call_timeout_s)
            except Exception as exc:
                if isinstance(exc, ApiException) and exc.status == 409:
                    raise Conflict(f"InferenceService {namespace}/{name} exists already "
                                   f"({errors.status_body(exc).get('reason') or 409})") from exc
                if not is_transient(exc):
                    raise
                found = self._lost(namespace, name, wanted, "create")
                if found is not None:
                    return found
                raise

        return self._call(create_or_find, f"creating InferenceService {namespace}/{name}",
                          "create", namespace)

    def replace(self, current: dict, body: dict) -> dict:
        """Replace ``current`` with ``body`` (optimistic: with ``current``'s resourceVersion).
        A lost answer is followed by a GET: the change is there or it is tried again. A 409
        (changed since read) or a 404 naming the object (deleted since) raises
        :class:`Conflict`."""
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
                if isinstance(exc, ApiException) and (
                        exc.status == 409 or exc.status == 404 and errors.names_object(
                            exc, name)):
                    reason = errors.status_body(exc).get("reason") or exc.status
                    raise Conflict(f"InferenceService {namespace}/{name} changed since it "
                                   f"was read ({reason})") from exc
                if not is_transient(exc):
                    raise
                found = self._lost(namespace, name, wanted, "update")
                if found is not None:
                    return found
                raise

        return self._call(replace, f"updating InferenceService {namespace}/{name}", "update",
                          namespace)

    def canary_list_supported(self) -> bool:
        """Whether the cluster's InferenceService CRD has ``spec.canary`` (Standard-mode
        canaries)."""
        from kubernetes.client.exceptions import ApiException

        what = f"reading the CRD {CRD_NAME}"

        def read():
            try:  # raw JSON: the CRD is megabytes, too big to turn into client models
                response = self.extensions.read_custom_resource_definition(
                    CRD_NAME, _preload_content=False,
                    _request_timeout=self.policy.call_timeout_s)
                return json.loads(response.data)
            except ApiException as exc:
                if exc.status == 404:
                    return None
                raise

        try:
            crd = self._call(read, what, "get", crd=True)
        except KServeError as exc:
            raise KServeError(f"{exc} (it is read for Standard-mode canaries; or use kserve "
                              "mode serverless)") from exc
        if crd is None:
            raise errors.not_installed(what)
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


_UNREAD: Any = object()
Plan = Callable[[dict | None], "State | None"]


class InferenceServices:
    """Canary, promotion and rollback of one model's InferenceService.

    Every change is planned from the object as read and written with its resourceVersion;
    a 409 (the controller writes the status all through a rollout; someone created the
    object meanwhile) is answered by reading it again and planning again, at most
    ``conflict_attempts`` times with the retry policy's backoff, as controllers do."""

    def __init__(self, api: KServeApi, namespace: str, mode: str = "serverless",
                 rollout_timeout_s: float = 900.0, poll_s: float = 5.0,
                 conflict_attempts: int = 6):
        if mode not in MODES:
            raise KServeError(f"unknown KServe mode {mode!r}; use {' or '.join(MODES)}")
        self.api, self.namespace, self.mode = api, namespace, mode
        self.rollout_timeout_s, self.poll_s = rollout_timeout_s, poll_s
        self.conflict_attempts = conflict_attempts
        self._checked_mode = False

    def _check_mode(self) -> None:
        if self.mode == "standard" and not self._checked_mode:
            if not self.api.canary_list_supported():
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

    def _apply(self, name: str, plan: Plan, placement: Placement,
               labels: dict[str, str] | None = None, current: Any = _UNREAD) -> dict:
        """Write ``plan(object as read)`` (None: nothing to change); on a 409 read again and
        plan again. Returns the object written (or found already right)."""
        delays = self.api.policy.delays()
        for attempt in range(1, self.conflict_attempts + 1):
            if current is _UNREAD:
                current = self.api.get(self.namespace, name)
            new = plan(current)
            if new is None:
                return current
            try:
                return self._write(name, current, new, placement, labels)
            except Conflict as exc:
                if attempt == self.conflict_attempts:
                    raise KServeError(
                        f"{exc}, {attempt} times in a row; something keeps writing it (check "
                        f"`kubectl get isvc -n {self.namespace} {name} -o yaml`), then run "
                        "the command again") from exc
                wait = self.api.policy.jitter(next(delays))
                self.api.echo(f"{exc}; reading it again and re-applying in {wait:.1f}s "
                              f"(attempt {attempt + 1} of {self.conflict_attempts})")
                self.api.policy.sleep(wait)
                current = _UNREAD
        raise AssertionError("unreachable")  # pragma: no cover

    def _owned(self, name: str, current: dict | None) -> State:
        state = State.of(current)
        if current is None or not state.versions:
            raise KServeError(f"no InferenceService {self.namespace}/{name} made by gkeflow; "
                              "deploy a model first (gkeflow deploy NAME --target gke)")
        return state

    def _fixed(self, name: str, expected: State, target: State) -> Plan:
        """A plan that writes ``target`` over ``expected`` and nothing else: when someone
        else changed the traffic meanwhile, it refuses rather than guess."""
        def plan(current: dict | None) -> State | None:
            state = self._owned(name, current)
            if state.to_json() == target.to_json():
                return None
            if state.to_json() != expected.to_json():
                raise KServeError(
                    f"InferenceService {self.namespace}/{name} was changed meanwhile (it "
                    f"serves {state.describe()} now); check it and run the command again")
            return target
        return plan

    def deploy(self, name: str, version: ModelVersion, placement: Placement,
               percent: int = 10, labels: dict[str, str] | None = None) -> State:
        """Serve ``version`` with ``percent`` of the traffic (100 when it is the first)."""
        check_name(name)
        tr.check_percent(percent)
        self._check_mode()

        def plan(current: dict | None) -> State | None:
            state = State.of(current)
            if current is not None and not state.versions:
                raise KServeError(f"InferenceService {self.namespace}/{name} exists but was "
                                  "not made by gkeflow; choose another name or delete it")
            versions = [v for v in state.versions if v.key != version.key] + [version]
            order = [v.key for v in versions]
            split = tr.canary(state.split, version.key, percent, order)
            if self.mode == "serverless":
                # One canary at a time: a version that has 0% now leaves.
                split = {k: v for k, v in split.items() if v}
            if split == state.split and version in state.versions:
                return None  # a retry: nothing to change
            return State([v for v in versions if v.key in split], split, state.split)

        return State.of(self._apply(name, plan, placement, labels))

    def promote(self, name: str, placement: Placement, keep: int = 1) -> State:
        """The newest version gets 100%; ``keep`` previous ones stay recorded at 0% (Standard
        mode: still running as 0% canaries; Serverless mode: what a rollback returns to)."""
        check_name(name)
        self._check_mode()

        def plan(current: dict | None) -> State | None:
            state = self._owned(name, current)
            newest = state.versions[-1].key
            promotion = tr.promote(state.split, newest, [v.key for v in state.versions], keep)
            if promotion.split == state.split:
                return None
            return State([v for v in state.versions if v.key in promotion.split],
                         promotion.split, state.split)

        return State.of(self._apply(name, plan, placement))

    def rollback(self, name: str, placement: Placement) -> State:
        """Restore the split before the last change.

        Serverless mode sends a canary share only against the revision last rolled out at
        100%; when the split to restore has a canary and its stable version is not the one
        rolled out now, that version is rolled out first, then the canary is added once
        the rollout is done (at most ``rollout_timeout_s``). A 409 is met by re-reading:
        the rollback is applied again unless someone else changed the traffic meanwhile."""
        check_name(name)
        self._check_mode()
        current = self.api.get(self.namespace, name)
        state = self._owned(name, current)
        try:
            back = tr.rollback(state.split, state.previous)
        except tr.TrafficError as exc:
            raise KServeError(f"InferenceService {name}: {exc}") from exc
        order = [v.key for v in state.versions]
        split = {k: v for k, v in back.split.items() if v} if self.mode == "serverless" \
            else back.split
        stable = tr.stable_of(split, order)
        expected = state
        if self.mode == "serverless" and len(split) > 1 and \
                stable != tr.stable_of(state.split, order):
            # Recorded with the split to restore as its "previous": a rollback run again
            # after this step alone (a timeout, a lost connection) completes this one.
            held = {key: (100 if key == stable else 0) for key in split}  # 0%: still known
            first = State([v for v in state.versions if v.key in split], held, split)
            written = self._apply(name, self._fixed(name, state, first), placement,
                                  current=current)
            current = self._wait_rolled_out(name, written, f"{stable} at 100%")
            expected = first
        new = State([v for v in state.versions if v.key in split], split, state.split)
        return State.of(self._apply(name, self._fixed(name, expected, new), placement,
                                    current=current))

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
