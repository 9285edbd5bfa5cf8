"""The built-images lock file (``gkeflow.lock`` next to gkeflow.yaml): what was built, where.

``gkeflow images build`` records one entry per image it built, keyed by the tag reference
it built (``REGISTRY/gkeflow-cpu:TAG``)::

    {
      "about": "Written by `gkeflow images build`; ...",
      "images": {
        "europe-west4-docker.pkg.dev/my-project/ml/gkeflow-cpu:0.1.0": {
          "digest": "sha256:...", "built_at": "2026-12-01T12:00:00Z",
          "builder": "podman", "pushed": true
        }
      }
    }

Entries for several registries live side by side; compiling pins each image to the
entry of the registry gkeflow.yaml names (:mod:`gkeflow.pipelines.settings.images_config`). The
file belongs to the user's project (commit it with gkeflow.yaml): it is never written
inside the installed package, and every write goes to a temporary file renamed over the
old one, so a failed write leaves the previous lock intact.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from gkeflow.components._atomic import plain_mode
from gkeflow.components.images import ImageLockError, is_digest

ABOUT = ("Written by `gkeflow images build`: the digest of every image built, per registry. "
         "Commit it with gkeflow.yaml; do not edit by hand.")


@dataclass(frozen=True)
class LockEntry:
    """One built image.

    Attributes:
        digest: ``sha256:<64 hex>``: the pushed manifest's digest (or, with
            ``pushed=False``, the local image's).
        built_at: When the build finished, ISO 8601 in UTC.
        builder: ``podman``, ``docker`` or ``cloud-build``.
        pushed: Whether the image was pushed to its registry (only pushed images can run).
    """

    digest: str
    built_at: str
    builder: str
    pushed: bool = True


def now() -> str:
    """The current time as the lock file writes it (UTC, seconds)."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def load_lock(path: Path | str) -> dict[str, LockEntry]:
    """Tag reference -> :class:`LockEntry`; empty when the file does not exist.

    Raises:
        ImageLockError: The file is not a lock file; the message names the file and key.
    """
    path = Path(path)
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ImageLockError(f"{path}: not a readable JSON lock file ({exc}); fix it, or "
                             "delete it and run `gkeflow images build`") from exc
    images = data.get("images") if isinstance(data, dict) else None
    if not isinstance(images, dict):
        raise ImageLockError(f"{path}: expected an object with an 'images' mapping; fix it, "
                             "or delete it and run `gkeflow images build`")
    lock = {}
    for reference, entry in images.items():
        if not isinstance(entry, dict):
            raise ImageLockError(f"{path}: images.{reference} must be an object")
        digest = entry.get("digest")
        if not isinstance(digest, str) or not is_digest(digest):
            raise ImageLockError(f"{path}: images.{reference}.digest must be "
                                 f"sha256:<64 hex digits>; got {digest!r}")
        pushed = entry.get("pushed", True)
        if not isinstance(pushed, bool):
            raise ImageLockError(f"{path}: images.{reference}.pushed must be true or false; "
                                 f"got {pushed!r}")
        lock[reference] = LockEntry(digest=digest, built_at=str(entry.get("built_at", "")),
                                    builder=str(entry.get("builder", "")), pushed=pushed)
    return lock


def record(path: Path | str, reference: str, entry: LockEntry) -> dict[str, LockEntry]:
    """Add or replace ``reference``'s entry in the lock at ``path``; returns the new lock.

    Other entries are kept. The file is written aside and renamed into place.
    """
    if not is_digest(entry.digest):
        raise ImageLockError(f"{reference}: the builder returned {entry.digest!r}, not a "
                             "sha256 digest")
    path = Path(path)
    lock = load_lock(path)
    lock[reference] = entry
    document = {"about": ABOUT,
                "images": {ref: asdict(lock[ref]) for ref in sorted(lock)}}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=2, sort_keys=True)
            handle.write("\n")
        plain_mode(tmp)  # mkstemp makes it 0600; others (CI, containers) read the lock
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return lock
