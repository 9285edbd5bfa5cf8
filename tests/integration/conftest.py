"""Fixtures for registry backends talking HTTP to local fake servers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import CONTRACTS

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
    from components.register.backends import RegistrySettings

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
                    "contract layer needs ../shared/contracts")
    pytest.importorskip("openapi_core", reason="openapi-core validates the fake's requests")
    from tests.integration.fake_model_registry import FakeModelRegistry

    with FakeModelRegistry(MODEL_REGISTRY_CONTRACT) as fake:
        yield fake
        assert fake.contract_violations == [], fake.contract_violations
