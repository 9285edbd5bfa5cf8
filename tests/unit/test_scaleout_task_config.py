"""Merging the launcher task's Kubernetes settings (dsl.TaskConfig) into the JobSet's pods:
the compute profile's values win, the task fills in the rest, nothing lands twice."""

from __future__ import annotations

import pytest
from kfp import dsl

from gkeflow.components.scaleout import jobset as js
from gkeflow.components.scaleout.task_config import as_dict, merge_task_config
from gkeflow.pipelines.compute.engines.gke import jobset_template
from gkeflow.pipelines.definitions.training import DEFAULT_COMPUTE
from tests.integration.fake_kube import validate_jobset

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def template(**overrides) -> dict:
    profile = DEFAULT_COMPUTE["train-model"].with_overrides(replicas=2, **overrides)
    return jobset_template(profile, "gkeflow-gpu:test")


def pod_of(manifest: dict) -> dict:
    return manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]


def test_profile_values_win_and_the_task_fills_in_the_rest():
    base = template(scheduling="spot")
    config = dsl.TaskConfig(
        resources={"requests": {"cpu": "1", "memory": "2G", "ephemeral-storage": "50Gi"},
                   "limits": {"cpu": "1", "memory": "2G", "nvidia.com/gpu": "4",
                              "ephemeral-storage": "50Gi"}},
        node_selector={"cloud.google.com/gke-accelerator": "nvidia-l4", "team": "ml"},
        tolerations=[GPU_TOLERATION, {"key": "team", "operator": "Equal", "value": "ml",
                                      "effect": "NoSchedule"}],
        affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
        env=[{"name": "TF_CPP_MIN_LOG_LEVEL", "value": "0"}, {"name": "HTTPS_PROXY",
                                                             "value": "http://proxy:3128"}],
        volumes=[{"name": "certs", "secret": {"secretName": "ca"}},
                 {"name": "dshm", "emptyDir": {}}],
        volume_mounts=[{"name": "certs", "mountPath": "/etc/certs"},
                       {"name": "dshm", "mountPath": "/elsewhere"}])
    merged, notes = merge_task_config(base, config)
    pod, base_pod = pod_of(merged), pod_of(base)
    container, base_container = pod["containers"][0], base_pod["containers"][0]
    for kind in ("requests", "limits"):  # cpu, memory and GPUs are the profile's
        for name, value in base_container["resources"][kind].items():
            assert container["resources"][kind][name] == value
        assert container["resources"][kind]["ephemeral-storage"] == "50Gi"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert pod["nodeSelector"] == {**base_pod["nodeSelector"], "team": "ml"}
    assert pod["nodeSelector"]["cloud.google.com/gke-accelerator"] == "nvidia-tesla-t4"
    assert pod["tolerations"].count(GPU_TOLERATION) == 1
    assert {"key": "team", "operator": "Equal", "value": "ml",
            "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["affinity"] == config.affinity
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env == {"TF_CPP_MIN_LOG_LEVEL": "1", "HTTPS_PROXY": "http://proxy:3128"}
    assert [v["name"] for v in pod["volumes"]] == ["dshm", "certs"]
    assert pod["volumes"][0] == base_pod["volumes"][0]  # the profile's /dev/shm
    assert {"name": "certs", "mountPath": "/etc/certs"} in container["volumeMounts"]
    assert not any(m["mountPath"] == "/elsewhere" for m in container["volumeMounts"])
    assert notes == ["volume dshm is not mounted in the JobSet's pods: the compute profile "
                     "uses that name"]
    assert base == template(scheduling="spot"), "the template itself is not modified"
    validate_jobset(js.finish(merged, "gkeflow-train-0123456789abcdef", "ns", "sa", []))


def test_a_persistent_volume_claim_stays_off_the_multi_node_pods():
    config = {"volumes": [{"name": "kfp-workspace",
                           "persistentVolumeClaim": {"claimName": "run-1-workspace"}}],
              "volume_mounts": [{"name": "kfp-workspace", "mountPath": "/kfp-workspace"}]}
    merged, notes = merge_task_config(template(), config)
    pod = pod_of(merged)
    assert [v["name"] for v in pod["volumes"]] == ["dshm"]
    assert all(m["name"] == "dshm" for m in pod["containers"][0]["volumeMounts"])
    assert notes and "run-1-workspace" in notes[0] and "several nodes" in notes[0]


def test_an_empty_task_config_changes_nothing():
    base = template(queue="team-a")
    assert merge_task_config(base, dsl.TaskConfig()) == (base, [])
    assert merge_task_config(base, None) == (base, [])
    assert as_dict(dsl.TaskConfig(env=[], node_selector={"a": "b"})) == {
        "node_selector": {"a": "b"}}
    with pytest.raises(ValueError, match="unknown task config field"):
        as_dict({"nodeSelector": {"a": "b"}})
