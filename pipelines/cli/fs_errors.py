"""File-system failures as one line: the path, the reason and the option that changes it.

``OSError: [Errno 30] Read-only file system: 'rofs/compiled'`` becomes
``cannot write rofs/compiled: read-only file system; choose another folder with --output``.
"""

from __future__ import annotations

import errno
import os

#: The option that picks where each command writes, and what it names.
OUTPUT_OPTIONS: dict[str, tuple[str, str]] = {
    "compile": ("--output", "folder"),
    "docs": ("--output", "file"),
    "init": ("--path", "file"),
    "run": ("--output", "folder"),
    "sweep": ("--output", "folder"),
}

#: Errors that mean "this place cannot be written", as opposed to a remote or a bug.
WRITE_ERRNOS = {errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.ENOENT,
                errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.EDQUOT, errno.ENAMETOOLONG}


def _file_system_error(exc: BaseException | None) -> OSError | None:
    """``exc`` or the first error it was raised from that names a path and a write errno."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.filename and exc.errno in WRITE_ERRNOS:
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def _shown(path: object) -> str:
    """A path relative to the current directory when it lies below it."""
    text = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else str(path)
    try:
        relative = os.path.relpath(text)
    except ValueError:  # another drive
        return text
    return relative if not relative.startswith("..") else text


def describe_file_system_error(exc: BaseException, command: str | None) -> str | None:
    """One line for a file-system failure of ``command``, or None when ``exc`` is not one.

    Args:
        exc: The failure.
        command: The gkeflow command that failed (e.g. ``compile``), or None.
    """
    found = _file_system_error(exc)
    if found is None:
        return None
    reason = os.strerror(found.errno).lower()
    if found.errno == errno.ENOENT:
        reason += " (its folder cannot be created there)"
    elif found.errno == errno.ENOTDIR or (found.errno == errno.EEXIST
                                          and os.path.isfile(found.filename)):
        reason = "a file stands where a folder is needed"
    option, kind = OUTPUT_OPTIONS.get(command or "", ("", ""))
    fix = (f"choose another {kind} with {option}" if option
           else "check the path and its permissions")
    return f"cannot write {_shown(found.filename)}: {reason}; {fix}"
