"""The GPU catalogue against its sources, consumption rules, GKE allocatable resources."""

from __future__ import annotations

import re

import pytest
from google.cloud import aiplatform_v1

from gkeflow.pipelines.compute import accelerators as acc
from gkeflow.pipelines.compute import gpu_catalogue as cat
from gkeflow.pipelines.compute.capacity import capacity_problems, offered_options
from gkeflow.pipelines.compute.plan import plan, target_notes
from gkeflow.pipelines.compute.profiles import (
    ComputeError,
    ComputeProfile,
    fitting_shape,
    profile_problems,
    validate_profiles,
)

MIB = 2**20


def gpu(accelerator: str, count: int, cpu: str = "8", memory: str = "32G", **kw):
    return ComputeProfile(cpu=cpu, memory=memory, accelerator=accelerator,
                          accelerator_count=count, **kw)


# --------------------------------------------------------------------------- every family

#: family -> (GKE label, Vertex type, {shape: (vCPUs, GB, GPUs)}, consumption options), as
#: read from the sources cited in gpu_catalogue (N1 families are checked separately).
FIXED_FAMILIES = {
    "G2": ("nvidia-l4", "NVIDIA_L4", {
        "g2-standard-4": (4, 16, 1), "g2-standard-8": (8, 32, 1), "g2-standard-12": (12, 48, 1),
        "g2-standard-16": (16, 64, 1), "g2-standard-32": (32, 128, 1),
        "g2-standard-24": (24, 96, 2), "g2-standard-48": (48, 192, 4),
        "g2-standard-96": (96, 384, 8)}, "standard spot flex-start reservation"),
    "G4": ("nvidia-rtx-pro-6000", "NVIDIA_RTX_PRO_6000", {
        "g4-standard-48": (48, 180, 1), "g4-standard-96": (96, 360, 2),
        "g4-standard-192": (192, 720, 4), "g4-standard-384": (384, 1440, 8)},
        "standard spot reservation"),
    "A2 High": ("nvidia-tesla-a100", "NVIDIA_TESLA_A100", {
        "a2-highgpu-1g": (12, 85, 1), "a2-highgpu-2g": (24, 170, 2),
        "a2-highgpu-4g": (48, 340, 4), "a2-highgpu-8g": (96, 680, 8),
        "a2-megagpu-16g": (96, 1360, 16)}, "standard spot flex-start reservation"),
    "A2 Ultra": ("nvidia-a100-80gb", "NVIDIA_A100_80GB", {
        "a2-ultragpu-1g": (12, 170, 1), "a2-ultragpu-2g": (24, 340, 2),
        "a2-ultragpu-4g": (48, 680, 4), "a2-ultragpu-8g": (96, 1360, 8)},
        "standard spot flex-start reservation"),
    "A3 High": ("nvidia-h100-80gb", "NVIDIA_H100_80GB", {
        "a3-highgpu-1g": (26, 234, 1), "a3-highgpu-2g": (52, 468, 2),
        "a3-highgpu-4g": (104, 936, 4), "a3-highgpu-8g": (208, 1872, 8)},
        "standard spot flex-start reservation"),
    "A3 Edge": ("nvidia-h100-80gb", "NVIDIA_H100_80GB", {"a3-edgegpu-8g": (208, 1872, 8)},
                "standard spot flex-start reservation"),
    "A3 Mega": ("nvidia-h100-mega-80gb", "NVIDIA_H100_MEGA_80GB",
                {"a3-megagpu-8g": (208, 1872, 8)}, "standard spot flex-start reservation"),
    "A3 Ultra": ("nvidia-h200-141gb", "NVIDIA_H200_141GB", {"a3-ultragpu-8g": (224, 2952, 8)},
                 "spot flex-start reservation"),
    "A4": ("nvidia-b200", "NVIDIA_B200", {"a4-highgpu-8g": (224, 3968, 8)},
           "spot flex-start reservation"),
    "A4X": ("nvidia-gb200", "NVIDIA_GB200", {"a4x-highgpu-4g": (140, 884, 4)}, "reservation"),
}

