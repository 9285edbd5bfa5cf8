"""Which serving runtime matches the TensorFlow a model was trained with.

- **Vertex AI** serves a registered model with the container recorded on the model
  (``containerSpec.imageUri``, set at registration). The prebuilt TensorFlow prediction
  containers are ``<region>-docker.pkg.dev/vertex-ai/prediction/tf2-{cpu,gpu}.2-<minor>``;
  the list google-cloud-aiplatform ships (``aiplatform.constants.prediction``) says which
  exist. :func:`vertex_image` picks the one of the training TensorFlow's minor version,
  else the newest older one, with a note saying so.
- **KServe** runs ``tensorflow/serving:<runtimeVersion>``; without a ``runtimeVersion`` the
  runtime's default (2.6.2) is used and a GPU limit appends ``-gpu`` to the tag
  (kserve ``UpdateImageTag``). :func:`kserve_runtime_version` gives the TensorFlow
  Serving release of the training TensorFlow, ``-gpu`` included for GPU serving.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PREBUILT = re.compile(r"^(?P<region>[a-z]+)-docker\.pkg\.dev/vertex-ai/prediction/"
                      r"tf2-(?P<kind>cpu|gpu)\.2-(?P<minor>\d+):latest$")
#: Used when google-cloud-aiplatform's list cannot be read.
FALLBACK_MINORS = tuple(range(1, 16))


def tf_minor(version: str) -> int:
    """``"2.21.0"`` -> 21."""
    match = re.match(r"^2\.(\d+)", version or "")
    if not match:
        raise ValueError(f"not a TensorFlow 2 version: {version!r}")
    return int(match.group(1))


def prebuilt_minors(kind: str = "cpu") -> list[int]:
    """TensorFlow 2 minor versions with a Vertex AI prebuilt prediction container."""
    try:
        from google.cloud.aiplatform.constants import prediction

        uris = [u for u in getattr(prediction, "TF_CONTAINER_URIS", [])]
    except Exception:  # noqa: BLE001 - an older or absent client: use the fallback
        uris = []
    minors = sorted({int(m["minor"]) for u in uris if (m := PREBUILT.match(u))
                     and m["kind"] == kind})
    return minors or list(FALLBACK_MINORS)


@dataclass(frozen=True)
class Choice:
    image: str
    note: str = ""


def vertex_image(tf_version: str, gpu: bool, region: str = "us") -> Choice:
    """The prebuilt Vertex AI TensorFlow container for a model trained with ``tf_version``."""
    kind = "gpu" if gpu else "cpu"
    trained = tf_minor(tf_version)
    minors = prebuilt_minors(kind)
    usable = [m for m in minors if m <= trained]
    minor = usable[-1] if usable else minors[0]
    image = f"{region}-docker.pkg.dev/vertex-ai/prediction/tf2-{kind}.2-{minor}:latest"
    note = ""
    if minor != trained:
        note = (f"no Vertex AI prebuilt container for TensorFlow 2.{trained}; using "
                f"tf2-{kind}.2-{minor} (older than the training TensorFlow): the servability "
                "check passed with this machine's TensorFlow; set registry.serving_image to a "
                f"container with TensorFlow 2.{trained} to serve with the same release")
    return Choice(image, note)


def kserve_runtime_version(tf_version: str, gpu: bool) -> str:
    """The ``tensorflow/serving`` tag for ``tf_version``: ``2.21.0`` or ``2.21.0-gpu``."""
    minor = tf_minor(tf_version)
    return f"2.{minor}.0" + ("-gpu" if gpu else "")


def is_gpu_image(image: str) -> bool:
    """Whether a Vertex AI serving image can use a GPU (the prebuilt ``tf2-gpu`` ones, or
    any image not known to be CPU-only)."""
    match = PREBUILT.match(image)
    return match is None or match["kind"] == "gpu"
