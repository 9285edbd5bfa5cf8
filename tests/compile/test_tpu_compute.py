"""TPU compute profiles: validation, plan, and what each target compiles or launches.

The JobSet is checked against the vendored JobSet CRD, the CustomJob with aiplatform_v1's
own message (unknown fields rejected), the GKE pod through the compiled pipeline's
KubernetesExecutorConfig.
"""

from __future__ import annotations

import pytest

from gkeflow.components.scaleout import jobset as js
from gkeflow.pipelines.compute.engines import gke, training_engine, vertex
from gkeflow.pipelines.compute.plan import plan, target_notes
from gkeflow.pipelines.compute.profiles import (
    ComputeError,
    ComputeProfile,
    apply_overrides,
    profile_problems,
    validate_profiles,
)
from gkeflow.pipelines.definitions.training import DEFAULT_COMPUTE
from gkeflow.pipelines.targets.compile import compile_pipeline
from tests.compile.customjob import strict_custom_job
from tests.compile.test_targets import documents, resources, strict_executor_configs
from tests.integration.fake_kube import validate_jobset

STEP = "train-model"
#: The step that trains train-model's Keras model beside the other candidates.
KERAS_STEP = "train-mlp"


def tpu(**changes) -> ComputeProfile:
    return DEFAULT_COMPUTE[STEP].with_overrides(**changes)


def test_switching_to_a_tpu_drops_the_gpu_count_and_back():
    profile = DEFAULT_COMPUTE[STEP].with_overrides(accelerator_count=2, shm_size="1Gi")
    profile = profile.with_overrides(accelerator="v6e", topology="4x4")
    assert (profile.accelerator, profile.accelerator_count, profile.shm_size) == (
        "tpu-v6e", 0, "")
    assert profile.uses_tpu and not profile.uses_gpu
    assert profile.with_overrides(accelerator="nvidia-l4", accelerator_count=1).topology == ""


def test_cli_overrides_give_a_valid_multi_host_slice():
    profiles = apply_overrides(DEFAULT_COMPUTE, [f"{STEP}.accelerator=tpu-v6e",
                                                 f"{STEP}.topology=4x4"])
    validate_profiles(profiles, "gke")
    assert profiles[STEP].topology == "4x4"


