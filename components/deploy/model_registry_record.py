"""The Kubeflow Model Registry records what a KServe InferenceService serves.

After each change of an InferenceService made by gkeflow, every version in its split (and
in the split before) is recorded as a Model Registry ``InferenceService`` named
``<isvc>-v<N>`` in the ``ServingEnvironment`` named after the namespace: the registered
model and version it serves, the runtime, ``desiredState`` (DEPLOYED while it has traffic or
is kept for a rollback, UNDEPLOYED once removed) and custom properties
``traffic_percent`` and ``kserve_inference_service`` (``namespace/name``).

Plain REST (``/api/model_registry/v1alpha3``) with the bearer token the registry client
would use (``KF_PIPELINES_SA_TOKEN_PATH`` or the pod's service-account token); every call
through :class:`~gkeflow.components.cloud.retry.RetryPolicy`; a create whose answer is lost
is followed by a look-up by name (the registry refuses a duplicate name with 409).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gkeflow.components.cloud.retry import RetryPolicy, is_transient

PREFIX = "/api/model_registry/v1alpha3"
RUNTIME = "kserve-tensorflow-serving"
_RESOURCE = re.compile(r"/registered_models/(\d+)/versions/(\d+)$")
SA_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


class RecordError(RuntimeError):
    """The Model Registry could not record the deployment; the message says why."""


def _token() -> str:
    for path in (os.environ.get("KF_PIPELINES_SA_TOKEN_PATH", ""), str(SA_TOKEN)):
        if path and Path(path).is_file():
            return Path(path).read_text().strip()
    return ""


def _string(value: Any) -> dict[str, str]:
    return {"metadataType": "MetadataStringValue", "string_value": str(value)}


class ModelRegistryRecorder:
    """Upserts serving environments and inference services in one Model Registry."""

    def __init__(self, registry_uri: str, policy: RetryPolicy | None = None,
                 echo: Callable[[str], None] = print):
        from gkeflow.components.register.kubeflow import parse_kubeflow_uri

        base, port, _ = parse_kubeflow_uri(registry_uri)
        self.base = f"{base}:{port}{PREFIX}"
        self.policy = policy or RetryPolicy.from_env()
        self.echo = echo
        token = _token()
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def _request(self, method: str, path: str, **kwargs):
        import requests

        response = requests.request(method, f"{self.base}{path}", headers=self.headers,
                                    timeout=self.policy.call_timeout_s, **kwargs)
        if response.status_code >= 400 and response.status_code != 404:
            response.raise_for_status()
        return response

    def _call(self, method: str, path: str, what: str, **kwargs):
        return self.policy.call(lambda: self._request(method, path, **kwargs), what,
                                on_retry=self.echo)

    def _find(self, kind: str, **params) -> dict | None:
        response = self._call("GET", f"/{kind}", f"looking up {kind} {params}", params=params)
        return None if response.status_code == 404 else response.json()

    def _create(self, kind: str, find: dict, body: dict) -> dict:
        import requests

        def create_or_find():
            try:
                response = self._request("POST", f"/{kind}s", json=body)
                if response.status_code == 404:
                    raise RecordError(f"the Model Registry has no {kind}s API")
                return response.json()
            except requests.HTTPError as exc:
                if exc.response is not None and exc.response.status_code == 409:
                    found = self._find(kind, **find)
                    if found is not None:
                        return found
                raise
            except Exception as exc:
                if not is_transient(exc):
                    raise
                found = self._find(kind, **find)  # the create may have been carried out
                if found is not None:
                    return found
                raise

        return self.policy.call(create_or_find, f"creating {kind} {body.get('name')}",
                                on_retry=self.echo)

    def environment(self, namespace: str) -> str:
        found = self._find("serving_environment", name=namespace)
        if found is None:
            found = self._create("serving_environment", {"name": namespace},
                                 {"name": namespace,
                                  "description": "Kubernetes namespace served by KServe"})
        return str(found["id"])

    def record(self, namespace: str, isvc: str, split: dict[int, int], kept: set[int],
               versions: dict[int, str]) -> None:
        """Record every version of ``isvc``: its share in ``split`` (versions in ``kept``
        stay DEPLOYED at 0%; others absent from ``split`` are UNDEPLOYED).

        Args:
            versions: version number -> the registry's resource name for it
                (``.../registered_models/<id>/versions/<id>``).
        """
        known = {n: _RESOURCE.search(r or "") for n, r in versions.items()}
        known = {n: m.groups() for n, m in known.items() if m}  # Model Registry versions
        if not known:
            return
        environment = self.environment(namespace)
        for number, (registered_model_id, model_version_id) in sorted(known.items()):
            name = f"{isvc}-v{number}"
            share = int(split.get(number, 0))
            body = {
                "modelVersionId": model_version_id,
                "runtime": RUNTIME,
                "desiredState": "DEPLOYED" if share or number in kept else "UNDEPLOYED",
                "customProperties": {"traffic_percent": _string(share),
                                     "kserve_inference_service": _string(
                                         f"{namespace}/{isvc}")},
            }
            found = self._find("inference_service", name=name, parentResourceId=environment)
            if found is None:
                self._create("inference_service",
                             {"name": name, "parentResourceId": environment},
                             {"name": name, "servingEnvironmentId": environment,
                              "registeredModelId": registered_model_id, **body})
            else:
                self._call("PATCH", f"/inference_services/{found['id']}",
                           f"updating inference service {name}", json=body)
        self.echo(f"recorded {isvc} in the Kubeflow Model Registry ({namespace})")
