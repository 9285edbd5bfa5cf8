"""The TPU catalogue: its tables against the sources read, consistency and refusals."""

from __future__ import annotations

import re
from math import prod

import pytest
from google.cloud import aiplatform_v1

from gkeflow.pipelines.compute import tpu_catalogue as tpu

#: generation -> (GKE label, {topology: (chips, hosts, chips per host, machine type)}), as
#: read from the sources cited in tpu_catalogue.
EXPECTED = {
    "tpu-v5e": ("tpu-v5-lite-podslice", {
        "1x1": (1, 1, 1, "ct5lp-hightpu-1t"), "2x2": (4, 1, 4, "ct5lp-hightpu-4t"),
        "2x4": (8, 1, 8, "ct5lp-hightpu-8t"), "4x4": (16, 4, 4, "ct5lp-hightpu-4t"),
        "16x16": (256, 64, 4, "ct5lp-hightpu-4t")}),
    "tpu-v6e": ("tpu-v6e-slice", {
        "1x1": (1, 1, 1, "ct6e-standard-1t"), "2x2": (4, 1, 4, "ct6e-standard-4t"),
        "2x4": (8, 1, 8, "ct6e-standard-8t"), "4x4": (16, 4, 4, "ct6e-standard-4t"),
        "8x16": (128, 32, 4, "ct6e-standard-4t")}),
    "tpu-v5p": ("tpu-v5p-slice", {
        "2x2x1": (4, 1, 4, "ct5p-hightpu-4t"), "2x2x2": (8, 2, 4, "ct5p-hightpu-4t"),
        "2x4x4": (32, 8, 4, "ct5p-hightpu-4t"), "4x4x4": (64, 16, 4, "ct5p-hightpu-4t"),
        "16x16x24": (6144, 1536, 4, "ct5p-hightpu-4t")}),
    "tpu-v4": ("tpu-v4-podslice", {
        "2x2x1": (4, 1, 4, "ct4p-hightpu-4t"), "2x2x4": (16, 4, 4, "ct4p-hightpu-4t")}),
    "tpu7x": ("tpu7x", {
        "1x1x1": (1, 1, 1, "tpu7x-standard-1t"), "2x2x1": (4, 1, 4, "tpu7x-standard-4t"),
        "4x4x8": (128, 32, 4, "tpu7x-standard-4t")}),
}


@pytest.mark.parametrize("name", EXPECTED)
def test_generations_match_the_sources(name):
    label, shapes = EXPECTED[name]
    gen = tpu.tpu_generation(name)
    assert gen.gke_label == label
    for topology, shape in shapes.items():
        assert tuple(tpu.slice_shape(name, topology)) == shape, topology


def test_every_generation_the_issue_names_is_there():
    assert {g.name for g in tpu.GENERATIONS} == set(EXPECTED)


def test_gke_labels_and_names_are_unique():
    labels = [g.gke_label for g in tpu.GENERATIONS]
    assert len(labels) == len(set(labels))
    assert len({g.name for g in tpu.GENERATIONS}) == len(tpu.GENERATIONS)


@pytest.mark.parametrize("gen", tpu.GENERATIONS, ids=lambda g: g.name)
def test_every_topology_divides_into_whole_hosts(gen):
    machines = {m.name: m.chips for m in gen.machines}
    pattern = re.compile(r"^\d+x\d+$" if gen.dims == 2 else r"^\d+x\d+x\d+$")
    for topology, machine in gen.topologies.items():
        assert pattern.match(topology), topology
        chips = prod(int(d) for d in topology.split("x"))
        assert machine in machines, (topology, machine)
        assert chips % machines[machine] == 0, topology
        shape = tpu.slice_shape(gen.name, topology)
        assert shape.hosts * shape.chips_per_host == shape.chips == chips
        # a VM bigger than the slice would leave chips unused: single-host slices fill one VM
        assert shape.chips >= shape.chips_per_host


@pytest.mark.parametrize("gen", tpu.GENERATIONS, ids=lambda g: g.name)
def test_entries_carry_sources_and_a_date(gen):
    assert gen.sources and re.fullmatch(r"\d{4}-\d{2}-\d{2}", gen.date_read)
    cited = set(re.findall(r"^- ``([a-z0-9-]+)``:", tpu.__doc__, re.MULTILINE))
    assert set(gen.sources) <= cited, set(gen.sources) - cited
    assert set(gen.consumption) <= set(tpu.CONSUMPTION)


