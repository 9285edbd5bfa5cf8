"""Rates derived from the price rows (CPU steps, Vertex AI machines, Spot and TPUs on Vertex
AI) and accelerator steps sized to their machine, over price rows built here."""

from __future__ import annotations

from datetime import date

import pytest

from gkeflow.pipelines.compute import derived_rates, machine_fit
from gkeflow.pipelines.compute.costing import run_cost, step_cost
from gkeflow.pipelines.compute.derived_rates import Cluster
from gkeflow.pipelines.compute.prices import Price
from gkeflow.pipelines.compute.profiles import ComputeProfile, fitting_shape
from gkeflow.pipelines.definitions.training import DEFAULT_COMPUTE, resolve_compute

READ = date(2026, 12, 1)
R = "us-central1"


def row(kind, item, capacity, usd):
    return Price(kind, item, capacity, R, usd, f"src-{kind}", READ)


ROWS = (
    row("vcpu", "e2", "standard", 0.02), row("ram-gib", "e2", "standard", 0.003),
    row("vcpu", "e2", "spot", 0.01), row("ram-gib", "e2", "spot", 0.001),
    row("vcpu", "n2", "standard", 0.03), row("ram-gib", "n2", "standard", 0.004),
    row("machine", "n1-standard-4", "standard", 0.2),
    row("vertex-machine", "n1-standard-4", "standard", 0.25),  # markup 1.25
    row("machine", "n1-standard-8", "standard", 0.4),
    row("gpu", "nvidia-tesla-t4", "standard", 0.35),
    row("instance", "a3-highgpu-8g", "standard", 80.0),
    row("instance", "a3-highgpu-8g", "spot", 40.0),
    row("vertex-machine", "a3-highgpu-8g", "standard", 12.0),
    row("vertex-gpu", "nvidia-h100-80gb", "standard", 11.0),  # (12 + 88) / 80 = 1.25 too
    row("tpu", "tpu-v6e", "standard", 2.5), row("tpu", "tpu-v6e", "spot", 0.5),
)


def test_a_cpu_step_on_gke_pays_for_its_requests_at_the_node_pools_family_rates():
    profile = ComputeProfile(cpu="2", memory="8Gi", timeout_s=3600)
    cost = step_cost("prepare-data", profile, "gke", R, prices=ROWS)
    assert cost.usd_per_hour == pytest.approx(2 * 0.02 + 8 * 0.003)
    assert cost.ceiling_usd == pytest.approx(2 * 0.02 + 8 * 0.003, abs=1e-4)
    assert cost.estimate and "the e2 node pool's per-vCPU and per-GiB rates" in cost.derived
    n2 = step_cost("prepare-data", profile, "gke", R, prices=ROWS, cluster=Cluster("n2"))
    assert n2.usd_per_hour == pytest.approx(2 * 0.03 + 8 * 0.004)
    spot = step_cost("prepare-data", profile.with_overrides(spot=True), "gke", R, prices=ROWS)
    assert spot.usd_per_hour == pytest.approx(2 * 0.01 + 8 * 0.001)
    assert spot.saving_pct == pytest.approx(100 * (1 - 0.028 / 0.064), abs=0.1)


def test_an_autopilot_cluster_without_rates_is_missing_with_the_reason():
    profile = ComputeProfile(cpu="1", memory="2Gi", timeout_s=600)
    cost = step_cost("register-model", profile, "gke", R, prices=ROWS,
                     cluster=Cluster(autopilot=True))
    assert cost.usd_per_hour is None
    assert cost.reason.startswith("no standard autopilot-vcpu rate of pod in us-central1")


@pytest.mark.parametrize("cpu, memory, machine", [
    ("1", "1Gi", "e2-highcpu-2"), ("2", "8Gi", "e2-standard-2"), ("2", "9Gi", "e2-highmem-2"),
    ("3", "4Gi", "e2-highcpu-4"), ("32", "256Gi", "n1-highmem-64"),
    ("64", "400Gi", "n1-highmem-64"), ("96", "624Gi", "n1-highmem-96")])
def test_a_vertex_pipelines_step_is_priced_on_the_smallest_machine_that_fits(cpu, memory,
                                                                            machine):
    from gkeflow.pipelines.compute.units import cpu_cores, memory_bytes

    assert derived_rates.vertex_pipeline_machine(cpu_cores(cpu),
                                                 memory_bytes(memory) / 2**30) == machine
    assert derived_rates.vertex_pipeline_machine(None, None) == "e2-standard-4"


def test_a_vertex_pipelines_step_is_compute_engines_rate_times_the_reference_markup():
    profile = ComputeProfile(cpu="2", memory="8Gi", timeout_s=3600)
    cost = step_cost("prepare-data", profile, "vertex", R, prices=ROWS)
    assert cost.machine == "e2-standard-2"
    assert cost.usd_per_hour == pytest.approx((2 * 0.02 + 8 * 0.003) * 1.25)
    assert cost.derived.startswith("e2-standard-2, Vertex AI's choice for these limits; "
                                   "estimate: Compute Engine's on-demand rate x 1.25 (Vertex "
                                   "AI's markup, from n1-standard-4's")


def test_vertex_spot_is_compute_engine_spot_plus_the_management_fee():
    profile = ComputeProfile(cpu="8", memory="64Gi", accelerator="nvidia-h100-80gb",
                             accelerator_count=8, scheduling="spot", timeout_s=3600)
    cost = step_cost("train-model", profile, "vertex", R, prices=ROWS)
    assert cost.usd_per_hour == pytest.approx(40.0 + 0.15 * 80.0)
    assert cost.on_demand_usd_per_hour == pytest.approx(100.0)  # the Vertex AI rows, read
    assert cost.derived.startswith("Vertex AI spot: Compute Engine's spot rate + management "
                                   "fee 12/h")


