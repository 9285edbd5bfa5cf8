"""The gated deploy stage at the end of the training and sweep pipelines.

The stage runs only when the model was blessed (it sits inside the evaluation's
``model-blessed`` condition), registered (it takes the registration's output) and the
pipeline parameter ``deploy`` is true. The ``deploy-model`` compute profile sizes both the
deploy task (CPU, memory, timeout, retries; never a GPU: the servability check runs on
CPU) and the *serving* machines: on Vertex AI the machine type and accelerator of the
endpoint's replicas, on GKE the resources, node selector and tolerations of the
InferenceService's pods, made by the same rules as any GKE step
(:func:`~gkeflow.pipelines.compute.profiles.apply_compute`).

``deploy:`` in gkeflow.yaml (one entry per environment) is modelled in
:mod:`gkeflow.pipelines.settings.deploy_config`.
"""

from __future__ import annotations

import json
from typing import Any

from gkeflow.pipelines.compute.profiles import ComputeProfile, apply_compute
from gkeflow.pipelines.settings.platforms import platform

DEPLOY_STEP = "deploy-model"

#: The deploy task and each serving replica unless compute.deploy-model says otherwise:
#: 2 vCPUs, 4 GB, no GPU. Never cached (a scheduled run must deploy its own model); every
#: call inside is retried, so the task's own retries cover a lost pod.
SERVING_PROFILE = ComputeProfile(cpu="2", memory="4G", caching=False, timeout_s=3600,
                                 retries=2, retry_backoff_s=30, retry_backoff_factor=2.0,
                                 retry_max_duration_s=1800)


def task_profile(profile: ComputeProfile) -> ComputeProfile:
    """The deploy task's own compute: the profile without its accelerator and capacity."""
    return profile.with_overrides(accelerator="", accelerator_count=0, scheduling="standard",
                                  reservation="", max_wait="")

#: Pipeline parameters the stage reads.
DEPLOY_PARAMETERS = ("deploy", "deploy_traffic", "deploy_settings")


def serving_compute(profile: ComputeProfile, target: str) -> str:
    """The serving machine the deploy step asks for, as JSON.

    ``vertex``: the machine type (the smallest that fits, for GPUs from the accelerator
    catalogue) and the accelerator. ``gke``: resources, node selector and tolerations, as
    :func:`~gkeflow.pipelines.compute.profiles.apply_compute` sets them on a step.
    """
    if platform(target).managed:
        return json.dumps({"vertex": vertex_machine(profile)}, sort_keys=True)
    if platform(target).kubernetes:
        return json.dumps({"gke": gke_placement(profile, target)}, sort_keys=True)
    return "{}"


def vertex_machine(profile: ComputeProfile) -> dict[str, Any]:
    from gkeflow.pipelines.compute.profiles import (
        GKE_TO_VERTEX_ACCELERATOR,
        cpu_cores,
        fitting_shape,
        memory_bytes,
    )

    if profile.uses_gpu:
        shape = fitting_shape(profile, "vertex")
        return {"machine_type": shape.name if shape else "",
                "accelerator_type": GKE_TO_VERTEX_ACCELERATOR[profile.accelerator],
                "accelerator_count": profile.accelerator_count}
    # n1-standard-N: N vCPUs and 3.75 GB each; the smallest that holds the request.
    cpus, gib = cpu_cores(profile.cpu), memory_bytes(profile.memory) / 2**30
    for n in (2, 4, 8, 16, 32, 64, 96):
        if n >= cpus and n * 3.75 >= gib:
            return {"machine_type": f"n1-standard-{n}"}
    return {"machine_type": "n1-standard-96"}


def gke_placement(profile: ComputeProfile, target: str) -> dict[str, Any]:
    """Resources, node selector and tolerations of a pod running ``profile`` on the
    Kubernetes platform ``target``: the profile applied by :func:`apply_compute` to a
    stand-in task, read back."""
    from kfp import dsl
    from kfp.dsl import pipeline_context
    from kfp.dsl.pipeline_task import PipelineTask

    @dsl.container_component
    def stand_in():
        return dsl.ContainerSpec(image="stand-in", command=["true"])

    # Outside any pipeline being defined, so the stand-in is not added to it.
    defining = pipeline_context.Pipeline._default_pipeline
    handler = PipelineTask._register_task_handler
    pipeline_context.Pipeline._default_pipeline = None
    PipelineTask._register_task_handler = lambda task: "stand-in"
    try:
        task = PipelineTask(stand_in.component_spec, {}, execute_locally=False)
        apply_compute(task, profile, target)
    finally:
        pipeline_context.Pipeline._default_pipeline = defining
        PipelineTask._register_task_handler = handler
    spec = task.container_spec.resources
    requests = {"cpu": spec.cpu_request, "memory": spec.memory_request}
    limits = {"cpu": spec.cpu_limit, "memory": spec.memory_limit}
    if spec.accelerator_count:
        limits[spec.accelerator_type] = str(spec.accelerator_count)
    kubernetes = (task.platform_config or {}).get("kubernetes", {})
    tolerations = [{k: v for k, v in t.items() if k in {"key", "operator", "value", "effect"}}
                   for t in kubernetes.get("tolerations", [])]
    return {"resources": {"requests": {k: v for k, v in requests.items() if v},
                          "limits": {k: v for k, v in limits.items() if v}},
            "node_selector": dict(kubernetes.get("nodeSelector", {}).get("labels", {})),
            "tolerations": tolerations}


def deploy_stage(target: str, profile: ComputeProfile, scope: dict[str, Any]):
    """A callable for :func:`~gkeflow.pipelines.definitions.stages.evaluate_and_register`: adds the
    deploy task under ``dsl.If(deploy)``, inside the blessed branch, after registration.

    ``scope``: the pipeline function's parameters (``deploy``, ``deploy_traffic``,
    ``deploy_settings``, ``registry_uri``).
    """
    from kfp import dsl

    if platform(target).managed:
        from gkeflow.components.deploy.vertex_component import deploy_model
    else:
        from gkeflow.components.deploy.component import deploy_model
    compute = serving_compute(profile, target)

    def add(register_task, evaluate_task, model) -> None:
        with dsl.If(scope["deploy"] == True, name="deploy-requested"):  # noqa: E712
            task = deploy_model(
                model=model,
                evaluation=evaluate_task.outputs["evaluation"],
                registered_model=register_task.outputs["registered_model"],
                target=platform(target).runtime,
                registry_uri=scope["registry_uri"],
                serving_compute=compute,
                deploy_settings=scope["deploy_settings"],
                traffic=scope["deploy_traffic"],
            )
            task.set_display_name("Deploy model")
            apply_compute(task, task_profile(profile), target, DEPLOY_STEP)

    return add