#: N1 GPU -> (Vertex type, {GPUs: (max vCPUs, max GB)}).
N1_FAMILIES = {
    "nvidia-tesla-t4": ("NVIDIA_TESLA_T4", {1: (48, 312), 2: (48, 312), 4: (96, 624)}),
    "nvidia-tesla-v100": ("NVIDIA_TESLA_V100",
                          {1: (12, 78), 2: (24, 156), 4: (48, 312), 8: (96, 624)}),
    "nvidia-tesla-p100": ("NVIDIA_TESLA_P100", {1: (16, 104), 2: (32, 208), 4: (96, 624)}),
    "nvidia-tesla-p4": ("NVIDIA_TESLA_P4", {1: (24, 156), 2: (48, 312), 4: (96, 624)}),
}


def _family(name: str, accelerator: str) -> cat.Family:
    return next(f for f in cat.FAMILIES if f.name == name and f.accelerator == accelerator)


@pytest.mark.parametrize("name", sorted(FIXED_FAMILIES))
def test_each_accelerator_optimized_family_matches_its_sources(name):
    label, vertex_type, shapes, options = FIXED_FAMILIES[name]
    family = _family(name, label)
    assert family.vertex_type == vertex_type
    assert {s.name: (s.vcpus, s.memory_gib, s.accelerator_count) for s in family.shapes} == shapes
    assert all(s.accelerator == label for s in family.shapes)
    assert set(family.consumption) == set(options.split())
    assert family.sources and family.cpu_arch == (cat.ARM64 if name == "A4X" else cat.X86_64)


@pytest.mark.parametrize("accelerator", sorted(N1_FAMILIES))
def test_each_n1_gpu_matches_its_limits_and_predefined_shapes(accelerator):
    vertex_type, limits = N1_FAMILIES[accelerator]
    family = _family("N1", accelerator)
    assert family.vertex_type == vertex_type
    assert set(family.consumption) == {"standard", "spot", "reservation"}
    assert sorted({s.accelerator_count for s in family.shapes}) == sorted(limits)
    # Memory in whole MiB as the Compute Engine API reports it (n1-highcpu-2: 1843 MiB).
    predefined = [(f"{series}-{n}", n, round(n * per_vcpu * 1024) / 1024)
                  for series, per_vcpu in (("n1-standard", 3.75), ("n1-highmem", 6.5),
                                           ("n1-highcpu", 0.9))
                  for n in (1, 2, 4, 8, 16, 32, 64, 96) if (series, n) != ("n1-highmem", 1)
                  and (series, n) != ("n1-highcpu", 1)]
    for count, (max_vcpus, max_gb) in limits.items():
        expected = {name: (n, gb) for name, n, gb in predefined if n <= max_vcpus and gb <= max_gb}
        assert {s.name: (s.vcpus, s.memory_gib) for s in family.shapes
                if s.accelerator_count == count} == expected


def test_every_vertex_type_exists_in_aiplatform_and_every_source_is_described():
    enum = aiplatform_v1.AcceleratorType
    described = set(re.findall(r"^- ``([a-z0-9-]+)``:", cat.__doc__, flags=re.M))
    for family in cat.FAMILIES:
        assert enum[family.vertex_type], family.vertex_type
        assert set(family.sources) <= described, family.name
    assert {f.accelerator for f in cat.FAMILIES} == set(acc.ACCELERATORS)
    assert acc.ACCELERATORS["nvidia-h100-80gb"].family == "A3 High or A3 Edge"


def test_a3_high_below_eight_gpus_is_spot_or_flex_start_only():
    for count in (1, 2, 4):
        (shape,) = acc.shapes_for("nvidia-h100-80gb", count)
        assert acc.consumption_of(shape) == {"spot", "flex-start"}
    assert {s.name for s in acc.shapes_for("nvidia-h100-80gb", 8)} == {
        "a3-highgpu-8g", "a3-edgegpu-8g"}
    assert offered_options(gpu("nvidia-h100-80gb", 8)) == set(cat.CONSUMPTION)


