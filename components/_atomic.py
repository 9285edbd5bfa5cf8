"""Publish a directory atomically: write it aside, then rename it into place.

A step that fails or is killed half-way leaves only a ``.partial-*`` sibling,
never a directory at the published path that looks complete. What is published gets the
mode a plain create would give it (``0666``/``0777`` less the umask: ``0644``/``0755``
with umask 022), not the private mode of a temporary file: other users (CI jobs,
containers running as another uid) can read it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


def current_umask() -> int:
    """The process's umask (read without changing it where the system allows)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def plain_mode(path: str | os.PathLike) -> None:
    """Give a temporary file or directory (private: ``0600``/``0700``) the mode a plain
    create would: ``0666``/``0777`` less the umask."""
    full = 0o777 if os.path.isdir(path) else 0o666
    os.chmod(path, full & ~current_umask())


@contextlib.contextmanager
def publish_dir(target: Path) -> Iterator[Path]:
    """Yield a scratch directory next to ``target``; move it to ``target`` on success."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".partial-{target.name}-", dir=target.parent))
    try:
        yield scratch
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    plain_mode(scratch)
    if not target.exists() and not target.is_symlink():
        os.replace(scratch, target)
        return
    # The old output is moved aside whole before the new one takes its name, and deleted
    # only after: an interruption leaves the old output or the new one, never a mix.
    aside = Path(tempfile.mkdtemp(prefix=f".replaced-{target.name}-", dir=target.parent))
    os.replace(target, aside / target.name)
    os.replace(scratch, target)
    shutil.rmtree(aside, ignore_errors=True)


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and an atomic rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".partial-{path.name}-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        plain_mode(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
