"""Serving runtimes matched to the training TensorFlow."""

import re
from pathlib import Path

import pytest

from gkeflow.components.images import SERVING_TF_VERSION, serving_reference
from gkeflow.components.serving.runtimes import (
    RuntimeMismatch,
    image_tf_version,
    is_gpu_image,
    kserve_runtime_version,
    prebuilt_minors,
    tf_serving_container,
    vertex_runtime,
)
from gkeflow.components.serving.serving_tags import RELEASES, check_release

REPO = Path(__file__).resolve().parents[2]
BUILT = serving_reference("europe-west4-docker.pkg.dev/p/ml") + "@sha256:" + "a" * 64
UNBUILT = serving_reference("europe-west4-docker.pkg.dev/p/ml")


def test_a_model_a_prebuilt_container_serves_gets_that_container():
    newest = max(prebuilt_minors("cpu"))
    runtime = vertex_runtime(f"2.{newest}.1", serving_image=BUILT)
    assert runtime.image == f"us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-{newest}:latest"
    assert runtime.tf_version == f"2.{newest}" and not runtime.tf_serving


def test_a_newer_model_gets_the_built_tf_serving_image_of_its_version():
    runtime = vertex_runtime(SERVING_TF_VERSION, serving_image=BUILT)
    assert runtime.image == BUILT and runtime.tf_serving
    assert runtime.tf_version == SERVING_TF_VERSION


def test_no_built_serving_image_is_refused_naming_both_versions_and_the_fix():
    newest = max(prebuilt_minors("cpu"))
    for image in ("", UNBUILT):
        with pytest.raises(RuntimeMismatch) as caught:
            vertex_runtime("2.21.0", serving_image=image)
        message = str(caught.value)
        assert "2.21.0" in message and f"2.{newest}" in message
        assert "gkeflow images build" in message and "\n" not in message


def test_a_model_of_another_tensorflow_than_the_serving_image_is_refused():
    with pytest.raises(RuntimeMismatch, match=rf"TensorFlow 2\.19\.0 but gkeflow-serving "
                                              rf"serves TensorFlow {SERVING_TF_VERSION}"):
        vertex_runtime("2.19.0", serving_image=BUILT)


def test_a_configured_container_is_checked_when_its_tensorflow_is_known():
    prebuilt = "us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest"
    with pytest.raises(RuntimeMismatch, match="serves TensorFlow 2.15 but the model was saved "
                                              "with TensorFlow 2.21.0"):
        vertex_runtime("2.21.0", serving_image=BUILT, configured=prebuilt)
    own = vertex_runtime("2.21.0", configured="europe-docker.pkg.dev/p/r/mine:1")
    assert own.image == "europe-docker.pkg.dev/p/r/mine:1" and "not known" in own.note


def test_tf_serving_container_routes_and_port():
    spec = tf_serving_container("penguins")
    assert spec["serving_container_ports"] == [8501]
    assert spec["serving_container_predict_route"] == "/v1/models/penguins:predict"
    assert spec["serving_container_health_route"] == "/v1/models/penguins"
    assert spec["serving_container_environment_variables"] == {"MODEL_NAME": "penguins"}


def test_kserve_runtime_version_names_only_known_releases():
    assert kserve_runtime_version("2.21.0", gpu=False) == "2.21.0"
    assert kserve_runtime_version("2.21.3", gpu=True) == "2.21.0-gpu"
    assert kserve_runtime_version("2.16.2", gpu=False) == "2.16.1"  # no 2.16.0 was released
    with pytest.raises(RuntimeMismatch, match="no TensorFlow Serving release for TensorFlow "
                                              "2.22"):
        kserve_runtime_version("2.22.0", gpu=False)
    with pytest.raises(ValueError, match="TensorFlow 2"):
        kserve_runtime_version("1.15.0", gpu=False)


def test_gpu_images():
    assert not is_gpu_image("us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest")
    assert is_gpu_image("us-docker.pkg.dev/vertex-ai/prediction/tf2-gpu.2-15:latest")
    assert is_gpu_image("europe-docker.pkg.dev/my-project/serving/custom:1")  # not known CPU
    assert not is_gpu_image(BUILT)
    assert image_tf_version(BUILT) == SERVING_TF_VERSION
    assert image_tf_version("europe-docker.pkg.dev/my-project/serving/custom:1") == ""


def test_the_serving_image_is_the_locks_tensorflow_and_a_known_release():
    dockerfile = (REPO / "images" / "serving.Dockerfile").read_text()
    [base] = re.findall(r"^FROM (\S+)", dockerfile, flags=re.MULTILINE)
    assert base == f"docker.io/tensorflow/serving:{SERVING_TF_VERSION}"
    check_release(SERVING_TF_VERSION)
    for lock, package in (("requirements-cpu.lock", "tensorflow-cpu"),
                          ("requirements-gpu.lock", "tensorflow")):
        pinned = re.search(rf"^{package}==(\S+)", (REPO / "images" / lock).read_text(),
                           flags=re.MULTILINE)
        assert pinned and pinned.group(1) == SERVING_TF_VERSION, lock
    assert all(evidence in ("github-tag", "pypi+run") and re.match(r"\d{4}-\d\d-\d\d$", date)
               for evidence, date in RELEASES.values())
