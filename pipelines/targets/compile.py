"""Compile pipelines to YAML, one file per target: ``compiled/<pipeline>.<target>.yaml``.

Before compiling, each step's compute is validated for the target (an invalid request is
an error naming the step, not a pod pending forever or a 400 at submit). Every image
reference in the compiled file (steps, launched workloads, defaults) is mapped to the
registry of gkeflow.yaml's ``images:`` and pinned to the digest recorded in its lock file
(:func:`gkeflow.pipelines.settings.images_config.image_map`); a release build refuses any image
that is still referenced by tag only.
"""

from __future__ import annotations

import contextlib
import functools
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from gkeflow.components._atomic import plain_mode
from gkeflow.pipelines.definitions import operations
from gkeflow.pipelines.settings.platforms import names, platform
from gkeflow.pipelines.settings.remote_config import PIPELINE_NAMES

COMPILE_TARGETS = ("gke", "vertex")


def compile_choices() -> tuple[str, ...]:
    """What ``--target`` of compile and plan accepts: the backends, and every cloud platform
    (a platform another's flag selects, as GKE Autopilot, may be named directly)."""
    return tuple(dict.fromkeys([*COMPILE_TARGETS,
                                *(name for name in names() if platform(name).cloud)]))
#: Relative: ``compiled/`` of the directory the command runs in (the user's project), not
#: the installed package's source tree.
DEFAULT_OUTPUT = Path("compiled")


class ReleaseError(ValueError):
    """A release build would reference an image by tag only."""


def _loaded(config):
    """``config``, or ./gkeflow.yaml when it is None."""
    from gkeflow.pipelines.settings.config import load_config

    return config if config is not None else load_config()


def _training(target: str, compute=None, config=None):
    """The training pipeline with ``config``'s workspace and preparation sections."""
    from gkeflow.pipelines.definitions.training import build_training_pipeline

    config = _loaded(config)
    return build_training_pipeline(target, pipeline_compute("training", compute),
                                   config.gke_workspace(), config.preparation,
                                   operations.of(config, target), gcsfuse=config.gcsfuse,
                                   lustre=config.lustre, families=config.training_families())


def _prediction(target: str, compute=None, config=None):
    from gkeflow.pipelines.definitions.prediction import build_prediction_pipeline

    config = _loaded(config)
    return build_prediction_pipeline(target, pipeline_compute("prediction", compute),
                                     operations.of(config, target), gcsfuse=config.gcsfuse,
                                   lustre=config.lustre)


def _sweep(target: str, compute=None, config=None):
    """The sweep pipeline with the ``sweep:`` section of ``config`` (the
    :class:`~gkeflow.pipelines.settings.config.GkeflowConfig` of ``--config``; default: read from
    ./gkeflow.yaml), or the default sweep when it has none; its workspace and preparation
    sections too."""
    from gkeflow.pipelines.definitions.sweep import build_sweep_pipeline

    config = _loaded(config)
    return build_sweep_pipeline(target, pipeline_compute("sweep", compute), config.sweep,
                                config.gke_workspace(), config.preparation,
                                operations.of(config, target), gcsfuse=config.gcsfuse,
                                lustre=config.lustre)


def _fanout_prepare(target: str, compute=None, config=None):
    from gkeflow.pipelines.definitions.fanout import build_fanout_pipeline

    config = _loaded(config)
    return build_fanout_pipeline(target, pipeline_compute("fanout-prepare", compute),
                                 config.preparation.parallelism, config.gke_workspace(),
                                 _untracked(operations.of(config, target)),
                                 gcsfuse=config.gcsfuse, lustre=config.lustre)


def _untracked(ops: operations.Operations) -> operations.Operations:
    """``ops`` without MLflow tracking: the fan-out pipeline's steps log no runs."""
    from dataclasses import replace

    return replace(ops, tracking=None)


