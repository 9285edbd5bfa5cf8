"""A gcsfuse bucket compiles to the CSI driver's volume and annotation on exactly the steps
that read or write under it (GKE), to the /gcs/ paths alone on Vertex AI."""

from __future__ import annotations

import json

import pytest
from google.protobuf import json_format
from kfp.kubernetes import kubernetes_executor_config_pb2 as k8s_pb2
from kfp.pipeline_spec import pipeline_spec_pb2

from gkeflow.components import yamlio
from gkeflow.components.cloud.mounts import MOUNTS_ENV, READ_ONLY_ENV
from gkeflow.pipelines.compute.gcsfuse import DRIVER, manifests
from gkeflow.pipelines.compute.profiles import ComputeError
from gkeflow.pipelines.definitions.training import DEFAULT_COMPUTE
from gkeflow.pipelines.settings.config import GkeflowConfig
from gkeflow.pipelines.targets.compile import compile_pipeline
from tests.compile.customjob import custom_job_payload, strict_custom_job

GCSFUSE = {"buckets": [
    {"bucket": "raw-data", "read_only": True, "mount_options": ["implicit-dirs", "o=noexec"]},
    {"bucket": "work-area", "mount_path": "/work", "use": ["shards", "checkpoints"],
     "mount_options": ["implicit-dirs", "file-cache:max-size-mb=-1"]},
], "sidecar": {"memory_limit": "2Gi", "ephemeral_storage_limit": "10Gi"}}


def _config(gcsfuse=GCSFUSE, **extra) -> GkeflowConfig:
    return GkeflowConfig.model_validate({"gcsfuse": gcsfuse, **extra})


def _executors(spec) -> dict[str, str]:
    """Task name -> executor label, through nested DAGs."""
    found = {}

    def walk(dag):
        for name, task in dag.get("tasks", {}).items():
            component = spec["components"][task["componentRef"]["name"]]
            if "dag" in component:
                walk(component["dag"])
            else:
                found[name] = component["executorLabel"]

    walk(spec["root"]["dag"])
    return found


def _env(spec, executor) -> dict[str, str]:
    container = spec["deploymentSpec"]["executors"][executor]["container"]
    return {item["name"]: item["value"] for item in container.get("env", [])}


def test_gke_mounts_each_bucket_on_exactly_the_steps_that_use_it(tmp_path):
    spec, platform = yamlio.load_all(
        compile_pipeline("training", "gke", tmp_path, config=_config()).read_text())
    json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec())
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    mounted = {}
    for task, label in _executors(spec).items():
        config = k8s_pb2.KubernetesExecutorConfig()
        json_format.ParseDict(executors.get(label, {}), config)
        claims = {m.mount_path: m.pvc_name_parameter.runtime_value.constant.string_value
                  for m in config.pvc_mount if m.pvc_name_parameter.runtime_value.constant
                  .string_value.startswith("gcsfuse-")}
        annotations = dict(config.pod_metadata.annotations)
        env = _env(spec, label).get(MOUNTS_ENV)
        read_only = _env(spec, label).get(READ_ONLY_ENV)
        assert read_only == ("raw-data" if "/gcs/raw-data" in claims else None), task
        if claims:
            mounted[task] = claims
            assert annotations == {"gke-gcsfuse/volumes": "true",
                                   "gke-gcsfuse/memory-limit": "2Gi",
                                   "gke-gcsfuse/ephemeral-storage-limit": "10Gi"}, task
            assert json.loads(env) == {
                {"/gcs/raw-data": "raw-data", "/work": "work-area"}[path]: path
                for path in claims}, task
        else:
            assert "gke-gcsfuse/volumes" not in annotations and env is None, task
    assert mounted == {
        "fingerprint-data": {"/gcs/raw-data": "gcsfuse-raw-data"},
        "prepare-data": {"/gcs/raw-data": "gcsfuse-raw-data", "/work": "gcsfuse-work-area"},
        # model_type auto's candidates read what train-model reads, and train-model (which
        # chooses among them) reads the eval split
        "train-gbdt": {"/work": "gcsfuse-work-area"},
        "train-mlp": {"/work": "gcsfuse-work-area"},
        "train-linear": {"/work": "gcsfuse-work-area"},
        "train-model": {"/work": "gcsfuse-work-area"},
        "evaluate-model": {"/work": "gcsfuse-work-area"},
    }


def test_vertex_reads_through_gcs_without_a_volume(tmp_path):
    text = compile_pipeline("training", "vertex", tmp_path, config=_config()).read_text()
    (spec,) = yamlio.load_all(text)
    assert "gke-gcsfuse" not in text and "gcsfuse-" not in text
    envs = {task: _env(spec, label).get(MOUNTS_ENV) for task, label in _executors(spec).items()}
    assert json.loads(envs["prepare-data"]) == {"raw-data": "/gcs/raw-data",
                                                "work-area": "/gcs/work-area"}
    assert json.loads(envs["evaluate-model"]) == {"work-area": "/gcs/work-area"}
    # the candidates train as CustomJobs whose launchers read nothing: the jobs' own
    # containers read the buckets through Vertex AI's /gcs/ mount (below); train-model,
    # choosing among them, reads the eval split itself
    for step in ("train-gbdt", "train-mlp", "train-linear"):
        assert envs[step] is None, step
        job = strict_custom_job(custom_job_payload(spec, step))
        [pool] = job.job_spec.worker_pool_specs
        assert {e.name: e.value for e in pool.container_spec.env} == {
            MOUNTS_ENV: json.dumps({"work-area": "/gcs/work-area"})}, step
    assert json.loads(envs["train-model"]) == {"work-area": "/gcs/work-area"}
    assert envs["register-model"] is None


