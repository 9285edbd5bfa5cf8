"""The slim and CPU images, each built once per session with podman (image_build).

These tests build a real image (minutes) and run the compiled steps inside it, so they run
only under ``make image-test`` (``GKEFLOW_IMAGE_TEST=1``) and only where podman can build;
elsewhere they are skipped with the reason.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.images.rootfs import podman_can_build

HERE = Path(__file__).resolve().parent
USER_CODE = HERE / "user_code"
#: Local tags of the images under test (never pushed); GKEFLOW_IMAGE_TEST_TAG changes the
#: tag, so that two checkouts can build on one machine at the same time.
TAG = os.environ.get("GKEFLOW_IMAGE_TEST_TAG", "image-test")
CPU_REFERENCE = f"localhost/gkeflow-cpu:{TAG}"
SLIM_REFERENCE = f"localhost/gkeflow:{TAG}"
#: Build timing, read by the bench figures in bench/RESULTS.md.
TIMINGS: dict[str, float] = {}


def pytest_collection_modifyitems(config, items):
    here = [item for item in items if HERE in Path(str(item.fspath)).parents]
    if not here:
        return
    if os.environ.get("GKEFLOW_IMAGE_TEST") != "1":
        reason = ("builds a container image (minutes): run make image-test, "
                  "make image-test-gpu or make image-test-tpu")
    else:
        reason = podman_can_build()
    for item in here:
        item.add_marker(pytest.mark.image)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def cpu_image() -> str:
    """Build the CPU image from the installed package's Dockerfile and lock, with the user's
    extra requirements and an included module, keeping it local; returns its reference."""
    from gkeflow.pipelines.targets.image_build import build_image

    started = time.monotonic()
    digest = build_image("cpu", CPU_REFERENCE, USER_CODE / "requirements.txt",
                         [USER_CODE / "penguin_head.py"], builder="podman", push=False,
                         echo=lambda line: print(line, flush=True))
    TIMINGS["build_s"] = time.monotonic() - started
    assert digest.startswith("sha256:") and len(digest) == 71
    return CPU_REFERENCE


@pytest.fixture(scope="session")
def slim_image() -> str:
    """Build the slim image (no TensorFlow) the same way; returns its reference."""
    from gkeflow.pipelines.targets.image_build import build_image

    started = time.monotonic()
    digest = build_image("slim", SLIM_REFERENCE, USER_CODE / "requirements.txt",
                         [USER_CODE / "penguin_head.py"], builder="podman", push=False,
                         echo=lambda line: print(line, flush=True))
    TIMINGS["slim_build_s"] = time.monotonic() - started
    assert digest.startswith("sha256:") and len(digest) == 71
    return SLIM_REFERENCE
