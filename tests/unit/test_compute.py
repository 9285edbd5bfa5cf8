"""ComputeProfile parsing, validation against the machine tables, plans; no KFP compile."""

from __future__ import annotations

import pytest

from gkeflow.pipelines.compute import accelerators as acc
from gkeflow.pipelines.compute.plan import plan, target_notes
from gkeflow.pipelines.compute.profiles import (
    ComputeError,
    ComputeProfile,
    apply_overrides,
    fitting_shape,
    memory_bytes,
    profile_problems,
    validate_profiles,
)
from gkeflow.pipelines.definitions.training import DEFAULT_COMPUTE, resolve_compute


def gpu(accelerator: str, count: int, cpu: str = "4", memory: str = "16G", **kw):
    return ComputeProfile(cpu=cpu, memory=memory, accelerator=accelerator,
                          accelerator_count=count, **kw)


# --------------------------------------------------------------------------- parsing


def test_vertex_spellings_are_aliases_of_gke_names():
    assert ComputeProfile(accelerator="NVIDIA_TESLA_T4", accelerator_count=1).accelerator == (
        "nvidia-tesla-t4")
    assert ComputeProfile(accelerator="nvidia_h200_141gb", accelerator_count=8,
                          cpu="8").accelerator == "nvidia-h200-141gb"