def test_without_a_reference_markup_a_vertex_rate_stays_missing():
    rows = tuple(r for r in ROWS if r.kind != "vertex-machine")
    profile = ComputeProfile(cpu="2", memory="8Gi", timeout_s=3600)
    cost = step_cost("prepare-data", profile, "vertex", R, prices=rows)
    assert cost.usd_per_hour is None and "no Vertex AI markup" in cost.reason


def test_tpu_slices_are_chips_times_the_chip_rate_and_slices_multiply_out():
    v6e = ComputeProfile(accelerator="tpu-v6e", topology="4x4", timeout_s=3600)
    cost = step_cost("train-model", v6e, "gke", R, prices=ROWS)
    assert (cost.usd_per_hour, cost.machine) == (pytest.approx(16 * 2.5), "ct6e-standard-4t")
    two = step_cost("train-model", v6e.with_overrides(replicas=2, spot=True), "gke", R,
                    prices=ROWS)
    assert two.nodes == 2 and two.usd_per_hour == pytest.approx(2 * 16 * 0.5)
    assert two.on_demand_usd_per_hour == pytest.approx(2 * 16 * 2.5)
    single = ComputeProfile(accelerator="tpu-v6e", topology="2x2", timeout_s=3600)
    vertex = step_cost("train-model", single, "vertex", R, prices=ROWS)
    assert vertex.usd_per_hour == pytest.approx(4 * 2.5 * 1.25) and vertex.estimate


def test_the_default_training_run_is_priced_in_full_on_both_targets_from_the_vendored_rows():
    for target in ("gke", "vertex"):
        run = run_cost(resolve_compute(target), target, R)
        missing = [s.step for s in run.steps if s.usd_per_hour is None]
        assert not missing and run.ceiling_usd is not None, (target, run.ceiling_reason)


#: The step that trains with train-model's compute: the Keras candidate of model_type auto.
TRAINS = "train-mlp"


def test_8_h100_are_sized_to_most_of_the_a3_machine_unless_cpu_or_memory_are_set():
    compute = {"train-model": DEFAULT_COMPUTE["train-model"].with_overrides(
        accelerator="nvidia-h100-80gb", accelerator_count=8)}
    gke = resolve_compute("gke", compute)[TRAINS]
    cpu, gib = machine_fit.machine_room(fitting_shape(gke, "gke"), "gke")
    assert fitting_shape(gke, "gke").name == "a3-highgpu-8g"
    assert (gke.cpu, gke.memory) == (str(cpu), f"{gib}Gi") and cpu >= 200 and gib >= 1700
    vertex = resolve_compute("vertex", compute)[TRAINS]
    assert (vertex.cpu, vertex.memory) == ("96", "624Gi")  # a pipeline step's most
    assert fitting_shape(vertex, "vertex").name == "a3-highgpu-8g"
    # a size set by hand is kept, and plan says most of the machine sits idle
    manual = compute["train-model"].with_overrides(cpu="8")
    kept = resolve_compute("gke", {"train-model": manual})[TRAINS]
    assert kept.cpu == "8" and not kept.auto_size
    note = machine_fit.idle_note("train-model", kept, "gke")
    assert note.startswith(f"train-model asks for 8 of the {cpu} vCPUs and ")
    # N1 GPUs attach to any machine: the default T4 keeps its own size
    default = resolve_compute("gke")[TRAINS]
    assert (default.cpu, default.memory) == ("7", "26G")


@pytest.mark.parametrize("target", ["gke", "vertex"])
def test_a_tpu_step_asks_for_its_host_s_cpu_and_memory_not_the_t4_default(target):
    """A v6e 2x2 slice is one ct6e-standard-4t host (180 vCPUs, 720 GiB): train-model asks
    for what a pod there can have, not the T4 default's 7 vCPU / 26G."""
    compute = {"train-model": DEFAULT_COMPUTE["train-model"].with_overrides(
        accelerator="tpu-v6e", topology="2x2", accelerator_count=0)}
    tpu = resolve_compute(target, compute)[TRAINS]
    machine, cpu, gib = machine_fit.tpu_room(tpu, target)
    assert machine == "ct6e-standard-4t" and (tpu.cpu, tpu.memory) == (str(cpu), f"{gib}Gi")
    if target == "vertex":
        assert (cpu, gib) == (180, 720)
    else:  # GKE's reservations and the DaemonSet allowance come off the node
        assert 160 < cpu < 180 and 600 < gib < 720
    manual = compute["train-model"].with_overrides(cpu="8", memory="26G")
    kept = resolve_compute(target, {"train-model": manual})[TRAINS]
    note = machine_fit.idle_note("train-model", kept, target)
    assert kept.cpu == "8" and note.startswith(f"train-model asks for 8 of the {cpu} vCPUs and")
    assert "ct6e-standard-4t" in note


def test_autopilot_pods_are_priced_at_the_vendored_rates_where_read():
    """GKE Autopilot bills a pod's requests: priced in asia-southeast1 (the rates read),
    missing elsewhere with the reason."""
    profile = ComputeProfile(cpu="2", memory="8Gi", timeout_s=3600)
    read = step_cost("prepare-data", profile, "gke", "asia-southeast1",
                     cluster=Cluster(autopilot=True))
    assert read.usd_per_hour == pytest.approx(2 * 0.0549 + 8 * 0.0060729, abs=1e-4)
    assert read.derived.startswith("GKE Autopilot: 2 vCPU and 8 GiB requested")
    elsewhere = step_cost("prepare-data", profile, "gke", "us-central1",
                          cluster=Cluster(autopilot=True))
    assert elsewhere.usd_per_hour is None and "not read for this region" in elsewhere.reason