def test_vertex_custom_job_containers_read_the_buckets_through_gcs(tmp_path):
    compute = {"train-model": DEFAULT_COMPUTE["train-model"].with_overrides(replicas=2)}
    (spec,) = yamlio.load_all(compile_pipeline(
        "training", "vertex", tmp_path, compute=compute, config=_config()).read_text())
    job = strict_custom_job(custom_job_payload(spec))
    pools = job.job_spec.worker_pool_specs
    assert [p.replica_count for p in pools] == [1, 1]
    for pool in pools:
        env = {item.name: item.value for item in pool.container_spec.env}
        assert env == {MOUNTS_ENV: json.dumps({"work-area": "/gcs/work-area"})}, env
    # what the training code in the job then reads and writes
    from gkeflow.components.cloud.mounts import mounted_path, writable_path

    assert mounted_path("gs://work-area/shards/train", env) == "/gcs/work-area/shards/train"
    assert writable_path("gs://work-area/ckpt", env) == "/gcs/work-area/ckpt"
    assert mounted_path("gs://other/x", env) == "gs://other/x"
    read_only = _config(gcsfuse={"buckets": [{"bucket": "frozen", "use": ["data"],
                                              "read_only": True}]})
    (plain,) = yamlio.load_all(compile_pipeline(
        "training", "vertex", tmp_path, compute=compute, config=read_only).read_text())
    # a data-only bucket is read by preparation, not by training: the job gets no env
    assert all(not p.container_spec.env for p in
               strict_custom_job(custom_job_payload(plain)).job_spec.worker_pool_specs)


def test_engines_without_mounts_refuse_a_mount_environment():
    from gkeflow.pipelines.compute.engines import gke, local

    profile = DEFAULT_COMPUTE["train-model"].with_overrides(replicas=2)
    for engine in (gke.ENGINE, local.ENGINE):
        with pytest.raises(ComputeError, match="pods mount no Cloud Storage bucket"):
            engine.task(profile, {}, env={MOUNTS_ENV: "{}"})


