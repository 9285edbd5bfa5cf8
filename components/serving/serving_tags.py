"""TensorFlow Serving releases known to exist, with where that was read and when.

``tensorflow/serving:<version>`` (and ``<version>-gpu``) on Docker Hub are published with
each TensorFlow Serving release. No registry but PyPI can be reached where this table was
written, so the Docker Hub tags themselves were not listed; each entry says what it rests on:

- ``github-tag``: a release tag of github.com/tensorflow/serving (read from a snapshot of
  the repository taken 2026-07-30; 2.20.0 is dated 2026-04-23, and a maintainer confirmed
  2.20.0 as released on 2026-08-12 in tensorflow/serving#4129 and #4130);
- ``pypi+run``: newer than that snapshot; tensorflow-serving-api of the same version on
  PyPI (a hint only) and a public TensorFlow Serving tutorial whose outputs were recorded
  running ``tensorflow/serving:2.21.0`` (read 2026-12-02).

Add a release here once its tag is seen; :func:`check_release` refuses any other.
"""

from __future__ import annotations

#: Release -> (evidence, date read).
RELEASES: dict[str, tuple[str, str]] = {
    **{version: ("github-tag", "2026-07-30") for version in (
        "2.11.0", "2.11.1", "2.12.0", "2.12.1", "2.12.2", "2.13.0", "2.13.1", "2.14.0",
        "2.14.1", "2.15.1", "2.16.1", "2.17.0", "2.17.1", "2.18.0", "2.18.1", "2.19.0",
        "2.19.1", "2.20.0")},
    "2.21.0": ("pypi+run", "2026-12-02"),
}


class UnknownRelease(ValueError):
    """No TensorFlow Serving release of that TensorFlow is known to exist."""


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def release_for(tf_version: str) -> str:
    """The newest known TensorFlow Serving release of ``tf_version``'s minor version.

    Raises:
        UnknownRelease: none is known; the message names the newest that is.
    """
    minor = ".".join(tf_version.split(".")[:2])
    found = sorted((v for v in RELEASES if v.startswith(minor + ".")), key=_key)
    if not found:
        newest = max(RELEASES, key=_key)
        raise UnknownRelease(
            f"no TensorFlow Serving release for TensorFlow {minor} is known (newest known: "
            f"{newest}, see gkeflow.components.serving.serving_tags)")
    return found[-1]


def check_release(version: str) -> str:
    """``version`` (``2.21.0`` or ``2.21.0-gpu``) when it is a known release."""
    base = version.removesuffix("-gpu")
    if base not in RELEASES:
        raise UnknownRelease(f"tensorflow/serving:{version} is not a known release (known: "
                             f"{', '.join(sorted(RELEASES, key=_key)[-3:])}, ...)")
    return version