def test_string_values_from_yaml_or_cli_are_converted():
    p = ComputeProfile().with_overrides(
        cpu=4, accelerator_count="2", spot="yes", caching="off", timeout_s="2h",
        retries="3", retry_backoff_s="1m", retry_backoff_factor="1.5",
        retry_max_duration_s="30m",
    )
    assert (p.cpu, p.accelerator_count, p.spot, p.caching) == ("4", 2, True, False)
    assert (p.timeout_s, p.retries, p.retry_backoff_s) == (7200, 3, 60)
    assert (p.retry_backoff_factor, p.retry_max_duration_s) == (1.5, 1800)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"cpu": "two"}, "cpu must be a CPU quantity"),
        ({"memory": "8"}, "memory '8' has no unit; write e.g. 8G or 8Gi"),
        ({"memory": "8GB"}, "memory must be a memory quantity"),
        ({"spot": "maybe"}, "spot must be true or false"),
        ({"accelerator_count": 1.5}, "accelerator_count must be a whole number"),
        ({"accelerator_count": True}, "accelerator_count must be a whole number"),
        ({"timeout_s": "soon"}, "timeout_s must be a duration"),
        ({"retry_backoff_factor": "fast"}, "retry_backoff_factor must be a number"),
        ({"gpus": 2}, "unknown compute field gpus; valid: cpu, memory, accelerator"),
    ],
)
def test_bad_field_values_are_rejected_with_the_field_named(changes, message):
    with pytest.raises(ComputeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ComputeProfile().with_overrides(**changes)


def test_cli_overrides_name_step_and_field():
    profiles = apply_overrides(DEFAULT_COMPUTE, ["train-model.accelerator=nvidia-l4",
                                                 "train-model.accelerator_count = 2"])
    assert profiles["train-model"].accelerator == "nvidia-l4"
    assert profiles["train-model"].accelerator_count == 2
    assert profiles["prepare-data"] == DEFAULT_COMPUTE["prepare-data"]
    with pytest.raises(ComputeError, match=r"unknown step 'tain-model' \(did you mean "
                                           r"'train-model'\?\); steps are fingerp"):
        apply_overrides(DEFAULT_COMPUTE, ["tain-model.cpu=2"])
    with pytest.raises(ComputeError, match="expected STEP.FIELD=VALUE"):
        apply_overrides(DEFAULT_COMPUTE, ["train-model=2"])
    with pytest.raises(ComputeError, match="train-model: spot must be true or false"):
        apply_overrides(DEFAULT_COMPUTE, ["train-model.spot=often"])


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("profile", "expected"),
    [
        (gpu("nvidia-tesla-k80", 1),
         ("train-model: unknown accelerator 'nvidia-tesla-k80'; valid: NVIDIA_TESLA_T4 "
          "(x 1, 2, 4), ")),
        (gpu("nvidia-tesla-t4", 3),
         ("train-model: nvidia-tesla-t4 x 3 fits no machine; the N1 family hosts "
         "nvidia-tesla-t4 in counts of 1, 2, 4")),
        (gpu("nvidia-tesla-a100", 3),
         ("train-model: nvidia-tesla-a100 x 3 fits no machine; the A2 High family hosts "
         "nvidia-tesla-a100 in counts of 1, 2, 4, 8, 16")),
        (gpu("nvidia-h200-141gb", 1),
         ("train-model: nvidia-h200-141gb x 1 fits no machine; the A3 Ultra family hosts "
         "nvidia-h200-141gb in counts of 8")),
        (gpu("nvidia-l4", 1, cpu="64"),
         ("train-model: cpu 64 and memory 16G (14.9 GiB) fit no G2 machine with nvidia-l4 x 1; "
         "with that accelerator machines offer at most 32 vCPUs and 128.0 GiB")),
        (gpu("nvidia-tesla-t4", 1, memory="400G"),
         ("fit no N1 machine with nvidia-tesla-t4 x 1; with that accelerator machines offer at "
         "most 32 vCPUs and 208.0 GiB")),
        (ComputeProfile(cpu="4", memory="16G", accelerator_count=2),
         ("train-model: asks for 2 GPUs but names no accelerator; set accelerator to one of "
         "nvidia-tesla-t4")),
        (ComputeProfile(cpu="4", memory="16G", accelerator="nvidia-l4"),
         ("train-model: accelerator nvidia-l4 with accelerator_count 0; valid counts for "
         "nvidia-l4: 1, 2, 4, 8")),
        (ComputeProfile(shm_size="1Gi"),
         "train-model: shm_size 1Gi is applied to GPU steps only"),
        (gpu("nvidia-tesla-t4", 2, memory="16G", shm_size="16G"),
         "train-model: shm_size 16G must be smaller than memory 16G"),
        (ComputeProfile(retries=2, retry_backoff_factor=0),
         ("retry_backoff_factor must be >= 1 (1 keeps the wait constant; the KFP SDK silently "
         "turns 0 into 2); got 0")),
        (ComputeProfile(retries=2, retry_backoff_s=600, retry_max_duration_s=60),
         "retry_max_duration_s 60 is shorter than retry_backoff_s 600"),
        (ComputeProfile(retries=-1), "train-model: retries must be >= 0; got -1"),
        (ComputeProfile(timeout_s=-5), "train-model: timeout_s must be >= 0"),
        (ComputeProfile(cpu="0"), "train-model: cpu must be more than 0"),
        (ComputeProfile(cpu="128", memory="64G"),
         ("train-model: cpu 128 exceeds what Vertex AI Pipelines gives a step "
         "without accelerator: at most 96 vCPUs and 624 GiB")),
    ],
)
def test_each_invalid_profile_is_rejected_with_its_message(profile, expected):
    with pytest.raises(ComputeError) as raised:
        validate_profiles({"train-model": profile}, "vertex")
    assert expected in str(raised.value)
    assert str(raised.value).startswith("invalid compute for target vertex:")


def test_gpu_on_a_cpu_only_image_is_rejected():
    problems = profile_problems("evaluate-model", gpu("nvidia-tesla-t4", 1), "gke",
                                image_has_gpu=False)
    assert problems == [
        ("evaluate-model: asks for nvidia-tesla-t4 but runs in a CPU-only image, which cannot "
        "use a GPU; drop the accelerator or run the step in the GPU image")
    ]
    with pytest.raises(ComputeError, match="evaluate-model: asks for nvidia-l4 but runs in a "
                                           "CPU-only image"):
        resolve_compute("gke", {"evaluate-model": gpu("nvidia-l4", 1)})


def test_every_problem_is_reported_at_once():
    with pytest.raises(ComputeError) as raised:
        validate_profiles({"a": gpu("nvidia-tesla-t4", 3), "b": gpu("bogus", 1)}, "gke")
    assert "a: nvidia-tesla-t4 x 3" in str(raised.value)
    assert "b: unknown accelerator 'bogus'" in str(raised.value)