#: Pipeline short name -> builder taking a target, per-step compute overrides and the
#: loaded gkeflow.yaml (for the sections a pipeline reads besides ``compute:``).
PIPELINES: dict[str, Callable[..., object]] = {
    "training": _training, "prediction": _prediction, "sweep": _sweep,
    "fanout-prepare": _fanout_prepare,
}
if tuple(PIPELINES) != PIPELINE_NAMES:
    raise RuntimeError(f"pipeline builders {tuple(PIPELINES)} differ from "
                       f"config.PIPELINE_NAMES {PIPELINE_NAMES}")


def steps_of(pipeline: str) -> Mapping:
    """``pipeline``'s steps and their default compute."""
    if pipeline == "prediction":
        from gkeflow.pipelines.definitions.prediction import DEFAULT_COMPUTE
    elif pipeline == "sweep":
        from gkeflow.pipelines.definitions.sweep import SWEEP_COMPUTE as DEFAULT_COMPUTE
    elif pipeline == "fanout-prepare":
        from gkeflow.pipelines.definitions.fanout import DEFAULT_COMPUTE
    else:
        from gkeflow.pipelines.definitions.training import CANDIDATE_COMPUTE, DEFAULT_COMPUTE

        return {**DEFAULT_COMPUTE, **CANDIDATE_COMPUTE}
    return DEFAULT_COMPUTE


def default_compute() -> dict:
    """Every pipeline's steps and their default compute (gkeflow.yaml may override any)."""
    merged: dict = {}
    for name in PIPELINES:
        merged.update(steps_of(name))
    return merged


def pipeline_compute(pipeline: str, compute: Mapping | None) -> Mapping | None:
    """``compute`` without other pipelines' steps (one gkeflow.yaml holds every pipeline's);
    a step no pipeline has stays, so the pipeline reports it."""
    if compute is None:
        return None
    own, known = steps_of(pipeline), default_compute()
    return {step: p for step, p in compute.items() if step in own or step not in known}


@functools.cache
def _parameter_names(name: str) -> frozenset[str]:
    """The parameters pipeline ``name`` takes on any target (built once per process: they
    are the pipeline function's, whatever gkeflow.yaml says)."""
    return frozenset(key for target in COMPILE_TARGETS
                     for key in PIPELINES[name](target).component_spec.inputs)


def parameters_of_other_pipelines(pipeline: str) -> set[str]:
    """Parameters that other pipelines take and ``pipeline`` does not (on any target): a
    shared ``parameters:`` environment in gkeflow.yaml may set them for those pipelines."""
    others = set().union(*(_parameter_names(n) for n in PIPELINES if n != pipeline))
    return others - _parameter_names(pipeline) if pipeline in PIPELINES else others


def compiled_path(output_dir: Path, pipeline: str, target: str) -> Path:
    return Path(output_dir) / f"{pipeline}.{target}.yaml"


def pin_images(pipeline, lock: Mapping[str, str]) -> dict[str, str]:
    """Replace each executor's image as ``lock`` maps it (see
    :func:`gkeflow.components.images.pin`); returns executor -> image."""
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
        # A launcher's workload (a Vertex AI CustomJob payload) names its own image.
        args = list(container["args"]) if "args" in container else []
        for index, arg in enumerate(args):
            pinned = _pin_embedded(arg, lock, images, f"{name} (workload)")
            if pinned != arg:
                args[index] = pinned
                container["args"] = args
    for task_name, task in pipeline.pipeline_spec.root.dag.tasks.items():
        for param in task.inputs.parameters.values():  # a JobSet template passed as a constant
            constant = param.runtime_value.constant
            if constant.HasField("string_value"):
                pinned = _pin_embedded(constant.string_value, lock, images,
                                       f"{task_name} (workload)")
                if pinned != constant.string_value:
                    constant.string_value = pinned
    return images


#: Keys under which a workload embedded as JSON names its container image.
_IMAGE_KEYS = ("image", "image_uri")


