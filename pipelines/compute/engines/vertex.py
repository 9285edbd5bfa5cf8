"""Vertex AI engine: the training step runs as a CustomJob launched from the pipeline.

A Vertex AI pipeline step has no scheduling field and no timeout, and runs on one machine.
When the training profile asks for more (``replicas > 1``, Spot or flex-start capacity, a
reservation, or a timeout), the step becomes a small launcher (the suite's CPU image,
:mod:`gkeflow.components.scaleout.vertex_launcher`) that creates a CustomJob whose worker
pools run ``train_model``'s own container: pool 0 the chief, pool 1 ``replicas - 1`` workers,
each with the profile's machine and accelerators. This is the shape Google Cloud Pipeline
Components' ``create_custom_training_job_from_component`` compiles to (the same executor
input placeholder, JSON-escaped inside the payload), built here without that package
(which pins google-cloud-aiplatform below 2).

Vertex AI sets ``TF_CONFIG`` on every replica; ``train_model`` then trains with
MultiWorkerMirroredStrategy and only the chief writes the model, at the output path that
evaluation reads. The CustomJob runs as the pipeline job's service account and on its
network (both from ``gkeflow.yaml``'s Vertex target), read by the launcher at run time.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Mapping
from typing import Any

from gkeflow.pipelines.compute import launchers, tpu_profile
from gkeflow.pipelines.compute.profiles import (
    GKE_TO_VERTEX_ACCELERATOR,
    ComputeError,
    ComputeProfile,
    cpu_cores,
    fitting_shape,
    memory_bytes,
)

STRATEGIES = {"standard": "STANDARD", "spot": "SPOT", "flex-start": "FLEX_START",
              "reservation": "STANDARD"}
#: Vertex AI's own limit on a CustomJob's run time (7 days).
MAX_TIMEOUT_S = 7 * 86400
LAUNCHER_MODULE = "gkeflow.components.scaleout.vertex_launcher"
_EXECUTOR_INPUT = "{{$}}"
_EXECUTOR_INPUT_JSON_ESCAPED = "{{$.json_escape[1]}}"
_N1_CPU_ONLY = (4, 8, 16, 32, 64, 96)


def machine_type(profile: ComputeProfile) -> str:
    """The machine each replica runs on: the smallest that hosts the profile (a TPU slice's
    own machine type)."""
    if profile.uses_tpu:
        return tpu_profile.vertex_machine_spec(profile)["machine_type"]
    if profile.uses_gpu:
        shape = fitting_shape(profile, "vertex")
        if shape is None:
            raise ComputeError(f"no Vertex AI machine hosts {profile.accelerator} x "
                               f"{profile.accelerator_count} with cpu {profile.cpu} and "
                               f"memory {profile.memory}")
        return shape.name
    cpu, gib = cpu_cores(profile.cpu), memory_bytes(profile.memory) / 2**30
    for vcpus in _N1_CPU_ONLY:
        if cpu <= vcpus and gib <= vcpus * 3.75:
            return f"n1-standard-{vcpus}"
    raise ComputeError(f"no n1-standard machine hosts cpu {profile.cpu} and memory "
                       f"{profile.memory}; lower them or add an accelerator")


def boot_disk_gb(profile: ComputeProfile) -> int:
    """Each replica's boot disk: the profile's ephemeral storage, at least Vertex's 100 GB."""
    if not profile.ephemeral_storage:
        return 100
    return max(100, math.ceil(memory_bytes(profile.ephemeral_storage) / 10**9))


def scheduling(profile: ComputeProfile) -> dict[str, Any]:
    """``CustomJobSpec.scheduling``: strategy, max wait, timeout, restart on worker restart."""
    timeout = min(profile.timeout_s or MAX_TIMEOUT_S, MAX_TIMEOUT_S)
    result: dict[str, Any] = {
        "timeout": f"{timeout}s",
        # Multi-worker training cannot continue without a lost worker: restart them all.
        "restart_job_on_worker_restart": profile.replicas > 1,
        "strategy": STRATEGIES[profile.scheduling],
    }
    if profile.scheduling == "flex-start" and profile.max_wait:
        from gkeflow.pipelines.compute.profiles import to_seconds

        result["max_wait_duration"] = f"{to_seconds('max_wait', profile.max_wait)}s"
    return result


def _with_escaped_executor_input(parts: list[str]) -> list[str]:
    # The payload is a JSON string: the executor input must be substituted JSON-escaped.
    return [_EXECUTOR_INPUT_JSON_ESCAPED if p == _EXECUTOR_INPUT else p for p in parts]


