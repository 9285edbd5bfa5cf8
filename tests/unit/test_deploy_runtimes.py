"""Serving runtimes matched to the training TensorFlow."""

import pytest

from gkeflow.components.deploy.runtimes import (
    is_gpu_image,
    kserve_runtime_version,
    prebuilt_minors,
    vertex_image,
)


def test_vertex_picks_the_same_minor_else_the_newest_older_one_and_says_so():
    minors = prebuilt_minors("cpu")
    newest = max(minors)
    same = vertex_image(f"2.{newest}.1", gpu=False)
    assert same.image == f"us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-{newest}:latest"
    assert same.note == ""
    newer = vertex_image(f"2.{newest + 6}.0", gpu=True, region="europe")
    assert newer.image == f"europe-docker.pkg.dev/vertex-ai/prediction/tf2-gpu.2-{newest}:latest"
    assert f"TensorFlow 2.{newest + 6}" in newer.note and "registry.serving_image" in newer.note


def test_kserve_runtime_version_and_gpu_images():
    assert kserve_runtime_version("2.21.0", gpu=False) == "2.21.0"
    assert kserve_runtime_version("2.21.3", gpu=True) == "2.21.0-gpu"
    assert not is_gpu_image("us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest")
    assert is_gpu_image("us-docker.pkg.dev/vertex-ai/prediction/tf2-gpu.2-15:latest")
    assert is_gpu_image("europe-docker.pkg.dev/my-project/serving/custom:1")  # not known CPU
    with pytest.raises(ValueError, match="TensorFlow 2"):
        kserve_runtime_version("1.15.0", gpu=False)