def test_gke_needs_room_for_its_node_reservations():
    # A whole n1-standard-32 fits on Vertex; GKE keeps part of every node for itself.
    profile = gpu("nvidia-tesla-t4", 1, cpu="32", memory="100G")
    assert fitting_shape(profile, "vertex").name == "n1-standard-32"
    assert profile_problems("train-model", profile, "vertex") == []
    problems = profile_problems("train-model", profile, "gke")
    assert len(problems) == 1
    assert "GKE nodes leave pods at most 31.85 vCPUs" in problems[0]


def test_gke_allocatable_follows_the_documented_reservations():
    shape = next(s for s in acc.GPU_SHAPES if s.name == "n1-standard-8")
    cpu, memory = acc.gke_allocatable(shape)
    # 8 vCPU: 0.06 + 0.01 + 2 x 0.005 + 4 x 0.0025 = 0.09 reserved.
    assert cpu == pytest.approx(7.91)
    # 30 GiB = 30720 MiB: kernel 30720 / 64 + 16 + 64 = 560 MiB; kube-reserved on GKE's
    # 1000-MiB "GB": 1000 + 800 + 800 + 6% of 14720 = 3483 MiB; eviction 100 MiB.
    assert memory == (30720 - 560 - 3483 - 100) / 1024


@pytest.mark.parametrize(
    ("accelerator", "count", "cpu", "memory", "vertex_shape", "scheduling"),
    [
        ("nvidia-tesla-t4", 1, "7", "26G", "n1-standard-8", "standard"),
        ("nvidia-tesla-t4", 4, "64", "200G", "n1-standard-64", "standard"),
        ("nvidia-l4", 1, "4", "12G", "g2-standard-4", "standard"),
        ("nvidia-l4", 8, "90", "300G", "g2-standard-96", "standard"),
        ("nvidia-tesla-a100", 2, "20", "100G", "a2-highgpu-2g", "standard"),
        ("nvidia-a100-80gb", 8, "90", "600G", "a2-ultragpu-8g", "standard"),
        ("nvidia-h100-80gb", 4, "100", "800G", "a3-highgpu-4g", "spot"),
        ("nvidia-h100-mega-80gb", 8, "96", "600G", "a3-megagpu-8g", "standard"),
        ("nvidia-h100-mega-80gb", 8, "200", "1500G", "a3-megagpu-8g", "spot"),
        ("nvidia-h200-141gb", 8, "200", "2500G", "a3-ultragpu-8g", "spot"),
        ("nvidia-tesla-v100", 8, "96", "600G", "n1-highmem-96", "standard"),
        ("nvidia-tesla-p100", 4, "32", "200G", "n1-highmem-32", "standard"),
    ],
)
def test_valid_requests_map_to_the_smallest_machine_of_their_family(
    accelerator, count, cpu, memory, vertex_shape, scheduling
):
    profile = gpu(accelerator, count, cpu=cpu, memory=memory, scheduling=scheduling)
    assert profile_problems("train-model", profile, "vertex") == []
    shape = fitting_shape(profile, "vertex")
    assert shape.name == vertex_shape
    assert shape.accelerator == accelerator and shape.accelerator_count == count
    assert shape.vcpus >= float(cpu) and shape.memory_gib * acc.GIB >= memory_bytes(memory)


def test_tables_are_consistent():
    assert set(acc.ACCELERATORS) == {s.accelerator for s in acc.GPU_SHAPES}
    for name, accelerator in acc.ACCELERATORS.items():
        assert accelerator.vertex_type.startswith("NVIDIA_")
        assert acc.valid_counts(name)
    assert acc.valid_counts("nvidia-tesla-t4") == [1, 2, 4]
    assert acc.valid_counts("nvidia-h100-mega-80gb") == [8]
    # N1 shapes honour the per-count vCPU and memory maxima.
    for shape in acc.GPU_SHAPES:
        if shape.name.startswith("n1-"):
            max_vcpus, max_memory = acc.N1_GPU_LIMITS[shape.accelerator][shape.accelerator_count]
            assert shape.vcpus <= max_vcpus and shape.memory_gib <= max_memory, shape