def custom_job_payload(profile: ComputeProfile, container: dict[str, Any],
                       display_name: str, env: Mapping[str, str] | None = None
                       ) -> dict[str, Any]:
    """The CustomJob (``aiplatform_v1.CustomJob`` JSON) running ``container`` per replica,
    with ``env`` (e.g. the gcsfuse mounts: Vertex AI mounts Cloud Storage at ``/gcs/`` in
    custom jobs too) in each replica's container."""
    machine: dict[str, Any] = {"machine_type": machine_type(profile)}
    if profile.uses_tpu:
        machine = dict(tpu_profile.vertex_machine_spec(profile))
    if profile.uses_gpu:
        machine["accelerator_type"] = GKE_TO_VERTEX_ACCELERATOR[profile.accelerator]
        machine["accelerator_count"] = profile.accelerator_count
    if profile.scheduling == "reservation":
        # The reservation as written (projects/PROJECT/zones/ZONE/reservations/NAME on Vertex).
        machine["reservation_affinity"] = {
            "reservation_affinity_type": "SPECIFIC_RESERVATION",
            "key": "compute.googleapis.com/reservation-name",
            "values": [profile.reservation],
        }
    chief = {
        "machine_spec": machine,
        "replica_count": 1,
        "container_spec": {
            "image_uri": container["image"],
            "command": _with_escaped_executor_input(container.get("command", [])),
            "args": _with_escaped_executor_input(container.get("args", [])),
            **({"env": [{"name": name, "value": value} for name, value in sorted(env.items())]}
               if env else {}),
        },
        "disk_spec": {"boot_disk_type": "pd-ssd", "boot_disk_size_gb": boot_disk_gb(profile)},
    }
    pools = [chief]
    if profile.replicas > 1:
        workers = copy.deepcopy(chief)
        workers["replica_count"] = profile.replicas - 1
        pools.append(workers)
    return {
        "display_name": display_name,
        "job_spec": {"worker_pool_specs": pools, "scheduling": scheduling(profile)},
        "labels": {"gkeflow-step": display_name},
    }


def custom_job_component(component, profile: ComputeProfile, launcher_image: str,
                         worker_image: str, env: Mapping[str, str] | None = None):
    """``component`` (a lightweight KFP component) run as a Vertex AI CustomJob, ``env`` in
    its replicas' containers.

    Same name, inputs and outputs, plus a ``gcp_resources`` output naming the CustomJob (the
    Vertex AI backend cancels it when the pipeline is cancelled).
    """
    import yaml
    from google.protobuf import json_format
    from kfp import components

    spec = json_format.MessageToDict(component.pipeline_spec)
    executor_name = next(iter(spec["deploymentSpec"]["executors"]))
    container = dict(spec["deploymentSpec"]["executors"][executor_name]["container"])
    container["image"] = worker_image
    name = component.component_spec.name
    payload = custom_job_payload(profile, container, display_name=name.replace("_", "-"),
                                 env=env)
    spec["deploymentSpec"]["executors"][executor_name] = {"container": {
        "image": launcher_image,
        "command": ["python3", "-u", "-m", LAUNCHER_MODULE],
        "args": [
            "--payload", json.dumps(payload, sort_keys=True),
            "--project", "{{$.pipeline_google_cloud_project_id}}",
            "--location", "{{$.pipeline_google_cloud_location}}",
            "--pipeline_job", "{{$.pipeline_job_resource_name}}",
            "--task_name", "{{$.pipeline_task_name}}",
            "--gcp_resources", "{{$.outputs.parameters['gcp_resources'].output_file}}",
            *launchers.flags(profile),
        ],
    }}
    for definitions in (*spec["components"].values(), spec["root"]):
        outputs = definitions.setdefault("outputDefinitions", {})
        outputs.setdefault("parameters", {})["gcp_resources"] = {"parameterType": "STRING"}
    loaded = components.load_component_from_text(yaml.safe_dump(spec))
    loaded.component_spec.name = component.component_spec.name
    loaded.description = component.description
    return loaded


class CustomJobEngine:
    name = "vertex"
    runs_any_component = True

    def describe(self, profile: ComputeProfile, step: str = "train-model") -> str:
        from gkeflow.pipelines.compute.engines import gpus_text

        accelerator = GKE_TO_VERTEX_ACCELERATOR.get(profile.accelerator, "")
        timeout = scheduling(profile)["timeout"]
        if profile.uses_tpu:
            return (f"{step} runs as a Vertex AI CustomJob on {machine_type(profile)} "
                    f"with tpu_topology {profile.topology} "
                    f"({tpu_profile.describe(profile, 'vertex')}), scheduling "
                    f"{STRATEGIES[profile.scheduling]}, timeout {timeout}; launched by a "
                    "1-vCPU pipeline step")
        return (f"{step} runs as a Vertex AI CustomJob: {profile.replicas} x "
                f"{machine_type(profile)} ({gpus_text(profile, accelerator)}), "
                f"scheduling {STRATEGIES[profile.scheduling]}, timeout {timeout}; "
                "launched by a 1-vCPU pipeline step")

    def applies(self, profile: ComputeProfile) -> bool:
        # A pipeline step cannot ask for a TPU: a TPU step always runs as a CustomJob.
        return (profile.replicas > 1 or profile.scheduling != "standard"
                or profile.timeout_s > 0 or profile.uses_tpu)

    def task(self, profile: ComputeProfile, arguments: dict[str, Any],
             env: Mapping[str, str] | None = None, component=None):
        from gkeflow.components import train_model
        from gkeflow.components.images import SLIM_IMAGE

        # the workers run the GPU or the TPU image, as the profile asks; the compiler maps
        # both images to the configured registry and pins them by digest
        worker_image = (component.component_spec.implementation.container.image if component
                        else tpu_profile.training_image(profile))
        component = custom_job_component(component or train_model, profile, SLIM_IMAGE,
                                         worker_image, env)
        return component(**arguments)

    def machine(self, profile: ComputeProfile) -> str:
        return machine_type(profile)

    def launcher_profile(self, profile: ComputeProfile) -> ComputeProfile:
        from gkeflow.pipelines.compute.engines import launcher_profile

        return launcher_profile(profile)


ENGINE = CustomJobEngine()