def test_single_and_multi_host():
    assert not tpu.slice_shape("tpu-v6e", "2x4").multi_host
    assert tpu.slice_shape("tpu-v6e", "4x4").multi_host
    assert tpu.slice_shape("tpu-v5p", "2x2x2").multi_host
    assert not tpu.slice_shape("v5p", "2x2x1").multi_host


def test_v5p_topologies_follow_the_cube_rule():
    topologies = tpu.valid_topologies("tpu-v5p")
    assert "16x16x24" in topologies  # 96 cubes, the largest single slice
    assert "16x16x28" not in topologies  # 112 cubes
    assert "4x8x4" not in topologies  # A <= B <= C
    assert "4x4x6" not in topologies  # neither <= 4 nor a multiple of 4


def test_names_are_found_by_alias_and_label():
    assert tpu.tpu_generation("Trillium").name == "tpu-v6e"
    assert tpu.tpu_generation("tpu-v5-lite-podslice").name == "tpu-v5e"
    assert tpu.tpu_generation("v5p").name == "tpu-v5p"


def test_unknown_generation_is_refused_listing_the_valid_ones():
    with pytest.raises(ValueError) as err:
        tpu.tpu_generation("tpu-v9")
    message = str(err.value)
    assert "\n" not in message
    assert message == ("unknown TPU generation 'tpu-v9'; choose one of tpu-v5e, tpu-v6e, "
                       "tpu-v5p, tpu-v4, tpu7x")


def test_invalid_topology_is_refused_listing_the_valid_ones():
    with pytest.raises(ValueError) as err:
        tpu.slice_shape("tpu-v6e", "3x3")
    assert str(err.value) == ("topology '3x3' is not valid for tpu-v6e on GKE; choose one of "
                              "1x1, 2x2, 2x4, 4x4, 4x8, 8x8, 8x16, 16x16")


def test_a_long_list_of_topologies_is_shortened_in_one_line():
    with pytest.raises(ValueError) as err:
        tpu.slice_shape("tpu-v5p", "4x4")
    message = str(err.value)
    assert "\n" not in message and message.startswith("topology '4x4' is not valid for tpu-v5p")
    assert f"({len(tpu.valid_topologies('tpu-v5p'))} in all)" in message


def test_unknown_target_is_refused():
    with pytest.raises(ValueError, match="unknown target 'aws'; choose one of gke, vertex"):
        tpu.valid_topologies("tpu-v6e", "aws")


def test_vertex_offers_single_host_v5e_and_v6e_only():
    for name in ("tpu-v5e", "tpu-v6e"):
        for topology in tpu.valid_topologies(name, tpu.VERTEX):
            assert not tpu.slice_shape(name, topology, tpu.VERTEX).multi_host
    with pytest.raises(ValueError, match="^tpu-v5p is not offered on Vertex AI"):
        tpu.slice_shape("tpu-v5p", "2x2x1", tpu.VERTEX)
    with pytest.raises(ValueError, match="not valid for tpu-v6e on Vertex AI; choose one of "
                                         "1x1, 2x2, 2x4$"):
        tpu.slice_shape("tpu-v6e", "4x4", tpu.VERTEX)


def test_vertex_machine_spec_parses_as_aiplatform_v1():
    spec = tpu.vertex_machine_spec("tpu-v5e", "2x2")
    assert spec == {"machine_type": "ct5lp-hightpu-4t", "tpu_topology": "2x2"}
    parsed = aiplatform_v1.MachineSpec(**spec)
    assert parsed.machine_type == "ct5lp-hightpu-4t" and parsed.tpu_topology == "2x2"


def test_consumption_options():
    assert tpu.consumption_options("tpu-v6e") == ["standard", "spot", "flex-start",
                                                  "reservation"]
    assert "flex-start" not in tpu.consumption_options("tpu-v5p")
    assert tpu.tpu_generation("tpu-v6e").consumption["flex-start"] == (
        "asia-northeast1-b", "us-east5-a")


