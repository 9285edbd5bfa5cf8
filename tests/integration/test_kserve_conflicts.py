"""KServe calls that meet 409s (a controller writing the status through a rollout, an object
created meanwhile) and refusals (403, 401, no KServe), against the fake API server answering
with the API server's Status objects."""

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
from tests.integration.fake_kserve import FakeKServe

FAST = RetryPolicy(call_timeout_s=5, budget_s=5, initial_s=0.01, maximum_s=0.02)
CPU = Placement(min_replicas=1, max_replicas=2)


def version(n: int) -> ModelVersion:
    return ModelVersion(f"v{n}", n, f"gs://bucket/serving/penguins-v{n}", "2.21.0",
                        f"penguins/{n}")


def uri(n: int) -> str:
    return f"gs://bucket/serving/penguins-v{n}"


@pytest.fixture
def kube():
    with FakeKServe() as fake:
        yield fake
        assert not fake.violations, fake.violations


def services(kube, mode: str = "serverless", attempts: int = 6) -> InferenceServices:
    lines: list[str] = []
    api = KServeApi(client.ApiClient(client.Configuration(host=kube.url)), FAST,
                    echo=lines.append)
    isvc = InferenceServices(api, "models", mode, conflict_attempts=attempts, poll_s=0.01)
    isvc.lines = lines
    return isvc


def puts(kube) -> int:
    return sum(1 for method, _ in kube.requests if method == "PUT")


@pytest.mark.parametrize("mode", ["serverless", "standard"])
def test_a_canary_completes_while_the_controller_keeps_writing_the_status(kube, mode):
    isvc = services(kube, mode)
    isvc.deploy("penguins", version(1), CPU)
    kube.busy(4)  # each of the next four writes finds a newer resourceVersion
    state = isvc.deploy("penguins", version(2), CPU, percent=20)
    assert state.split == {"v1": 80, "v2": 20}
    assert kube.traffic() == {uri(1): 80, uri(2): 20}
    assert puts(kube) == 5 and kube.count() == 1 and kube.creates == 1
    conflicts = [line for line in isvc.lines if "(Conflict)" in line]
    assert len(conflicts) == 4 and "re-applying" in conflicts[0]


def test_promote_and_both_rollback_writes_re_read_after_409s(kube):
    isvc = services(kube)
    isvc.deploy("penguins", version(1), CPU)
    isvc.deploy("penguins", version(2), CPU, percent=10)
    kube.busy(2)
    assert isvc.promote("penguins", CPU).split == {"v1": 0, "v2": 100}
    assert kube.traffic() == {uri(2): 100}
    kube.busy(1)  # the serverless rollback writes twice: v1 at 100%, then the canary
    state = isvc.rollback("penguins", CPU)
    assert state.split == {"v1": 90, "v2": 10} and state.previous == {"v1": 0, "v2": 100}
    assert kube.traffic() == {uri(1): 90, uri(2): 10}


def test_a_controller_that_never_stops_is_given_up_on_in_one_line(kube):
    isvc = services(kube, attempts=3)
    isvc.deploy("penguins", version(1), CPU)
    kube.busy(3)
    with pytest.raises(KServeError) as caught:
        isvc.deploy("penguins", version(2), CPU, percent=20)
    message = str(caught.value)
    assert "changed since it was read (Conflict), 3 times in a row" in message
    assert "kubectl get isvc -n models penguins" in message and "\n" not in message
    assert kube.traffic() == {uri(1): 100} and puts(kube) == 3


def test_a_rollback_does_not_undo_a_change_someone_else_made_meanwhile(kube):
    isvc = services(kube)
    isvc.deploy("penguins", version(1), CPU)
    isvc.deploy("penguins", version(2), CPU, percent=10)
    theirs = State([version(1), version(3)], {"v1": 50, "v3": 50}, {"v1": 90, "v2": 10})
    their_object = manifest("penguins", "models", theirs, CPU, "serverless")

    def their_deploy(stored: dict) -> None:  # between the rollback's read and its write
        stored["metadata"]["annotations"] = their_object["metadata"]["annotations"]
        stored["spec"] = their_object["spec"]

    kube.changed_meanwhile(their_deploy)
    with pytest.raises(KServeError, match=r"changed meanwhile \(it serves v1 50%, v3 50%"):
        isvc.rollback("penguins", CPU)
    assert State.of(kube.objects[("models", "penguins")]) == theirs
    assert any("(Conflict)" in line for line in isvc.lines)


