"""No copies in the registry: a model trained on exactly what an existing version was trained
on (the same data fingerprint, parameters and code) is not registered again.

The pipeline describes its training inputs as one string (the data fingerprint, the
training parameters, the user module's fingerprint); the registration step hashes it with
the suite's version into a *training key*, records the key in the version's lineage, and
before creating a version looks for one with the same key. Lineage is what every backend
stores and reads back (SQLite column, Vertex AI version description, Kubeflow Model
Registry custom properties), so the look-up is the same for all three.
"""

from __future__ import annotations

import hashlib

from gkeflow.components.register.local_registry import ModelVersion

#: Lineage entries written with each version.
TRAINING_KEY = "training_key"
RUN_ID = "pipeline_run_id"


def training_key(training_inputs: str, code_version: str | None = None) -> str:
    """``sha256:<hex>`` over the suite's version and the training inputs; "" for no inputs
    (then every registration makes a new version, as before).

    Args:
        training_inputs: What the model was trained on and with, as the pipeline states it.
        code_version: The suite's version; default: the installed one.
    """
    if not training_inputs:
        return ""
    if code_version is None:
        from gkeflow.components.images import VERSION

        code_version = VERSION
    digest = hashlib.sha256(f"gkeflow {code_version}\x00{training_inputs}".encode())
    return f"sha256:{digest.hexdigest()}"


def find_same_training(versions: list[ModelVersion], key: str) -> ModelVersion | None:
    """The newest version whose lineage holds ``key``, or None."""
    if not key:
        return None
    same = [v for v in versions if v.lineage.get(TRAINING_KEY) == key]
    return max(same, key=lambda v: v.version) if same else None


def made_by_run(version: ModelVersion, run_id: str) -> bool:
    """Whether ``version`` was registered by the pipeline run ``run_id`` (a retried step)."""
    return version.lineage.get(RUN_ID, version.run_id) == run_id
