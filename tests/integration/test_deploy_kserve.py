"""KServe InferenceServices against the CRD-validated fake Kubernetes API over real HTTP:
create, canary, promote, rollback in Serverless and Standard mode, retried and lost
requests, 503s — exactly one InferenceService and the expected traffic at every step."""

from __future__ import annotations

import pytest
from kubernetes import client

from gkeflow.components.cloud.retry import RetryPolicy
from gkeflow.components.deploy.kserve import (
    InferenceServices,
    KServeApi,
    KServeError,
    ModelVersion,
    Placement,
    State,
    manifest,
)
from tests.integration.fake_kserve import FakeKServe, validate_isvc

FAST = RetryPolicy(call_timeout_s=5, budget_s=5, initial_s=0.01, maximum_s=0.02)
GPU = Placement(
    resources={"requests": {"cpu": "4", "memory": "16G"},
               "limits": {"cpu": "4", "memory": "16G", "nvidia.com/gpu": "1"}},
    node_selector={"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"},
    tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    min_replicas=1, max_replicas=3)


def version(n: int, gpu: bool = True) -> ModelVersion:
    return ModelVersion(f"v{n}", n, f"gs://bucket/serving/penguins-v{n}",
                        "2.21.0-gpu" if gpu else "2.21.0", f"penguins/{n}")


def uri(n: int) -> str:
    return f"gs://bucket/serving/penguins-v{n}"


@pytest.fixture
def kube():
    with FakeKServe() as fake:
        yield fake
        assert not fake.violations, fake.violations


def services(kube, mode: str) -> InferenceServices:
    lines: list[str] = []
    api = KServeApi(client.ApiClient(client.Configuration(host=kube.url)), FAST,
                    echo=lines.append)
    isvc = InferenceServices(api, "models", mode)
    isvc.lines = lines
    return isvc


def test_serverless_canary_promote_rollback(kube):
    isvc = services(kube, "serverless")
    isvc.deploy("penguins", version(1), GPU, percent=10)
    assert kube.traffic() == {uri(1): 100}
    isvc.deploy("penguins", version(2), GPU, percent=10)
    assert kube.traffic() == {uri(1): 90, uri(2): 10}
    spec = kube.objects[("models", "penguins")]["spec"]["predictor"]
    assert spec["canaryTrafficPercent"] == 10 and spec["model"]["storageUri"] == uri(2)
    assert spec["model"]["runtimeVersion"] == "2.21.0-gpu"
    assert spec["nodeSelector"] == GPU.node_selector and spec["tolerations"] == GPU.tolerations

    state = isvc.promote("penguins", GPU, keep=1)
    assert kube.traffic() == {uri(2): 100} and state.split == {"v1": 0, "v2": 100}
    isvc.rollback("penguins", GPU)  # v1 rolled out again, then v2's 10% canary on top
    assert kube.traffic() == {uri(1): 90, uri(2): 10}
    assert kube.count() == 1 and kube.creates == 1


def test_serverless_rollback_of_a_canary(kube):
    isvc = services(kube, "serverless")
    isvc.deploy("penguins", version(1), GPU)
    isvc.deploy("penguins", version(2), GPU, percent=20)
    assert kube.traffic() == {uri(1): 80, uri(2): 20}
    state = isvc.rollback("penguins", GPU)
    assert kube.traffic() == {uri(1): 100} and state.split == {"v1": 100}