# --------------------------------------------------------------------------- consumption rules

OK = ""


@pytest.mark.parametrize(
    ("profile", "expected"),
    [
        (gpu("nvidia-h200-141gb", 8), ("train-model: a3-ultragpu-8g is not offered on demand: "
                                       "use scheduling=spot, flex-start or reservation")),
        (gpu("nvidia-b200", 8), ("train-model: a4-highgpu-8g is not offered on demand: use "
                                 "scheduling=spot, flex-start or reservation")),
        (gpu("nvidia-h100-80gb", 1), ("train-model: a3-highgpu-1g is not offered on demand: "
                                      "use scheduling=spot or flex-start")),
        (gpu("nvidia-h100-80gb", 4, scheduling="reservation", reservation="r"),
         "a3-highgpu-4g is not offered from a reservation: use scheduling=spot or flex-start"),
        (gpu("nvidia-tesla-t4", 1, scheduling="flex-start", timeout_s="1h"),
         ("train-model: nvidia-tesla-t4 x 1 is not offered with flex-start: use "
          "scheduling=standard, spot or reservation")),
        (gpu("nvidia-rtx-pro-6000", 1, scheduling="flex-start", timeout_s="1h"),
         "g4-standard-48 is not offered with flex-start: use scheduling=standard, spot or "
         "reservation"),
        (gpu("nvidia-gb200", 4, scheduling="reservation", reservation="r"),
         "the suite's images are built for x86_64 only and cannot start there"),
        (ComputeProfile(scheduling="flex-start", timeout_s="1h"),
         "train-model: scheduling=flex-start obtains GPU machines; this step asks for no GPU"),
        (gpu("nvidia-l4", 1, scheduling="flex-start"),
         "train-model: scheduling=flex-start needs a maximum run time: set timeout_s"),
        (gpu("nvidia-l4", 1, scheduling="flex-start", timeout_s="8d"),
         "timeout_s 691200 is longer than flex-start allows (604800 s = 7 days)"),
        (gpu("nvidia-l4", 1, max_wait="1h"),
         "train-model: max_wait applies to scheduling=flex-start only"),
        (gpu("nvidia-l4", 1, scheduling="reservation"),
         "train-model: scheduling=reservation needs the reservation: set reservation=NAME"),
        (gpu("nvidia-l4", 1, reservation="r"),
         "train-model: reservation applies to scheduling=reservation only"),
        (gpu("nvidia-l4", 1, scheduling="reservation", reservation="Bad_Name"),
         "reservation 'Bad_Name' is not a reservation name; use projects/PROJECT/zones/ZONE/"),
        (gpu("nvidia-l4", 1, queue="Team A"), "queue 'Team A' is not a Kueue LocalQueue name"),
        (gpu("nvidia-h100-80gb", 8, cpu="100", memory="500G"),
         ("train-model: cpu 100 exceeds what Vertex AI Pipelines gives a step "
          "with accelerator: at most 96 vCPUs and 624 GiB")),
        # Valid: each family on an option it offers, compiled for both targets elsewhere.
        (gpu("nvidia-h200-141gb", 8, scheduling="spot"), OK),
        (gpu("nvidia-b200", 8, scheduling="flex-start", timeout_s="7d", max_wait="2h"), OK),
        (gpu("nvidia-b200", 8, scheduling="reservation",
             reservation="projects/shared-proj/zones/us-central1-b/reservations/b200-pool"), OK),
        (gpu("nvidia-h100-80gb", 2, scheduling="spot"), OK),
        (gpu("nvidia-h100-80gb", 8, cpu="96"), OK),
        (gpu("nvidia-h100-80gb", 8, cpu="200", memory="1500G", scheduling="spot"), OK),
        (gpu("nvidia-rtx-pro-6000", 2, cpu="90", memory="300G"), OK),
        (gpu("nvidia-tesla-p4", 4, cpu="64", memory="200G", scheduling="spot"), OK),
        (gpu("nvidia-l4", 1, scheduling="flex-start", timeout_s="7d"), OK),
        (gpu("nvidia-tesla-a100", 1, scheduling="flex-start", timeout_s="2h"), OK),
        (gpu("nvidia-l4", 1, queue="team-a"), OK),
        (ComputeProfile(scheduling="reservation",
                        reservation="projects/123456789/zones/europe-west4-a/reservations/cpu"),
         OK),
    ],
)
def test_each_consumption_rule(profile, expected):
    problems = profile_problems("train-model", profile, "vertex")
    if expected == OK:
        assert problems == []
        assert profile_problems("train-model", profile, "gke") == []
    else:
        assert any(expected in p for p in problems), problems


