"""GKE Autopilot as a platform of its own: its request rules as Google documents them
(cloud.google.com/kubernetes-engine/docs/concepts/autopilot-resource-requests: general-purpose
pods get at least 250m vCPU and 512 MiB, 1 to 6.5 GiB per vCPU, CPU in 250m steps, at most
30 vCPU and 110 GiB; smaller requests are raised, larger ones rejected), GPU and TPU pods
chosen by selectors alone, per-pod prices, and ``targets.gke.autopilot: true`` selecting it
for compile, plan and submit."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from gkeflow.components import yamlio
from gkeflow.pipelines.cli.main import main
from gkeflow.pipelines.compute.compute_profile import ComputeProfile
from gkeflow.pipelines.compute.costing import run_cost
from gkeflow.pipelines.compute.plan import plan, target_notes
from gkeflow.pipelines.compute.pod_rules import fitted
from gkeflow.pipelines.compute.prices import load_prices
from gkeflow.pipelines.compute.profiles import ComputeError
from gkeflow.pipelines.compute.units import cpu_cores, memory_bytes
from gkeflow.pipelines.definitions.training import resolve_compute
from gkeflow.pipelines.settings.config import GkeflowConfig
from gkeflow.pipelines.targets.compile import compile_pipeline, default_compute

GIB = 2**30
ACCELERATOR_CLASS = ("cloud.google.com/compute-class", "Accelerator")


def _documented(cpu: float, memory: float) -> bool:
    """Google's rules for a general-purpose Autopilot pod (the page in the module docstring),
    written out here independently of the code under test."""
    gib = memory / GIB
    return (cpu >= 0.25 and gib >= 0.5 and math.isclose(cpu * 4, round(cpu * 4))
            and cpu * 1.0 <= gib + 1e-9 and gib <= cpu * 6.5 + 1e-9)


@pytest.mark.parametrize(("asked", "scheduled"), [
    (("500m", "256Mi"), ("500m", "512Mi")),   # memory raised to the minimum
    (("100m", "100Mi"), ("250m", "512Mi")),   # both raised to the minimums
    (("1", "8Gi"), ("1.25", "8Gi")),          # over 6.5 GiB per vCPU: CPU raised
    (("3", "2Gi"), ("3", "3Gi")),             # under 1 GiB per vCPU: memory raised
    (("0.3", "1Gi"), ("500m", "1Gi")),        # CPU rounded up to a 250m step
    (("4", "16G"), ("4", "16G")),             # within the rules: untouched
])
def test_requests_follow_autopilots_rules(asked, scheduled):
    profile = ComputeProfile(cpu=asked[0], memory=asked[1])
    after = fitted(profile, "autopilot")
    assert (after.cpu, after.memory) == scheduled
    assert _documented(cpu_cores(after.cpu), memory_bytes(after.memory))
    assert fitted(profile, "gke") is profile  # GKE Standard uses the requests as written


@settings(max_examples=200, deadline=None)
@given(millicpu=st.integers(10, 28_000), mib=st.integers(64, 100 * 1024))
def test_any_request_becomes_one_autopilot_accepts_and_is_never_lowered(millicpu, mib):
    profile = ComputeProfile(cpu=f"{millicpu}m", memory=f"{mib}Mi")
    after = fitted(profile, "autopilot")
    cpu, memory = cpu_cores(after.cpu), memory_bytes(after.memory)
    assert cpu >= millicpu / 1000 and memory >= mib * 2**20
    if cpu <= 30 and memory <= 110 * GIB:
        assert _documented(cpu, memory), (after.cpu, after.memory)
    assert fitted(after, "autopilot") is after  # applying the rules twice changes nothing


def test_a_pod_above_autopilots_maximum_is_refused_before_compiling(tmp_path):
    compute = default_compute()
    compute["train-linear"] = compute["train-linear"].with_overrides(cpu="40", memory="64Gi")
    with pytest.raises(ComputeError, match=r"train-linear: cpu 40 .* above GKE Autopilot"
                                           r".*maximum of 30 vCPU"):
        compile_pipeline("training", "autopilot", tmp_path, compute=compute)
    compile_pipeline("training", "gke", tmp_path, compute=compute)  # a Standard node pool can


def _platform(path) -> tuple[dict, dict]:
    spec, platform_spec = yamlio.load_all(path.read_text())
    return (spec["deploymentSpec"]["executors"],
            platform_spec["platforms"]["kubernetes"]["deploymentSpec"]["executors"])


def test_gpu_and_cpu_pods_compile_with_autopilots_selectors_and_requests(tmp_path):
    executors, kubernetes = _platform(compile_pipeline("training", "autopilot", tmp_path))
    gpu = kubernetes["exec-train-mlp"]
    assert gpu["nodeSelector"]["labels"] == {"cloud.google.com/gke-accelerator":
                                             "nvidia-tesla-t4", ACCELERATOR_CLASS[0]:
                                             ACCELERATOR_CLASS[1]}
    assert "tolerations" not in gpu  # no node pools: Autopilot adds them
    resources = executors["exec-train-mlp"]["container"]["resources"]
    assert resources["accelerator"]["resourceType"] == "nvidia.com/gpu"
    checked = 0
    for name, executor in executors.items():
        resources = executor.get("container", {}).get("resources")
        if not resources or "accelerator" in resources:
            continue
        assert resources["resourceCpuRequest"] == resources["resourceCpuLimit"], name
        assert resources["resourceMemoryRequest"] == resources["resourceMemoryLimit"], name
        assert _documented(cpu_cores(resources["resourceCpuRequest"]),
                           memory_bytes(resources["resourceMemoryRequest"])), name
        assert ACCELERATOR_CLASS[0] not in kubernetes.get(name, {}).get(
            "nodeSelector", {}).get("labels", {})
        checked += 1
    assert checked >= 5
    # the same pipeline on GKE Standard tolerates its node pool's taint and names no class
    _, standard = _platform(compile_pipeline("training", "gke", tmp_path))
    assert standard["exec-train-mlp"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert ACCELERATOR_CLASS[0] not in standard["exec-train-mlp"]["nodeSelector"]["labels"]


def test_a_tpu_step_and_a_spot_step_compile_with_selectors_alone(tmp_path):
    compute = default_compute()
    compute["train-model"] = compute["train-model"].with_overrides(
        accelerator="tpu-v6e", topology="2x2")
    compute["train-linear"] = compute["train-linear"].with_overrides(scheduling="spot")
    executors, kubernetes = _platform(compile_pipeline("training", "autopilot", tmp_path,
                                                       compute=compute))
    tpu = kubernetes["exec-train-mlp"]  # the Keras candidate takes train-model's TPU
    assert tpu["nodeSelector"]["labels"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
        "cloud.google.com/gke-tpu-topology": "2x2"}
    assert "tolerations" not in tpu
    accelerator = executors["exec-train-mlp"]["container"]["resources"]["accelerator"]
    assert (accelerator["resourceType"], accelerator["resourceCount"]) == ("google.com/tpu", "4")
    assert kubernetes["exec-train-linear"]["nodeSelector"]["labels"] == {
        "cloud.google.com/gke-spot": "true"}


def test_plan_prices_autopilot_pods_by_their_requests_and_never_gpus_as_standard_nodes():
    profiles = resolve_compute("autopilot")
    region = "asia-southeast1"  # the region whose Autopilot rates the vendored catalogue has

    def rate(kind):
        return next(row.usd_per_hour for row in load_prices() if row.kind == kind
                    and row.item == "pod" and row.region == region
                    and row.capacity == "standard")

    cpu_rate, gib_rate = rate("autopilot-vcpu"), rate("autopilot-ram-gib")
    cost = {step.step: step for step in run_cost(profiles, "autopilot", region).steps}
    prepare = profiles["prepare-data"]
    assert cost["prepare-data"].usd_per_hour == pytest.approx(
        cpu_cores(prepare.cpu) * cpu_rate + memory_bytes(prepare.memory) / GIB * gib_rate,
        rel=1e-3)
    gpu = cost["train-mlp"]
    assert gpu.usd_per_hour is None and "not priced as a Standard node" in gpu.reason
    standard = {step.step: step for step in run_cost(resolve_compute("gke"), "gke",
                                                     "us-central1").steps}
    assert standard["train-mlp"].usd_per_hour is not None  # a Standard T4 node is priced
    table = {row.step: row for row in plan(profiles, "autopilot", {})}
    assert table["prepare-data"].machine == "GKE Autopilot sizes the node"
    notes = target_notes(profiles, "autopilot")
    assert any(note.startswith("GKE Autopilot (general-purpose pods): requests = limits")
               for note in notes)


def test_an_adjusted_request_is_shown_and_priced_as_autopilot_schedules_it():
    profiles = resolve_compute("autopilot")
    profiles["register-model"] = profiles["register-model"].with_overrides(cpu="1",
                                                                           memory="10Gi")
    row = next(r for r in plan(profiles, "autopilot", {}) if r.step == "register-model")
    assert (row.cpu, row.memory) == ("1.75", "10Gi")  # 10 GiB needs 10/6.5 vCPU, in 250m
    assert ("register-model: GKE Autopilot requests cpu 1 -> 1.75 (its minimums, CPU:memory "
            "ratio and CPU rounding; billed as requested)") in target_notes(profiles,
                                                                            "autopilot")


def test_targets_gke_autopilot_selects_the_platform_for_compile_and_plan(tmp_path,
                                                                          monkeypatch):
    gke = {"host": "https://kfp.example.com", "autopilot": True}
    config = GkeflowConfig.model_validate({"targets": {"gke": gke}})
    assert config.platform_of("gke") == "autopilot" and config.platform_of("vertex") == "vertex"
    plain = GkeflowConfig.model_validate({"targets": {"gke": {**gke, "autopilot": False}}})
    assert plain.platform_of("gke") == "gke"
    path = compile_pipeline("training", "gke", tmp_path, config=config)
    assert path.name == "training.gke.yaml"  # submitted through targets.gke
    _, kubernetes = _platform(path)
    assert ACCELERATOR_CLASS[0] in kubernetes["exec-train-mlp"]["nodeSelector"]["labels"]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gkeflow.yaml").write_text(json.dumps({"targets": {"gke": gke}}))
    result = CliRunner(env={"COLUMNS": "400"}).invoke(main, ["plan", "--target", "gke"])
    assert result.exit_code == 0, result.output
    assert "GKE Autopilot (general-purpose pods): requests = limits" in result.output
    assert "GKE Autopilot sizes the node" in result.output


def test_jobset_and_rayjob_pods_are_placed_by_autopilots_rules(tmp_path):
    from gkeflow.pipelines.compute.engines import gke, kuberay, training_engine

    two = default_compute()["train-model"].with_overrides(replicas=2)
    engine = training_engine("autopilot", two)
    assert engine.name == "gke" and engine.target == "autopilot"
    pod = gke.jobset_template(two, "img", "autopilot")["spec"]["replicatedJobs"][0][
        "template"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4",
                                   ACCELERATOR_CLASS[0]: ACCELERATOR_CLASS[1]}
    assert "tolerations" not in pod
    standard = gke.jobset_template(two, "img")["spec"]["replicatedJobs"][0]["template"][
        "spec"]["template"]["spec"]
    assert standard["tolerations"][0]["key"] == "nvidia.com/gpu"
    # a multi-node step compiles its JobSet for Autopilot
    compute = default_compute()
    compute["train-model"] = two
    text = compile_pipeline("training", "autopilot", tmp_path, compute=compute).read_text()
    assert "compute-class" in text and "replicatedJobs" in text
    trial = ComputeProfile(cpu="1", memory="8Gi")  # a CPU trial over Autopilot's ratio
    ray = kuberay.rayjob_template(trial, "img", 0, None, "autopilot")
    worker = ray["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    requests = worker["containers"][0]["resources"]["requests"]
    assert _documented(cpu_cores(requests["cpu"]), memory_bytes(requests["memory"]))