@pytest.mark.parametrize(("changes", "target", "expected"), [
    ({"accelerator": "tpu-v6e", "topology": "3x3"}, "gke",
     "train-model: topology '3x3' is not valid for tpu-v6e on GKE; choose one of 1x1, 2x2, "
     "2x4, 4x4, 4x8, 8x8, 8x16, 16x16"),
    ({"accelerator": "tpu-v6e", "topology": "4x4"}, "vertex",
     "train-model: topology '4x4' is not valid for tpu-v6e on Vertex AI; choose one of 1x1, "
     "2x2, 2x4"),
    ({"accelerator": "tpu-v5p", "topology": "2x2x1"}, "vertex",
     "train-model: tpu-v5p is not offered on Vertex AI; use the other target"),
    ({"accelerator": "tpu-v6e"}, "gke",
     "train-model: accelerator tpu-v6e needs a topology; choose one of 1x1, 2x2, 2x4, 4x4, "
     "4x8, 8x8, 8x16, 16x16"),
    ({"accelerator": "tpu-v5e", "topology": "2x2", "accelerator_count": 4}, "gke",
     "train-model: accelerator_count (GPU settings) cannot be mixed with TPU tpu-v5e; the "
     "topology sets the chips: drop accelerator_count"),
    ({"accelerator": "tpu-v5p", "topology": "2x2x2", "scheduling": "flex-start",
      "timeout_s": "2h"}, "gke",
     "train-model: tpu-v5p is not offered with flex-start; use scheduling=standard, spot, "
     "reservation"),
    ({"accelerator": "tpu-v6e", "topology": "2x2", "scheduling": "flex-start",
      "timeout_s": "2h"}, "vertex",
     "train-model: tpu-v6e is not offered with flex-start on Vertex AI; use "
     "scheduling=standard, spot, reservation"),
    ({"accelerator": "tpu7x", "topology": "2x2x1"}, "gke",
     "train-model: tpu7x is not offered on demand; use scheduling=reservation"),
    ({"accelerator": "tpu-v5e", "topology": "1x1", "cpu": "24"}, "gke",
     "train-model: cpu 24 does not fit one ct5lp-hightpu-1t host of tpu-v5e 1x1 (GKE leaves "
     "pods at most 23.87 vCPUs and 42.6 GiB); lower them"),
    ({"accelerator": "tpu-v5e", "topology": "1x1", "cpu": "30", "memory": "60G"}, "vertex",
     "train-model: cpu 30 and memory 60G do not fit one ct5lp-hightpu-1t host of tpu-v5e 1x1 "
     "(the host has at most 24 vCPUs and 48.0 GiB); lower them"),
    ({"accelerator": "tpu-v6e", "topology": "2x4", "memory": "1500Gi"}, "gke",
     "train-model: memory 1500Gi does not fit one ct6e-standard-8t host of tpu-v6e 2x4 (GKE "
     "leaves pods at most 359 vCPUs and 1381.9 GiB); lower them"),
    ({"accelerator": "tpu-v6e", "topology": "2x4", "replicas": 2}, "vertex",
     "train-model: replicas 2 on tpu-v6e asks for 2 slices (Multislice), which Vertex AI "
     "CustomJobs do not run; use replicas: 1 and a larger topology, or target gke"),
    ({"accelerator": "nvidia-l4", "accelerator_count": 1, "topology": "2x2"}, "gke",
     "train-model: topology 2x2 applies to TPU steps only; set accelerator to one of tpu-v5e, "
     "tpu-v6e, tpu-v5p, tpu-v4, tpu7x or drop topology"),
])
def test_invalid_tpu_profiles_are_refused_in_one_line(changes, target, expected):
    assert profile_problems(STEP, tpu(**changes), target) == [expected]


def test_a_request_within_the_host_fits():
    assert profile_problems(STEP, tpu(accelerator="tpu-v5e", topology="1x1", cpu="23",
                                      memory="40Gi"), "gke") == []


def test_only_the_training_step_takes_a_tpu():
    profile = DEFAULT_COMPUTE["evaluate-model"].with_overrides(accelerator="tpu-v6e",
                                                               topology="1x1")
    assert profile_problems("evaluate-model", profile, "gke") == [
        "evaluate-model: tpu-v6e: only train-model trains on a TPU; drop accelerator and "
        "topology"]


def test_plan_shows_hosts_chips_machine_and_the_jobset():
    profiles = {**DEFAULT_COMPUTE, STEP: tpu(accelerator="tpu-v6e", topology="4x4")}
    row = next(r for r in plan(profiles, "gke", {}) if r.step == STEP)
    assert (row.accelerator, row.nodes, row.gpus, row.machine) == (
        "google.com/tpu (tpu-v6e 4x4)", "4 x 4", "16 chips", "ct6e-standard-4t")
    notes = target_notes(profiles, "gke")
    assert any("launches a JobSet" in n and "16 chips on 4 x 4" in n and "1 slice" in n
               for n in notes), notes


def test_plan_on_vertex_shows_the_custom_job_machine_and_topology():
    profiles = {**DEFAULT_COMPUTE, STEP: tpu(accelerator="tpu-v5e", topology="2x4")}
    row = next(r for r in plan(profiles, "vertex", {}) if r.step == STEP)
    assert (row.machine, row.nodes, row.gpus) == ("ct5lp-hightpu-8t", "1 x 8", "8 chips")
    assert any("CustomJob on ct5lp-hightpu-8t with tpu_topology 2x4" in n
               for n in target_notes(profiles, "vertex"))