def _pin_embedded(text: str, lock: Mapping[str, str], images: dict[str, str],
                  label: str) -> str:
    """``text`` with the images of an embedded JSON workload pinned; unchanged otherwise."""
    import json

    from gkeflow.components.images import pin

    if not text.startswith("{") or not any(f'"{key}"' in text for key in _IMAGE_KEYS):
        return text
    try:
        document = json.loads(text)
    except ValueError:
        return text
    found = []

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key in _IMAGE_KEYS and isinstance(value, str):
                    node[key] = pin(value, dict(lock))
                    found.append(node[key])
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(document)
    if not found:
        return text
    for index, image in enumerate(found):
        images[f"{label} {index}"] = image
    compact = "," in text and ", " not in text
    return json.dumps(document, sort_keys=True, separators=(",", ":") if compact else None)


def compile_pipeline(
    pipeline: str,
    target: str,
    output_dir: Path,
    compute: Mapping | None = None,
    lock: Mapping[str, str] | None = None,
    release: bool = False,
    config=None,
) -> Path:
    """Compile one pipeline for one target; returns the YAML's path.

    Args:
        pipeline: Short name in :data:`PIPELINES`.
        target: "gke" or "vertex" (the platform its gkeflow.yaml section selects: GKE
            Autopilot for ``targets.gke.autopilot: true``), or a platform's name.
        output_dir: Directory for the YAML file.
        compute: Per-step :class:`~gkeflow.pipelines.compute.profiles.ComputeProfile` overrides.
        lock: Declared image -> the reference (or digest) to use; default: the mapping of
            ``config``'s ``images:`` section and lock file.
        release: Refuse tag-only image references (:class:`ReleaseError`).
        config: The loaded gkeflow.yaml (``--config``) whose other sections the pipeline
            reads (the sweep's ``sweep:``); default: ./gkeflow.yaml.
    """
    from kfp import compiler

    from gkeflow.components.images import IMAGES, is_pinned, map_references, pin
    from gkeflow.components.yamlio import libyaml_emitter
    from gkeflow.pipelines.compute.wording import plural
    from gkeflow.pipelines.settings.images_config import image_map

    if pipeline not in PIPELINES:
        from gkeflow.components.did_you_mean import did_you_mean

        raise ValueError(f"unknown pipeline {pipeline!r}{did_you_mean(pipeline, PIPELINES)}; "
                         f"available: {', '.join(PIPELINES)}")
    if target not in names() or not platform(target).cloud:
        available = [name for name in names() if platform(name).cloud]
        raise ValueError(f"unknown target {target!r}; available: {', '.join(available)}")
    config = _loaded(config)
    # targets.gke.autopilot: true compiles the gke file for GKE Autopilot
    built = PIPELINES[pipeline](config.platform_of(target), compute, config)
    mapping = image_map(config.images) if lock is None else dict(lock)
    images = pin_images(built, mapping)
    path = compiled_path(output_dir, pipeline, target)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp.yaml", delete=False
    ) as tmp:
        tmp_path = Path(tmp.name)
    try:
        with libyaml_emitter():
            compiler.Compiler().compile(built, str(tmp_path))
        text = map_references(tmp_path.read_text(encoding="utf-8"), mapping)
        tmp_path.write_text(text, encoding="utf-8")
        if release:
            named = {pin(image, mapping) for image in IMAGES} | set(images.values())
            unpinned = sorted(i for i in named if i in text and not is_pinned(i))
            if unpinned:
                raise ReleaseError(
                    f"refusing a release build of {pipeline} for {target}: "
                    f"{plural(len(unpinned), 'image')} referenced by tag only: "
                    f"{', '.join(unpinned)}. Run `gkeflow images build` to record "
                    "their digests in the lock file, then compile again."
                )
        _stable_header(tmp_path)
        plain_mode(tmp_path)  # NamedTemporaryFile makes it private
        tmp_path.replace(path)
    finally:
        tmp_path.unlink(missing_ok=True)
    return path


