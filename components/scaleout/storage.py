"""Copy directories between this machine and the pipeline root (``gs://`` or a local path).

Workers of a multi-machine run share nothing but the pipeline root: inputs are fetched from
it and the chief publishes the exported model to it. A publication ends with a marker file
written last, so a half-uploaded model never looks complete.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

#: Written last into a published directory; its presence means the upload is complete.
COMPLETE_MARKER = "_GKEFLOW_COMPLETE.json"


def _split(uri: str) -> tuple[str, str]:
    bucket, _, prefix = uri[len("gs://"):].partition("/")
    if not bucket:
        raise ValueError(f"malformed Cloud Storage URI {uri!r}; expected gs://bucket/path")
    return bucket, prefix.strip("/")


def _client():
    from gkeflow.components.prepare.sources import gcs_client

    return gcs_client()


def local_path(uri: str) -> Path | None:
    """The local path of ``uri`` (a path, ``file://`` or a ``/gcs/`` FUSE path); None for gs://."""
    if uri.startswith("gs://"):
        return None
    return Path(uri[len("file://"):] if uri.startswith("file://") else uri)


def download(uri: str, destination: Path) -> Path:
    """Copy the file or directory at ``uri`` to ``destination``; returns ``destination``."""
    destination = Path(destination)
    path = local_path(uri)
    if path is not None:
        if path.is_dir():
            shutil.copytree(path, destination, dirs_exist_ok=True)
        elif path.is_file():
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, destination)
        else:
            raise FileNotFoundError(f"nothing at {uri}")
        return destination
    bucket_name, prefix = _split(uri)
    client = _client()
    blobs = list(client.list_blobs(bucket_name, prefix=prefix))
    exact = [b for b in blobs if b.name == prefix]
    if exact:  # a single object
        destination.parent.mkdir(parents=True, exist_ok=True)
        exact[0].download_to_filename(str(destination))
        return destination
    inside = [b for b in blobs if b.name.startswith(prefix + "/") or not prefix]
    if not inside:
        raise FileNotFoundError(f"nothing at {uri}")
    for blob in inside:
        relative = blob.name[len(prefix):].lstrip("/")
        if not relative or relative.endswith("/"):
            continue
        target = destination / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        blob.download_to_filename(str(target))
    return destination


def publish(source: Path, uri: str, summary: dict) -> None:
    """Upload directory ``source`` to ``uri``, then :data:`COMPLETE_MARKER` with ``summary``."""
    source = Path(source)
    files = sorted(p for p in source.rglob("*") if p.is_file())
    marker = json.dumps(summary, indent=2, sort_keys=True)
    path = local_path(uri)
    if path is not None:
        (path / COMPLETE_MARKER).unlink(missing_ok=True)
        shutil.copytree(source, path, dirs_exist_ok=True)
        (path / COMPLETE_MARKER).write_text(marker, encoding="utf-8")
        return
    bucket_name, prefix = _split(uri)
    bucket = _client().bucket(bucket_name)
    stale = bucket.blob(f"{prefix}/{COMPLETE_MARKER}")
    if stale.exists():
        stale.delete()
    for file in files:
        bucket.blob(f"{prefix}/{file.relative_to(source).as_posix()}").upload_from_filename(
            str(file))
    bucket.blob(f"{prefix}/{COMPLETE_MARKER}").upload_from_string(
        marker, content_type="application/json")


def published_summary(uri: str) -> dict | None:
    """The summary of a complete publication at ``uri``; None while it is absent or partial."""
    path = local_path(uri)
    if path is not None:
        marker = path / COMPLETE_MARKER
        return json.loads(marker.read_text(encoding="utf-8")) if marker.is_file() else None
    bucket_name, prefix = _split(uri)
    blob = _client().bucket(bucket_name).blob(f"{prefix}/{COMPLETE_MARKER}")
    if not blob.exists():
        return None
    return json.loads(blob.download_as_text())