@pytest.mark.parametrize(("generation", "topology", "hosts", "per_host", "label"), [
    ("tpu-v6e", "4x4", 4, 4, "tpu-v6e-slice"),
    ("tpu-v5e", "8x8", 16, 4, "tpu-v5-lite-podslice"),
    ("tpu-v5p", "2x2x2", 2, 4, "tpu-v5p-slice"),
])
def test_multi_host_slice_is_a_jobset_that_passes_the_crd(generation, topology, hosts,
                                                          per_host, label):
    profile = tpu(accelerator=generation, topology=topology, scheduling="spot", queue="tpu-q")
    assert training_engine("gke", profile) is gke.ENGINE
    manifest = js.finish(gke.jobset_template(profile, "img:1"), "gkeflow-train-x", "ns", "",
                         ["--x"])
    validate_jobset(manifest)
    assert manifest["metadata"]["annotations"] == {
        "alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"}
    assert manifest["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "tpu-q"
    assert manifest["spec"]["network"]["enableDNSHostnames"] is True
    [replicated] = manifest["spec"]["replicatedJobs"]
    assert replicated["replicas"] == 1  # one Job per slice
    job = replicated["template"]["spec"]
    assert job["parallelism"] == job["completions"] == hosts
    pod = job["template"]["spec"]
    [container] = pod["containers"]
    assert container["resources"]["requests"]["google.com/tpu"] == str(per_host)
    assert container["resources"]["limits"]["google.com/tpu"] == str(per_host)
    assert pod["nodeSelector"] == {"cloud.google.com/gke-tpu-accelerator": label,
                                   "cloud.google.com/gke-tpu-topology": topology,
                                   "cloud.google.com/gke-spot": "true"}
    assert "volumes" not in pod and "nvidia.com/gpu" not in str(pod)
    assert js.replicas_of(manifest) == hosts


def test_multislice_of_single_host_slices_is_refused_on_gke():
    """"Multislice only supports multi-host TPU slice node pools" (GKE's Multislice page)."""
    assert profile_problems(STEP, tpu(accelerator="tpu-v5e", topology="2x4", replicas=2),
                            "gke") == [
        "train-model: replicas 2 asks for 2 slices (Multislice), which GKE runs on multi-host "
        "slices only, and tpu-v5e 2x4 is one host; choose a topology of several hosts (4x4, "
        "4x8, 8x8) or replicas: 1"]


@pytest.mark.parametrize(("generation", "topology", "hosts"), [
    ("tpu-v6e", "4x4", 4),
    ("tpu-v5p", "2x2x2", 2),
])
def test_multislice_is_a_jobset_of_one_job_per_slice_joined_for_jax(generation, topology, hosts):
    profile = tpu(accelerator=generation, topology=topology, replicas=2)
    assert profile_problems(STEP, profile, "gke") == []
    assert training_engine("gke", profile) is gke.ENGINE
    manifest = js.finish(gke.jobset_template(profile, "img:1"), "gkeflow-train-x", "ns", "",
                         ["--x"])
    validate_jobset(manifest)
    assert manifest["metadata"]["annotations"] == {
        "alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"}
    [replicated] = manifest["spec"]["replicatedJobs"]
    assert replicated["replicas"] == 2  # two slices, each its own node pool
    assert replicated["template"]["spec"]["parallelism"] == hosts
    assert js.replicas_of(manifest) == 2 * hosts
    pod = replicated["template"]["spec"]["template"]["spec"]
    assert (pod["hostNetwork"], pod["dnsPolicy"]) == (True, "ClusterFirstWithHostNet")
    assert "privileged" not in str(pod)
    env = {e["name"]: e for e in
           replicated["template"]["spec"]["template"]["spec"]["containers"][0]["env"]}
    # what JAX's Cloud TPU cluster reads: worker 0 of slice 0 coordinates
    assert env["MEGASCALE_COORDINATOR_ADDRESS"]["value"] == (
        "gkeflow-train-x-worker-0-0.gkeflow-train-x")
    assert env["MEGASCALE_NUM_SLICES"]["value"] == "2"
    assert env["MEGASCALE_SLICE_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.labels['jobset.sigs.k8s.io/job-index']")
    row = next(r for r in plan({**DEFAULT_COMPUTE, STEP: profile}, "gke", {})
               if r.step == STEP)
    assert "2 slices" in " ".join(target_notes({**DEFAULT_COMPUTE, STEP: profile}, "gke")) \
        or "2 slices" in str(row)


def test_one_slice_has_no_megascale_variables():
    profile = tpu(accelerator="tpu-v6e", topology="4x4")
    manifest = js.finish(gke.jobset_template(profile, "img:1"), "gkeflow-train-x", "ns", "",
                         ["--x"])
    pod = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert not [e for e in pod["containers"][0]["env"] if e["name"].startswith("MEGASCALE")]
    assert "hostNetwork" not in pod  # one slice: the pod network


def test_only_train_model_trains_across_slices():
    problems = profile_problems("evaluate-model", tpu(accelerator="tpu-v6e", topology="4x4",
                                                      replicas=2), "gke")
    assert ("evaluate-model: replicas 2 on tpu-v6e asks for 2 slices (Multislice), which only "
            "train-model trains across; use replicas: 1") in problems


def test_single_host_slice_is_one_pod_not_a_jobset():
    assert training_engine("gke", tpu(accelerator="tpu-v6e", topology="2x4")) is None


def test_vertex_custom_job_parses_with_machine_type_and_topology():
    profile = tpu(accelerator="tpu-v6e", topology="2x2", scheduling="spot")
    assert training_engine("vertex", profile) is vertex.ENGINE
    payload = vertex.custom_job_payload(profile, {"image": "img", "command": ["python3"],
                                                  "args": []}, "train-model")
    job = strict_custom_job(payload)
    [pool] = job.job_spec.worker_pool_specs
    assert (pool.machine_spec.machine_type, pool.machine_spec.tpu_topology) == (
        "ct6e-standard-4t", "2x2")
    assert pool.machine_spec.accelerator_count == 0 and pool.replica_count == 1
    assert job.job_spec.scheduling.strategy.name == "SPOT"


def test_vertex_even_a_standard_tpu_step_runs_as_a_custom_job():
    profile = tpu(accelerator="tpu-v5e", topology="1x1", timeout_s=0)
    assert training_engine("vertex", profile) is vertex.ENGINE


@pytest.fixture(scope="module")
def single_host_gke(tmp_path_factory):
    profile = tpu(accelerator="tpu-v6e", topology="2x4", scheduling="spot")
    return compile_pipeline("training", "gke", tmp_path_factory.mktemp("tpu"), {STEP: profile})


def test_single_host_slice_compiles_to_a_tpu_pod_on_gke(single_host_gke):
    spec, platform = documents(single_host_gke)
    # train-model's slice goes to the Keras candidate of model_type auto; the trees and the
    # linear model, which cannot use a TPU, train on CPU machines beside it
    assert "accelerator" not in resources(spec)["train-gbdt"]
    assert "accelerator" not in resources(spec)["train-linear"]
    accelerator = resources(spec)[KERAS_STEP]["accelerator"]
    assert (accelerator["resourceType"], accelerator["resourceCount"]) == (
        "google.com/tpu", "8")
    config = strict_executor_configs(platform)[KERAS_STEP]
    assert dict(config.node_selector.labels) == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
        "cloud.google.com/gke-tpu-topology": "2x4", "cloud.google.com/gke-spot": "true"}
    assert ("google.com/tpu", "Exists", "NoSchedule") in [
        (t.key, t.operator, t.effect) for t in config.tolerations]
    assert not config.empty_dir_mounts


