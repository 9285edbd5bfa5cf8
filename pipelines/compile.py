"""Compile pipelines to YAML, one file per target: ``compiled/<pipeline>.<target>.yaml``."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

COMPILE_TARGETS = ("gke", "vertex")
DEFAULT_OUTPUT = Path(__file__).resolve().parent.parent / "compiled"


def _training(target: str):
    from pipelines.training import build_training_pipeline

    return build_training_pipeline(target)


#: Pipeline short name -> builder taking a target.
PIPELINES: dict[str, Callable[[str], object]] = {"training": _training}


def compiled_path(output_dir: Path, pipeline: str, target: str) -> Path:
    return Path(output_dir) / f"{pipeline}.{target}.yaml"


def compile_pipeline(pipeline: str, target: str, output_dir: Path) -> Path:
    """Compile one pipeline for one target; returns the YAML's path."""
    from kfp import compiler

    if pipeline not in PIPELINES:
        raise ValueError(f"unknown pipeline {pipeline!r}; available: {', '.join(PIPELINES)}")
    if target not in COMPILE_TARGETS:
        raise ValueError(f"unknown target {target!r}; available: {', '.join(COMPILE_TARGETS)}")
    path = compiled_path(output_dir, pipeline, target)
    path.parent.mkdir(parents=True, exist_ok=True)
    compiler.Compiler().compile(PIPELINES[pipeline](target), str(path))
    return path


def compile_all(output_dir: Path, targets=COMPILE_TARGETS, pipelines=None) -> list[Path]:
    return [
        compile_pipeline(name, target, output_dir)
        for name in (pipelines or PIPELINES)
        for target in targets
    ]


def stale_files(output_dir: Path, targets=COMPILE_TARGETS) -> list[Path]:
    """Compiled files that are missing or differ from what the code produces now."""
    stale = []
    with tempfile.TemporaryDirectory() as fresh_dir:
        for fresh in compile_all(Path(fresh_dir), targets):
            committed = Path(output_dir) / fresh.name
            if not committed.exists() or committed.read_text() != fresh.read_text():
                stale.append(committed)
    return stale
