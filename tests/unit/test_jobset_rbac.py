"""The shipped RBAC manifests: the launcher's account is granted exactly what the JobSet
launcher calls, nothing broader; the workers' account is granted nothing at all."""

from __future__ import annotations

from pathlib import Path

from gkeflow.components import yamlio
from tests.integration.fake_kube import FakeKube, KubeFaults

RBAC = Path(__file__).resolve().parents[2] / "deploy" / "rbac"
MANIFEST = RBAC / "jobset-launcher.yaml"
WORKER = RBAC / "jobset-worker.yaml"

#: HTTP method on a path the fake API saw -> the RBAC verb it needs.
_VERBS = {"POST": "create", "GET": "get", "DELETE": "delete"}


def _grants() -> set[tuple[str, str, str]]:
    role, binding = yamlio.load_all(MANIFEST.read_text())
    assert role["kind"] == "Role" and binding["kind"] == "RoleBinding", "namespaced only"
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    return {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def test_no_wildcards_and_no_secrets():
    grants = _grants()
    assert not any("*" in part for grant in grants for part in grant)
    assert {resource for _, resource, _ in grants} == {"jobsets", "pods", "pods/log",
                                                       "serviceaccounts"}
    assert not any(resource in ("pods", "serviceaccounts") and verb != "get" and verb != "list"
                   for _, resource, verb in grants)


def test_the_workers_account_is_bound_to_nothing():
    from gkeflow.pipelines.compute.profiles import ComputeProfile

    [account] = yamlio.load_all(WORKER.read_text())
    assert account["kind"] == "ServiceAccount"
    assert account["metadata"]["name"] == ComputeProfile().worker_service_account
    for document in yamlio.load_all(MANIFEST.read_text()):
        if document["kind"] == "RoleBinding":
            assert all(s["name"] != account["metadata"]["name"] for s in document["subjects"])
    # nothing else in deploy/ binds it either
    for path in Path(RBAC.parent).rglob("*.yaml"):
        for document in yamlio.load_all(path.read_text()):
            if document and document.get("kind") in ("RoleBinding", "ClusterRoleBinding"):
                assert all(s["name"] != account["metadata"]["name"]
                           for s in document.get("subjects", [])), path


def _needed(requests) -> set[tuple[str, str, str]]:
    needed = set()
    for method, path, query in requests:
        group = "jobset.x-k8s.io" if path.startswith("/apis/jobset") else ""
        parts = path.split("/")
        if path.endswith("/log"):
            resource, verb = "pods/log", "get"
        elif group and method == "GET" and parts[-1] == "jobsets":
            resource, verb = "jobsets", ("watch" if query.get("watch") else "list")
        elif group:
            resource, verb = "jobsets", _VERBS[method]
        elif parts[-2] == "serviceaccounts":
            resource, verb = "serviceaccounts", "get"
        else:
            named = parts[-2] == "pods"
            resource, verb = "pods", ("get" if named else "list")
        needed.add((group, resource, verb))
    return needed


def test_every_call_the_launcher_makes_is_granted_and_every_grant_used(tmp_path,
                                                                        monkeypatch):
    from gkeflow.components.scaleout import storage
    from gkeflow.components.scaleout.jobset_launcher import launch_in_cluster
    from gkeflow.pipelines.compute.engines.gke import jobset_template
    from gkeflow.pipelines.definitions.training import DEFAULT_COMPUTE
    from tests.integration.kube_helpers import api_for, fast_policy, manifest

    template = jobset_template(DEFAULT_COMPUTE["train-model"].with_overrides(replicas=2), "i")
    output = tmp_path / "model"

    def publish(_):
        (tmp_path / "src").mkdir(exist_ok=True)
        (tmp_path / "src" / "m").write_text("m")
        storage.publish(tmp_path / "src", str(output), {"workers": 2})

    import gkeflow.components.scaleout.jobset_launcher as launcher

    # A local root instead of Cloud Storage: this test is about the Kubernetes calls.
    monkeypatch.setattr(launcher, "output_uri", lambda *_: str(output))
    # a 410 (answered by a LIST) and a failed JobSet of an earlier attempt (replaced)
    faults = KubeFaults().script("gone_event", resource="watch")
    with FakeKube(running_looks=2, on_complete=publish, faults=faults) as kube:
        old = manifest(launcher.js.jobset_name("r", "t"))
        old["metadata"]["namespace"] = "ns"
        kube.add_jobset(old)
        kube.jobsets[("ns", old["metadata"]["name"])]["status"] = {"terminalState": "Failed"}
        launch_in_cluster(template, "gs://b/d", "gs://b/s", {}, "gs://b/root", "r", "t",
                          tmp_path / "out", api=api_for(kube), namespace="ns",
                          window_s=0.01, policy=fast_policy())
    needed = _needed(kube.requests)
    assert needed == _grants(), (needed - _grants(), _grants() - needed)