def test_compile_refuses_an_invalid_topology(tmp_path):
    with pytest.raises(ComputeError, match="topology '3x3' is not valid for tpu-v6e"):
        compile_pipeline("training", "gke", tmp_path,
                         {STEP: tpu(accelerator="tpu-v6e", topology="3x3")})


@pytest.mark.parametrize(("target", "topology", "said"), [
    ("gke", "4x4", "sweep on gke: its trials cannot take train-model's tpu-v5e 4x4 slice: each "
                   "trial is one pod; use a single-host topology (1x1, 2x2, 2x4)"),
    ("vertex", "2x2", "sweep on vertex: its trials cannot take train-model's tpu-v5e 2x2 slice: "
                      "a Vertex AI pipeline step cannot ask for a TPU; use sweep.engine: vizier"),
])
def test_sweep_trials_that_cannot_take_the_slice_are_refused(target, topology, said):
    from gkeflow.pipelines.compute.profiles import PipelineUnfit
    from gkeflow.pipelines.definitions.sweep_trials import fit_trial

    with pytest.raises(PipelineUnfit) as unfit:
        fit_trial(target, "kfp", tpu(accelerator="tpu-v5e", topology=topology))
    assert str(unfit.value) == said


def test_sweep_trials_on_a_single_host_slice_keep_it():
    from gkeflow.pipelines.definitions.sweep_trials import fit_trial

    profile = tpu(accelerator="tpu-v5e", topology="2x2")
    assert fit_trial("gke", "kfp", profile) == (profile, "")


