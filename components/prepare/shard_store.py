"""Where a prepared dataset's shards live, and how they are written, listed and streamed.

A prepared dataset is a small directory (the KFP ``Dataset`` artifact: schema.json,
stats.json, report.md, rejected.csv) plus its TFRecord shards. The shards either sit inside
that directory (``train/``, ``eval/``, ``test/``: small datasets, MinIO roots) or in an
*external shard root* (a ``gs://`` prefix or a local directory) that the directory names in
``shards.json`` (:data:`MANIFEST_FILE`):

    {"version": 1, "root": "gs://bucket/.../_shards/dataset/attempt-1a2b3c4d",
     "splits": {"train": ["gs://.../train/part-00000-0-00000.tfrecord.gz", ...], ...}}

Only the directory passes through the artifact store, so on open-source KFP the launcher
stages kilobytes instead of the whole dataset on the pod's disk, and readers stream the
shards while they run. Every attempt of a step writes under its own ``attempt-*`` prefix and
the manifest (published with the directory, atomically) lists exactly the shards of the
attempt that completed: a half-written attempt is never read.

``tf.io.gfile`` ignores the Cloud Storage emulator and needs TensorFlow's GCS plugin, so
``gs://`` shards are read with the google-cloud-storage client (a chunked download per
shard, inflated and unframed here, handed to ``tf.data`` through a generator); local shards
go through ``tf.data.TFRecordDataset``. Both give the same records in the same order.
"""

from __future__ import annotations

import json
import os
import struct
import uuid
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import google_crc32c

MANIFEST_FILE = "shards.json"
SHARDS_DIR = "_shards"
#: Bytes per Cloud Storage request when writing (resumable upload chunks) and reading.
UPLOAD_CHUNK_BYTES = 16 << 20
DOWNLOAD_CHUNK_BYTES = 8 << 20


def is_gcs(uri: str) -> bool:
    return str(uri).startswith("gs://")


def join(root: str | Path, *parts: str) -> str | Path:
    """``root/parts`` for a local path (a Path) or a ``gs://`` URI (a string)."""
    if is_gcs(str(root)):
        return "/".join([str(root).rstrip("/"), *parts])
    return Path(root).joinpath(*parts)


def _split_gcs(uri: str) -> tuple[str, str]:
    bucket, _, name = uri.removeprefix("gs://").partition("/")
    if not bucket or not name:
        raise ValueError(f"malformed Cloud Storage URI {uri!r}; expected gs://bucket/path")
    return bucket, name


def _client():
    from google.auth.exceptions import DefaultCredentialsError

    from gkeflow.components.prepare.sources import DataError, gcs_client

    try:
        return gcs_client()
    except DefaultCredentialsError as exc:
        raise DataError(
            "no Google Cloud credentials to read or write gs:// shards: run `gcloud auth "
            "application-default login` or set GOOGLE_APPLICATION_CREDENTIALS (on GKE: "
            "Workload Identity for the pipeline's service account), or leave shard_root "
            "empty to keep the shards with the dataset artifact"
        ) from exc


def resolve_shard_root(artifact_uri: str, shard_root: str = "",
                       attempt: str | None = None, workspace: str = "") -> str:
    """Where a step writes its shards: a fresh ``attempt-*`` prefix under ``shard_root``;
    when it is empty, under the run's mounted ``workspace`` (the GKE pipeline's volume for
    roots other than gs://, see :mod:`gkeflow.pipelines.compute.workspace`); else next to the
    artifact (``<parent>/_shards/<output name>/``) if the artifact lives in Cloud Storage or
    on a local path. An empty string means "inside the artifact" (other object stores, e.g.
    open-source KFP's default MinIO root without a workspace).

    The ``_shards`` sibling keeps the shards out of the artifact's own prefix: the KFP
    launcher downloads everything under an input artifact's URI.
    """
    attempt = attempt or f"attempt-{uuid.uuid4().hex[:12]}"
    workspace = "" if "{{" in workspace else workspace.strip()
    if shard_root:
        base = shard_root.removeprefix("file://")
    elif workspace:
        tail = [p for p in artifact_uri.rstrip("/").split("/") if p][-3:]
        base = str(Path(workspace, SHARDS_DIR, *tail))
    elif is_gcs(artifact_uri):
        parent, _, name = artifact_uri.rstrip("/").rpartition("/")
        base = f"{parent}/{SHARDS_DIR}/{name}"
    elif "://" not in artifact_uri or artifact_uri.startswith("file://"):
        path = Path(artifact_uri.removeprefix("file://"))
        base = str(path.parent / SHARDS_DIR / path.name)
    else:
        return ""
    if is_gcs(base):  # a bucket mounted in this step is written through the mount
        from gkeflow.components.cloud.mounts import writable_path

        base = writable_path(base)
    if "://" in base and not is_gcs(base):
        raise ValueError(
            f"shard_root must be a gs:// URI or a local path; got {shard_root!r}"
        )
    return str(join(base, attempt))


