"""Reading the Vertex AI CustomJob a compiled training step launches."""

from __future__ import annotations

import json


def custom_job_payload(document: dict, task: str | None = None) -> dict | None:
    """The CustomJob payload of ``task``'s launcher in a compiled Vertex document; None if the
    step runs as a plain pipeline step (or is an importer, which has no container). Default
    task: the step that trains the Keras model (``train-mlp`` beside the other candidates of
    ``model_type: auto``, else ``train-model``)."""
    executors = document["deploymentSpec"]["executors"]
    if task is None:
        task = "train-mlp" if "exec-train-mlp" in executors else "train-model"
    container = executors[f"exec-{task}"].get("container")
    if container is None:
        return None
    args = list(container.get("args", []))
    if "--payload" not in args:
        return None
    return json.loads(args[args.index("--payload") + 1])


def strict_custom_job(payload: dict):
    """``payload`` parsed as ``aiplatform_v1.CustomJob`` with unknown fields rejected."""
    from google.cloud import aiplatform_v1
    from google.protobuf import json_format

    message = aiplatform_v1.CustomJob.pb(aiplatform_v1.CustomJob())
    json_format.ParseDict(payload, message, ignore_unknown_fields=False)
    return aiplatform_v1.CustomJob.wrap(message)