def test_created_meanwhile_with_the_same_version_is_found_not_duplicated(kube):
    isvc = services(kube)
    state = State([version(1)], {"v1": 100})
    kube.created_meanwhile(manifest("penguins", "models", state, CPU, "serverless"))
    assert isvc.deploy("penguins", version(1), CPU).split == {"v1": 100}
    assert kube.count() == 1 and kube.creates == 1 and puts(kube) == 0
    assert any("(AlreadyExists)" in line for line in isvc.lines)


def test_created_meanwhile_with_another_version_is_reconciled(kube):
    isvc = services(kube)
    kube.created_meanwhile(manifest("penguins", "models", State([version(1)], {"v1": 100}),
                                    CPU, "serverless"))
    assert isvc.deploy("penguins", version(2), CPU, percent=30).split == {"v1": 70, "v2": 30}
    assert kube.traffic() == {uri(1): 70, uri(2): 30} and kube.creates == 1


def test_created_meanwhile_by_someone_else_is_not_taken_over(kube):
    isvc = services(kube)
    foreign = manifest("penguins", "models", State([version(1)], {"v1": 100}), CPU,
                       "serverless")
    foreign["metadata"]["annotations"] = {}
    kube.created_meanwhile(foreign)
    with pytest.raises(KServeError, match="exists but was not made by gkeflow"):
        isvc.deploy("penguins", version(2), CPU)
    assert puts(kube) == 0


@pytest.mark.parametrize("verb", ["get", "create", "update", "list"])
def test_a_403_names_account_verb_resource_and_the_rbac_file(kube, verb):
    isvc = services(kube)
    if verb in ("update", "list"):
        isvc.deploy("penguins", version(1), CPU)
    kube.deny(verb)
    with pytest.raises(KServeError) as caught:
        if verb == "list":
            isvc.api.list("models")
        else:
            isvc.deploy("penguins", version(2), CPU)
    assert str(caught.value) == (
        f"forbidden: ServiceAccount pipeline-runner in namespace kubeflow may not {verb} "
        "inferenceservices.serving.kserve.io in namespace models; "
        "deploy/rbac/kserve-deployer.yaml grants it: kubectl apply -n models -f "
        "deploy/rbac/kserve-deployer.yaml, with its bindings' subject set to ServiceAccount "
        "pipeline-runner in namespace kubeflow")


def test_a_401_says_to_renew_the_credentials(kube):
    kube.unauthorized()
    with pytest.raises(KServeError, match=r"did not accept the credentials \(401 Unauthorized\)"
                                          r"; renew them \(gcloud container clusters"):
        services(kube).status("penguins")


@pytest.mark.parametrize("mode", ["serverless", "standard"])
def test_a_cluster_without_kserve_is_named(mode):
    with FakeKServe(installed=False) as kube:
        isvc = services(kube, mode)
        with pytest.raises(KServeError, match="KServe is not installed in this cluster"):
            isvc.deploy("penguins", version(1), CPU)
        with pytest.raises(KServeError, match="KServe is not installed"):
            isvc.status("penguins")  # not "nothing deployed"


def test_a_missing_object_is_still_just_missing(kube):
    assert services(kube).status("penguins") is None


def test_a_terse_404_is_told_from_a_missing_kserve_by_listing():
    with FakeKServe(terse_not_found=True) as kube:
        isvc = services(kube)
        assert isvc.status("penguins") is None
        isvc.deploy("penguins", version(1), CPU)
        assert kube.traffic() == {uri(1): 100} and not kube.violations
