"""A Managed Lustre instance compiles to its claim on exactly the steps that read or write
under it (GKE); its PersistentVolume names the CSI driver's documented fields; Vertex AI,
whose pipeline steps cannot mount one, and JobSet training that would need one are refused
in one line."""

from __future__ import annotations

import json

import pytest
import yaml
from google.protobuf import json_format
from kfp.kubernetes import kubernetes_executor_config_pb2 as k8s_pb2
from pydantic import ValidationError

from gkeflow.components import yamlio
from gkeflow.pipelines.compute.lustre import DRIVER, manifests
from gkeflow.pipelines.compute.profiles import ComputeError
from gkeflow.pipelines.definitions.training import DEFAULT_COMPUTE
from gkeflow.pipelines.settings.config import GkeflowConfig
from gkeflow.pipelines.targets.compile import compile_pipeline
from tests.compile.test_gcsfuse_compile import _executors, _Response

DATA = {"name": "raw-fs", "project": "my-project", "location": "us-central1-a",
        "ip": "10.90.1.4", "filesystem": "rawfs", "read_only": True}
WORK = {"name": "work-fs", "project": "my-project", "location": "us-central1-b",
        "ip": "10.90.2.8", "filesystem": "lfs", "mount_path": "/work",
        "use": ["shards", "checkpoints"], "capacity": "36000Gi"}


def _config(*instances, **extra) -> GkeflowConfig:
    return GkeflowConfig.model_validate({"lustre": {"instances": list(instances)}, **extra})


def _claims(tmp_path, pipeline: str, config, compute=None) -> dict[str, dict[str, str]]:
    spec, platform = yamlio.load_all(compile_pipeline(
        pipeline, "gke", tmp_path, compute=compute, config=config).read_text())
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    found = {}
    for task, label in _executors(spec).items():
        parsed = k8s_pb2.KubernetesExecutorConfig()
        json_format.ParseDict(executors.get(label, {}), parsed)
        claims = {m.mount_path: m.pvc_name_parameter.runtime_value.constant.string_value
                  for m in parsed.pvc_mount}
        claims = {path: claim for path, claim in claims.items() if claim.startswith("lustre-")}
        if claims:
            found[task] = claims
    return found


def test_gke_mounts_each_instance_on_exactly_the_steps_that_use_it(tmp_path):
    assert _claims(tmp_path, "training", _config(DATA, WORK)) == {
        "fingerprint-data": {"/lustre/raw-fs": "lustre-raw-fs"},
        "prepare-data": {"/lustre/raw-fs": "lustre-raw-fs", "/work": "lustre-work-fs"},
        # model_type auto's candidates read what train-model reads; it chooses among them
        "train-gbdt": {"/work": "lustre-work-fs"},
        "train-mlp": {"/work": "lustre-work-fs"},
        "train-linear": {"/work": "lustre-work-fs"},
        "train-model": {"/work": "lustre-work-fs"},
        "evaluate-model": {"/work": "lustre-work-fs"},
    }
    assert _claims(tmp_path, "prediction", _config(DATA, WORK)) == {
        "predict-batch": {"/lustre/raw-fs": "lustre-raw-fs"}}


def test_vertex_ai_is_refused_in_one_line_for_every_pipeline(tmp_path):
    for pipeline in ("training", "sweep", "prediction", "fanout-prepare"):
        with pytest.raises(ComputeError) as refused:
            compile_pipeline(pipeline, "vertex", tmp_path, config=_config(DATA))
        message = str(refused.value)
        assert "\n" not in message and "lustre instance raw-fs" in message
        assert "--target gke" in message
    # without lustre: nothing changes on Vertex AI
    compile_pipeline("training", "vertex", tmp_path, config=_config())


def test_jobset_training_cannot_reach_shards_or_checkpoints_on_lustre(tmp_path):
    compute = {"train-model": DEFAULT_COMPUTE["train-model"].with_overrides(replicas=2)}
    with pytest.raises(ComputeError, match="lustre instance work-fs holds shards or "
                                           "checkpoints.*JobSet"):
        compile_pipeline("training", "gke", tmp_path, compute=compute, config=_config(WORK))
    # data-only: preparation mounts it, the JobSet's launcher does not
    mounted = _claims(tmp_path, "training", _config(DATA), compute=compute)
    assert set(mounted) == {"fingerprint-data", "prepare-data"}


