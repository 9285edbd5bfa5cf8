"""Scale-out in the compiled YAML: `gkeflow compile --compute train-model.replicas=2
--compute train-model.scheduling=spot` gives a Vertex AI CustomJob with 2 replicas and SPOT,
and a GKE launcher of a 2-pod JobSet with GPU requests, selectors and tolerations on every
pod; both parsed strictly (aiplatform_v1.CustomJob / PipelineJob, the JobSet CRD schema).
"""

from __future__ import annotations

import json
import socket

import pytest
from click.testing import CliRunner
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2

from gkeflow.components import yamlio
from gkeflow.components.scaleout import jobset as js
from gkeflow.pipelines.cli.main import main
from gkeflow.pipelines.definitions.training import DEFAULT_COMPUTE, build_training_pipeline
from gkeflow.pipelines.targets.compile import compile_pipeline
from tests.compile.customjob import custom_job_payload, strict_custom_job
from tests.integration.fake_kube import validate_jobset


def documents(path) -> list[dict]:
    return [d for d in yamlio.load_all(path.read_text()) if d]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    out = tmp_path_factory.mktemp("scaleout")
    result = CliRunner().invoke(main, [
        "compile", "--output", str(out), "--compute", "train-model.replicas=2",
        "--compute", "train-model.scheduling=spot"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "spot is not applied" not in result.output
    return {target: out / f"training.{target}.yaml" for target in ("gke", "vertex")}


def test_vertex_training_step_is_a_two_replica_spot_custom_job(compiled):
    [spec] = documents(compiled["vertex"])
    json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec(), ignore_unknown_fields=False)
    job = strict_custom_job(custom_job_payload(spec)).job_spec
    chief, workers = job.worker_pool_specs
    assert (chief.replica_count, workers.replica_count) == (1, 1)
    for pool in (chief, workers):
        assert pool.machine_spec.machine_type == "n1-standard-8"
        assert pool.machine_spec.accelerator_type.name == "NVIDIA_TESLA_T4"
        assert pool.machine_spec.accelerator_count == 1
        assert pool.container_spec.image_uri.startswith(
            "us-docker.pkg.dev/gkeflow/images/gkeflow-gpu")
        # train_model's own executor, with its input substituted JSON-escaped by Vertex.
        assert "{{$.json_escape[1]}}" in pool.container_spec.args
        assert "train_model" in pool.container_spec.args
    assert job.scheduling.strategy.name == "SPOT"
    assert job.scheduling.restart_job_on_worker_restart
    assert job.scheduling.timeout.total_seconds() == 6 * 3600
    launcher = spec["deploymentSpec"]["executors"]["exec-train-model"]["container"]
    assert launcher["command"][-1] == "gkeflow.components.scaleout.vertex_launcher"
    assert "{{$.pipeline_job_resource_name}}" in launcher["args"]
    assert "accelerator" not in launcher.get("resources", {}), "the launcher needs no GPU"
    outputs = spec["components"]["comp-train-model"]["outputDefinitions"]
    assert set(outputs["artifacts"]) == {"model", "metrics", "tensorboard"}
    assert "gcp_resources" in outputs["parameters"]
    # evaluation still reads the training step's model
    evaluate = spec["root"]["dag"]["tasks"]["evaluate-model"]["inputs"]["artifacts"]["model"]
    assert evaluate["taskOutputArtifact"] == {"outputArtifactKey": "model",
                                              "producerTask": "train-model"}


def test_vertex_pipeline_job_body_parses_strictly(compiled, monkeypatch):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import aiplatform, aiplatform_v1

    def no_network(self, address):
        raise AssertionError(f"unexpected network connection to {address}")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    job = aiplatform.PipelineJob(
        display_name="gkeflow-training", template_path=str(compiled["vertex"]),
        project="gkeflow-test", location="us-central1", pipeline_root="gs://bucket/root",
        credentials=AnonymousCredentials(), parameter_values={"epochs": 3})
    body = type(job._gca_resource).to_json(job._gca_resource)
    parsed = aiplatform_v1.PipelineJob.from_json(body, ignore_unknown_fields=False)
    payload = custom_job_payload(json_format.MessageToDict(parsed._pb.pipeline_spec))
    assert len(strict_custom_job(payload).job_spec.worker_pool_specs) == 2


def test_gke_training_step_launches_a_two_pod_jobset_with_gpus_on_every_pod(compiled):
    spec, platform = documents(compiled["gke"])
    task = spec["root"]["dag"]["tasks"]["train-model"]
    template = json.loads(
        task["inputs"]["parameters"]["jobset_template"]["runtimeValue"]["constant"])
    manifest = js.finish(template, js.jobset_name("run-1", "train-model"), "kubeflow",
                         "", ["--dataset", "gs://b/d"])
    validate_jobset(manifest)
    [replicated] = manifest["spec"]["replicatedJobs"]
    job = replicated["template"]["spec"]
    assert replicated["replicas"] * job["parallelism"] == 2 == job["completions"]
    assert job["completionMode"] == "Indexed"
    assert manifest["spec"]["network"]["enableDNSHostnames"] is True
    pod = job["template"]["spec"]  # one template: every pod of the JobSet
    [container] = pod["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "1"
    assert container["image"].startswith("us-docker.pkg.dev/gkeflow/images/gkeflow-gpu")
    assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4",
                                   "cloud.google.com/gke-spot": "true"}
    assert {t["key"] for t in pod["tolerations"]} == {"nvidia.com/gpu",
                                                     "cloud.google.com/gke-spot"}
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert pod["volumes"][0]["emptyDir"]["medium"] == "Memory"
    assert job["activeDeadlineSeconds"] == 6 * 3600
    assert pod["serviceAccountName"] == "gkeflow-worker"  # the workers' own account
    # The launcher pod itself: no GPU, no GPU selectors or tolerations, and a deadline that
    # adds the provisioning allowance to the JobSet's own.
    resources = spec["deploymentSpec"]["executors"]["exec-train-model"]["container"][
        "resources"]
    assert "accelerator" not in resources and resources["resourceCpuLimit"] == "1"
    k8s = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-train-model"]
    assert "nodeSelector" not in k8s and "tolerations" not in k8s
    assert int(k8s["activeDeadlineSeconds"]) == 6 * 3600 + 3600


def test_gke_jobset_step_receives_the_checkpoint_uri_parameter(compiled):
    """The pipeline's checkpoint_uri reaches the JobSet launcher (and so every pod)."""
    spec, _ = documents(compiled["gke"])
    task = spec["root"]["dag"]["tasks"]["train-model"]
    wired = task["inputs"]["parameters"]["checkpoint_uri"]
    assert wired == {"componentInputParameter": "checkpoint_uri"}
    inputs = spec["components"][task["componentRef"]["name"]]["inputDefinitions"]["parameters"]
    assert inputs["checkpoint_uri"]["parameterType"] == "STRING"


def test_gke_launcher_receives_its_kubernetes_settings_as_a_task_config(compiled):
    """KFP >= 2.15 task_config_passthroughs: the launcher's selectors, tolerations, affinity
    go to the JobSet only; resources, env and volumes stay on the launcher too."""
    spec, _ = documents(compiled["gke"])
    json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec(), ignore_unknown_fields=False)
    task = spec["root"]["dag"]["tasks"]["train-model"]
    component = spec["components"][task["componentRef"]["name"]]
    config = component["inputDefinitions"]["parameters"]["kubernetes_config"]
    assert config["parameterType"] == "TASK_CONFIG" and config["isOptional"] is True
    assert "kubernetes_config" not in task["inputs"]["parameters"]  # KFP fills it at run time
    passthroughs = {p["field"]: p.get("applyToTask", False)
                    for p in component["taskConfigPassthroughs"]}
    assert passthroughs == {"RESOURCES": True, "KUBERNETES_NODE_SELECTOR": False,
                            "KUBERNETES_TOLERATIONS": False, "KUBERNETES_AFFINITY": False,
                            "ENV": True, "KUBERNETES_VOLUMES": True}
    vertex = yamlio.load(compiled["vertex"].read_text())
    assert "TASK_CONFIG" not in json.dumps(vertex)  # Vertex AI runs a CustomJob instead


