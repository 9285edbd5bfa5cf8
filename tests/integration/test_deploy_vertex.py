"""Vertex AI endpoint logic against the strict EndpointService fake over real HTTP:
create, canary, promote, rollback, retried and lost requests, 503s — exactly one endpoint
and the expected traffic at every step."""

from __future__ import annotations

import pytest

from gkeflow.components.cloud.retry import GaveUp, RetryPolicy
from gkeflow.components.deploy.vertex_endpoint import DeployError, Machine, VertexEndpoints
from tests.integration.fake_vertex_endpoints import FakeEndpointService

FAST = RetryPolicy(call_timeout_s=5, budget_s=5, initial_s=0.01, maximum_s=0.02)
T4 = Machine("n1-standard-4", "NVIDIA_TESLA_T4", 1, min_replicas=1, max_replicas=2)


@pytest.fixture
def fake():
    with FakeEndpointService() as service:
        yield service
        assert not service.violations, service.violations


@pytest.fixture
def endpoints(fake):
    lines: list[str] = []
    api = VertexEndpoints(fake.project, fake.location, FAST, api_endpoint=fake.url,
                          echo=lines.append, poll_s=0.0)
    api.lines = lines
    return api


def model(fake, version: str) -> str:
    fake.add_model("555", version)
    return f"{fake.parent}/models/555@{version}"


def test_canary_promote_rollback(fake, endpoints):
    v1, v2 = model(fake, "1"), model(fake, "2")
    state = endpoints.deploy("penguins", v1, T4, percent=10)
    assert fake.split_by_version() == {"1": 100}  # the first version takes everything
    assert [d.display_name for d in state.deployed] == ["penguins-v1"]

    endpoints.deploy("penguins", v2, T4, percent=10)
    assert fake.split_by_version() == {"1": 90, "2": 10}

    endpoints.promote("penguins", keep=1)
    assert fake.split_by_version() == {"1": 0, "2": 100}  # v1 kept for a rollback

    endpoints.rollback("penguins")
    assert fake.split_by_version() == {"1": 90, "2": 10}  # the split before the promotion
    assert len(fake.endpoints) == 1 and fake.create_calls == 1 and fake.deploy_calls == 2
    resources = fake.only_endpoint().deployed_models[0].dedicated_resources
    assert resources.machine_spec.accelerator_type.name == "NVIDIA_TESLA_T4"
    assert (resources.min_replica_count, resources.max_replica_count) == (1, 2)


def test_rollback_of_a_canary_undeploys_it(fake, endpoints):
    endpoints.deploy("penguins", model(fake, "1"), T4)
    endpoints.deploy("penguins", model(fake, "2"), T4, percent=25)
    assert fake.split_by_version() == {"1": 75, "2": 25}
    endpoints.rollback("penguins")
    assert fake.split_by_version() == {"1": 100}
    assert len(fake.only_endpoint().deployed_models) == 1


def test_promote_undeploys_beyond_keep(fake, endpoints):
    for version in ("1", "2", "3"):
        endpoints.deploy("penguins", model(fake, version), T4)
        endpoints.promote("penguins", keep=1)
    assert fake.split_by_version() == {"2": 0, "3": 100}
    endpoints.promote("penguins", keep=0)
    assert fake.split_by_version() == {"3": 100}
    with pytest.raises(DeployError, match="no longer deployed"):
        endpoints.rollback("penguins")


def test_redeploying_the_same_version_changes_nothing(fake, endpoints):
    v1, v2 = model(fake, "1"), model(fake, "2")
    endpoints.deploy("penguins", v1, T4)
    endpoints.deploy("penguins", v2, T4, percent=10)
    endpoints.deploy("penguins", v2, T4, percent=10)  # a retried step
    assert fake.deploy_calls == 2 and fake.split_by_version() == {"1": 90, "2": 10}


def test_lost_create_and_deploy_answers_make_nothing_twice(fake, endpoints):
    fake.lose(method="POST", path_contains="/endpoints")  # create carried out, answer lost
    fake.lose(method="POST", path_contains=":deployModel")
    endpoints.deploy("penguins", model(fake, "1"), T4)
    assert fake.create_calls == 1 and fake.deploy_calls == 1
    assert fake.split_by_version() == {"1": 100}
    assert any("answer was lost" in line for line in endpoints.lines)


def test_503s_and_lost_polls_are_retried(fake, endpoints):
    fake.fail(503, times=2, method="GET")
    fake.fail(429, times=1, method="PATCH")
    fake.lose(times=2, path_contains="/operations/")
    endpoints.deploy("penguins", model(fake, "1"), T4)
    endpoints.deploy("penguins", model(fake, "2"), T4, percent=30)
    assert len(fake.endpoints) == 1 and fake.deploy_calls == 2
    assert fake.split_by_version() == {"1": 70, "2": 30}
    assert any("retrying" in line for line in endpoints.lines)


def test_errors_are_not_retried_and_an_outage_gives_up(fake, endpoints):
    with pytest.raises(Exception, match="does not exist"):
        endpoints.deploy("penguins", f"{fake.parent}/models/999@1", T4)
    assert fake.deploy_calls == 1
    fake.violations.clear()  # that 400 was the point
    fake.fail(503, times=1000)
    outage = VertexEndpoints(fake.project, fake.location, FAST.with_(budget_s=1),
                             api_endpoint=fake.url, echo=endpoints.lines.append, poll_s=0.0)
    with pytest.raises(GaveUp, match="looking for endpoint penguins"):
        outage.deploy("penguins", model(fake, "1"), T4)


def test_rollback_and_promote_need_an_endpoint(endpoints):
    with pytest.raises(DeployError, match="no endpoint named ghost"):
        endpoints.rollback("ghost")
    with pytest.raises(DeployError, match="no endpoint named ghost"):
        endpoints.promote("ghost")


def test_hung_reads_time_out_and_make_nothing_twice(fake):
    policy = RetryPolicy(call_timeout_s=0.5, budget_s=10, initial_s=0.01, maximum_s=0.02)
    lines: list[str] = []
    endpoints = VertexEndpoints(fake.project, fake.location, policy, api_endpoint=fake.url,
                                echo=lines.append, poll_s=0.0)
    fake.hang(1.5, method="POST", path_contains="/endpoints")  # create: answer too late
    fake.hang(1.5, method="POST", path_contains=":deployModel")
    fake.hang(1.5, method="PATCH")
    endpoints.deploy("penguins", model(fake, "1"), T4)
    endpoints.deploy("penguins", model(fake, "2"), T4, percent=20)
    assert fake.create_calls == 1 and fake.deploy_calls == 2 and len(fake.endpoints) == 1
    assert fake.split_by_version() == {"1": 80, "2": 20}
    assert any("retrying" in line or "answer was lost" in line for line in lines)


def test_a_deploy_still_running_after_its_answer_was_lost_is_waited_for(fake, endpoints):
    fake.operation_polls = 3
    endpoints.deploy("penguins", model(fake, "1"), T4)
    fake.lose(method="POST", path_contains=":deployModel", finished=False)
    endpoints.deploy("penguins", model(fake, "2"), T4, percent=10)
    assert fake.deploy_calls == 2  # not a third: the running deploy was waited for
    assert fake.split_by_version() == {"1": 90, "2": 10}
    assert any("still running on the endpoint" in line for line in endpoints.lines)