def _stable_header(path: Path) -> None:
    """Sort the keys of dict defaults in the YAML's header comment.

    kfp renders a default such as the sweep's trial list from a protobuf Struct, whose key
    order changes from one process to the next; sorted, the file is the same every time.
    """
    import ast
    import re

    def sort(value):
        if isinstance(value, dict):
            return {k: sort(value[k]) for k in sorted(value)}
        if isinstance(value, list):
            return [sort(v) for v in value]
        return value

    def stable(match: re.Match) -> str:
        try:
            return f"[Default: {sort(ast.literal_eval(match.group(1)))!r}]"
        except (ValueError, SyntaxError):
            return match.group(0)

    lines = path.read_text().split("\n")
    for index, line in enumerate(lines):
        if not line.startswith("#"):
            break
        lines[index] = re.sub(r"\[Default: ([\[{].*)\]$", stable, line)
    path.write_text("\n".join(lines))


class Compiled(list):
    """The files :func:`compile_all` wrote; ``skipped``: the file of each pipeline that
    cannot take the compute asked for another (:class:`~gkeflow.pipelines.compute.profiles.
    PipelineUnfit`) -> why, in one line; ``removed``: those of them an earlier compile had
    left in the output folder, now deleted."""

    def __init__(self, paths=(), skipped=None, removed=()):
        super().__init__(paths)
        self.skipped: dict[Path, str] = dict(skipped or {})
        self.removed: list[Path] = list(removed)


def compile_all(
    output_dir: Path,
    targets=COMPILE_TARGETS,
    pipelines=None,
    compute: Mapping | None = None,
    lock: Mapping[str, str] | None = None,
    release: bool = False,
    config=None,
) -> Compiled:
    """Every pipeline for every target into ``output_dir``, all or nothing: the files are
    compiled aside and moved into place only once each of them compiled, so a refused
    setting never leaves new files beside old ones.

    A pipeline that cannot take on a target what a step it shares with the others asks
    (the sweep's trials, whose compute is ``train-model``'s) is left out, with its reason
    in :attr:`Compiled.skipped`, and its file from an earlier compile is removed; the
    other pipelines compile.
    """
    from gkeflow.pipelines.compute.profiles import PipelineUnfit

    output_dir = Path(output_dir).absolute()
    existed = output_dir.exists()
    output_dir.mkdir(parents=True, exist_ok=True)  # an error here names the folder asked for
    try:
        with tempfile.TemporaryDirectory(dir=output_dir.parent,
                                         prefix=f".compiling-{output_dir.name}-") as staging:
            staged, skipped = [], {}
            for name in (pipelines or PIPELINES):
                for target in targets:
                    try:
                        staged.append(compile_pipeline(name, target, Path(staging), compute,
                                                       lock, release, config))
                    except PipelineUnfit as exc:
                        skipped[compiled_path(output_dir, name, target)] = str(exc)
            paths = Compiled(skipped=skipped)
            for file in staged:
                final = output_dir / file.relative_to(staging)
                final.parent.mkdir(parents=True, exist_ok=True)
                file.replace(final)
                paths.append(final)
            for earlier in skipped:
                if earlier.exists():
                    earlier.unlink()  # compiled for other settings: never submit it by mistake
                    paths.removed.append(earlier)
    except BaseException:
        if not existed:
            with contextlib.suppress(OSError):
                output_dir.rmdir()  # made for this compile, and still empty
        raise
    return paths


def stale_files(output_dir: Path, targets=COMPILE_TARGETS, compute: Mapping | None = None,
                lock: Mapping[str, str] | None = None, config=None) -> list[Path]:
    """Compiled files that are missing or differ from what the code produces now, and
    files of pipelines that are no longer compiled (:attr:`Compiled.skipped`)."""
    stale = []
    with tempfile.TemporaryDirectory() as fresh_dir:
        compiled = compile_all(Path(fresh_dir), targets, compute=compute, lock=lock,
                               config=config)
        for fresh in compiled:
            committed = Path(output_dir) / fresh.name
            if not committed.exists() or committed.read_text() != fresh.read_text():
                stale.append(committed)
        stale += [Path(output_dir) / skipped.name for skipped in compiled.skipped
                  if (Path(output_dir) / skipped.name).exists()]
    return stale
