"""The GPU image builds from its hashed lock and passes its Dockerfile's import check.

No GPU here: CUDA's libraries are installed and TensorFlow must report a CUDA build, but no
kernel runs on a device, and Ray Tune (a GKE Ray sweep's head and trials) imports. ``make
image-test-gpu`` runs this (it downloads about 3 GB)."""

from __future__ import annotations

import time

import pytest

from tests.conftest import REPO_ROOT
from tests.images.conftest import TAG, USER_CODE
from tests.images.rootfs import image_size, run_in_image

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

GPU_REFERENCE = f"localhost/gkeflow-gpu:{TAG}"


def test_gpu_image_builds_imports_and_is_a_cuda_build():
    from gkeflow.pipelines.targets.image_build import build_image

    started = time.monotonic()
    digest = build_image("gpu", GPU_REFERENCE, None, [USER_CODE / "penguin_head.py"],
                         builder="podman", push=False, echo=lambda line: print(line, flush=True))
    build_s = time.monotonic() - started
    assert digest.startswith("sha256:")
    # a GKE Ray sweep's head and trials run Ray Tune in it (the driver, the trial code)
    probe = ("import tensorflow as tf, penguin_head, gkeflow.components.train.logic; "
             "import ray.tune, gkeflow.components.sweep.ray_driver, "
             "gkeflow.components.sweep.ray_tune; "
             "info = tf.sysconfig.get_build_info(); "
             "print(tf.__version__, tf.test.is_built_with_cuda(), info.get('cuda_version'), "
             "info.get('cudnn_version'))")
    done = run_in_image(GPU_REFERENCE, ["python", "-c", probe], {})
    assert done.returncode == 0, done.stdout
    version, cuda_build, cuda, cudnn = done.stdout.split()[-4:]
    locked = (REPO_ROOT / "images" / "requirements-gpu.lock").read_text(encoding="utf-8")
    assert f"tensorflow=={version} " in locked and cuda_build == "True"
    print(f"GPU image: {image_size(GPU_REFERENCE) / 1e9:.2f} GB uncompressed, built in "
          f"{build_s:.0f} s; TensorFlow {version} for CUDA {cuda}, cuDNN {cudnn}")