ZONED = "projects/shared-proj/zones/us-central1-b/reservations/b200-pool"


@pytest.mark.parametrize(
    ("reservation", "gke", "vertex"),
    [
        ("b200-pool", OK, "Vertex AI needs the reservation's full name "
                          "projects/PROJECT/zones/ZONE/reservations/NAME"),
        ("projects/shared-proj/reservations/b200-pool", OK, "Vertex AI needs the reservation's "
                                                            "full name"),
        (ZONED, OK, OK),
        ("projects/shared-proj/zones/us-central1/reservations/b200-pool",
         "is not a reservation name; use NAME, projects/PROJECT/reservations/NAME or",
         "is not a reservation name; use projects/PROJECT/zones/ZONE/reservations/NAME"),
        ("projects/p/zones/us-central1-b/reservations/x",  # a too short project id
         "is not a reservation name", "is not a reservation name"),
        (ZONED + "/", "is not a reservation name", "is not a reservation name"),
    ],
)
def test_reservation_names_per_target(reservation, gke, vertex):
    """GKE completes a bare name (the node pool's reservation in the cluster's project);
    Vertex AI needs the zoned full name, which cannot be completed from a region."""
    profile = gpu("nvidia-b200", 8, scheduling="reservation", reservation=reservation)
    for target, expected in (("gke", gke), ("vertex", vertex)):
        problems = [p for p in profile_problems("train-model", profile, target)
                    if "reservation" in p]
        if expected == OK:
            assert problems == [], (target, problems)
        else:
            [problem] = problems
            assert expected in problem and "\n" not in problem, (target, problem)


def test_replicas_only_on_the_steps_a_pipeline_names():
    two = gpu("nvidia-l4", 1, replicas=2)
    assert capacity_problems("train-model", two, "gke") == []
    assert capacity_problems("evaluate-model", two, "gke") == [
        ("evaluate-model: replicas 2: only train-model can run on several machines; set "
         "replicas to 1")]
    validate_profiles({"fit": two}, "gke", multi_node_steps=("fit",))
    with pytest.raises(ComputeError, match="train-model: replicas 2: only fit or tune can"):
        validate_profiles({"train-model": two}, "gke", multi_node_steps=("fit", "tune"))
    with pytest.raises(ComputeError, match="replicas must be >= 1"):
        validate_profiles({"train-model": gpu("nvidia-l4", 1, replicas=0)}, "gke")


