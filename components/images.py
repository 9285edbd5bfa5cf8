"""The suite's container images, declared once.

Every component runs in one of three kinds of image built from the Dockerfiles shipped
with the package, and declares the kind it needs (its ``base_image``):

- ``gkeflow`` (:data:`SLIM_IMAGE`): the suite, kfp, the Google Cloud and Kubernetes
  clients, pandas and pyarrow, no TensorFlow. Every step that never loads TensorFlow:
  fingerprint, prepare, register, notify, the launchers, select-best-trial, resolve-model.
  ``gkeflow.images.slim_check`` proves it from the source, and the image's build fails
  when such a step's code path reaches TensorFlow.
- ``gkeflow-cpu`` (:data:`CPU_IMAGE`): the same with ``tensorflow-cpu``: evaluation,
  deployment (it loads the SavedModel), batch prediction in the pipeline.
- ``gkeflow-gpu`` (:data:`GPU_IMAGE`): TensorFlow for CUDA: training.
- ``gkeflow-tpu`` (:data:`TPU_IMAGE`): the CPU image plus JAX for Cloud TPUs (``jax``,
  ``libtpu``): training on Cloud TPUs with Keras on JAX. A training step takes it instead of
  the GPU image when its compute profile names a TPU
  (``gkeflow.pipelines.compute.tpu_profile.training_image``).

All contain the ``gkeflow`` package and kfp, so no step installs anything at run time.

Components name the images of the project's release registry by tag (:data:`SLIM_IMAGE`,
:data:`CPU_IMAGE`, :data:`GPU_IMAGE`, :data:`TPU_IMAGE`). Those declared references are
placeholders: when a pipeline or a component YAML is compiled, one mapping (declared
reference -> the reference to run, built by
:func:`gkeflow.pipelines.settings.images_config.image_map` from the ``images:`` section
of gkeflow.yaml and the digests that ``gkeflow images build`` recorded in the lock file)
replaces every occurrence, workload payloads included (:func:`pin`, :func:`map_references`).

This module is imported when components are defined: it reads no file or environment and
needs nothing beyond the standard library.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

#: The project's release registry: what the repository's own compiled/ names.
REGISTRY = "us-docker.pkg.dev/gkeflow/images"
#: The package version; also the images' default tag.
VERSION = "0.1.0"

#: Image flavour (kind) -> whether it can use a GPU. ``slim`` carries no TensorFlow.
FLAVOURS: dict[str, bool] = {"slim": False, "cpu": False, "gpu": True, "tpu": False}
#: The flavour without TensorFlow; its image is plain ``gkeflow``.
SLIM = "slim"
#: The flavour for Cloud TPUs: built only for projects that train on TPUs (or on request).
TPU = "tpu"


def image_name(flavour: str) -> str:
    """``cpu`` -> ``gkeflow-cpu``, ``slim`` -> ``gkeflow``: the image's name in any registry."""
    if flavour not in FLAVOURS:
        raise ValueError(f"unknown image flavour {flavour!r}; flavours: {', '.join(FLAVOURS)}")
    return "gkeflow" if flavour == SLIM else f"gkeflow-{flavour}"


def reference(flavour: str, registry: str = REGISTRY, tag: str = VERSION) -> str:
    """``REGISTRY/gkeflow-FLAVOUR:TAG``."""
    return f"{registry.rstrip('/')}/{image_name(flavour)}:{tag}"


#: Python 3.11, kfp, the suite and the cloud clients, no TensorFlow: the steps that never
#: load a model (data preparation, registration, launchers, notification).
SLIM_IMAGE = reference("slim")
#: The same with TensorFlow (CPU): evaluation, deployment, prediction.
CPU_IMAGE = reference("cpu")
#: The same with TensorFlow for CUDA (``tensorflow[and-cuda]``): training on GPUs.
GPU_IMAGE = reference("gpu")
#: The CPU image with JAX for Cloud TPUs (``jax``, ``libtpu``): training on TPUs.
TPU_IMAGE = reference("tpu")

#: Declared image -> whether it can use a GPU.
IMAGES = {SLIM_IMAGE: False, CPU_IMAGE: False, GPU_IMAGE: True, TPU_IMAGE: False}