def test_every_host_limit_is_checked_or_said_to_be_unknown():
    """For every generation and GKE topology: a host whose vCPUs and memory the catalogue
    records gets no note (the request is checked against them); one it does not record gets
    a note naming what is unknown, and nothing is refused for it."""
    from gkeflow.pipelines.compute.profiles import profile_problems
    from gkeflow.pipelines.compute.tpu_profile import unchecked_host_limits
    from gkeflow.pipelines.definitions.training import DEFAULT_COMPUTE

    for generation in tpu.GENERATIONS:
        machines = {m.name: m for m in generation.machines}
        for topology, machine_type in generation.topologies.items():
            machine = machines[machine_type]
            profile = DEFAULT_COMPUTE["train-model"].with_overrides(
                accelerator=generation.name, topology=topology, cpu="1000", memory="100Ti",
                scheduling=tpu.consumption_options(generation.name)[0])
            note = unchecked_host_limits("train-model", profile, "gke")
            problems = profile_problems("train-model", profile, "gke")
            assert ("vCPUs" in note) == (machine.vcpus is None), (generation.name, topology)
            assert ("memory" in note) == (machine.memory_gib is None), (generation.name, topology)
            assert any("cpu 1000" in p for p in problems) == (machine.vcpus is not None)
            assert any("memory 100Ti" in p for p in problems) == (
                machine.memory_gib is not None)


#: machine type -> (vCPUs, GiB) as Compute Engine lists them (``gcloud compute machine-types
#: list``: CPUS, MEMORY_GB = memoryMb in GiB), source ``gce-machine-types`` of tpu_catalogue.
HOSTS = {
    "ct5lp-hightpu-1t": (24, 48), "ct5lp-hightpu-4t": (112, 192), "ct5lp-hightpu-8t": (224, 384),
    "ct6e-standard-1t": (44, 176), "ct6e-standard-4t": (180, 720),
    "ct6e-standard-8t": (360, 1440), "ct5p-hightpu-4t": (208, 448),
    "tpu7x-standard-1t": (56, 240), "tpu7x-standard-4t": (224, 960),
    # From the 2025-10-30 listing (source gce-machine-types-2025): later ones drop it.
    "ct4p-hightpu-4t": (240, 407),
}


def test_host_vcpus_and_memory_match_the_compute_engine_listing():
    machines = {m.name: m for g in tpu.GENERATIONS for m in g.machines}
    recorded = {name: (m.vcpus, m.memory_gib) for name, m in machines.items()
                if m.vcpus is not None or m.memory_gib is not None}
    assert recorded == HOSTS
    assert set(machines) == set(HOSTS)
    assert machines["ct4p-hightpu-4t"].source == "gce-machine-types-2025"


def test_every_recorded_host_names_a_source_the_catalogue_cites():
    for gen in tpu.GENERATIONS:
        for machine in gen.machines:
            known = machine.vcpus is not None or machine.memory_gib is not None
            assert bool(machine.source) == known, machine.name
            if machine.source:
                assert machine.source in gen.sources, (gen.name, machine.name)
                assert f"``{machine.source}``" in tpu.__doc__


@pytest.mark.parametrize(("generation", "topology", "machine_type"), [
    ("tpu-v6e", "1x1", "ct6e-standard-1t"), ("tpu-v6e", "2x2", "ct6e-standard-4t"),
    ("tpu-v6e", "2x4", "ct6e-standard-8t"), ("tpu-v5e", "2x2", "ct5lp-hightpu-4t")])
def test_a_vertex_tpu_step_may_ask_for_the_whole_vm_and_no_more(generation, topology,
                                                                machine_type):
    from gkeflow.pipelines.compute.profiles import profile_problems
    from gkeflow.pipelines.definitions.training import DEFAULT_COMPUTE

    vcpus, gib = HOSTS[machine_type]
    fits = DEFAULT_COMPUTE["train-model"].with_overrides(
        accelerator=generation, topology=topology, cpu=str(vcpus), memory=f"{gib}Gi")
    assert profile_problems("train-model", fits, "vertex") == []
    for field, value in (("cpu", f"{vcpus * 1000 + 1}m"), ("memory", f"{gib * 1024 + 1}Mi")):
        (problem,) = profile_problems("train-model", fits.with_overrides(**{field: value}),
                                      "vertex")
        assert problem == (f"train-model: {field} {value} does not fit one {machine_type} host "
                           f"of {generation} {topology} (the host has at most {vcpus} vCPUs "
                           f"and {gib:.1f} GiB); lower them")