def test_vertex_and_local_say_what_they_do_not_apply():
    profiles = {"train-model": gpu("nvidia-b200", 8, scheduling="flex-start", timeout_s="1d",
                                   queue="team-a", ephemeral_storage="100Gi")}
    vertex = "\n".join(target_notes(profiles, "vertex"))
    # Training with flex-start runs as a Vertex AI CustomJob, which asks for it.
    assert "scheduling flex-start and reservation are not applied to a Vertex AI" not in vertex
    assert "train-model runs as a Vertex AI CustomJob" in vertex and "FLEX_START" in vertex
    evaluate = {"evaluate-model": ComputeProfile(scheduling="flex-start")}
    assert "scheduling flex-start and reservation are not applied to a Vertex AI" in "\n".join(
        target_notes(evaluate, "vertex"))
    assert "queue (Kueue) applies on gke only; ignored on vertex: train-model" in vertex
    assert "ephemeral_storage is not applied to a single-pod Vertex AI step" in vertex
    gke = "\n".join(target_notes(profiles, "gke"))
    assert "queue" not in gke and "ephemeral_storage" not in gke  # a volume on GKE


def test_p100_x4_above_64_vcpus_is_accepted_with_the_zones_it_cannot_use():
    big = gpu("nvidia-tesla-p100", 4, cpu="90", memory="300G")
    assert profile_problems("train-model", big, "vertex") == []
    assert fitting_shape(big, "vertex").name == "n1-standard-96"
    assert target_notes({"train-model": big}, "gke") == [
        ("train-model: nvidia-tesla-p100 x 4 with more than 64 vCPUs or 208 GB cannot run in "
         "us-east1-c, europe-west1-b, europe-west1-d")]
    assert target_notes({"train-model": gpu("nvidia-tesla-p100", 4, cpu="32")}, "gke") == []


def test_plan_shows_capacity_nodes_gpus_queue_and_disk():
    profiles = {"train-model": gpu("nvidia-h100-80gb", 8, cpu="96", replicas=2,
                                   scheduling="flex-start", timeout_s="1d", max_wait="3h",
                                   queue="team-a", ephemeral_storage="200Gi"),
                "evaluate-model": ComputeProfile(scheduling="reservation",
                                                 reservation="cpu-pool")}
    rows = {r.step: r for r in plan(profiles, "gke", {})}
    train = rows["train-model"]
    assert (train.capacity, train.nodes, train.gpus) == ("flex-start (wait 3h)", "2 x 8", "16")
    # Two replicas on GKE run as a JobSet, whose pods request their ephemeral storage.
    assert (train.queue, train.disk) == ("team-a", "200Gi")
    assert rows["evaluate-model"].capacity == "reservation cpu-pool"
    assert (rows["evaluate-model"].nodes, rows["evaluate-model"].gpus) == ("1 x 0", "0")
    vertex = {r.step: r for r in plan(profiles, "vertex", {})}["train-model"]
    assert vertex.capacity == "flex-start (wait 3h)"  # the CustomJob asks for it
    assert vertex.queue == "not applied (team-a)"


# --------------------------------------------------------------------------- GKE allocatable


@pytest.mark.parametrize(
    ("vcpus", "millicores"),
    [(1, 940), (2, 1930), (4, 3920), (8, 7910), (16, 15890), (96, 95690), (208, 207410),
     (224, 223370)],
)
def test_gke_allocatable_cpu_matches_the_documented_reservations(vcpus, millicores):
    # GKE docs: 6% of the first core, 1% of the next, 0.5% of the next 2, 0.25% above 4.
    assert acc.gke_allocatable_exact(vcpus, 16 * 2**30)[0] == millicores


@pytest.mark.parametrize(
    ("shape", "allocatable_mib"),
    [
        # 16 GiB = 16384 MiB: kernel 256 + 80 = 336; kube 1000 + 800 + 800 + 6% of 384 = 2623.
        ("g2-standard-4", 16384 - 336 - 2623 - 100),
        # 1872 GiB = 1916928 MiB: kernel 29952 + 80; kube 9320 + 2% of 1788928 = 45098.
        ("a3-highgpu-8g", 1916928 - 30032 - 45098 - 100),
        # 2952 GiB = 3022848 MiB: kernel 47232 + 80; kube 9320 + 2% of 2894848 = 67216.
        ("a3-ultragpu-8g", 3022848 - 47312 - 67216 - 100),
        # 3968 GiB = 4063232 MiB: kernel 63488 + 80; kube 9320 + 2% of 3935232 = 88024.
        ("a4-highgpu-8g", 4063232 - 63568 - 88024 - 100),
    ],
)
def test_gke_allocatable_memory_takes_the_kernel_share_and_gkes_brackets(shape, allocatable_mib):
    (machine,) = [s for s in acc.GPU_SHAPES if s.name == shape]
    _, memory = acc.gke_allocatable_exact(machine.vcpus, int(machine.memory_gib * 2**30))
    assert memory == allocatable_mib * MIB
    assert acc.gke_allocatable(machine)[1] == allocatable_mib / 1024  # GiB, as plans show it


