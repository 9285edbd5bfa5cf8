"""Both targets compiled for 0, 1, 2 and 8 GPUs, spot on and off, parsed strictly.

GKE: the PipelineSpec, the PlatformSpec and each executor's KubernetesExecutorConfig parse
with unknown fields rejected. Vertex: a single document that parses strictly and that
``aiplatform.PipelineJob(template_path=...)`` loads without a network call.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest
from google.protobuf import json_format
from kfp.kubernetes import kubernetes_executor_config_pb2 as k8s
from kfp.pipeline_spec import pipeline_spec_pb2

from gkeflow.components import yamlio
from gkeflow.pipelines.compute.profiles import ComputeProfile, fitting_shape
from gkeflow.pipelines.definitions.training import DEFAULT_COMPUTE, resolve_compute
from gkeflow.pipelines.targets.compile import compile_pipeline
from tests.compile.customjob import custom_job_payload, strict_custom_job

#: The steps of the training pipeline with one-pod preparation (the default) and their
#: default profiles.
ONE_POD_COMPUTE = {step: DEFAULT_COMPUTE[step] for step in resolve_compute("local")
                   if step in DEFAULT_COMPUTE}
REPO = Path(__file__).resolve().parents[2]
#: train-model's compute goes to the Keras candidate of model_type auto (the default), which
#: trains beside the trees and the linear model; train-model then only chooses.
GPU_STEP = "train-mlp"

#: GPU count -> a valid training profile with that many GPUs (0: CPU only).
TRAIN_PROFILES = {
    0: ComputeProfile(cpu="4", memory="16G", timeout_s=7200),
    1: ComputeProfile(cpu="7", memory="26G", accelerator="nvidia-tesla-t4", accelerator_count=1,
                      timeout_s=7200, retries=3, retry_backoff_s=10, retry_backoff_factor=1.0,
                      retry_max_duration_s=900),
    2: ComputeProfile(cpu="20", memory="80G", accelerator="NVIDIA_L4", accelerator_count=2,
                      timeout_s=7200),
    8: ComputeProfile(cpu="90", memory="600G", accelerator="nvidia-tesla-a100",
                      accelerator_count=8, timeout_s=7200, shm_size="64Gi"),
}
CASES = [(count, spot) for count in TRAIN_PROFILES for spot in (False, True)]


def documents(path: Path) -> list[dict]:
    return [d for d in yamlio.load_all(path.read_text()) if d is not None]


def strict_pipeline_spec(document: dict) -> pipeline_spec_pb2.PipelineSpec:
    return json_format.ParseDict(document, pipeline_spec_pb2.PipelineSpec(),
                                 ignore_unknown_fields=False)


def strict_executor_configs(document: dict) -> dict[str, k8s.KubernetesExecutorConfig]:
    platform = json_format.ParseDict(document, pipeline_spec_pb2.PlatformSpec(),
                                     ignore_unknown_fields=False)
    assert set(platform.platforms) == {"kubernetes"}
    executors = json_format.MessageToDict(platform.platforms["kubernetes"].deployment_spec)
    return {
        name.removeprefix("exec-"): json_format.ParseDict(
            config, k8s.KubernetesExecutorConfig(), ignore_unknown_fields=False)
        for name, config in executors["executors"].items()
    }


def resources(spec: dict) -> dict[str, dict]:
    return {
        name.removeprefix("exec-"): executor["container"].get("resources", {})
        for name, executor in spec["deploymentSpec"]["executors"].items()
    }


def retry_policies(spec: dict) -> dict[str, dict]:
    found = {}

    def walk(tasks: dict) -> None:
        for name, task in tasks.items():
            found[name] = task.get("retryPolicy")

    walk(spec["root"]["dag"]["tasks"])
    for component in spec["components"].values():
        walk(component.get("dag", {}).get("tasks", {}))
    return {k: v for k, v in found.items() if k in DEFAULT_COMPUTE or k.startswith("train-")}


@pytest.fixture(scope="module")
def compiled_cases(tmp_path_factory) -> dict[tuple[int, bool], dict[str, Path]]:
    out = {}
    for count, spot in CASES:
        directory = tmp_path_factory.mktemp(f"gpus{count}-spot{int(spot)}")
        profile = TRAIN_PROFILES[count].with_overrides(spot=spot)
        out[(count, spot)] = {
            target: compile_pipeline("training", target, directory, {"train-model": profile})
            for target in ("gke", "vertex")
        }
    return out


@pytest.mark.parametrize(("count", "spot"), CASES)
def test_gke(compiled_cases, count, spot):
    profile = TRAIN_PROFILES[count].with_overrides(spot=spot)
    spec_doc, platform_doc = documents(compiled_cases[(count, spot)]["gke"])
    strict_pipeline_spec(spec_doc)
    configs = strict_executor_configs(platform_doc)
    res = resources(spec_doc)
    profiles = resolve_compute("gke", {"train-model": profile})
    assert profiles[GPU_STEP] == profile

    for step, p in profiles.items():
        r = res[step]
        # CPU and memory requests and limits on every step.
        assert r["resourceCpuRequest"] == r["resourceCpuLimit"] == p.cpu, step
        assert r["resourceMemoryRequest"] == r["resourceMemoryLimit"] == p.memory, step
        config = configs[step]
        assert config.active_deadline_seconds == p.timeout_s, step
        if not p.uses_gpu:
            # No GPU settings; the Spot selector and toleration only where spot was asked.
            spot_here = p.spot
            assert "accelerator" not in r, step
            assert not config.empty_dir_mounts, step
            assert dict(config.node_selector.labels) == (
                {"cloud.google.com/gke-spot": "true"} if spot_here else {}), step
            assert [(t.key, t.operator, t.value, t.effect) for t in config.tolerations] == (
                [("cloud.google.com/gke-spot", "Equal", "true", "NoSchedule")]
                if spot_here else []), step

    train = configs[GPU_STEP]
    if count:
        assert res[GPU_STEP]["accelerator"] == {
            "count": str(count), "resourceCount": str(count),
            "resourceType": "nvidia.com/gpu", "type": "nvidia.com/gpu",
        }
        expected_labels = {"cloud.google.com/gke-accelerator": profile.accelerator}
        expected_tolerations = [("nvidia.com/gpu", "Exists", "", "NoSchedule")]
        if spot:
            expected_labels["cloud.google.com/gke-spot"] = "true"
            expected_tolerations.append(("cloud.google.com/gke-spot", "Equal", "true",
                                         "NoSchedule"))
        assert dict(train.node_selector.labels) == expected_labels
        assert [(t.key, t.operator, t.value, t.effect) for t in train.tolerations] == (
            expected_tolerations)
        if count >= 2:
            [mount] = train.empty_dir_mounts
            assert (mount.mount_path, mount.medium) == ("/dev/shm", "Memory")
            assert mount.size_limit == (profile.shm_size or "38146Mi")
        else:
            assert not train.empty_dir_mounts


@pytest.mark.parametrize(("count", "spot"), CASES)
def test_vertex(compiled_cases, count, spot):
    path = compiled_cases[(count, spot)]["vertex"]
    docs = documents(path)
    assert len(docs) == 1, "Vertex loads a single YAML document"
    strict_pipeline_spec(docs[0])
    text = path.read_text()
    for kubernetes_only in ("nvidia.com/gpu", "gke-accelerator", "gke-spot", "/dev/shm",
                            "platforms:", "activeDeadlineSeconds"):
        assert kubernetes_only not in text
    res = resources(docs[0])
    profile = TRAIN_PROFILES[count]
    for step, p in resolve_compute("vertex", {"train-model": profile}).items():
        if step.startswith("train-") and step != "train-model":
            # a candidate's CustomJob launcher (the profile has a timeout): a small pod
            assert res[step]["resourceCpuLimit"] == "1" and "accelerator" not in res[step]
            continue
        assert res[step]["resourceCpuLimit"] == p.cpu and res[step]["resourceMemoryLimit"] == (
            p.memory)
        assert "resourceCpuRequest" not in res[step]
    job = strict_custom_job(custom_job_payload(docs[0], GPU_STEP))
    assert job.job_spec.scheduling.strategy.name == ("SPOT" if spot else "STANDARD")
    assert job.job_spec.scheduling.timeout.total_seconds() == profile.timeout_s
    [chief] = job.job_spec.worker_pool_specs
    if count:
        vertex_types = {1: "NVIDIA_TESLA_T4", 2: "NVIDIA_L4", 8: "NVIDIA_TESLA_A100"}
        assert chief.machine_spec.accelerator_type.name == vertex_types[count]
        assert chief.machine_spec.accelerator_count == count
        assert chief.machine_spec.machine_type == fitting_shape(profile, "vertex").name
    else:
        assert chief.machine_spec.accelerator_count == 0


@pytest.mark.parametrize("count", sorted(TRAIN_PROFILES))
def test_vertex_yaml_loads_as_a_pipeline_job_without_network(compiled_cases, count,
                                                             monkeypatch):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import aiplatform, aiplatform_v1

    def no_network(self, address):
        raise AssertionError(f"unexpected network connection to {address}")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    job = aiplatform.PipelineJob(
        display_name="gkeflow-training",
        template_path=str(compiled_cases[(count, False)]["vertex"]),
        project="gkeflow-test",
        location="us-central1",
        pipeline_root="gs://gkeflow-test-bucket/root",
        credentials=AnonymousCredentials(),
        parameter_values={"epochs": 3},
    )
    resource = job._gca_resource
    body = type(resource).to_json(resource)
    parsed = aiplatform_v1.PipelineJob.from_json(body, ignore_unknown_fields=False)
    payload = custom_job_payload(json_format.MessageToDict(parsed._pb.pipeline_spec))
    machine = strict_custom_job(payload).job_spec.worker_pool_specs[0].machine_spec
    assert (machine.accelerator_count > 0) == (count > 0)
    assert parsed.runtime_config.gcs_output_directory == "gs://gkeflow-test-bucket/root"


def test_retry_fields_are_all_explicit(compiled_cases):
    spec = documents(compiled_cases[(1, False)]["gke"])[0]
    policies = retry_policies(spec)
    assert policies[GPU_STEP] == {"backoffDuration": "10s", "backoffFactor": 1.0,
                                  "backoffMaxDuration": "900s", "maxRetryCount": 3}
    register = DEFAULT_COMPUTE["register-model"]
    assert policies["register-model"] == {
        "backoffDuration": f"{register.retry_backoff_s}s",
        "backoffFactor": register.retry_backoff_factor,
        "backoffMaxDuration": f"{register.retry_max_duration_s}s",
        "maxRetryCount": register.retries,
    }
    assert policies["prepare-data"] is None  # no retries asked, none compiled
    caching = {name: t["cachingOptions"].get("enableCache", False)
               for name, t in spec["root"]["dag"]["tasks"].items()
               if name in DEFAULT_COMPUTE or name.startswith("train-")}
    # The data fingerprint (computed at run time) and the champion look-up in evaluation
    # are never served from cache; preparation is, keyed on that fingerprint.
    assert caching == {"fingerprint-data": False, "prepare-data": True, "train-model": True,
                       "train-gbdt": True, "train-mlp": True, "train-linear": True,
                       "evaluate-model": False}


# --------------------------------------------------------------------------- secrets

SECRET_PATTERNS = {
    "private key": re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    "service-account key field": re.compile(r"\"?private_key(_id)?\"?\s*:"),
    "AWS access key": re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"),
    "Google API key": re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b"),
    "Google OAuth token": re.compile(r"\bya29\.[0-9A-Za-z_\-]{20,}"),
    "GitHub token": re.compile(r"\bgh[pousr]_[0-9A-Za-z]{36}\b"),
    "Slack token": re.compile(r"\bxox[abposr]-[0-9A-Za-z-]{10,}"),
    "bearer token": re.compile(r"(?i)\bbearer\s+[A-Za-z0-9\-._~+/]{16,}"),
    "credentials in a URL": re.compile(r"\b[a-z][a-z0-9+.-]*://[^/\s:@'\"]+:[^/\s@'\"]+@"),
    "assigned secret": re.compile(
        r"(?i)\b(password|passwd|secret|api[_-]?key|access[_-]?key|auth[_-]?token|"
        r"client[_-]?secret)\b\s*[:=]\s*['\"]?[^\s'\"]{6,}"),
}


def secrets_in(text: str) -> list[str]:
    return [f"{kind}: {m.group(0)[:40]}" for kind, pattern in SECRET_PATTERNS.items()
            for m in pattern.finditer(text)]


def test_the_secret_scan_finds_planted_secrets():
    planted = "\n".join([
        "-----BEGIN RSA PRIVATE KEY-----", '"private_key": "x"', "AKIAABCDEFGHIJKLMNOP",
        "AIza" + "A" * 35, "ya29." + "a" * 30, "ghp_" + "b" * 36, "xoxb-1234567890-abc",
        "Authorization: Bearer abcdefghijklmnopqrstuvwx", "https://user:hunter22@example.com",
        "password: hunter22", "API_KEY=abcdef123456",
    ])
    assert len(secrets_in(planted)) >= len(SECRET_PATTERNS)
    assert secrets_in("registry_uri: sqlite:///gkeflow-registry.db\nimage: x:1.0") == []


def test_no_secret_looking_value_in_any_compiled_yaml(compiled_cases):
    paths = sorted((REPO / "compiled").glob("*.yaml"))
    assert paths, "compiled/ holds the committed pipelines"
    paths += [p for case in compiled_cases.values() for p in case.values()]
    for path in paths:
        assert secrets_in(path.read_text()) == [], path

