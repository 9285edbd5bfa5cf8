"""`gkeflow images build` and `gkeflow images list`: the suite's images in the user's registry.

`build` builds the slim, CPU and GPU images, and the TPU image where gkeflow.yaml's compute
trains on a TPU or it is asked for (Dockerfiles shipped in the package, the user's
``requirements`` and ``include`` of gkeflow.yaml's ``images:`` layered on top) through
:mod:`gkeflow.pipelines.targets.image_build`, pushes them, and records each digest in the lock
file next to gkeflow.yaml (:mod:`gkeflow.pipelines.settings.image_lock`) as soon as that image is
built: a failed GPU build keeps the CPU image's record. `list` shows the lock file.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import click
from rich.table import Table
from rich.text import Text

from gkeflow.components.images import FLAVOURS, SERVING, TPU
from gkeflow.pipelines.cli.common import stdout_console

#: Builders in the order `--builder auto` looks for them, with the executable each needs.
ENGINES = {"podman": "podman", "docker": "docker", "cloud-build": "gcloud"}
_PROJECT_RE = re.compile(r"^(?:[a-z0-9-]+-docker\.pkg\.dev|(?:[a-z]+\.)?gcr\.io)/([^/]+)")


def _load(config_path: Path):
    from gkeflow.pipelines.settings.config import ConfigError, load_config

    if not config_path.exists():
        raise click.ClickException(f"{config_path} not found; `gkeflow init` writes one with "
                                   "a commented images: section")
    try:
        return load_config(config_path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc


def pick_builder(choice: str) -> str:
    """``auto``: the first of podman, docker, gcloud (Cloud Build) on PATH."""
    if choice != "auto":
        return choice
    for builder, executable in ENGINES.items():
        if shutil.which(executable):
            return builder
    raise click.ClickException("no image builder found: install podman or docker, or the "
                               "Google Cloud CLI for --builder cloud-build")


def tpu_steps(config) -> list[str]:
    """The steps whose compute in gkeflow.yaml asks for a TPU."""
    from gkeflow.pipelines.compute.tpu_profile import tpu_name

    return sorted(step for step, changes in config.compute.items()
                  if tpu_name(str((changes or {}).get("accelerator") or "")))


def flavours_to_build(choice: str, config) -> list[str]:
    """The images ``--flavour CHOICE`` builds. ``all``: slim, CPU, GPU and serving, and the
    TPU image only when gkeflow.yaml's compute gives a step a TPU (it is large and only
    TPU training runs in it)."""
    if choice != "all":
        return [choice]
    kinds = [f for f in FLAVOURS if f != TPU or tpu_steps(config)]
    return [*kinds, SERVING]


def registry_project(registry: str) -> str | None:
    """The Google Cloud project of an Artifact Registry / Container Registry path."""
    match = _PROJECT_RE.match(registry)
    return match.group(1) if match else None


_config_option = click.option(
    "--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
    default=Path("gkeflow.yaml"), show_default=True,
    help="The gkeflow.yaml whose images: section names the registry; the lock file lies "
         "next to it.")


@click.group("images")
def images_group() -> None:
    """The images every step runs in (slim, CPU, GPU, TPU), built into your own registry.

    \b
    gkeflow images build    build (and push) every image; record their digests
    gkeflow images list     what is built, for which registry

    Set images.registry in gkeflow.yaml first (`gkeflow init` writes the section). Compiled
    pipelines then name REGISTRY/gkeflow, -cpu, -gpu and -tpu by the digests in the lock
    file, and `gkeflow submit` / `schedule apply` refuse images that were never built and
    pushed. The TPU image is built only for a project whose compute trains on a TPU, or with
    `gkeflow images build --flavour tpu`.
    """


@images_group.command("build")
@click.option("--builder", type=click.Choice(["auto", *ENGINES]), default="auto",
              show_default=True,
              help="podman (no daemon needed), docker, or cloud-build (gcloud builds submit: "
                   "no local engine, always pushes). auto: the first of these installed.")
@click.option("--push/--no-push", default=True, show_default=True,
              help="Push to images.registry. --no-push keeps the images local: compile pins "
                   "them, but submit refuses them until they are pushed.")
@click.option("--flavour", type=click.Choice([*FLAVOURS, SERVING, "all"]), default="all",
              show_default=True,
              help="Which image to build; serving: TensorFlow Serving of the training "
                   "TensorFlow, for Vertex AI deploys; tpu: JAX and libtpu for training on "
                   "Cloud TPUs. all: every image, the TPU one only when a step of "
                   "gkeflow.yaml's compute asks for a TPU.")
@click.option("--project", metavar="PROJECT",
              help="cloud-build: the Google Cloud project to build in (default: the one in "
                   "an Artifact Registry path, else gcloud's).")
@_config_option
def images_build(builder: str, push: bool, flavour: str, project: str | None,
                 config_path: Path) -> None:
    """Build the slim, CPU, GPU and serving images into images.registry; record their digests.

    The TPU image (JAX for Cloud TPUs) is built when gkeflow.yaml's compute gives a step a TPU
    accelerator, or with --flavour tpu; projects that never train on TPUs skip it.

    Each image is the suite's Dockerfile (shipped in the package, installing from hashed
    locks) with images.requirements and images.include of gkeflow.yaml on top, tagged
    REGISTRY/gkeflow:TAG (slim, no TensorFlow) or REGISTRY/gkeflow-FLAVOUR:TAG. Each digest
    goes into the lock file (images.lock, default gkeflow.lock next to gkeflow.yaml) as soon
    as its image is built; nothing is written into the installed package. Then `gkeflow
    compile`, `submit` and `schedule apply` pin every step to those digests.
    """
    from gkeflow.components.images import ImageLockError
    from gkeflow.pipelines.settings.image_lock import LockEntry, load_lock, now, record
    from gkeflow.pipelines.targets.image_build import ImageBuildError, build_image, check_pins
    from gkeflow.pipelines.targets.image_engine import Interrupted, interruptible

    config = _load(config_path)
    images = config.images
    if not images.registry:
        raise click.ClickException(
            f"{config_path}: images.registry is not set; set it to a registry you can push "
            "to, e.g. europe-west4-docker.pkg.dev/my-project/ml (`gkeflow init` shows the "
            "section)")
    try:
        load_lock(images.lock_path)  # a broken lock fails now, not after a long build
    except ImageLockError as exc:
        raise click.ClickException(str(exc)) from exc
    _check_writable(images.lock_path)
    builder = pick_builder(builder)
    project = project or registry_project(images.registry)
    console = stdout_console()
    flavours = flavours_to_build(flavour, config)
    references = {**images.references(), SERVING: images.serving_reference()}
    if images.requirements_path:
        try:  # every image's pins, before the first build starts
            check_pins(images.requirements_path, [f for f in flavours if f != SERVING])
        except ImageBuildError as exc:
            raise click.ClickException(str(exc)) from exc
    for name in flavours:
        reference = references[name]
        try:
            with interruptible():
                digest = build_image(name, reference, images.requirements_path,
                                     images.include_paths, builder=builder, push=push,
                                     project=project,
                                     echo=lambda line: console.print(line, markup=False))
                record(images.lock_path, reference,
                       LockEntry(digest=digest, built_at=now(), builder=builder, pushed=push))
        except (ImageBuildError, ImageLockError) as exc:
            raise click.ClickException(str(exc)) from exc
        except Interrupted as stop:
            click.echo(f"Error: {stop} during the build of {reference}: the builder was stopped "
                       "and the build context removed; images built before it stay recorded "
                       f"in {images.lock_path}", err=True)
            raise SystemExit(128 + stop.signum) from None
        console.print(f"recorded {reference} {digest} in {images.lock_path}", markup=False,
                      soft_wrap=True)
    if push:
        console.print("Next: `gkeflow plan`, then `gkeflow submit --target gke|vertex`; "
                      "compiled steps now pull these digests.", markup=False, soft_wrap=True)
    else:
        console.print("Built locally (--no-push): `gkeflow compile` pins these digests; "
                      "run `gkeflow images build` (with push) before `gkeflow submit`.",
                      markup=False, soft_wrap=True)


def _check_writable(lock: Path) -> None:
    """The lock's folder takes a new file (the lock is written aside, then renamed): found
    now, not after the images are built and pushed."""
    import tempfile

    folder = lock.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{lock.name}.", suffix=".check"):
            pass
    except OSError as exc:
        raise click.ClickException(f"cannot write the lock file {lock}: {exc.strerror or exc} "
                                   "in its folder; set images.lock to a writable path") from exc


@images_group.command("list")
@_config_option
def images_list(config_path: Path) -> None:
    """Show the images in the lock file: reference, digest, built at, builder, pushed.

    Images of the registry gkeflow.yaml names now are marked `in use`; an image it names
    that was never built shows as `not built`.
    """
    from gkeflow.components.images import ImageLockError
    from gkeflow.pipelines.settings.image_lock import load_lock

    config = _load(config_path) if config_path.exists() else None
    if config is None:
        from gkeflow.pipelines.settings.config import GkeflowConfig

        config = GkeflowConfig()
    images = config.images
    try:
        lock = load_lock(images.lock_path)
    except ImageLockError as exc:
        raise click.ClickException(str(exc)) from exc
    references = images.references()
    if not tpu_steps(config) and references[TPU] not in lock:
        references.pop(TPU)  # built on request only: not missing where no step trains on TPUs
    wanted = {*references.values(), images.serving_reference()}
    console = stdout_console()
    if not console.is_terminal:
        console.width = 240  # one line per image when captured
    table = Table(title=f"images in {images.lock_path}", title_justify="left")
    for column in ("reference", "digest", "built at", "builder", "pushed", "status"):
        table.add_column(column, overflow="fold")
    for reference in sorted(set(lock) | wanted):
        entry = lock.get(reference)
        status = "in use" if reference in wanted else "other registry or tag"
        if entry is None:
            table.add_row(Text(reference), "-", "-", "-", "-", "not built")
            continue
        table.add_row(*(Text(value) for value in (  # the lock's text, never markup
            reference, entry.digest, entry.built_at, entry.builder,
            "yes" if entry.pushed else "no", status)))
    console.print(table)
    unbuilt = sorted(r for r in wanted if r not in lock)
    unpushed = sorted(r for r in wanted if r in lock and not lock[r].pushed)
    if unbuilt:
        console.print(f"not built for {images.registry_or_default}: {', '.join(unbuilt)}; "
                      "run `gkeflow images build`", markup=False, soft_wrap=True)
    if unpushed:
        console.print(f"built with --no-push, not in {images.registry_or_default} yet: "
                      f"{', '.join(unpushed)}; `gkeflow images build` pushes them (submit "
                      "and schedule apply need them there)", markup=False, soft_wrap=True)