def test_manifests_are_persistent_volumes_of_the_managed_lustre_csi_driver():
    from kubernetes.client import ApiClient

    client = ApiClient()
    documents = manifests(_config(DATA, WORK).lustre, namespace="team-a")
    assert [d["kind"] for d in documents] == ["PersistentVolume", "PersistentVolumeClaim"] * 2
    for document in documents:
        model = client.deserialize(_Response(document), f"V1{document['kind']}")
        assert client.sanitize_for_serialization(model) == document  # no unknown field
    volume, claim = documents[0], documents[1]
    assert volume["spec"]["csi"] == {
        "driver": DRIVER, "volumeHandle": "my-project/us-central1-a/raw-fs",
        "volumeAttributes": {"ip": "10.90.1.4", "filesystem": "rawfs"}, "readOnly": True}
    assert volume["spec"]["accessModes"] == claim["spec"]["accessModes"] == ["ReadOnlyMany"]
    assert volume["spec"]["storageClassName"] == claim["spec"]["storageClassName"] == ""
    assert volume["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert volume["spec"]["claimRef"] == {"name": "lustre-raw-fs", "namespace": "team-a"}
    assert claim["spec"]["volumeName"] == volume["metadata"]["name"]
    work_volume, work_claim = documents[2], documents[3]
    assert work_volume["spec"]["accessModes"] == ["ReadWriteMany"]
    assert "readOnly" not in work_volume["spec"]["csi"]
    assert work_volume["spec"]["capacity"] == work_claim["spec"]["resources"]["requests"] == {
        "storage": "36000Gi"}


@pytest.mark.parametrize("change,message", [
    ({"ip": "10.90.1"}, "not an IP address"),
    ({"ip": "fd00::4"}, "takes an IPv4 address"),
    ({"filesystem": "toolongname"}, "not a Managed Lustre file system name"),
    ({"location": "us-central1"}, "not a zone"),
    ({"read_only": True, "use": ["checkpoints"]}, "read_only but holds checkpoints"),
    ({"mount_path": "/kfp-workspace/lustre"}, "overlaps /kfp-workspace"),
    ({"name": "Bad_Name"}, "not a valid name"),
])
def test_instance_settings_are_checked_where_they_are_read(change, message):
    with pytest.raises(ValidationError, match=message):
        _config({**DATA, **change})


def test_two_volumes_at_one_path_are_refused():
    with pytest.raises(ValidationError, match="overlap"):
        _config(DATA, {**WORK, "mount_path": "/lustre/raw-fs/sub"})
    with pytest.raises(ValidationError, match="overlaps gcsfuse bucket my-data"):
        _config({**DATA, "mount_path": "/data"},
                gcsfuse={"buckets": [{"bucket": "my-data", "mount_path": "/data/raw"}]})


def test_plan_shows_the_mounts_and_refuses_vertex_ai(tmp_path):
    from click.testing import CliRunner

    from gkeflow.pipelines.cli.main import main

    config = tmp_path / "gkeflow.yaml"
    config.write_text(yaml.safe_dump({"lustre": {"instances": [DATA, WORK]}}))
    shown = CliRunner().invoke(main, ["plan", "--target", "gke", "--config", str(config)])
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    assert ("lustre: train-model: work-fs at /work (read-write, claim lustre-work-fs)"
            in text)
    assert "lustre: fingerprint-data: raw-fs at /lustre/raw-fs (read-only" in text
    assert f"CSI driver {DRIVER}" in text
    as_json = CliRunner().invoke(main, ["plan", "--target", "gke", "--config", str(config),
                                        "--output", "json"])
    assert json.loads(as_json.output)["lustre"]["evaluate-model"] == [
        {"bucket": "work-fs", "path": "/work", "read_only": False, "claim": "lustre-work-fs"}]
    refused = CliRunner().invoke(main, ["plan", "--target", "vertex", "--config", str(config)])
    assert refused.exit_code == 1
    assert "Vertex AI mounts Managed Lustre only in CustomJobs" in refused.output


def test_manifest_printer_reads_gkeflow_yaml_and_refuses_bad_config(tmp_path, capsys):
    from gkeflow.pipelines.compute.lustre import main

    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump({"lustre": {"instances": [DATA]}}))
    assert main(["--config", str(good), "--namespace", "team-a"]) == 0
    assert list(yamlio.load_all(capsys.readouterr().out)) == manifests(
        _config(DATA).lustre, "team-a")
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"lustre": {"instances": [{**DATA, "ip": "nope"}]}}))
    assert main(["--config", str(bad)]) == 2
    assert "not an IP address" in capsys.readouterr().err
    empty = tmp_path / "empty.yaml"
    empty.write_text("{}\n")
    assert main(["--config", str(empty)]) == 2

