"""Fixtures: fake KFP, Vertex and Kubeflow Model Registry servers (checked for contract
violations after each test), configs pointing at them, and fast retry policies."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gkeflow.pipelines.targets.transport import RetryPolicy
from tests.conftest import CONTRACTS
from tests.gkeflow_cli import gkeflow  # noqa: F401  (the tests import it from here)
from tests.integration.fakes import KFP_SWAGGER, FakeKfpServer, FakeVertexServer

TOKEN = "kfp-test-token-5f1c9e2a7b"  # a value that must never show up in any output
#: The images: section of every test config: images built and pushed (built-images.lock), so
#: submit and schedule apply accept them (tests/compile/test_images_config.py: refusal).
BUILT_IMAGES = {"registry": "europe-west4-docker.pkg.dev/my-project/ml", "tag": "test",
                "lock": str(Path(__file__).with_name("built-images.lock"))}
FAST = RetryPolicy(attempts=4, base_delay_s=0.01, max_delay_s=0.05, timeout_s=5.0)


@pytest.fixture
def kfp_server():
    with FakeKfpServer(expected_token=TOKEN) as server:
        yield server
        assert not server.violations, "requests broke the KFP contract:\n" + "\n".join(
            server.violations)


@pytest.fixture
def vertex_server():
    with FakeVertexServer() as server:
        yield server
        assert not server.violations, "requests broke the Vertex contract:\n" + "\n".join(
            server.violations)


@pytest.fixture
def token_env(monkeypatch):
    monkeypatch.setenv("GKEFLOW_TEST_KFP_TOKEN", TOKEN)
    return "GKEFLOW_TEST_KFP_TOKEN"


def config_dict(kfp_url: str | None, vertex_url: str | None, schedules=(), **extra) -> dict:
    targets = {}
    if kfp_url:
        targets["gke"] = {"host": kfp_url, "experiment": "gkeflow-tests",
                          "auth": {"token_env": "GKEFLOW_TEST_KFP_TOKEN"}}
    if vertex_url:
        targets["vertex"] = {
            "project": "my-project", "region": "us-central1",
            "pipeline_root": "gs://my-bucket//pipeline-root/",
            "service_account": "pipelines@my-project.iam.gserviceaccount.com",
            "network": "projects/123456/global/networks/ml-vpc",
            "encryption_key": "projects/my-project/locations/us-central1/keyRings/ml/"
                              "cryptoKeys/pipelines",
            "labels": {"Team Name": "ML Platform!", "cost-center": "R&D 42"},
            "enable_caching": False, "api_endpoint": vertex_url}
    return {"targets": targets, "images": BUILT_IMAGES,
            "parameters": {"default": {"epochs": 2}, "prod": {"epochs": 5,
                                                              "min_accuracy": 0.9}},
            "schedules": list(schedules), **extra}


@pytest.fixture
def make_config():
    from gkeflow.pipelines.settings.config import GkeflowConfig

    def _make(*args, **kwargs) -> GkeflowConfig:
        return GkeflowConfig.model_validate(config_dict(*args, **kwargs))

    return _make


@pytest.fixture
def write_config(tmp_path):
    def _write(data: dict, name: str = "gkeflow.yaml") -> Path:
        path = tmp_path / name
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        return path

    return _write


@pytest.fixture
def swagger_layer():
    if not KFP_SWAGGER.exists():
        pytest.skip(f"{KFP_SWAGGER.parent} not present: KFP request bodies are not checked "
                    "against the swagger in this run")
    return KFP_SWAGGER


# ---------------------------------------------------------------- model registries

MODEL_REGISTRY_CONTRACT = CONTRACTS / "kubeflow-model-registry.openapi.yaml"


@pytest.fixture
def saved_model_dir(tmp_path) -> Path:
    """A directory that passes the SavedModel check (registration never loads it)."""
    path = tmp_path / "model"
    path.mkdir()
    (path / "saved_model.pb").write_bytes(b"\x08\x01")
    return path


@pytest.fixture
def fake_vertex():
    from tests.integration.fake_vertex import FakeVertex

    with FakeVertex() as fake:
        yield fake


@pytest.fixture
def vertex_uri(fake_vertex) -> str:
    return f"vertex://projects/{fake_vertex.project}/locations/{fake_vertex.location}"


@pytest.fixture
def fast_retries():
    from gkeflow.components.register.backends import RegistrySettings

    def make(**kwargs) -> RegistrySettings:
        return RegistrySettings(retry_delay_s=0.01, **kwargs)

    return make


@pytest.fixture
def registry_token(tmp_path, monkeypatch) -> str:
    """A bearer token where the model-registry client looks for one (the contract needs it)."""
    token_file = tmp_path / "token"
    token_file.write_text("test-token")
    monkeypatch.setenv("KF_PIPELINES_SA_TOKEN_PATH", str(token_file))
    return "test-token"


@pytest.fixture
def fake_model_registry(registry_token):
    if not MODEL_REGISTRY_CONTRACT.exists():
        pytest.skip(f"{MODEL_REGISTRY_CONTRACT} not present: the Kubeflow Model Registry "
                    "contract layer needs tests/contracts")
    pytest.importorskip("openapi_core", reason="openapi-core validates the fake's requests")
    from tests.integration.fake_model_registry import FakeModelRegistry

    with FakeModelRegistry(MODEL_REGISTRY_CONTRACT) as fake:
        yield fake
        assert fake.contract_violations == [], fake.contract_violations