def test_gke_allocatable_memory_small_nodes():
    assert acc.kube_reserved_memory_bytes(0) == 0
    assert acc.kube_reserved_memory_bytes(600 * MIB) == 255 * MIB
    assert acc.kernel_reserved_bytes(2 * 2**30) == (32 + 16) * MIB  # no IO TLB at <= 3 GiB
    assert acc.kernel_reserved_bytes(4 * 2**30) == (64 + 16 + 64) * MIB


def test_a_gke_pod_never_asks_for_more_than_the_node_leaves():
    (machine,) = acc.shapes_for("nvidia-h100-mega-80gb", 8)
    millicores, memory = acc.gke_allocatable_exact(machine.vcpus, int(machine.memory_gib * 2**30))
    fits = gpu("nvidia-h100-mega-80gb", 8, cpu=f"{millicores}m", memory=f"{memory // MIB}Mi")
    assert profile_problems("train-model", fits, "gke") == []
    for too_big in (fits.with_overrides(memory=f"{memory // MIB + 1}Mi"),
                    fits.with_overrides(cpu=f"{millicores + 1}m")):
        (problem,) = profile_problems("train-model", too_big, "gke")
        assert "GKE nodes leave pods at most" in problem
    # 1827 GiB passed the former model on a3-highgpu-8g; GKE leaves about 1798.5 GiB.
    assert profile_problems("train-model", gpu("nvidia-h100-80gb", 8, memory="1827Gi"), "gke")


@pytest.mark.parametrize("target", ["gke", "vertex"])
@pytest.mark.parametrize("count", [1, 4, 8])
@pytest.mark.parametrize("scheduling", ["standard", "spot", "reservation"])
def test_an_arm_only_accelerator_gets_one_message_whatever_the_count(target, count,
                                                                    scheduling):
    extra = ({"reservation": "projects/my-project/zones/us-central1-b/reservations/r"}
             if scheduling == "reservation" else {})
    problems = profile_problems("train-model", gpu("nvidia-gb200", count,
                                                   scheduling=scheduling, **extra), target)
    assert len(problems) == 1, problems
    assert "runs only on A4X machines, whose CPUs are arm64" in problems[0]
    assert "counts of" not in problems[0] and "not offered" not in problems[0]


@pytest.mark.parametrize("target", ["gke", "vertex"])
def test_the_unknown_accelerator_list_offers_what_can_run_with_its_counts(target):
    [problem] = profile_problems("train-model", gpu("nvidia-k80", 1), target)
    assert "gb200" not in problem.lower()
    for name in acc.runnable():
        spelt = cat_vertex(name) if target == "vertex" else name
        counts = ", ".join(str(c) for c in acc.valid_counts(name))
        assert f"{spelt} (x {counts})" in problem, name
    assert acc.runnable() == [n for n in acc.ACCELERATORS if n != "nvidia-gb200"]


def cat_vertex(name: str) -> str:
    return acc.ACCELERATORS[name].vertex_type


def test_of_shapes_the_same_size_the_general_family_is_chosen():
    # A3 Edge's a3-edgegpu-8g has A3 High's size; the general family comes first
    assert [s.name for s in acc.shapes_for("nvidia-h100-80gb", 8)] == [
        "a3-highgpu-8g", "a3-edgegpu-8g"]
