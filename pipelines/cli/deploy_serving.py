"""`gkeflow models list`'s serving column: which version serves where, read from the local
stand-in, Vertex AI endpoints or KServe InferenceServices."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gkeflow.pipelines.cli.deploy_context import kube_api


def lookup_policy():
    """The serving column is a side look-up: a few seconds of retries, not a launcher's
    budget, so an unreachable cluster or endpoint never holds up `models list`."""
    from gkeflow.components.cloud.retry import RetryPolicy

    policy = RetryPolicy.from_env()
    return policy.with_(budget_s=min(policy.budget_s, 15.0),
                        call_timeout_s=min(policy.call_timeout_s, 10.0))


def serving_by_version(kind: str, registry_uri: str, api_endpoint: str = "",
                       namespaces: Sequence[str] = (), kube=None
                       ) -> dict[tuple[str, int], str]:
    """(model, version) -> "endpoint 90%, ..." for the local stand-in, Vertex AI endpoints
    and (Kubeflow Model Registry) the KServe InferenceServices in ``namespaces``, through
    ``kube`` (an API client; default: the kubeconfig's); empty when nothing can be read."""
    out: dict[tuple[str, int], list[str]] = {}
    from gkeflow.components.register.backends import LOCAL_REGISTRY, VERTEX_REGISTRY

    if kind == LOCAL_REGISTRY:
        from gkeflow.components.deploy.local_server import LocalEndpoints
        from gkeflow.components.register.local_registry import LocalRegistry, registry_path

        root = registry_path(registry_uri).resolve().parent / "deployments"
        by_dir = {str(Path(v.uri).resolve()): (v.name, v.version)
                  for v in LocalRegistry(registry_uri).list()}
        for endpoint in LocalEndpoints(root).list():
            for version in endpoint.versions:
                key = by_dir.get(str(Path(version.model_dir).resolve()))
                if key is not None:
                    out.setdefault(key, []).append(
                        f"{endpoint.name} {endpoint.split.get(version.key, 0)}%")
    elif kind == VERTEX_REGISTRY:
        from gkeflow.components.deploy.vertex_endpoint import VertexEndpoints

        where = registry_uri.removeprefix("vertex://").split("/")
        try:
            api = VertexEndpoints(where[1], where[3], lookup_policy(),
                                  api_endpoint=api_endpoint, echo=lambda line: None)
            endpoints = api.listed()
        except Exception:  # noqa: BLE001 - the table still shows the registry
            return {}
        for endpoint in endpoints:
            state = api._state(endpoint)
            for deployed in state.deployed:
                model_name = endpoint.labels.get("gkeflow-model", "")
                version = int(deployed.model.rsplit("@", 1)[1])
                out.setdefault((model_name, version), []).append(
                    f"{endpoint.display_name} {deployed.percent}%")
    elif kind == "kubeflow":
        from gkeflow.components.deploy.kserve import KServeApi, serving_shares

        try:
            api = KServeApi(kube or kube_api(), lookup_policy(), echo=lambda line: None)
            shares = [share for namespace in dict.fromkeys(namespaces)
                      for share in serving_shares(api, namespace)]
        except Exception:  # noqa: BLE001 - no cluster at hand: the table still shows the registry
            return {}
        for model_name, version, where, percent in shares:
            out.setdefault((model_name, version), []).append(f"{where} {percent}%")
    return {k: ", ".join(v) for k, v in out.items()}