def test_standard_canary_promote_rollback(kube):
    isvc = services(kube, "standard")
    isvc.deploy("penguins", version(1), GPU)
    isvc.deploy("penguins", version(2), GPU, percent=10)
    obj = kube.objects[("models", "penguins")]
    assert obj["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "Standard"
    assert [c["predictor"]["name"] for c in obj["spec"]["canary"]] == ["v2"]
    assert "maxReplicas" not in obj["spec"]["canary"][0]["predictor"]
    assert kube.traffic() == {uri(1): 90, uri(2): 10}
    isvc.promote("penguins", GPU, keep=1)
    assert kube.traffic() == {uri(2): 100}
    isvc.rollback("penguins", GPU)  # Standard: the very split before the promotion
    assert kube.traffic() == {uri(1): 90, uri(2): 10}
    assert kube.count() == 1 and kube.creates == 1


def test_standard_mode_needs_the_canary_list():
    with FakeKServe(canary_list=False) as kube:
        with pytest.raises(KServeError, match="no spec.canary"):
            services(kube, "standard").deploy("penguins", version(1), GPU)
        assert kube.count() == 0


def test_standard_mode_says_when_the_crd_cannot_be_read():
    with FakeKServe(crd_readable=False) as kube:
        with pytest.raises(KServeError, match=(
                r"ServiceAccount pipeline-runner in namespace kubeflow may not get "
                r"customresourcedefinitions.apiextensions.k8s.io \(cluster-wide\); "
                r"deploy/rbac/kserve-deployer.yaml grants it: kubectl apply -n NAMESPACE .*"
                r"or use kserve mode serverless")):
            services(kube, "standard").deploy("penguins", version(1), GPU)
        assert kube.count() == 0


def test_lost_answers_and_503s_make_one_object_with_the_right_traffic(kube):
    isvc = services(kube, "serverless")
    kube.lose(method="POST")
    isvc.deploy("penguins", version(1), GPU)
    kube.fail(503, times=2, method="GET")
    kube.lose(method="PUT")
    isvc.deploy("penguins", version(2), GPU, percent=30)
    isvc.deploy("penguins", version(2), GPU, percent=30)  # a retried step: no change
    assert kube.count() == 1 and kube.creates == 1
    assert kube.traffic() == {uri(1): 70, uri(2): 30}
    assert any("answer was lost" in line for line in isvc.lines)


def test_someone_elses_object_is_not_taken_over(kube):
    kube.objects[("models", "penguins")] = {
        "apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
        "metadata": {"name": "penguins", "namespace": "models", "resourceVersion": "1"},
        "spec": {"predictor": {"model": {"modelFormat": {"name": "tensorflow"},
                                         "storageUri": "gs://x/y"}}}}
    with pytest.raises(KServeError, match="not made by gkeflow"):
        services(kube, "serverless").deploy("penguins", version(1), GPU)


@pytest.mark.parametrize("mode", ["serverless", "standard"])
def test_manifests_validate_against_the_crd(mode):
    state = State([version(1), version(2)], {"v1": 90, "v2": 10})
    assert validate_isvc(manifest("penguins", "models", state, GPU, mode)) == []


def test_the_fake_refuses_what_kserve_refuses():
    state = State([version(1, gpu=False)], {"v1": 100})
    bad = manifest("penguins", "models", state, GPU, "serverless")
    assert any("-gpu runtimeVersion" in p for p in validate_isvc(bad))
    bad = manifest("penguins", "models", State([version(1)], {"v1": 100}), GPU, "serverless")
    bad["spec"]["predictor"]["model"]["unknownField"] = 1
    assert any("unknownField" in p for p in validate_isvc(bad))
    bad = manifest("penguins", "models", State([version(1), version(2)],
                                                {"v1": 90, "v2": 10}), GPU, "standard")
    bad["metadata"]["annotations"].pop("serving.kserve.io/deploymentMode")
    assert any("Standard" in p for p in validate_isvc(bad))


def test_hung_reads_time_out_and_make_nothing_twice(kube):
    policy = RetryPolicy(call_timeout_s=0.5, budget_s=10, initial_s=0.01, maximum_s=0.02)
    api = KServeApi(client.ApiClient(client.Configuration(host=kube.url)), policy,
                    echo=lambda line: None)
    isvc = InferenceServices(api, "models", "serverless")
    kube.hang(1.5, method="POST")
    isvc.deploy("penguins", version(1), GPU)
    kube.hang(1.5, method="PUT")
    isvc.deploy("penguins", version(2), GPU, percent=40)
    assert kube.count() == 1 and kube.creates == 1
    assert kube.traffic() == {uri(1): 60, uri(2): 40}


def settle(kube, isvc) -> None:
    """Read the object until the fake controller has reconciled the last write."""
    while kube.pending:
        isvc.api.get("models", "penguins")


def test_serverless_rollback_after_a_promotion_restores_the_canary_split():
    # revisions become ready after a few reads: the canary is added only once the stable
    # version has been rolled out again, else it would be split against the promoted one
    with FakeKServe(ready_after_reads=3) as kube:
        isvc = services(kube, "serverless")
        isvc.poll_s = 0.01
        isvc.deploy("penguins", version(1), GPU)
        settle(kube, isvc)
        isvc.deploy("penguins", version(2), GPU, percent=10)
        settle(kube, isvc)
        assert kube.traffic() == {uri(1): 90, uri(2): 10}
        isvc.promote("penguins", GPU, keep=1)
        settle(kube, isvc)
        assert kube.traffic() == {uri(2): 100}
        state = isvc.rollback("penguins", GPU)
        settle(kube, isvc)
        assert kube.traffic() == {uri(1): 90, uri(2): 10}
        assert state.split == {"v1": 90, "v2": 10} and state.previous == {"v1": 0, "v2": 100}
        assert kube.count() == 1 and kube.creates == 1 and not kube.violations


def test_a_rollback_cut_short_after_rolling_out_the_stable_version_completes_when_rerun():
    with FakeKServe(ready_after_reads=10**6) as kube:  # never ready: the wait times out
        isvc = services(kube, "serverless")
        isvc.poll_s, isvc.rollout_timeout_s = 0.01, 0.2
        isvc.deploy("penguins", version(1), GPU)
        isvc.deploy("penguins", version(2), GPU, percent=10)
        kube.ready_after_reads = 0
        kube._reconcile(("models", "penguins"))
        isvc.promote("penguins", GPU, keep=1)
        kube._reconcile(("models", "penguins"))
        kube.ready_after_reads = 10**6
        with pytest.raises(KServeError, match="v1 at 100%.*not rolled out within 0 s.*again"):
            isvc.rollback("penguins", GPU)
        kube._reconcile(("models", "penguins"))  # the rollout finishes later
        assert kube.traffic() == {uri(1): 100}
        kube.ready_after_reads = 0
        state = isvc.rollback("penguins", GPU)
        assert kube.traffic() == {uri(1): 90, uri(2): 10}
        assert state.split == {"v1": 90, "v2": 10}