def test_defaults_are_valid_on_every_target_and_only_training_has_a_gpu():
    for target in ("gke", "vertex", "local"):
        resolve_compute(target)
    assert [s for s, p in DEFAULT_COMPUTE.items() if p.uses_gpu] == ["train-model"]
    assert fitting_shape(DEFAULT_COMPUTE["train-model"], "gke").name == "n1-standard-8"
    assert not DEFAULT_COMPUTE["fingerprint-data"].caching
    assert DEFAULT_COMPUTE["prepare-data"].caching  # keyed on the run-time fingerprint
    assert not DEFAULT_COMPUTE["register-model"].caching


def test_multi_gpu_steps_get_shared_memory_by_default():
    assert gpu("nvidia-l4", 1).effective_shm_size == ""
    assert gpu("nvidia-l4", 2, memory="16Gi").effective_shm_size == "8192Mi"
    assert gpu("nvidia-l4", 2, shm_size="2Gi").effective_shm_size == "2Gi"


# --------------------------------------------------------------------------- plan and notes


def test_plan_spells_each_target_and_notes_what_vertex_cannot_honour():
    profiles = {
        "prepare-data": DEFAULT_COMPUTE["prepare-data"],
        "train-model": gpu("nvidia-l4", 2, cpu="20", memory="90G", spot=True, timeout_s=3600,
                           retries=1),
    }
    images = {"prepare-data": "cpu-image", "train-model": "gpu-image"}
    gke = {r.step: r for r in plan(profiles, "gke", images)}
    vertex = {r.step: r for r in plan(profiles, "vertex", images)}
    assert gke["train-model"].accelerator == "nvidia.com/gpu (nvidia-l4)"
    assert vertex["train-model"].accelerator == "NVIDIA_L4"
    assert vertex["train-model"].machine == "g2-standard-24"
    assert gke["train-model"].machine == "g2-standard-24 or larger"
    # On Vertex AI, training with spot or a timeout runs as a CustomJob, which honours both.
    assert (gke["train-model"].capacity, vertex["train-model"].capacity) == ("spot", "spot")
    assert (gke["train-model"].nodes, gke["train-model"].gpus) == ("1 x 2", "2")
    assert gke["train-model"].shm == "42915Mi" and vertex["train-model"].shm == "-"
    assert gke["train-model"].timeout == "1h"
    assert vertex["train-model"].timeout == "1h"
    assert vertex["prepare-data"].timeout == "not enforced (1h asked)"
    assert gke["train-model"].retries == "1 (backoff 30s x2, max 1h)"
    assert gke["prepare-data"].caching == "on" and gke["prepare-data"].accelerator == "-"
    assert gke["train-model"].image == "gpu-image"
    notes = target_notes(profiles, "vertex")
    assert notes == [
        ("timeout_s is not enforced on Vertex AI Pipelines (the pipeline spec has no per-step "
        "timeout): prepare-data"),
        ("train-model runs as a Vertex AI CustomJob: 1 x g2-standard-24 (2 x NVIDIA_L4 each, "
         "2 GPUs in all), scheduling SPOT, timeout 3600s; launched by a 1-vCPU pipeline step"),
    ]
    plain = {**profiles, "train-model": profiles["train-model"].with_overrides(
        spot=False, timeout_s=0)}
    assert target_notes(plain, "vertex") == [
        ("timeout_s is not enforced on Vertex AI Pipelines (the pipeline spec has no per-step "
        "timeout): prepare-data")]
    assert target_notes(profiles, "gke") == []


@pytest.mark.parametrize(("typed", "hint"), [
    ("nvidia-h100-80gbb", " (did you mean 'nvidia-h100-80gb'?)"),
    ("NVIDIA-L4", " (did you mean 'nvidia-l4'?)"),
    ("tpu-v6", " (did you mean 'tpu-v6e'?)"),
    ("nvidia-tesla-k80", ""),  # another GPU, not a typo of one
])
def test_a_misspelled_accelerator_gets_a_did_you_mean(typed, hint):
    with pytest.raises(ComputeError) as raised:
        validate_profiles({"train-model": gpu(typed, 1)}, "gke")
    assert f"unknown accelerator {typed!r}{hint}; valid:" in str(raised.value)
