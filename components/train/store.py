"""Where training checkpoints live: a local (or mounted) directory, or Cloud Storage.

A checkpoint is a set of immutable objects (the model with its optimizer state, the best
epoch's weights) named once and never overwritten, plus ``state.json``, written last: it
names the objects of the committed checkpoint and is the commit point. A reader that sees
a ``state.json`` sees every object it names, so a kill at any instant leaves the previous
checkpoint or the new one, never a mix.

- :class:`LocalStore`: a directory (a local disk, the run's PersistentVolumeClaim on GKE, a
  FUSE mount); objects and ``state.json`` are published with ``os.replace`` after ``fsync``.
- :class:`GcsStore`: ``gs://bucket/prefix`` through google-cloud-storage, no FUSE mount.
  Objects are uploaded with ``if_generation_match=0`` (they never existed) and
  ``state.json`` with ``if_generation_match`` set to the generation this writer last read
  or wrote, so a second writer (a zombie attempt still running after its pod was replaced)
  cannot silently overwrite a newer commit: it fails with :class:`CheckpointConflict`.

Objects of killed attempts that were never committed are deleted by the next commit.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
import weakref
from collections.abc import Iterator
from pathlib import Path

STATE_FILE = "state.json"

#: Where the GKE pipeline mounts the run's checkpoint PersistentVolumeClaim in the training
#: pod (see ``gkeflow.pipelines.compute.checkpoints``).
CHECKPOINT_MOUNT = "/gkeflow-checkpoints"


class Scratch:
    """Local scratch space (a remote store's fetched objects, a worker's private
    checkpoints): made on first use, removed by :meth:`remove`, else when its owner is
    collected or the interpreter exits, so neither a long-lived process nor a stopped
    training fills ``/tmp``."""

    def __init__(self, prefix: str):
        self._prefix = prefix
        self._root: Path | None = None
        self._finalizer: weakref.finalize | None = None

    def directory(self) -> Path:
        """A new empty directory under this scratch space."""
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix=self._prefix))
            self._finalizer = weakref.finalize(self, shutil.rmtree, self._root, True)
        return Path(tempfile.mkdtemp(dir=self._root))

    def remove(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
        self._root = self._finalizer = None


@contextlib.contextmanager
def fetched(store, name: str) -> Iterator[Path]:
    """The local path of the store's object ``name`` while the block runs; a copy fetched
    into staging is deleted after it."""
    staging = store.staging()
    try:
        yield store.fetch(name, staging / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


class CheckpointConflict(RuntimeError):
    """``state.json`` changed under this writer: another attempt is writing checkpoints."""


class LocalStore:
    """Checkpoints in a directory."""

    def __init__(self, directory: Path | str):
        self.directory = Path(directory)
        self.uri = str(self.directory)

    def staging(self) -> Path:
        """A scratch directory on the same file system (so publishing is a rename)."""
        path = self.directory / ".staging"
        path.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(dir=path))

    def read_state(self) -> tuple[dict, object] | None:
        try:
            return json.loads((self.directory / STATE_FILE).read_text()), None
        except FileNotFoundError:
            return None

    def exists(self, name: str) -> bool:
        return (self.directory / name).is_file()

    def fetch(self, name: str, destination: Path) -> Path:
        return self.directory / name  # already local: read in place

    def put(self, source: Path, name: str) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(source, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(source, self.directory / name)

    def commit(self, state: dict, token: object) -> object:
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".state-", dir=self.directory)
        with os.fdopen(fd, "w") as handle:
            json.dump(state, handle)
            handle.flush()
            os.fsync(handle.fileno())
        from gkeflow.components._atomic import plain_mode

        plain_mode(tmp)
        os.replace(tmp, self.directory / STATE_FILE)
        return None

    def names(self) -> list[str]:
        if not self.directory.is_dir():
            return []
        return [p.name for p in self.directory.iterdir() if p.is_file()]

    def delete(self, name: str) -> None:
        (self.directory / name).unlink(missing_ok=True)

    def remove_all(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def storage_client():
    """Credentials from the environment; anonymous against an emulator
    (``STORAGE_EMULATOR_HOST``)."""
    from google.cloud import storage

    if os.environ.get("STORAGE_EMULATOR_HOST"):
        from google.auth.credentials import AnonymousCredentials

        return storage.Client(project=os.environ.get("GOOGLE_CLOUD_PROJECT", "local"),
                              credentials=AnonymousCredentials())
    return storage.Client()


class GcsStore:
    """Checkpoints under ``gs://bucket/prefix/``, written with google-cloud-storage."""

    def __init__(self, uri: str, client=None):
        if not uri.startswith("gs://"):
            raise ValueError(f"not a gs:// URI: {uri}")
        bucket, _, prefix = uri[len("gs://"):].partition("/")
        if not bucket:
            raise ValueError(f"no bucket in {uri}")
        self.uri = uri.rstrip("/")
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.bucket = (client or storage_client()).bucket(bucket)
        self._scratch = Scratch("gkeflow-ckpt-")

    def staging(self) -> Path:
        return self._scratch.directory()

    def read_state(self) -> tuple[dict, object] | None:
        blob = self.bucket.get_blob(self.prefix + STATE_FILE)
        if blob is None:
            return None
        data = blob.download_as_bytes(if_generation_match=blob.generation)
        return json.loads(data), blob.generation

    def exists(self, name: str) -> bool:
        return self.bucket.blob(self.prefix + name).exists()

    def fetch(self, name: str, destination: Path) -> Path:
        destination.parent.mkdir(parents=True, exist_ok=True)
        self.bucket.blob(self.prefix + name).download_to_filename(str(destination))
        return destination

    def put(self, source: Path, name: str) -> None:
        self.bucket.blob(self.prefix + name).upload_from_filename(
            str(source), if_generation_match=0)

    def commit(self, state: dict, token: object) -> object:
        from google.api_core.exceptions import PreconditionFailed

        blob = self.bucket.blob(self.prefix + STATE_FILE)
        try:
            blob.upload_from_string(json.dumps(state), content_type="application/json",
                                    if_generation_match=token or 0)
        except PreconditionFailed as exc:
            raise CheckpointConflict(
                f"{self.uri}/{STATE_FILE} was changed by another writer (is an earlier "
                "attempt of this step still running?); not overwriting its checkpoint"
            ) from exc
        return blob.generation

    def names(self) -> list[str]:
        return [b.name[len(self.prefix):] for b in self.bucket.list_blobs(prefix=self.prefix)
                if "/" not in b.name[len(self.prefix):]]

    def delete(self, name: str) -> None:
        from google.api_core.exceptions import NotFound

        try:
            self.bucket.blob(self.prefix + name).delete()
        except NotFound:
            pass

    def remove_all(self) -> None:
        for name in self.names():
            self.delete(name)
        self._scratch.remove()