def _prediction_mounts(tmp_path, target: str, config):
    documents = list(yamlio.load_all(
        compile_pipeline("prediction", target, tmp_path, config=config).read_text()))
    spec = documents[0]
    json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec())
    executors = (documents[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
                 if len(documents) > 1 else {})
    found = {}
    for task, label in _executors(spec).items():
        config_ = k8s_pb2.KubernetesExecutorConfig()
        json_format.ParseDict(executors.get(label, {}), config_)
        claims = sorted(m.constant for m in config_.pvc_mount if m.constant.startswith("gcsfuse-"))
        env = _env(spec, label) if "container" in spec["deploymentSpec"]["executors"][
            label] else {}
        if claims or MOUNTS_ENV in env:
            found[task] = (claims, json.loads(env.get(MOUNTS_ENV, "{}")),
                           env.get(READ_ONLY_ENV),
                           dict(config_.pod_metadata.annotations).get("gke-gcsfuse/volumes"))
    return found


def test_prediction_mounts_its_data_bucket_in_the_scoring_step_only(tmp_path):
    assert _prediction_mounts(tmp_path, "gke", _config()) == {
        "predict-batch": (["gcsfuse-raw-data"], {"raw-data": "/gcs/raw-data"}, "raw-data",
                          "true")}
    assert _prediction_mounts(tmp_path, "vertex", _config()) == {
        "predict-batch": ([], {"raw-data": "/gcs/raw-data"}, "raw-data", None)}
    assert _prediction_mounts(tmp_path, "gke", GkeflowConfig()) == {}


def test_no_gcsfuse_compiles_no_mount(tmp_path):
    text = compile_pipeline("training", "gke", tmp_path, config=GkeflowConfig()).read_text()
    assert "gke-gcsfuse" not in text and MOUNTS_ENV not in text


def test_jobset_training_refuses_a_bucket_for_shards(tmp_path):
    config = _config(targets={"gke": {"host": "http://kfp.example",
                                      "pipeline_root": "gs://root-bucket/p"}})
    compute = {"train-model": DEFAULT_COMPUTE["train-model"].with_overrides(replicas=2)}
    with pytest.raises(ComputeError, match="JobSet whose pods mount no bucket"):
        compile_pipeline("training", "gke", tmp_path, compute=compute, config=config)
    data_only = _config(gcsfuse={"buckets": [{"bucket": "raw-data"}]},
                        targets=config.model_dump(include={"targets"})["targets"])
    compile_pipeline("training", "gke", tmp_path, compute=compute, config=data_only)


class _Response:
    def __init__(self, document):
        self.data = json.dumps(document)


def test_manifests_are_valid_persistent_volumes_of_the_csi_driver():
    from kubernetes.client import ApiClient

    client = ApiClient()
    documents = manifests(_config().gcsfuse, namespace="team-a")
    assert [d["kind"] for d in documents] == ["PersistentVolume", "PersistentVolumeClaim"] * 2
    for document in documents:
        model = client.deserialize(_Response(document), f"V1{document['kind']}")
        # a field Kubernetes does not know would be dropped on the way through its model
        assert client.sanitize_for_serialization(model) == document
    volume, claim = documents[0], documents[1]
    assert volume["spec"]["csi"] == {"driver": DRIVER, "volumeHandle": "raw-data",
                                     "readOnly": True}
    assert volume["spec"]["mountOptions"] == ["implicit-dirs", "o=noexec", "uid=10001",
                                              "gid=10001"]
    assert volume["spec"]["accessModes"] == claim["spec"]["accessModes"] == ["ReadOnlyMany"]
    assert volume["spec"]["claimRef"] == {"name": "gcsfuse-raw-data", "namespace": "team-a"}
    assert claim["spec"]["volumeName"] == volume["metadata"]["name"]
    assert documents[2]["spec"]["csi"] == {"driver": DRIVER, "volumeHandle": "work-area"}
    assert documents[3]["spec"]["accessModes"] == ["ReadWriteMany"]
    own = _config(gcsfuse={"buckets": [{"bucket": "b-data", "mount_options": ["uid=0"]}]})
    assert manifests(own.gcsfuse)[0]["spec"]["mountOptions"] == ["uid=0", "gid=10001"]


def test_manifest_printer_reads_gkeflow_yaml_and_refuses_bad_config(tmp_path, capsys):
    from gkeflow.pipelines.compute.gcsfuse import main

    good = tmp_path / "good.yaml"
    good.write_text("gcsfuse:\n  buckets:\n    - bucket: my-data\n      read_only: true\n")
    assert main(["--config", str(good), "--namespace", "team-a"]) == 0
    printed = capsys.readouterr().out
    documents = list(yamlio.load_all(printed))
    assert documents == manifests(_config(gcsfuse={"buckets": [
        {"bucket": "my-data", "read_only": True}]}).gcsfuse, "team-a")
    bad = tmp_path / "bad.yaml"
    bad.write_text("gcsfuse:\n  buckets:\n    - bucket: My_Data\n")
    assert main(["--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a Cloud Storage bucket name" in err


@pytest.mark.parametrize("pipeline, expected", [
    ("sweep", {"fingerprint-data": ["/gcs/raw-data"], "prepare-data": ["/gcs/raw-data", "/work"],
               "train-model": ["/work"], "evaluate-model": ["/work"]}),
    ("fanout-prepare", {"plan-prepare": ["/gcs/raw-data"],
                        "prepare-group": ["/gcs/raw-data", "/work"],
                        "merge-prepared": ["/work"]}),
])
def test_sweep_and_fanout_mount_the_same_way(tmp_path, pipeline, expected):
    spec, platform = yamlio.load_all(
        compile_pipeline(pipeline, "gke", tmp_path, config=_config()).read_text())
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    mounted = {}
    for task, label in _executors(spec).items():
        config = k8s_pb2.KubernetesExecutorConfig()
        json_format.ParseDict(executors.get(label, {}), config)
        paths = sorted(m.mount_path for m in config.pvc_mount if m.constant.startswith("gcsfuse-"))
        if paths:
            assert config.pod_metadata.annotations["gke-gcsfuse/volumes"] == "true"
            mounted[task] = paths
    assert mounted == expected


def test_pod_spec_as_kfp_driver_builds_it_is_a_valid_pod(tmp_path):
    """KFP's driver turns each pvcMount into a persistentVolumeClaim volume named after the
    claim plus a volumeMount, and podMetadata into the pod's annotations
    (the v2 driver in kubeflow/pipelines); the result must be a Pod Kubernetes accepts."""
    from kubernetes.client import ApiClient

    spec, platform = yamlio.load_all(
        compile_pipeline("training", "gke", tmp_path, config=_config()).read_text())
    executor = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"][
        "exec-prepare-data"]
    config = k8s_pb2.KubernetesExecutorConfig()
    json_format.ParseDict(executor, config)
    mounts = [m for m in config.pvc_mount if m.constant.startswith("gcsfuse-")]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "prepare-data", "annotations": dict(
               config.pod_metadata.annotations)},
           "spec": {"containers": [{"name": "main", "image": "gkeflow:test", "volumeMounts": [
               {"name": m.constant, "mountPath": m.mount_path} for m in mounts]}],
               "volumes": [{"name": m.constant, "persistentVolumeClaim": {
                   "claimName": m.constant}} for m in mounts]}}
    client = ApiClient()
    model = client.deserialize(_Response(pod), "V1Pod")
    assert client.sanitize_for_serialization(model) == pod
    claims = {d["metadata"]["name"] for d in manifests(_config().gcsfuse)
              if d["kind"] == "PersistentVolumeClaim"}
    assert {v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"]} == claims
