"""The suite's container images, declared once, and their digests from the image lock file.

Every component runs in one of two images built from ``images/`` (``cpu.Dockerfile``,
``gpu.Dockerfile``): both contain the ``gkeflow`` package (and so kfp and TensorFlow), so
no step installs anything at run time.

Components name the images by tag (:data:`CPU_IMAGE`, :data:`GPU_IMAGE`). The image build
(``images/build.sh``: Cloud Build, then ``python -m gkeflow.components.images record-build``) writes
the pushed digests to ``images/images.lock.json``; the compiler replaces each tag by its
digest from that file (:func:`pin`), and ``gkeflow compile --release`` refuses a reference
that is still tag-only.

This module is imported when components are defined: it reads no environment and needs
nothing beyond the standard library.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from pathlib import Path

REGISTRY = "us-docker.pkg.dev/gkeflow/images"
VERSION = "0.1.0"

#: Python 3.11, TensorFlow (CPU), kfp and the suite: data preparation, evaluation, registration.
CPU_IMAGE = f"{REGISTRY}/gkeflow-cpu:{VERSION}"
#: The same with TensorFlow for CUDA (``tensorflow[and-cuda]``): training on GPUs.
GPU_IMAGE = f"{REGISTRY}/gkeflow-gpu:{VERSION}"

#: Image -> whether it can use a GPU.
IMAGES = {CPU_IMAGE: False, GPU_IMAGE: True}

#: Written by the image build; maps each tag reference to the digest that was pushed.
LOCK_FILE = Path(__file__).resolve().parent.parent / "images" / "images.lock.json"

_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


class ImageLockError(ValueError):
    """The lock file or a build record is malformed; the message says where."""


def is_pinned(reference: str) -> bool:
    """True when ``reference`` names its image by digest (``...@sha256:<64 hex>``)."""
    _, _, digest = reference.partition("@")
    return bool(_DIGEST_RE.match(digest))


def _repository(reference: str) -> str:
    """``host/path/name:tag`` -> ``host/path/name`` (a registry port is not a tag)."""
    name, _, _ = reference.partition("@")
    head, _, last = name.rpartition("/")
    return f"{head}/{last.split(':')[0]}" if head else last.split(":")[0]


def load_lock(path: Path | str = LOCK_FILE) -> dict[str, str]:
    """Tag reference -> digest, from the lock file; empty when the file does not exist."""
    path = Path(path)
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ImageLockError(f"{path}: not valid JSON: {exc}") from exc
    images = data.get("images") if isinstance(data, dict) else None
    if not isinstance(images, dict):
        raise ImageLockError(f"{path}: expected an object with an 'images' mapping")
    lock = {}
    for reference, entry in images.items():
        digest = entry.get("digest") if isinstance(entry, dict) else None
        if not isinstance(digest, str) or not _DIGEST_RE.match(digest):
            raise ImageLockError(
                f"{path}: images.{reference}.digest must be sha256:<64 hex digits>; "
                f"got {digest!r}"
            )
        lock[reference] = digest
    return lock


def pin(reference: str, lock: dict[str, str]) -> str:
    """``reference`` by digest when the lock has one (``repo@sha256:...``), else unchanged."""
    if is_pinned(reference) or reference not in lock:
        return reference
    return f"{_repository(reference)}@{lock[reference]}"


def record_build(build: dict, lock_path: Path | str = LOCK_FILE) -> dict[str, str]:
    """Write the digests of a finished Cloud Build (its ``Build`` resource as JSON) to the lock.

    Every image in :data:`IMAGES` must be among the build's pushed images. The lock file is
    written aside and renamed, so a failed write never leaves half a lock behind.
    """
    if build.get("status") != "SUCCESS":
        raise ImageLockError(f"build {build.get('id', '?')} did not succeed: "
                             f"status {build.get('status')!r}")
    pushed = {}
    for image in (build.get("results") or {}).get("images") or []:
        name, digest = image.get("name"), image.get("digest")
        if not isinstance(digest, str) or not _DIGEST_RE.match(digest):
            raise ImageLockError(f"build result for {name!r} has no sha256 digest: {digest!r}")
        pushed[name] = digest
    missing = [ref for ref in IMAGES if ref not in pushed]
    if missing:
        raise ImageLockError(
            f"build {build.get('id', '?')} pushed {', '.join(sorted(pushed)) or 'no images'}; "
            f"missing: {', '.join(missing)}"
        )
    lock_path = Path(lock_path)
    document = {
        "about": "Written by images/build.sh from the Cloud Build result; do not edit by hand.",
        "build_id": build.get("id", ""),
        "images": {ref: {"digest": pushed[ref]} for ref in IMAGES},
    }
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=lock_path.parent, prefix=".images.lock.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=2, sort_keys=True)
            handle.write("\n")
        from gkeflow.components._atomic import plain_mode

        plain_mode(tmp)
        os.replace(tmp, lock_path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return {ref: pushed[ref] for ref in IMAGES}


def _main(argv: list[str]) -> int:
    usage = ("usage: python -m gkeflow.components.images tags\n"
             "       python -m gkeflow.components.images record-build BUILD_JSON [LOCK_FILE]")
    if argv[:1] == ["tags"] and len(argv) == 1:
        print(f"_CPU_IMAGE={CPU_IMAGE},_GPU_IMAGE={GPU_IMAGE}")
        return 0
    if argv[:1] == ["record-build"] and len(argv) in (2, 3):
        build = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
        lock_path = Path(argv[2]) if len(argv) == 3 else LOCK_FILE
        try:
            pinned = record_build(build, lock_path)
        except ImageLockError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        for reference, digest in pinned.items():
            print(f"{reference} -> {digest}")
        print(f"wrote {lock_path}")
        return 0
    print(usage, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
