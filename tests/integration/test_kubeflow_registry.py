"""Kubeflow Model Registry backend: the real model-registry client against a local fake whose
requests and responses are validated against the published OpenAPI contract."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from gkeflow.components.register.backends import champion_or_latest, open_registry
from gkeflow.components.register.kubeflow import KubeflowRegistry
from gkeflow.components.register.local_registry import RegistryError
from gkeflow.components.register.logic import register, register_for_pipeline
from tests.integration.sign_in_page import sign_in_page


def _posts(fake, fragment: str) -> int:
    return sum(1 for method, path in fake.requests
               if method == "POST" and path.split("?")[0].endswith(fragment))


@pytest.fixture
def kf_uri(fake_model_registry) -> str:
    return f"kubeflow://127.0.0.1:{fake_model_registry.port}"


def test_registers_model_version_and_tensorflow_artifact(fake_model_registry, kf_uri,
                                                         saved_model_dir, fast_retries):
    settings = fast_retries()
    first, created1 = register(saved_model_dir, "gs://b/run-1/model", "churn",
                               {"accuracy": 0.91}, "run-1", kf_uri, labels={"team": "ml"},
                               lineage={"data_uri": "gs://b/data.csv"}, settings=settings)
    second, created2 = register(saved_model_dir, "gs://b/run-2/model", "churn",
                                {"accuracy": 0.93}, "run-2", kf_uri, settings=settings)
    assert (first.version, created1, second.version, created2) == (1, True, 2, True)

    fake = fake_model_registry
    assert [m["name"] for m in fake.registered_models.values()] == ["churn"]
    versions = sorted(fake.model_versions.values(), key=lambda v: int(v["id"]))
    assert [v["name"] for v in versions] == ["1", "2"]
    props = versions[0]["customProperties"]
    assert props["metric:accuracy"] == {"metadataType": "MetadataDoubleValue",
                                        "double_value": 0.91}
    assert props["pipeline_run_id"]["string_value"] == "run-1"
    assert props["lineage:data_uri"]["string_value"] == "gs://b/data.csv"
    assert props["label:team"]["string_value"] == "ml"
    artifacts = sorted(fake.artifacts.values(), key=lambda a: int(a["id"]))
    assert [(a["artifactType"], a["modelFormatName"], a["uri"]) for a in artifacts] == [
        ("model-artifact", "tensorflow", "gs://b/run-1/model"),
        ("model-artifact", "tensorflow", "gs://b/run-2/model"),
    ]
    assert fake.version_artifacts == {versions[0]["id"]: [artifacts[0]["id"]],
                                      versions[1]["id"]: [artifacts[1]["id"]]}
    # Read back through the backend.
    assert first.metrics == {"accuracy": 0.91} and first.labels == {"team": "ml"}
    assert first.lineage["data_uri"] == "gs://b/data.csv" and first.run_id == "run-1"
    assert first.uri == "gs://b/run-1/model"


def test_retry_returns_the_same_version_and_completes_a_half_done_one(
        fake_model_registry, kf_uri, fast_retries):
    registry = open_registry(kf_uri, fast_retries(attempts=2))
    fake = fake_model_registry
    # The first attempt dies after the version, before the artifact (e.g. the pod is killed).
    fake.fail(503, "artifact store unavailable", times=2, method="POST",
              path_contains="/artifacts")
    with pytest.raises(RegistryError, match="artifact store unavailable"):
        registry.register("churn", "gs://b/m", {"accuracy": 0.9}, "run-1")
    assert len(fake.model_versions) == 1 and fake.artifacts == {}
    # The step's retry finds the version, adds the missing artifact, creates nothing else.
    version, created = registry.register("churn", "gs://b/m", {"accuracy": 0.9}, "run-1")
    again, created_again = registry.register("churn", "gs://b/m", {"accuracy": 0.9}, "run-1")
    assert (version.version, created, again.version, created_again) == (1, False, 1, False)
    assert len(fake.model_versions) == 1 and len(fake.artifacts) == 1
    assert _posts(fake, "/model_versions") == 1


def test_server_errors_are_retried(fake_model_registry, kf_uri, fast_retries, capsys):
    registry = open_registry(kf_uri, fast_retries())
    fake_model_registry.fail(503, "registry restarting", times=2, method="POST",
                             path_contains="/model_versions")
    version, created = registry.register("churn", "gs://b/m", {}, "run-1")
    assert (version.version, created) == (1, True)
    assert len(fake_model_registry.model_versions) == 1
    assert "registry restarting" in capsys.readouterr().out


def test_client_errors_are_reported_with_the_server_message(fake_model_registry, kf_uri,
                                                            fast_retries):
    registry = open_registry(kf_uri, fast_retries())
    fake_model_registry.fail(403, "user cannot create registered models in namespace ml",
                             method="POST")
    with pytest.raises(RegistryError,
                       match=r"HTTP 403.*user cannot create registered models in namespace ml"):
        registry.register("churn", "gs://b/m", {}, "run-1")
    assert _posts(fake_model_registry, "/registered_models") == 1  # not retried


def test_a_web_page_at_the_registry_address_is_named_not_parsed(fast_retries):
    with sign_in_page() as port:
        registry = open_registry(f"kubeflow://127.0.0.1:{port}", fast_retries())
        with pytest.raises(RegistryError, match="answered with something that is not its "
                                                "REST API.*check registry_uri and the token"):
            registry.register("churn", "gs://b/m", {}, "run-1")


def test_alias_moves_and_champion_lookup(fake_model_registry, kf_uri, fast_retries):
    registry = open_registry(kf_uri, fast_retries())
    assert champion_or_latest(registry, "churn") is None
    registry.register("churn", "gs://b/1", {"accuracy": 0.8}, "run-1", aliases=("candidate",))
    registry.register("churn", "gs://b/2", {"accuracy": 0.9}, "run-2", aliases=("candidate",))
    assert registry.get_by_alias("churn", "candidate").version == 2
    assert champion_or_latest(registry, "churn").version == 2
    registry.set_alias("churn", 1, "champion")
    assert champion_or_latest(registry, "churn").version == 1
    moved = registry.set_alias("churn", 2, "champion")
    assert moved.aliases == ("candidate", "champion")
    assert registry.get("churn", 1).aliases == ()
    assert [(v.name, v.version, v.aliases) for v in registry.list()] == [
        ("churn", 1, ()), ("churn", 2, ("candidate", "champion"))]
    with pytest.raises(RegistryError, match="no version 9"):
        registry.set_alias("churn", 9, "champion")


def test_concurrent_registrations_get_distinct_versions(fake_model_registry, kf_uri):
    def register_one(i: int) -> int:
        registry = KubeflowRegistry(kf_uri, retry_delay_s=0.01)
        return registry.register("churn", f"gs://b/{i}", {}, f"run-{i}")[0].version

    with ThreadPoolExecutor(max_workers=4) as pool:
        versions = sorted(pool.map(register_one, range(8)))
    assert versions == list(range(1, 9))
    assert len(fake_model_registry.model_versions) == 8
    assert len(fake_model_registry.registered_models) == 1


@pytest.mark.parametrize(
    "change, message",
    [
        ({"labels": {"Team": "ml"}}, "invalid label key"),
        ({"aliases": ("not valid",)}, "invalid alias"),
        ({"model_name": "-churn"}, "invalid model name"),
        ({"registry_uri": "kubeflow://host:port:bad"}, "invalid Kubeflow Model Registry URI"),
        ({"run_id": ""}, "run id is empty"),
    ],
)
def test_bad_input_fails_before_any_request(fake_model_registry, kf_uri, saved_model_dir,
                                            change, message):
    args = {"model_dir": saved_model_dir, "model_uri": "gs://b/m", "model_name": "churn",
            "metrics": {}, "run_id": "run-1", "registry_uri": kf_uri, **change}
    with pytest.raises(RegistryError, match=message):
        register(**args)
    assert fake_model_registry.requests == []


def test_pipeline_step_metadata(fake_model_registry, kf_uri, saved_model_dir, fast_retries):
    outcome = register_for_pipeline(
        model_path=str(saved_model_dir), model_uri="gs://b/m", model_name="churn",
        metrics_metadata={"accuracy": 0.9}, run_id="run-1", task_key="register-model",
        registry_uri=kf_uri, settings=fast_retries())
    assert outcome.metadata["backend"] == "kubeflow"
    assert outcome.metadata["version"] == 1
    assert "/registered_models/" in outcome.metadata["resourceName"]
    assert outcome.artifact_uri == ""
