"""The shipped KServe RBAC grants exactly what the deploy step calls, nothing broader."""

from __future__ import annotations

from pathlib import Path

from kubernetes import client

from gkeflow.components import yamlio
from gkeflow.components.cloud.retry import RetryPolicy
from gkeflow.components.deploy.kserve import InferenceServices, KServeApi, ModelVersion, Placement
from tests.integration.fake_kserve import FakeKServe

MANIFEST = Path(__file__).resolve().parents[2] / "deploy" / "rbac" / "kserve-deployer.yaml"
_VERBS = {"POST": "create", "GET": "get", "PUT": "update"}


def _grants() -> set[tuple[str, str, str]]:
    documents = list(yamlio.load_all(MANIFEST.read_text()))
    grants = set()
    for doc in documents:
        if doc["kind"] in ("Role", "ClusterRole"):
            grants |= {(g, r, v) for rule in doc["rules"] for g in rule["apiGroups"]
                       for r in rule["resources"] for v in rule["verbs"]}
        else:
            assert doc["roleRef"]["name"] == doc["metadata"]["name"]
    return grants


def test_no_wildcards_no_delete_and_the_crd_read_is_named():
    grants = _grants()
    assert not any("*" in part for grant in grants for part in grant)
    assert not any(verb in ("delete", "patch", "deletecollection") for *_, verb in grants)
    [cluster_role] = [d for d in yamlio.load_all(MANIFEST.read_text())
                      if d["kind"] == "ClusterRole"]
    assert cluster_role["rules"][0]["resourceNames"] == ["inferenceservices.serving.kserve.io"]


def test_every_call_the_deploy_step_makes_is_granted():
    policy = RetryPolicy(call_timeout_s=5, budget_s=5, initial_s=0.01, maximum_s=0.02)
    with FakeKServe() as kube:
        api = KServeApi(client.ApiClient(client.Configuration(host=kube.url)), policy,
                        echo=lambda line: None)
        services = InferenceServices(api, "models", "standard")
        for n in (1, 2):
            services.deploy("penguins", ModelVersion(f"v{n}", n, f"gs://b/p-v{n}", "2.21.0"),
                            Placement())
        services.promote("penguins", Placement())
        services.rollback("penguins", Placement())
        api.list("models")
        seen = set(kube.requests)
    grants = _grants()
    for method, path in seen:
        crd = "customresourcedefinitions" in path
        group = "apiextensions.k8s.io" if crd else "serving.kserve.io"
        resource = "customresourcedefinitions" if crd else "inferenceservices"
        verb = _VERBS[method]
        if method == "GET" and path.endswith("/inferenceservices"):
            verb = "list"
        assert (group, resource, verb) in grants, (method, path)


def test_the_file_grants_exactly_what_errors_name_it_for():
    from gkeflow.components.deploy.kserve_errors import GRANTS, RBAC_FILE

    assert MANIFEST.as_posix().endswith(RBAC_FILE)
    table = {(g, r, v) for (g, r), verbs in GRANTS.items() for v in verbs}
    assert _grants() == table


def test_a_403_for_a_verb_gkeflow_does_not_use_says_so():
    import json

    from kubernetes.client.exceptions import ApiException

    from gkeflow.components.deploy.kserve_errors import forbidden

    exc = ApiException(status=403, reason="Forbidden")
    exc.body = json.dumps({
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden",
        "code": 403, "message": 'inferenceservices.serving.kserve.io "x" is forbidden: User '
        '"system:serviceaccount:ns:sa" cannot patch resource "inferenceservices" in API group '
        '"serving.kserve.io" in the namespace "ns"'})
    assert str(forbidden(exc, "update", "serving.kserve.io", "inferenceservices", "ns")) == (
        "forbidden: ServiceAccount sa in namespace ns may not patch "
        "inferenceservices.serving.kserve.io in namespace ns; gkeflow does not patch it; "
        "deploy/rbac/kserve-deployer.yaml grants what it does (get, list, create, update): "
        "kubectl apply -n ns -f deploy/rbac/kserve-deployer.yaml, with its bindings' subject "
        "set to ServiceAccount sa in namespace ns")
    exc.body = "not json"
    line = str(forbidden(exc, "update", "serving.kserve.io", "inferenceservices", "ns"))
    assert line.startswith("forbidden: the account in use may not update "
                           "inferenceservices.serving.kserve.io in namespace ns; ")
    assert "binding the account the deploy runs as" in line