def test_vizier_trials_run_on_the_slice_machine_with_its_topology():
    import json

    from gkeflow.components.sweep import vizier as vizier_job
    from gkeflow.pipelines.compute.engines.vizier import tuning_spec
    from gkeflow.pipelines.settings.sweep_config import parse_sweep

    sweep = parse_sweep({"engine": "vizier", "max_trials": 2, "parameters": {
        "dropout": {"type": "uniform", "min": 0.0, "max": 0.5}}})
    spec = tuning_spec(sweep, tpu(accelerator="tpu-v6e", topology="2x4"))
    job = vizier_job.validate_job(vizier_job.build_job(
        json.loads(spec), display_name="s", image="img", dataset_uri="gs://b/d",
        schema_uri="gs://b/s", output_uri="gs://b/o", run_id="r", require_gpu=False,
        fixed={}))
    machine = job.trial_job_spec.worker_pool_specs[0].machine_spec
    assert (machine.machine_type, machine.tpu_topology, machine.accelerator_count) == (
        "ct6e-standard-8t", "2x4", 0)


def test_what_a_tpu_step_cannot_train_is_refused_before_any_step(tmp_path):
    from gkeflow.pipelines.compute.tpu_profile import backend_problem
    from tests.gkeflow_cli import gkeflow

    slices = {STEP: tpu(accelerator="tpu-v6e", topology="4x4", replicas=2)}
    assert "backend tensorflow cannot train across the 2 TPU slices" in backend_problem(
        slices, {"backend": "tensorflow"})
    assert backend_problem(slices, {"backend": "jax"}) == ""
    assert backend_problem(slices, {}) == ""  # auto: JAX on a TPU
    one = {STEP: tpu(accelerator="tpu-v6e", topology="2x2")}
    assert backend_problem(one, {"backend": "tensorflow"}) == ""
    assert "model_type gbdt trains on CPUs or GPUs" in backend_problem(one,
                                                                       {"model_type": "gbdt"})
    (tmp_path / "gkeflow.yaml").write_text(
        "targets:\n  gke:\n    host: https://kfp.acme.dev/pipeline\n"
        "compute:\n  train-model: {accelerator: tpu-v6e, topology: 4x4, replicas: 2}\n"
        "parameters:\n  default: {backend: tensorflow}\n")
    result = gkeflow("submit", "--target", "gke", "--dry-run", cwd=tmp_path,
                     env={"KFP_TOKEN": "t"})
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert ("parameters of training: train-model: backend tensorflow cannot train across the "
            "2 TPU slices") in result.stderr
