"""Every GKE training pod carries the labels `gkeflow monitoring apply`'s GPU duty-cycle alert
filters on: the single train-model pod, each sweep trial and the JobSet pods."""

from __future__ import annotations

import re

import pytest
from google.protobuf import json_format
from kfp.kubernetes import kubernetes_executor_config_pb2 as k8s

from gkeflow.components import yamlio
from gkeflow.components.scaleout.jobset import finish
from gkeflow.pipelines.compute.engines.gke import jobset_template
from gkeflow.pipelines.compute.profiles import ComputeProfile
from gkeflow.pipelines.settings.monitoring_config import MonitoringSettings
from gkeflow.pipelines.targets.compile import compile_pipeline
from gkeflow.pipelines.targets.monitoring import desired_policies

SELECTOR = re.compile(r'metadata\.user_labels\.("[^"]+") = ("[^"]*")')


def alert_labels() -> dict[str, str]:
    """The pod labels the default GKE alert policy's filter selects."""
    gke = next(policy for policy in desired_policies(MonitoringSettings(), "default")
               if "k8s_container" in policy["conditions"][0]["conditionThreshold"]["filter"])
    text = gke["conditions"][0]["conditionThreshold"]["filter"]
    pairs = {yamlio.load(key): yamlio.load(value) for key, value in SELECTOR.findall(text)}
    assert pairs, text
    return pairs


def pod_labels(path, executor: str) -> dict[str, str]:
    docs = [doc for doc in yamlio.load_all(path.read_text()) if doc]
    config = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"][executor]
    json_format.ParseDict(config, k8s.KubernetesExecutorConfig(), ignore_unknown_fields=False)
    return config.get("podMetadata", {}).get("labels", {})


@pytest.mark.parametrize("compute", [
    None,  # the default CPU training step
    {"train-model": ComputeProfile(cpu="8", memory="32G", accelerator="nvidia-l4",
                                   accelerator_count=1, scheduling="spot")},
])
def test_single_pod_training_carries_the_alert_labels(tmp_path, compute):
    path = compile_pipeline("training", "gke", tmp_path, compute=compute)
    labels = pod_labels(path, "exec-train-mlp")  # the Keras candidate of model_type auto
    assert alert_labels().items() <= labels.items()


def test_sweep_trials_carry_the_alert_labels(tmp_path):
    path = compile_pipeline("sweep", "gke", tmp_path)
    assert alert_labels().items() <= pod_labels(path, "exec-train-model").items()


def test_only_training_pods_are_labelled(tmp_path):
    path = compile_pipeline("training", "gke", tmp_path)
    assert not alert_labels().items() <= pod_labels(path, "exec-prepare-data").items()


def test_jobset_pods_carry_the_alert_labels():
    template = jobset_template(ComputeProfile(cpu="8", memory="32G", accelerator="nvidia-l4",
                                              accelerator_count=1, replicas=2), "img")
    manifest = finish(template, "train-abc", "ns", "", ["--x"], run_id="r", task_name="t")
    for job in manifest["spec"]["replicatedJobs"]:
        labels = job["template"]["spec"]["template"]["metadata"]["labels"]
        assert alert_labels().items() <= labels.items()
