"""ephemeral_storage reaches a GKE step as a sized generic ephemeral volume over the
launcher's staging directory; Vertex says it does not apply it; fan-out compiles for both."""

from __future__ import annotations

from google.protobuf import json_format
from kfp.kubernetes import kubernetes_executor_config_pb2 as k8s
from kfp.pipeline_spec import pipeline_spec_pb2

from gkeflow.components import yamlio
from gkeflow.pipelines.compute.plan import plan
from gkeflow.pipelines.compute.profiles import ComputeProfile
from gkeflow.pipelines.compute.scratch import STAGING_PATH
from gkeflow.pipelines.targets.compile import compile_pipeline


def _docs(path) -> list[dict]:
    docs = [d for d in yamlio.load_all(path.read_text()) if d]
    json_format.ParseDict(docs[0], pipeline_spec_pb2.PipelineSpec(), ignore_unknown_fields=False)
    return docs


def test_gke_step_gets_a_sized_volume_only_when_asked(tmp_path):
    compute = {"prepare-data": ComputeProfile(cpu="4", memory="16G", caching=False,
                                              ephemeral_storage="300Gi")}
    docs = _docs(compile_pipeline("training", "gke", tmp_path / "gke", compute=compute))
    executors = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    config = json_format.ParseDict(executors["exec-prepare-data"],
                                   k8s.KubernetesExecutorConfig(), ignore_unknown_fields=False)
    (volume,) = config.generic_ephemeral_volume
    assert (volume.mount_path, volume.size, list(volume.access_modes)) == (
        STAGING_PATH, "300Gi", ["ReadWriteOnce"])
    assert volume.default_storage_class
    for name, executor in executors.items():  # the default profiles ask for none
        if name != "exec-prepare-data":
            assert "genericEphemeralVolume" not in executor
    row = {r.step: r for r in plan(compute, "gke", {})}["prepare-data"]
    assert row.disk == "300Gi volume at /minio"
    vertex = _docs(compile_pipeline("training", "vertex", tmp_path / "vertex", compute=compute))
    assert len(vertex) == 1 and "genericEphemeralVolume" not in str(vertex)


def test_fanout_pipeline_compiles_for_both_targets(tmp_path):
    for target in ("gke", "vertex"):
        docs = _docs(compile_pipeline("fanout-prepare", target, tmp_path / target))
        assert len(docs) == (2 if target == "gke" else 1)
        spec = docs[0]
        loop = next(t for t in spec["root"]["dag"]["tasks"].values()
                    if "iteratorPolicy" in t)
        assert loop["iteratorPolicy"]["parallelismLimit"] == 8
        assert set(spec["deploymentSpec"]["executors"]) == {
            "exec-plan-prepare", "exec-prepare-group", "exec-merge-prepared"}
        resources = spec["deploymentSpec"]["executors"]["exec-prepare-group"]["container"][
            "resources"]
        assert resources.get("cpuLimit") == 2.0 or resources.get("resourceCpuLimit") == "2"


def test_plan_shows_the_fanout_pipelines_own_steps(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from gkeflow.pipelines.cli.main import main

    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["plan", "fanout-prepare", "--target", "gke"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    for step in ("plan-prepare", "prepare-group", "merge-prepared"):
        assert step in result.output
    assert "train-model" not in result.output