def test_flex_start_and_queue_on_gke_and_vertex(tmp_path):
    profile = DEFAULT_COMPUTE["train-model"].with_overrides(
        accelerator="nvidia-l4", accelerator_count=1, cpu="7", memory="26G", replicas=3,
        scheduling="flex-start", max_wait="2h", queue="team-a")
    compute = {"train-model": profile}
    gke = documents(compile_pipeline("training", "gke", tmp_path, compute=compute))[0]
    template = json.loads(gke["root"]["dag"]["tasks"]["train-model"]["inputs"]["parameters"][
        "jobset_template"]["runtimeValue"]["constant"])
    validate_jobset(js.finish(template, "gkeflow-train-x", "ns", "", []))
    assert template["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    pod = template["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"]["cloud.google.com/gke-flex-start"] == "true"
    assert "cloud.google.com/gke-spot" not in pod["nodeSelector"]
    vertex = documents(compile_pipeline("training", "vertex", tmp_path, compute=compute))[0]
    job = strict_custom_job(custom_job_payload(vertex)).job_spec
    assert job.scheduling.strategy.name == "FLEX_START"
    assert job.scheduling.max_wait_duration.total_seconds() == 7200
    assert [p.replica_count for p in job.worker_pool_specs] == [1, 2]
    assert job.worker_pool_specs[0].machine_spec.accelerator_type.name == "NVIDIA_L4"


def test_engines_apply_only_when_needed():
    train = DEFAULT_COMPUTE["train-model"]
    single = build_training_pipeline("gke").pipeline_spec
    root_inputs = single.root.dag.tasks["train-model"].inputs.parameters
    assert "jobset_template" not in root_inputs, "one pod: no JobSet"
    plain = {"train-model": train.with_overrides(timeout_s=0)}
    spec = build_training_pipeline("vertex", plain).pipeline_spec
    args = list(spec.deployment_spec["executors"]["exec-train-model"]["container"]["args"])
    assert "--payload" not in args, "standard, one replica, no timeout: a plain Vertex step"
    local = build_training_pipeline("local", {"train-model": train.with_overrides(replicas=2)})
    args = list(local.pipeline_spec.deployment_spec["executors"]["exec-train-model"][
        "container"]["args"])
    assert "train_model_local_workers" in args
