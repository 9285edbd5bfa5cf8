"""The shipped RBAC manifest grants exactly what the JobSet launcher calls, nothing broader."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.integration.fake_kube import FakeKube

MANIFEST = Path(__file__).resolve().parents[2] / "deploy" / "rbac" / "jobset-launcher.yaml"

#: HTTP method on a path the fake API saw -> the RBAC verb it needs.
_VERBS = {"POST": "create", "GET": "get", "DELETE": "delete"}


def _grants() -> set[tuple[str, str, str]]:
    role, binding = yaml.safe_load_all(MANIFEST.read_text())
    assert role["kind"] == "Role" and binding["kind"] == "RoleBinding", "namespaced only"
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    return {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def test_no_wildcards_and_no_secrets():
    grants = _grants()
    assert not any("*" in part for grant in grants for part in grant)
    assert {resource for _, resource, _ in grants} == {"jobsets", "pods", "pods/log"}
    assert not any(resource == "pods" and verb in ("create", "delete", "patch")
                   for _, resource, verb in grants)


def test_every_call_the_launcher_makes_is_granted(tmp_path, monkeypatch):
    from kubernetes import client

    from gkeflow.components.scaleout import storage
    from gkeflow.components.scaleout.jobset_launcher import KubeApi, launch_in_cluster
    from gkeflow.pipelines.engines.gke import jobset_template
    from gkeflow.pipelines.training import DEFAULT_COMPUTE

    template = jobset_template(DEFAULT_COMPUTE["train-model"].with_overrides(replicas=2), "i")
    output = tmp_path / "model"

    def publish(_):
        (tmp_path / "src").mkdir()
        (tmp_path / "src" / "m").write_text("m")
        storage.publish(tmp_path / "src", str(output), {"workers": 2})

    import gkeflow.components.scaleout.jobset_launcher as launcher

    # A local root instead of Cloud Storage: this test is about the Kubernetes calls.
    monkeypatch.setattr(launcher, "output_uri", lambda *_: str(output))
    with FakeKube(running_looks=1, on_complete=publish) as kube:
        kube.add_pod("ns", "me", service_account="pipeline-runner")
        launch_in_cluster(template, "gs://b/d", "gs://b/s", {}, "gs://b/root", "r", "t",
                          tmp_path / "out", api=KubeApi(client.ApiClient(
                              client.Configuration(host=kube.url))),
                          namespace="ns", pod_name="me", poll_s=0.01)
    needed = set()
    for method, path in kube.requests:
        group = "jobset.x-k8s.io" if path.startswith("/apis/jobset") else ""
        parts = path.split("/")
        if path.endswith("/log"):
            resource, verb = "pods/log", "get"
        elif group and method == "GET" and parts[-1] == "jobsets":
            resource, verb = "jobsets", "watch"  # the fake serves only watches of the list
        elif group:
            resource, verb = "jobsets", _VERBS[method]
        else:
            named = parts[-2] == "pods"
            resource, verb = "pods", ("get" if named else "list")
        needed.add((group, resource, verb))
    assert needed <= _grants(), needed - _grants()
    assert ("jobset.x-k8s.io", "jobsets", "create") in needed
    assert ("jobset.x-k8s.io", "jobsets", "watch") in needed and kube.watches
