"""Compile pipelines to YAML, one file per target: ``compiled/<pipeline>.<target>.yaml``.

Before compiling, each step's compute is validated for the target (an invalid request is
an error naming the step, not a pod pending forever or a 400 at submit). Each step's image
is pinned to the digest recorded in the image lock file; a release build refuses any image
that is still referenced by tag only.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

COMPILE_TARGETS = ("gke", "vertex")
DEFAULT_OUTPUT = Path(__file__).resolve().parent.parent / "compiled"


class ReleaseError(ValueError):
    """A release build would reference an image by tag only."""


def _training(target: str, compute=None):
    from gkeflow.pipelines.training import build_training_pipeline

    return build_training_pipeline(target, compute)


#: Pipeline short name -> builder taking a target and per-step compute overrides.
PIPELINES: dict[str, Callable[..., object]] = {"training": _training}


def compiled_path(output_dir: Path, pipeline: str, target: str) -> Path:
    return Path(output_dir) / f"{pipeline}.{target}.yaml"


def pin_images(pipeline, lock: Mapping[str, str]) -> dict[str, str]:
    """Replace each executor's image by its digest from ``lock``; returns executor -> image."""
    from gkeflow.components.images import pin

    executors = pipeline.pipeline_spec.deployment_spec["executors"]
    images = {}
    for name in sorted(executors.keys()):
        if "container" not in executors[name]:
            continue
        container = executors[name]["container"]
        if container["image"].startswith("argostub/"):
            continue  # kfp-kubernetes volume steps: performed by the KFP driver, no container
        container["image"] = pin(container["image"], dict(lock))
        images[name] = container["image"]
    return images


def compile_pipeline(
    pipeline: str,
    target: str,
    output_dir: Path,
    compute: Mapping | None = None,
    lock: Mapping[str, str] | None = None,
    release: bool = False,
) -> Path:
    """Compile one pipeline for one target; returns the YAML's path.

    Args:
        pipeline: Short name in :data:`PIPELINES`.
        target: "gke" or "vertex".
        output_dir: Directory for the YAML file.
        compute: Per-step :class:`~gkeflow.pipelines.compute.ComputeProfile` overrides.
        lock: Tag -> digest; default: the image lock file.
        release: Refuse tag-only image references (:class:`ReleaseError`).
    """
    from kfp import compiler

    from gkeflow.components.images import is_pinned, load_lock

    if pipeline not in PIPELINES:
        raise ValueError(f"unknown pipeline {pipeline!r}; available: {', '.join(PIPELINES)}")
    if target not in COMPILE_TARGETS:
        raise ValueError(f"unknown target {target!r}; available: {', '.join(COMPILE_TARGETS)}")
    built = PIPELINES[pipeline](target, compute)
    images = pin_images(built, load_lock() if lock is None else lock)
    if release:
        unpinned = sorted({image for image in images.values() if not is_pinned(image)})
        if unpinned:
            raise ReleaseError(
                f"refusing a release build of {pipeline} for {target}: image(s) referenced by "
                f"tag only: {', '.join(unpinned)}. Build the images (images/build.sh) to record "
                "their digests in images/images.lock.json, then compile again."
            )
    path = compiled_path(output_dir, pipeline, target)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp.yaml", delete=False
    ) as tmp:
        tmp_path = Path(tmp.name)
    try:
        compiler.Compiler().compile(built, str(tmp_path))
        tmp_path.replace(path)
    finally:
        tmp_path.unlink(missing_ok=True)
    return path


def compile_all(
    output_dir: Path,
    targets=COMPILE_TARGETS,
    pipelines=None,
    compute: Mapping | None = None,
    lock: Mapping[str, str] | None = None,
    release: bool = False,
) -> list[Path]:
    return [
        compile_pipeline(name, target, output_dir, compute, lock, release)
        for name in (pipelines or PIPELINES)
        for target in targets
    ]


def stale_files(output_dir: Path, targets=COMPILE_TARGETS, compute: Mapping | None = None,
                lock: Mapping[str, str] | None = None) -> list[Path]:
    """Compiled files that are missing or differ from what the code produces now."""
    stale = []
    with tempfile.TemporaryDirectory() as fresh_dir:
        for fresh in compile_all(Path(fresh_dir), targets, compute=compute, lock=lock):
            committed = Path(output_dir) / fresh.name
            if not committed.exists() or committed.read_text() != fresh.read_text():
                stale.append(committed)
    return stale
