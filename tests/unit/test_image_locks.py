"""The images' hashed locks pin every dependency pyproject.toml names, with hashes, at
versions pyproject.toml allows; the CPU and GPU images carry the same TensorFlow."""

from __future__ import annotations

import tomllib

import pytest
from packaging.requirements import Requirement

from gkeflow.pipelines.targets.image_locks import (
    BUILD_BACKEND,
    CLIENT_ONLY,
    FLAVOURS,
    PLATFORMS,
    TENSORFLOW_ONLY,
    LockError,
    constraints,
    direct_names,
    left_out,
    lock_path,
    normalise,
    read_pins,
    resolver_input,
)
from tests.conftest import REPO_ROOT

PYPROJECT = REPO_ROOT / "pyproject.toml"
IMAGES = REPO_ROOT / "images"


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_the_lock_pins_every_dependency_of_pyproject_with_hashes(flavour):
    pins = read_pins(lock_path(IMAGES, flavour))
    assert direct_names(PYPROJECT, flavour) <= set(pins)
    for line in resolver_input(PYPROJECT, flavour):
        requirement = Requirement(line)
        version, _ = pins[normalise(requirement.name)]
        assert requirement.specifier.contains(version, prereleases=True), (line, version)
    unhashed = [name for name, (_, hashes) in pins.items() if not hashes]
    assert not unhashed


def test_the_cpu_image_gets_tensorflow_cpu_at_the_gpu_images_tensorflow_version():
    cpu = read_pins(lock_path(IMAGES, "cpu"))
    gpu = read_pins(lock_path(IMAGES, "gpu"))
    assert "tensorflow" not in cpu and "tensorflow-cpu" in cpu
    assert cpu["tensorflow-cpu"][0] == gpu["tensorflow"][0]
    # no CUDA wheels; nvidia-ml-py (NVML bindings, pure Python, 58 kB) is in both images
    assert not [name for name in cpu if name.startswith("nvidia-") and name != "nvidia-ml-py"]
    assert {"nvidia-cudnn-cu12", "nvidia-cublas-cu12"} <= set(gpu)


def test_resolver_input_swaps_only_tensorflow_and_xgboost_and_the_gpu_image_adds_ray():
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    cpu, gpu = resolver_input(PYPROJECT, "cpu"), resolver_input(PYPROJECT, "gpu")
    kept = [line for line in project["dependencies"]
            if normalise(Requirement(line).name) not in CLIENT_ONLY]
    ray = project["optional-dependencies"]["ray"]  # a GKE Ray sweep runs in the GPU image
    assert gpu[len(cpu):] == ray and {"ray", "optuna"} <= {
        normalise(Requirement(line).name) for line in ray}
    gpu = gpu[:len(cpu)]
    assert len(cpu) == len(gpu) == len(kept) == len(project["dependencies"]) - len(CLIENT_ONLY)
    changed = [(a, b) for a, b in zip(cpu, gpu, strict=True) if a != b]
    assert len(changed) == 2  # TensorFlow and XGBoost: the builds with CUDA kernels
    assert changed[0][0].startswith("tensorflow-cpu") and changed[0][1].startswith(
        "tensorflow[and-cuda]")
    assert changed[1][0].startswith("xgboost-cpu") and changed[1][1].startswith("xgboost<")
    assert changed[1][0].split("xgboost-cpu")[1] == changed[1][1].split("xgboost")[1]


def test_the_slim_lock_has_no_tensorflow_and_the_rest_at_the_cpu_locks_versions():
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    slim = resolver_input(PYPROJECT, "slim")
    names = [normalise(Requirement(line).name) for line in slim]
    assert not {"tensorflow", "tensorflow-cpu", "tensorboard", "nvidia-ml-py"} & set(names)
    kept = [line for line in project["dependencies"]
            if normalise(Requirement(line).name) not in TENSORFLOW_ONLY + CLIENT_ONLY]
    assert [str(Requirement(line)) for line in slim] == [  # what builds its source-only packages
        str(Requirement(line)) for line in [*kept, "setuptools", "wheel"]]
    pins = read_pins(lock_path(IMAGES, "slim"))
    banned = ("tensorflow", "tensorboard", "keras", "tf-keras", "libclang", "h5py", "ml-dtypes",
              "nvidia-", "grpcio-tools")
    assert not [name for name in pins if name.startswith(banned)]
    assert {"kfp", "pandas", "pyarrow", "google-cloud-aiplatform", "kubernetes"} <= set(pins)
    cpu = read_pins(lock_path(IMAGES, "cpu"))
    assert {n: v for n, (v, _) in pins.items() if n in cpu and v != cpu[n][0]} == {}


