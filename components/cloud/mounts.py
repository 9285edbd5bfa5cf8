"""Cloud Storage buckets mounted in a step: ``gs://bucket/path`` read through the mount.

The pipeline sets :data:`MOUNTS_ENV` on exactly the steps that mount a bucket (through the
Cloud Storage FUSE CSI driver on GKE; Vertex AI mounts every bucket at ``/gcs/<bucket>``)
to a JSON object of bucket -> mount path. Steps without it use ``gs://`` URIs as given.
"""

from __future__ import annotations

import json
import os

#: Environment variable naming the step's mounted buckets: ``{"bucket": "/mount/path"}``.
MOUNTS_ENV = "GKEFLOW_GCS_MOUNTS"
#: Environment variable listing the step's buckets mounted read-only, comma-separated.
READ_ONLY_ENV = "GKEFLOW_GCS_READ_ONLY"


def mounts(environ=None) -> dict[str, str]:
    """Bucket -> mount path for this step (empty when it mounts none)."""
    text = (os.environ if environ is None else environ).get(MOUNTS_ENV, "")
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{MOUNTS_ENV} is not JSON ({exc}); it maps bucket to "
                         "mount path") from exc
    if not isinstance(value, dict):
        raise ValueError(f"{MOUNTS_ENV} must map bucket to mount path")
    return {str(k): str(v) for k, v in value.items()}


def mounted_path(uri: str, environ=None) -> str:
    """``uri`` under this step's mount of its bucket, or ``uri`` unchanged."""
    text = str(uri)
    if not text.startswith("gs://"):
        return text
    bucket, _, rest = text[len("gs://"):].partition("/")
    path = mounts(environ).get(bucket)
    if path is None:
        return text
    return path.rstrip("/") + ("/" + rest if rest else "")


def writable_path(uri: str, environ=None, what: str = "shards and checkpoints") -> str:
    """:func:`mounted_path` for a location the step writes ``what`` to.

    Raises:
        ValueError: ``uri`` is in a bucket this step mounts read-only.
    """
    environ = os.environ if environ is None else environ
    text = str(uri)
    bucket = text[len("gs://"):].partition("/")[0] if text.startswith("gs://") else ""
    if bucket and bucket in environ.get(READ_ONLY_ENV, "").split(","):
        raise ValueError(f"{text} is in bucket {bucket}, which gcsfuse mounts read-only: "
                         f"write {what} to another bucket or set its "
                         "read_only: false")
    return mounted_path(text, environ)
