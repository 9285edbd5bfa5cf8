"""Vertex AI Endpoints: create-or-get the endpoint, deploy a registered model version with a
canary share, promote it, roll back, and read what serves where.

Every call goes through :class:`~gkeflow.components.cloud.retry.RetryPolicy` with the
policy's per-call timeout; long-running operations (create endpoint, deploy, undeploy) are
polled with ``get_operation``, each poll retried on its own.

Nothing is made twice:

- the endpoint's ID is its name (``CreateEndpointRequest.endpoint_id``), so it is found by
  a GET, a create whose answer is lost (or fails transiently) is followed by that look-up
  before another try, and a second create of the same ID is refused (409) rather than made;
  it is also labelled ``gkeflow-endpoint: <name>`` for listing;
- a model version is found on the endpoint by its model resource and version id before it
  is deployed; a deploy whose answer is lost is followed by the same look-up, after
  waiting for the operations still running on the endpoint (a deployment in progress is
  not on the endpoint until it ends).

The split in force before the last change is kept on the endpoint as labels
``gkeflow-prev-<deployed model id>: <percent>``, written in the same ``UpdateEndpoint``
call as the new split, so :meth:`VertexEndpoints.rollback` can restore it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gkeflow.components.cloud.retry import RetryPolicy, is_transient
from gkeflow.components.deploy import traffic as tr

ENDPOINT_LABEL = "gkeflow-endpoint"
PREVIOUS_PREFIX = "gkeflow-prev-"
PREVIOUS_MARK = "gkeflow-prev"
_NAME = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")
_MODEL = re.compile(r"^(projects/[^/]+/locations/[^/]+/models/[^/@]+)@(\d+)$")


class DeployError(RuntimeError):
    """A deployment that cannot be carried out; the message says why and what to do."""


@dataclass(frozen=True)
class Machine:
    """What each serving replica runs on (Vertex AI ``DedicatedResources``)."""

    machine_type: str = "n1-standard-2"
    accelerator_type: str = ""  # NVIDIA_TESLA_T4...
    accelerator_count: int = 0
    min_replicas: int = 1
    max_replicas: int = 1

    def __post_init__(self):
        if self.min_replicas < 1 or self.max_replicas < self.min_replicas:
            raise DeployError(f"replicas must satisfy 1 <= min ({self.min_replicas}) <= max "
                              f"({self.max_replicas})")
        if bool(self.accelerator_type) != (self.accelerator_count > 0):
            raise DeployError("accelerator_type and accelerator_count go together")

    def resources(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"machine_type": self.machine_type}
        if self.accelerator_count:
            spec["accelerator_type"] = self.accelerator_type
            spec["accelerator_count"] = self.accelerator_count
        return {"machine_spec": spec, "min_replica_count": self.min_replicas,
                "max_replica_count": self.max_replicas}


@dataclass(frozen=True)
class Serving:
    """One deployed model version as it serves now."""

    deployed_id: str
    model: str  # projects/.../models/ID@VERSION
    display_name: str
    percent: int


@dataclass
class EndpointState:
    """An endpoint, what is deployed on it (oldest first) and the split before the last change."""

    name: str  # projects/.../endpoints/ID
    display_name: str
    deployed: list[Serving] = field(default_factory=list)
    previous: dict[str, int] = field(default_factory=dict)

    @property
    def split(self) -> dict[str, int]:
        return {d.deployed_id: d.percent for d in self.deployed}

    def find(self, model: str) -> Serving | None:
        return next((d for d in self.deployed if d.model == model), None)

    def describe(self) -> str:
        names = {d.deployed_id: d.display_name for d in self.deployed}
        return tr.describe(self.split, names)


def check_endpoint_name(name: str) -> str:
    if not _NAME.match(name or ""):
        raise DeployError(f"endpoint name {name!r} must be lower-case letters, digits and '-', "
                          "starting with a letter (at most 63)")
    return name


def check_model_resource(model: str) -> tuple[str, str]:
    match = _MODEL.match(model or "")
    if not match:
        raise DeployError(f"model {model!r} is not a Vertex AI model version; expected "
                          "projects/P/locations/L/models/ID@VERSION")
    return match.group(1), match.group(2)


class VertexEndpoints:
    """The Vertex AI EndpointService for one project and location."""

    def __init__(self, project: str, location: str, policy: RetryPolicy | None = None,
                 api_endpoint: str = "", credentials: Any = None,
                 echo: Callable[[str], None] = print, poll_s: float = 5.0):
        from google.api_core.client_options import ClientOptions
        from google.cloud import aiplatform_v1

        self.parent = f"projects/{project}/locations/{location}"
        self.location = location
        self.policy = policy or RetryPolicy.from_env()
        self.echo = echo
        self.poll_s = poll_s
        options: dict[str, Any] = {"api_endpoint": api_endpoint or
                                   f"{location}-aiplatform.googleapis.com"}
        transport = None
        if api_endpoint.startswith("http://"):
            # A plain-HTTP endpoint is a local emulator: never send real credentials over it.
            from google.auth.credentials import AnonymousCredentials

            credentials = AnonymousCredentials()
            transport = "rest"
        self.client = aiplatform_v1.EndpointServiceClient(
            credentials=credentials, transport=transport,
            client_options=ClientOptions(**options))

    # -- plumbing -------------------------------------------------------------------------

    def _call(self, operation: Callable[[], Any], what: str):
        return self.policy.call(operation, what, on_retry=self.echo)

    def _wait(self, operation_name: str, what: str, response_type=None):
        """Poll a long-running operation to its end; its response (or raise its error).
        The first read comes after a second, the next ones half as long again each time, up
        to ``poll_s`` (as google.api_core polls operations): a short one ends soon."""
        started = self.policy.clock()
        delay = min(1.0, self.poll_s)
        while True:
            op = self._call(lambda: self.client.get_operation(
                request={"name": operation_name}, timeout=self.policy.call_timeout_s),
                f"reading the operation {what}")
            if op.done:
                if op.HasField("error") and op.error.code:
                    raise DeployError(f"Vertex AI failed {what}: {op.error.message} "
                                      f"(operation {operation_name})")
                if response_type is None:
                    return None
                message = response_type.pb(response_type())
                op.response.Unpack(message)
                return response_type.wrap(message)
            if self.policy.clock() - started > self.policy.budget_s:
                raise DeployError(f"operation {operation_name} ({what}) has not finished "
                                  f"after {self.policy.budget_s:.0f}s; look at it in the "
                                  "console and run the command again")
            self.policy.sleep(delay)
            delay = min(delay * 1.5, self.poll_s)

    def _state(self, endpoint) -> EndpointState:
        split = dict(endpoint.traffic_split)
        deployed = sorted(endpoint.deployed_models,
                          key=lambda d: (d.create_time.timestamp() if d.create_time else 0,
                                         d.id))
        previous = {k[len(PREVIOUS_PREFIX):]: int(v) for k, v in endpoint.labels.items()
                    if k.startswith(PREVIOUS_PREFIX)}
        return EndpointState(
            name=endpoint.name, display_name=endpoint.display_name,
            deployed=[Serving(d.id, f"{d.model.split('@')[0]}@{d.model_version_id or '1'}",
                              d.display_name, int(split.get(d.id, 0))) for d in deployed],
            previous=previous)

    # -- the endpoint -----------------------------------------------------------------------

    def find(self, name: str):
        """Endpoint ``name`` (its ID is the name), or None."""
        from google.api_core import exceptions

        def get():
            try:
                return self.client.get_endpoint(name=f"{self.parent}/endpoints/{name}",
                                                timeout=self.policy.call_timeout_s)
            except exceptions.NotFound:
                return None

        return self._call(get, f"looking for endpoint {name}")

    def listed(self) -> list:
        """Endpoints gkeflow made (labelled ``gkeflow-endpoint``)."""
        request = {"parent": self.parent, "filter": f"labels.{ENDPOINT_LABEL}:*"}
        return self._call(lambda: [e for e in self.client.list_endpoints(
            request=request, timeout=self.policy.call_timeout_s)
            if ENDPOINT_LABEL in e.labels], "listing endpoints")

    def ensure(self, name: str, labels: dict[str, str] | None = None):
        """The endpoint ``name``: found, or created once (its ID is ``name``, so a second
        create of the same endpoint is refused by Vertex AI with 409, never made)."""
        from google.api_core import exceptions
        from google.cloud import aiplatform_v1

        check_endpoint_name(name)
        existing = self.find(name)
        if existing is not None:
            return existing
        body = {"display_name": name, "labels": {**(labels or {}), ENDPOINT_LABEL: name}}

        def create_or_find():
            try:
                op = self.client.create_endpoint(
                    request={"parent": self.parent, "endpoint": body, "endpoint_id": name},
                    timeout=self.policy.call_timeout_s)
                return self._wait(op.operation.name, f"creating endpoint {name}",
                                  aiplatform_v1.Endpoint)
            except exceptions.AlreadyExists:
                self.echo(f"endpoint {name} exists already (an earlier try made it)")
                return self.find(name)
            except Exception as exc:
                if not is_transient(exc):
                    raise
                found = self.find(name)  # the create may have been carried out
                if found is not None:
                    self.echo(f"the create's answer was lost; found endpoint {found.name}")
                    return found
                raise

        created = self._call(create_or_find, f"creating endpoint {name}")
        self.echo(f"created endpoint {created.name}")
        return self.get(created.name)

    def get(self, endpoint_name: str):
        return self._call(lambda: self.client.get_endpoint(
            name=endpoint_name, timeout=self.policy.call_timeout_s),
            f"reading endpoint {endpoint_name}")

    def state(self, name: str) -> EndpointState | None:
        endpoint = self.find(name)
        return None if endpoint is None else self._state(endpoint)

    # -- changes ---------------------------------------------------------------------------

    def _set_split(self, state: EndpointState, split: dict[str, int], what: str):
        """One UpdateEndpoint: the new split, and the current one kept as labels."""
        split = tr.check_split(split)
        endpoint = self.get(state.name)
        labels = {k: v for k, v in endpoint.labels.items()
                  if not k.startswith(PREVIOUS_PREFIX) and k != PREVIOUS_MARK}
        labels[PREVIOUS_MARK] = "set"
        labels.update({f"{PREVIOUS_PREFIX}{k}": str(v) for k, v in state.split.items() if v})
        body = {"name": state.name, "traffic_split": split, "labels": labels}
        return self._call(lambda: self.client.update_endpoint(
            request={"endpoint": body, "update_mask": {"paths": ["traffic_split", "labels"]}},
            timeout=self.policy.call_timeout_s), what)

    def _undeploy(self, endpoint_name: str, deployed_id: str, split: dict[str, int]) -> None:
        def undeploy():
            current = self.get(endpoint_name)
            if all(d.id != deployed_id for d in current.deployed_models):
                return None  # an earlier try did it
            op = self.client.undeploy_model(
                request={"endpoint": endpoint_name, "deployed_model_id": deployed_id,
                         "traffic_split": {k: v for k, v in split.items() if k != deployed_id}},
                timeout=self.policy.call_timeout_s)
            return self._wait(op.operation.name, f"undeploying {deployed_id}")

        self._call(undeploy, f"undeploying {deployed_id} from {endpoint_name}")
        self.echo(f"undeployed {deployed_id} from {endpoint_name}")

    def deploy(self, name: str, model: str, machine: Machine, percent: int = 10,
               labels: dict[str, str] | None = None, service_account: str = ""
               ) -> EndpointState:
        """Deploy ``model`` (``projects/.../models/ID@VERSION``) on endpoint ``name`` with
        ``percent`` of the traffic (100 when nothing serves yet); idempotent."""
        from google.cloud import aiplatform_v1

        tr.check_percent(percent)
        model_id, version = check_model_resource(model)
        endpoint = self.ensure(name, labels)
        state = self._state(endpoint)
        existing = state.find(model)
        order = [d.deployed_id for d in state.deployed]
        if existing is None:
            display = f"{name}-v{version}"[:128]
            body: dict[str, Any] = {"model": model, "display_name": display,
                                    "dedicated_resources": machine.resources()}
            if service_account:
                body["service_account"] = service_account
            split = tr.canary(state.split, "0", percent, order)

            def deploy_or_find():
                try:
                    op = self.client.deploy_model(
                        request={"endpoint": state.name, "deployed_model": body,
                                 "traffic_split": split},
                        timeout=self.policy.call_timeout_s)
                    self._wait(op.operation.name, f"deploying {model}",
                               aiplatform_v1.DeployModelResponse)
                except Exception as exc:
                    if not is_transient(exc):
                        raise
                    if self._deployed_meanwhile(state.name, model):
                        self.echo(f"the deploy's answer was lost; {model} is on {name}")
                        return
                    raise

            self._call(deploy_or_find, f"deploying {model} on {name}")
            after = self._state(self.get(state.name))
            new = after.find(model)
            # DeployModel set the split; keep the one before it for a rollback.
            self._set_split(state, after.split, f"recording the split before {model}")
            self.echo(f"deployed {model} on {name} as {new.deployed_id}")
        else:
            split = tr.canary(state.split, existing.deployed_id, percent, order)
            if split != state.split:
                self._set_split(state, split, f"giving {model} {percent}% on {name}")
        return self._state(self.get(state.name))

    def _deployed_meanwhile(self, endpoint_name: str, model: str) -> bool:
        """After a deploy whose answer was lost: whether ``model`` is on the endpoint, once
        the operations still running there (a deploy in progress is not on the endpoint
        yet) have ended."""
        if self._state(self.get(endpoint_name)).find(model) is not None:
            return True
        running = self._call(lambda: [op.name for op in self.client.list_operations(
            request={"name": endpoint_name}, timeout=self.policy.call_timeout_s).operations
            if not op.done], f"listing operations of {endpoint_name}")
        for operation in running:
            self.echo(f"waiting for {operation}, still running on the endpoint")
            try:
                self._wait(operation, "in progress on the endpoint")
            except DeployError:
                pass  # it failed: what counts is whether the model is there now
        return self._state(self.get(endpoint_name)).find(model) is not None

    def promote(self, name: str, model: str = "", keep: int = 1) -> EndpointState:
        """Give ``model`` (default: the newest deployed) 100%; undeploy beyond ``keep``."""
        state = self._require(name)
        new = state.find(model) if model else (state.deployed[-1] if state.deployed else None)
        if new is None:
            raise DeployError(f"{model or 'no model'} is not deployed on endpoint {name}")
        promotion = tr.promote(state.split, new.deployed_id,
                               [d.deployed_id for d in state.deployed], keep)
        if promotion.split != {k: v for k, v in state.split.items()
                               if k not in promotion.undeploy}:
            self._set_split(state, {**{k: 0 for k in promotion.undeploy}, **promotion.split},
                            f"promoting {new.model} on {name}")
        for deployed_id in promotion.undeploy:
            self._undeploy(state.name, deployed_id, promotion.split)
        return self._state(self.get(state.name))

    def rollback(self, name: str) -> EndpointState:
        """Restore the split before the last change; undeploy what that change added."""
        state = self._require(name)
        try:
            back = tr.rollback(state.split, state.previous)
        except tr.TrafficError as exc:
            raise DeployError(f"endpoint {name}: {exc}") from exc
        self._set_split(state, {**{k: 0 for k in back.undeploy}, **back.split},
                        f"rolling back {name}")
        for deployed_id in back.undeploy:
            self._undeploy(state.name, deployed_id, back.split)
        return self._state(self.get(state.name))

    def _require(self, name: str) -> EndpointState:
        check_endpoint_name(name)
        state = self.state(name)
        if state is None:
            raise DeployError(f"no endpoint named {name} in {self.parent}; deploy a model "
                              "first (gkeflow deploy NAME --target vertex)")
        return state


def endpoint_uri(endpoint_name: str) -> str:
    """``projects/p/locations/l/endpoints/e`` -> its REST address (what Vertex AI links)."""
    location = endpoint_name.split("/locations/", 1)[1].split("/", 1)[0]
    return f"https://{location}-aiplatform.googleapis.com/v1/{endpoint_name}"