def open_store(location: Path | str):
    """The store for a checkpoint location: ``gs://...`` or a directory."""
    text = str(location)
    if text.startswith("gs://"):
        return GcsStore(text)
    if "://" in text:
        raise ValueError(f"unsupported checkpoint location {text}: use gs://bucket/path or a "
                         "directory (a mounted volume)")
    return LocalStore(Path(text))


def checkpoint_mount(workspace_path: str = "") -> str:
    """The mounted directory for checkpoints: ``checkpoints/`` in the run's workspace when
    the step has one (created here), else the run's checkpoint volume at
    :data:`CHECKPOINT_MOUNT` (there when the GKE pipeline mounted it)."""
    if not workspace_path or "{{" in workspace_path:
        return CHECKPOINT_MOUNT
    mount = Path(workspace_path) / "checkpoints"
    mount.mkdir(parents=True, exist_ok=True)
    return str(mount)


def _safe(part: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", part).strip("-.") or "x"


def resolve_checkpoint_location(checkpoint_uri: str, pipeline_root: str, run_id: str,
                                task_name: str, key: str = "",
                                mount: str = CHECKPOINT_MOUNT) -> str:
    """``<base>/<run>/<task>[/<key>]``: the same location on every retry of one run's task.

    The base is, in order: ``checkpoint_uri`` when set (``gs://...`` or a directory);
    ``<pipeline_root>/checkpoints`` for a ``gs://`` root (written with the Cloud Storage
    client, no FUSE mount needed); the run's checkpoint volume at ``mount`` when the pod has
    it (the GKE pipeline mounts one, for the default ``minio://`` root of open-source KFP);
    ``<pipeline_root>/checkpoints`` for a local root. ``key`` tells apart several trainings
    in one task's place (e.g. the trials of a sweep).

    Returns:
        The location, or "" when there is no stable one (no run id, or a root such as
        ``minio://`` without the volume): the step then trains without resumable checkpoints.

    Raises:
        ValueError: ``checkpoint_uri`` is neither ``gs://`` nor an absolute directory.
    """
    checkpoint_uri = checkpoint_uri.strip()
    if checkpoint_uri and not (checkpoint_uri.startswith("gs://")
                               or checkpoint_uri.startswith("/")):
        raise ValueError(f"checkpoint_uri must be gs://bucket/path or an absolute directory "
                         f"(a mounted volume); got {checkpoint_uri!r}")
    if checkpoint_uri.startswith("gs://") and not checkpoint_uri[5:].strip("/"):
        raise ValueError(f"checkpoint_uri {checkpoint_uri!r} names no bucket")
    if not run_id or "{{" in run_id:
        print("no pipeline run id; training without resumable checkpoints")
        return ""
    root = "" if "{{" in pipeline_root else pipeline_root.strip().rstrip("/")
    from gkeflow.components.cloud.mounts import writable_path

    if checkpoint_uri:  # a bucket mounted in this step is written through the mount
        base = writable_path(checkpoint_uri.rstrip("/"))
    elif root.startswith("gs://"):
        base = writable_path(root + "/checkpoints")
    elif mount and Path(mount).is_dir():
        base = mount.rstrip("/")
    elif root and "://" not in root:
        base = root + "/checkpoints"
    else:
        print(f"no checkpoint location for pipeline root {root or '(none)'}: set "
              "checkpoint_uri; training without resumable checkpoints")
        return ""
    parts = [_safe(run_id), _safe(task_name or "train")] + ([_safe(key)] if key else [])
    return "/".join([base, *parts])
