"""No copies in the registry: a model trained on exactly what an existing version was trained
on (the same data fingerprint, parameters and code) is not registered again.

The pipeline describes its training inputs as one string (the data fingerprint, the
training parameters, the user module's fingerprint); the registration step hashes it with
the suite's version and a digest of the source that prepares data and builds models
(:func:`suite_code`: a changed model recipe is a different model, whatever the version
number says) into a *training key*, records the key in the version's lineage, and
before creating a version looks for one with the same key. Lineage is what every backend
stores and reads back (SQLite column, Vertex AI version description, Kubeflow Model
Registry custom properties), so the look-up is the same for all three.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
from pathlib import Path

from gkeflow.components.register.local_registry import ModelVersion

#: Lineage entries written with each version.
TRAINING_KEY = "training_key"
RUN_ID = "pipeline_run_id"
#: The packages whose source decides what a model is, besides its data and parameters.
MODEL_CODE = ("gkeflow.components.prepare", "gkeflow.components.train")


@functools.cache
def suite_code(packages: tuple[str, ...] = MODEL_CODE) -> str:
    """The installed suite's version and ``sha256:<hex>`` of the Python source of
    ``packages`` (file names and contents, in order); the version alone where no source is
    found."""
    from gkeflow.components.images import VERSION

    digest = hashlib.sha256()
    found = False
    for package in packages:
        spec = importlib.util.find_spec(package)
        for location in (spec.submodule_search_locations or []) if spec else []:
            for path in sorted(Path(location).glob("*.py")):
                digest.update(f"{package}/{path.name}\0".encode() + path.read_bytes() + b"\0")
                found = True
    return f"{VERSION} sha256:{digest.hexdigest()}" if found else VERSION


def training_key(training_inputs: str, code_version: str | None = None) -> str:
    """``sha256:<hex>`` over the suite's code and the training inputs; "" for no inputs
    (then every registration makes a new version, as before).

    Args:
        training_inputs: What the model was trained on and with, as the pipeline states it.
        code_version: The suite's version and model code; default: the installed one's
            (:func:`suite_code`).
    """
    if not training_inputs:
        return ""
    if code_version is None:
        code_version = suite_code()
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