#: What a node pulls for each kind's stock image of this version (its layers
#: gzip-compressed, as a registry stores them), in bytes; None where nothing was measured.
#: Source: bench/RESULTS.md "Image sizes" (``bench/image_sizes.py``, podman, this version's
#: locks, the stand-in base image, the image tests' extras). Your extras add to them.
PULL_SIZES: dict[str, int | None] = {"slim": 208_000_000, "cpu": 467_000_000,
                                     "gpu": 3_870_000_000, "tpu": 810_000_000}


def flavour_of(reference: str) -> str | None:
    """The kind of a suite image reference (``.../gkeflow-cpu@sha256:...`` -> ``cpu``,
    ``.../gkeflow:TAG`` -> ``slim``); None for any other image."""
    name = repository(reference).rsplit("/", 1)[-1]
    return next((f for f in FLAVOURS if image_name(f) == name), None)


def pull_size_note(reference: str) -> str:
    """``pull about 0.47 GB, measured: ...`` for a suite image with a measured figure; says
    ``unknown`` otherwise."""
    size = PULL_SIZES.get(flavour_of(reference) or "")
    if size is None:
        return "pull size unknown"
    return f"pull about {size / 1e9:.2f} GB, measured: bench/RESULTS.md"


#: The serving image's kind: ``REGISTRY/gkeflow-serving:TAG``, TensorFlow Serving of the
#: training TensorFlow for Vertex AI (images/serving.Dockerfile); not a step image.
SERVING = "serving"
#: The TensorFlow Serving release the serving image is built from: the images' TensorFlow
#: (tests check it against images/serving.Dockerfile and the locks).
SERVING_TF_VERSION = "2.21.0"


def serving_reference(registry: str = REGISTRY, tag: str = VERSION) -> str:
    """``REGISTRY/gkeflow-serving:TAG``."""
    return f"{registry.rstrip('/')}/gkeflow-{SERVING}:{tag}"


#: The serving image as components declare it; compiling maps it like the step images.
SERVING_IMAGE = serving_reference()

_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


class ImageLockError(ValueError):
    """The image lock file or a build record is malformed; the message says where."""


def is_digest(value: str) -> bool:
    """True for ``sha256:<64 hex digits>``."""
    return bool(_DIGEST_RE.match(value))


def is_pinned(reference: str) -> bool:
    """True when ``reference`` names its image by digest (``...@sha256:<64 hex>``)."""
    _, _, digest = reference.partition("@")
    return is_digest(digest)


def repository(reference: str) -> str:
    """``host/path/name:tag`` or ``...@digest`` -> ``host/path/name`` (a port is not a tag)."""
    name, _, _ = reference.partition("@")
    head, _, last = name.rpartition("/")
    return f"{head}/{last.split(':')[0]}" if head else last.split(":")[0]


def pin(reference: str, images: Mapping[str, str]) -> str:
    """``reference`` as ``images`` maps it; unchanged when it has no entry.

    An entry's value is either the full reference to use (``host/repo/name@sha256:...``
    or ``host/repo/name:tag``) or a bare digest (``sha256:...``), which keeps the
    repository and pins it: ``repository@digest``.
    """
    target = images.get(reference)
    if target is None or reference == target:
        return reference
    return f"{repository(reference)}@{target}" if is_digest(target) else target


def _pattern(declared: list[str]) -> re.Pattern:
    # A declared reference followed by more reference characters is another image
    # (``...:0.1.0-rc1``); it must not be touched.
    alternatives = "|".join(re.escape(d) for d in sorted(declared, key=len, reverse=True))
    return re.compile(rf"(?<![\w./-])({alternatives})(?![\w.@-])")


def map_references(text: str, images: Mapping[str, str]) -> str:
    """``text`` (a compiled YAML document, a JSON payload...) with every occurrence of a
    mapped reference replaced as :func:`pin` maps it."""
    changes = [d for d in images if pin(d, images) != d]
    if not changes:
        return text
    return _pattern(changes).sub(lambda m: pin(m.group(1), images), text)