class GcsShardFile:
    """A write-only shard object in Cloud Storage (a resumable upload in chunks: memory and
    disk stay flat whatever the shard's size). Closing completes the upload."""

    def __init__(self, uri: str, client=None):
        bucket, name = _split_gcs(uri)
        self.uri = uri
        self._writer = (client or _client()).bucket(bucket).blob(
            name, chunk_size=UPLOAD_CHUNK_BYTES).open(
            "wb", content_type="application/octet-stream", ignore_flush=True)

    def write(self, data: bytes) -> int:
        return self._writer.write(data)

    def close(self) -> None:
        self._writer.close()


def open_shard(directory: str | Path, name: str, client=None):
    """``(location, binary writer)`` for a new shard ``name`` in ``directory``."""
    if is_gcs(str(directory)):
        uri = str(join(directory, name))
        return uri, GcsShardFile(uri, client)
    path = Path(directory) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    return path, path.open("wb")


# --- the manifest ----------------------------------------------------------------------------

def write_manifest(dataset_dir: Path, root: str, shards: dict[str, Sequence]) -> None:
    """Record the external shards of a dataset directory (written before it is published)."""
    doc = {"version": 1, "root": str(root),
           "splits": {split: sorted(str(s) for s in files) for split, files in shards.items()}}
    (Path(dataset_dir) / MANIFEST_FILE).write_text(json.dumps(doc, indent=2), encoding="utf-8")


def read_manifest(dataset_dir: Path) -> dict | None:
    path = Path(dataset_dir) / MANIFEST_FILE
    if not path.exists():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def split_shards(dataset_dir: Path, split: str, suffix: str) -> list[str]:
    """The shard locations of one split, from the manifest or the directory itself."""
    manifest = read_manifest(dataset_dir)
    if manifest is not None:
        if split not in manifest["splits"]:
            raise FileNotFoundError(f"no {split!r} split in {dataset_dir}/{MANIFEST_FILE}")
        from gkeflow.components.cloud.mounts import mounted_path

        return [mounted_path(uri) for uri in manifest["splits"][split]]
    directory = Path(dataset_dir) / split
    if not directory.is_dir():
        raise FileNotFoundError(
            f"no {split!r} split in {dataset_dir} (expected a directory of *{suffix} "
            f"shards or a {MANIFEST_FILE}); was it written by prepare_data?"
        )
    return sorted(str(p) for p in directory.glob(f"*{suffix}"))


# --- streaming reads -------------------------------------------------------------------------

def _masked_crc(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _inflate(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """GZIP members (one or several, concatenated) inflated as the chunks arrive."""
    inflater = zlib.decompressobj(31)
    for chunk in chunks:
        while chunk:
            out = inflater.decompress(chunk)
            if out:
                yield out
            if inflater.eof:  # another member may follow
                chunk = inflater.unused_data
                inflater = zlib.decompressobj(31)
            else:
                chunk = b""
    tail = inflater.flush()
    if tail:
        yield tail


def iter_records(chunks: Iterator[bytes], name: str = "shard") -> Iterator[bytes]:
    """The records of a GZIP TFRecord stream given as byte chunks, checksums verified."""
    buffer = bytearray()
    offset = 0
    for data in _inflate(chunks):
        buffer += data
        while True:
            if len(buffer) - offset < 12:
                break
            header = bytes(buffer[offset:offset + 8])
            (length,) = struct.unpack("<Q", header)
            (header_crc,) = struct.unpack("<I", buffer[offset + 8:offset + 12])
            if header_crc != _masked_crc(header):
                raise OSError(f"corrupt record header in {name}")
            end = offset + 12 + length + 4
            if len(buffer) < end:
                break
            record = bytes(buffer[offset + 12:end - 4])
            (crc,) = struct.unpack("<I", buffer[end - 4:end])
            if crc != _masked_crc(record):
                raise OSError(f"corrupt record in {name}")
            yield record
            offset = end
        if offset:
            del buffer[:offset]
            offset = 0
    if buffer:
        raise OSError(f"truncated record at the end of {name}")


def gcs_chunks(uri: str, client=None, chunk_bytes: int = DOWNLOAD_CHUNK_BYTES) -> Iterator[bytes]:
    """An object's bytes in chunks, as stored (no transcoding), streamed."""
    bucket, name = _split_gcs(uri)
    blob = (client or _client()).bucket(bucket).blob(name)
    with blob.open("rb", chunk_size=chunk_bytes, raw_download=True) as handle:
        while True:
            chunk = handle.read(chunk_bytes)
            if not chunk:
                return
            yield chunk


def gcs_records(uri: str, client=None) -> Iterator[bytes]:
    """The records of one ``gs://`` shard, streamed."""
    yield from iter_records(gcs_chunks(uri, client), uri)


_CLIENTS: dict[int, object] = {}


def process_client():
    """One storage client per process, shared by the reader threads of tf.data (a client
    is not fork-safe; its connection pool serves several threads)."""
    pid = os.getpid()
    if pid not in _CLIENTS:
        _CLIENTS[pid] = _client()
    return _CLIENTS[pid]
