"""Which serving runtime matches the TensorFlow a model was trained with.

- **Vertex AI** serves a registered model with the container recorded on the model
  (``containerSpec.imageUri``, set at registration). The prebuilt TensorFlow prediction
  containers are ``<region>-docker.pkg.dev/vertex-ai/prediction/tf2-{cpu,gpu}.2-<minor>``;
  the list google-cloud-aiplatform ships (``aiplatform.constants.prediction``) says which
  exist; the newest (2.15) is older than the suite's TensorFlow. :func:`vertex_runtime`
  picks the prebuilt container of the model's minor version, else the suite's serving
  image ``gkeflow-serving`` (TensorFlow Serving of the images' TensorFlow, built and pinned
  by `gkeflow images build`), else refuses naming both versions.
- **KServe** runs ``tensorflow/serving:<runtimeVersion>``; without a ``runtimeVersion`` the
  runtime's default (2.6.2) is used and a GPU limit appends ``-gpu`` to the tag
  (kserve ``UpdateImageTag``). :func:`kserve_runtime_version` gives the TensorFlow
  Serving release of the training TensorFlow, ``-gpu`` included for GPU serving, from the
  releases known to exist (:mod:`.serving_tags`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PREBUILT = re.compile(r"^(?P<region>[a-z]+)-docker\.pkg\.dev/vertex-ai/prediction/"
                      r"tf2-(?P<kind>cpu|gpu)\.2-(?P<minor>\d+):latest$")
#: Used when google-cloud-aiplatform's list cannot be read.
FALLBACK_MINORS = tuple(range(1, 16))
#: TensorFlow Serving's REST port (``--rest_api_port``).
TF_SERVING_REST_PORT = 8501


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


class RuntimeMismatch(ValueError):
    """No serving container of the model's TensorFlow; the message names both versions and
    the fix."""


@dataclass(frozen=True)
class Runtime:
    """The container Vertex AI serves a model with.

    Attributes:
        image: The container image.
        tf_version: The TensorFlow it serves (``2.15`` for a prebuilt container, the
            TensorFlow Serving release for gkeflow-serving); empty when unknown.
        tf_serving: gkeflow-serving: TensorFlow Serving's own REST routes and model layout.
        note: Said once at registration (e.g. an unchecked container of your own).
    """

    image: str
    tf_version: str = ""
    tf_serving: bool = False
    note: str = ""


def prebuilt_image(minor: int, gpu: bool = False, region: str = "us") -> str:
    kind = "gpu" if gpu else "cpu"
    return f"{region}-docker.pkg.dev/vertex-ai/prediction/tf2-{kind}.2-{minor}:latest"


def is_tf_serving_image(image: str) -> bool:
    """Whether ``image`` is the suite's serving image (``.../gkeflow-serving``)."""
    from gkeflow.components.images import SERVING, repository

    return repository(image).rsplit("/", 1)[-1] == f"gkeflow-{SERVING}"


def image_tf_version(image: str) -> str:
    """The TensorFlow a known serving image serves; "" for any other image."""
    from gkeflow.components.images import SERVING_TF_VERSION

    match = PREBUILT.match(image)
    if match:
        return f"2.{match['minor']}"
    return SERVING_TF_VERSION if is_tf_serving_image(image) else ""


def vertex_runtime(tf_version: str, serving_image: str = "", configured: str = "",
                   region: str = "us") -> Runtime:
    """The Vertex AI container for a model saved with ``tf_version``.

    ``configured`` (registry.serving_image) wins, when its TensorFlow is the model's or
    unknown. Otherwise: the prebuilt container of the same minor version, else
    ``serving_image`` (gkeflow-serving, pinned by digest by `gkeflow images build`) when
    it serves the same minor version.

    Raises:
        RuntimeMismatch: no container serves the model's TensorFlow.
    """
    from gkeflow.components.images import SERVING_TF_VERSION, is_pinned

    trained = tf_minor(tf_version)
    if configured:
        known = image_tf_version(configured)
        if known and tf_minor(known) != trained:
            raise RuntimeMismatch(
                f"registry.serving_image {configured} serves TensorFlow {known} but the model "
                f"was saved with TensorFlow {tf_version}: unset registry.serving_image to use "
                "gkeflow-serving (`gkeflow images build`), or name a container of TensorFlow "
                f"2.{trained}")
        note = "" if known else (f"registry.serving_image {configured}: its TensorFlow is not "
                                 f"known here; it must serve TensorFlow 2.{trained}")
        return Runtime(configured, known, is_tf_serving_image(configured), note)
    if trained in prebuilt_minors("cpu"):
        return Runtime(prebuilt_image(trained, region=region), f"2.{trained}")
    newest = max(prebuilt_minors("cpu"))
    if serving_image and is_tf_serving_image(serving_image) and is_pinned(serving_image):
        if tf_minor(SERVING_TF_VERSION) == trained:
            return Runtime(serving_image, SERVING_TF_VERSION, True)
        raise RuntimeMismatch(
            f"the model was saved with TensorFlow {tf_version} but gkeflow-serving serves "
            f"TensorFlow {SERVING_TF_VERSION} and Vertex AI's prebuilt containers stop at "
            f"2.{newest}: retrain with TensorFlow {SERVING_TF_VERSION}, or set "
            f"registry.serving_image to a container of TensorFlow 2.{trained}")
    raise RuntimeMismatch(
        f"the model was saved with TensorFlow {tf_version}; Vertex AI's prebuilt containers "
        f"stop at 2.{newest} and gkeflow-serving (TensorFlow Serving {SERVING_TF_VERSION}) "
        "was never built for images.registry: run `gkeflow images build`")


def tf_serving_container(model_name: str) -> dict:
    """``Model.upload`` container settings for gkeflow-serving: TensorFlow Serving's REST
    port and routes; the image's entrypoint reads the model from ``AIP_STORAGE_URI``."""
    return {
        "serving_container_ports": [TF_SERVING_REST_PORT],
        "serving_container_predict_route": f"/v1/models/{model_name}:predict",
        "serving_container_health_route": f"/v1/models/{model_name}",
        "serving_container_environment_variables": {"MODEL_NAME": model_name},
    }


def tf_serving_base(model_uri: str) -> str:
    """Where a model is laid out for TensorFlow Serving (``<base>/1/saved_model.pb``)."""
    return f"{model_uri.rstrip('/')}-tfserving"


def kserve_runtime_version(tf_version: str, gpu: bool) -> str:
    """The ``tensorflow/serving`` tag for ``tf_version`` (``2.21.0`` or ``2.21.0-gpu``): the
    newest known release of its minor version (:mod:`.serving_tags`).

    Raises:
        RuntimeMismatch: no TensorFlow Serving release of that TensorFlow is known.
    """
    from gkeflow.components.serving.serving_tags import UnknownRelease, release_for

    tf_minor(tf_version)
    try:
        release = release_for(tf_version)
    except UnknownRelease as exc:
        raise RuntimeMismatch(f"the model was saved with TensorFlow {tf_version}: {exc}; "
                              "retrain with a TensorFlow that has one") from None
    return release + ("-gpu" if gpu else "")


def is_gpu_image(image: str) -> bool:
    """Whether a Vertex AI serving image can use a GPU (the prebuilt ``tf2-gpu`` ones, or
    any image not known to be CPU-only)."""
    if is_tf_serving_image(image):
        return False  # built from tensorflow/serving's CPU image
    match = PREBUILT.match(image)
    return match is None or match["kind"] == "gpu"