def test_unknown_flavour_is_refused():
    with pytest.raises(LockError, match="unknown image flavour 'rocm'"):
        resolver_input(PYPROJECT, "rocm")


def test_the_tpu_lock_is_the_cpu_lock_plus_jax_for_tpu():
    """Keras on JAX trains on the chips (jax, jaxlib and the libtpu jax[tpu] names); the CPU
    image's TensorFlow feeds and exports, at the CPU lock's versions; no tensorflow-tpu (it
    stopped at 2.20). The TPU VM platform (manylinux_2_31) is what libtpu publishes for."""
    tpu = read_pins(lock_path(IMAGES, "tpu"))
    cpu = read_pins(lock_path(IMAGES, "cpu"))
    jax_version = tpu["jax"][0]
    assert tpu["jaxlib"][0] == jax_version and "libtpu" in tpu
    assert tpu["tensorflow-cpu"] == cpu["tensorflow-cpu"]
    assert not {"tensorflow", "tensorflow-tpu", "libclang"} & set(tpu)
    assert not [name for name in tpu if name.startswith("nvidia-") and name != "nvidia-ml-py"]
    differ = {n: (cpu[n][0], v) for n, (v, _) in tpu.items() if n in cpu and v != cpu[n][0]}
    assert differ == {}
    assert set(tpu) - set(cpu) <= {"jax", "jaxlib", "libtpu", "scipy", "opt-einsum"}
    assert PLATFORMS["tpu"] == "x86_64-manylinux_2_31"
    lines = resolver_input(PYPROJECT, "tpu")
    assert any(x.startswith("jax[tpu]") for x in lines)
    assert any(x.startswith("tensorflow-cpu") for x in lines)


def test_pins_and_constraints_read_a_hashed_lock(tmp_path):
    lock = tmp_path / "requirements.lock"
    lock.write_text(
        "# This file was autogenerated by uv via the following command:\n"
        "#    make locks\n"
        "Absl_Py==2.5.1 \\\n"
        "    --hash=sha256:" + "a" * 64 + " \\\n"
        "    --hash=sha256:" + "b" * 64 + "\n"
        "    # via keras\n"
        "tensorflow-cpu==2.21.0 ; sys_platform == 'linux' \\\n"
        "    --hash=sha256:" + "c" * 64 + "\n")
    assert read_pins(lock) == {"absl-py": ("2.5.1", ["a" * 64, "b" * 64]),
                               "tensorflow-cpu": ("2.21.0", ["c" * 64])}
    assert constraints(lock) == "absl-py==2.5.1\ntensorflow-cpu==2.21.0\n"


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_no_lock_installs_what_only_the_gkeflow_command_uses(flavour):
    """The step images leave out the command's own clients (Cloud Billing, Cloud Monitoring)
    and what only it, or nothing of the suite, loads (google-genai, GitPython, uvicorn,
    pygments, ...): the same rule for every image, from one list."""
    pins = read_pins(lock_path(IMAGES, flavour))
    assert not set(pins) & set(left_out(flavour))
    assert set(CLIENT_ONLY) | {"google-genai", "gitpython", "pygments"} <= set(left_out(flavour))
    assert not {normalise(Requirement(line).name) for line in resolver_input(PYPROJECT, flavour)
                } & set(CLIENT_ONLY)
    # pinned for building the source-only packages; the build removes them (images/prune.sh)
    assert set(BUILD_BACKEND) <= set(pins)