@pytest.mark.parametrize(("generation", "topology", "machine_type", "scheduling"), [
    ("tpu-v6e", "4x4", "ct6e-standard-4t", "standard"),
    ("tpu-v5p", "2x2x2", "ct5p-hightpu-4t", "standard"),
    ("tpu-v4", "2x2x4", "ct4p-hightpu-4t", "spot"),
    ("tpu7x", "2x2x2", "tpu7x-standard-4t", "reservation"),
    ("tpu7x", "1x1x1", "tpu7x-standard-1t", "reservation")])
def test_a_gke_tpu_pod_may_ask_for_what_the_node_leaves_and_no_more(generation, topology,
                                                                   machine_type, scheduling):
    from gkeflow.pipelines.compute.accelerators import gke_allocatable_exact
    from gkeflow.pipelines.compute.profiles import profile_problems
    from gkeflow.pipelines.compute.tpu_profile import unchecked_host_limits
    from gkeflow.pipelines.definitions.training import DEFAULT_COMPUTE

    vcpus, gib = HOSTS[machine_type]
    millicores, memory = gke_allocatable_exact(vcpus, gib * 2**30)
    assert 0 < millicores < vcpus * 1000 and 0 < memory < gib * 2**30
    reservation = {"reservation": "tpu-pool"} if scheduling == "reservation" else {}
    fits = DEFAULT_COMPUTE["train-model"].with_overrides(
        accelerator=generation, topology=topology, scheduling=scheduling,
        cpu=f"{millicores}m", memory=f"{memory // 2**20}Mi", **reservation)
    assert profile_problems("train-model", fits, "gke") == []
    assert unchecked_host_limits("train-model", fits, "gke") == ""
    for field, value in (("cpu", f"{millicores + 1}m"), ("memory", f"{memory // 2**20 + 1}Mi")):
        (problem,) = profile_problems("train-model", fits.with_overrides(**{field: value}),
                                      "gke")
        assert problem.startswith(f"train-model: {field} {value} does not fit one "
                                  f"{machine_type} host of {generation} {topology} (GKE leaves "
                                  "pods at most "), problem


def test_no_tpu_host_is_left_unchecked_in_plan():
    from gkeflow.pipelines.compute.plan import target_notes
    from gkeflow.pipelines.definitions.training import DEFAULT_COMPUTE

    for gen in tpu.GENERATIONS:
        topology = next(iter(gen.topologies))
        scheduling = tpu.consumption_options(gen.name)[0]
        reservation = {"reservation": "tpu-pool"} if scheduling == "reservation" else {}
        profiles = {**DEFAULT_COMPUTE, "train-model": DEFAULT_COMPUTE["train-model"]
                    .with_overrides(accelerator=gen.name, topology=topology,
                                    scheduling=scheduling, **reservation)}
        assert not any("not checked against the host" in note
                       for note in target_notes(profiles, "gke")), gen.name


def test_a_host_without_recorded_limits_is_said_in_plan(monkeypatch):
    """Were a host's vCPUs and memory unknown, plan would say so and refuse nothing."""
    from dataclasses import replace

    from gkeflow.pipelines.compute.plan import target_notes
    from gkeflow.pipelines.compute.profiles import profile_problems
    from gkeflow.pipelines.definitions.training import DEFAULT_COMPUTE

    v4 = tpu.tpu_generation("tpu-v4")
    monkeypatch.setitem(tpu._BY_NAME, "tpu-v4", replace(
        v4, machines=(tpu.TpuMachine("ct4p-hightpu-4t", 4),)))
    profile = DEFAULT_COMPUTE["train-model"].with_overrides(
        accelerator="tpu-v4", topology="2x2x4", cpu="1000")
    assert ("train-model: the vCPUs and memory of one ct4p-hightpu-4t host are unknown (not "
            "found in the pages the TPU catalogue cites); cpu and memory not checked against "
            "the host") in target_notes({**DEFAULT_COMPUTE, "train-model": profile}, "gke")
    assert profile_problems("train-model", profile, "gke") == []
