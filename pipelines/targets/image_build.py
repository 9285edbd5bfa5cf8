"""Build the suite's slim, CPU, GPU and TPU images, with the user's packages and code, into a
registry.

The Dockerfiles and hashed lock files ship inside the package (``gkeflow.images``), so a
build works after ``pip install gkeflow`` as well as from a clone. :func:`assemble_context`
writes a self-contained build context into a directory of its own (never into the installed
package)::

    Dockerfile               images/<flavour>.Dockerfile
    requirements.lock        images/requirements-<flavour>.lock (--require-hashes --no-deps)
    build.lock               the lock's setuptools and wheel, which build its source-only packages
    prune.sh                 removes what no step runs (images/prune.sh)
    dist/gkeflow-*.whl       the installed gkeflow package, repacked as a wheel (no re-resolving)
    user/requirements.txt    the user's extra packages (constrained to the lock's versions)
    user/constraints.txt     the lock's versions, without hashes
    user/modules.txt         the included modules, imported by the build (gkeflow.images.warm)
    user/include/            the user's modules and packages (importable: a .pth file names it)

:func:`build_image` builds that context with podman, docker or Cloud Build, pushes it unless
told not to, and returns the image's digest. The requirements file is checked first
(:mod:`~gkeflow.pipelines.targets.image_requirements`: local paths, plain-text credentials,
pins against the locks); the builders run through
:mod:`~gkeflow.pipelines.targets.image_engine`.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path

from gkeflow.components.images import SERVING, VERSION
from gkeflow.pipelines.settings.images_config import link_trouble
from gkeflow.pipelines.targets import image_locks, image_requirements
from gkeflow.pipelines.targets.image_engine import (
    BUILDERS,
    ImageBuildError,
    StepFailed,
    prune_previous,
    run,
    unpullable_base,
)

FLAVOURS = ("slim", "cpu", "gpu", "tpu")
#: The packages the wheel of the installed suite carries.
PACKAGES = ("gkeflow.components", "gkeflow.pipelines", "gkeflow.images")

_DIGEST_RE = re.compile(r"(?<![0-9a-f])sha256:[0-9a-f]{64}(?![0-9a-f])")
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
_SKIP_DIRS = {"__pycache__", ".pytest_cache", ".ruff_cache"}


def images_dir() -> Path:
    """The installed ``gkeflow.images`` folder (Dockerfiles and locks)."""
    return _package_dir("gkeflow.images")


def _package_dir(package: str) -> Path:
    try:
        module = importlib.import_module(package)
    except ImportError as exc:
        raise ImageBuildError(
            f"{package} is not installed; reinstall gkeflow (pip install gkeflow)") from exc
    paths = [Path(p) for p in getattr(module, "__path__", [])]
    if not paths or not paths[0].is_dir():
        raise ImageBuildError(f"{package} is not a folder on disk (zipped install?); "
                              "reinstall gkeflow with pip")
    return paths[0]


def _package_files(package: str) -> list[tuple[str, Path]]:
    """(path inside the wheel, file) for every file of ``package``, caches left out."""
    root = _package_dir(package)
    prefix = package.replace(".", "/")
    files = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        for name in sorted(names):
            if name.endswith((".pyc", ".pyo")) or name.startswith("."):
                continue
            path = Path(folder) / name
            files.append((f"{prefix}/{path.relative_to(root).as_posix()}", path))
    return files


def _dist_text(name: str) -> str | None:
    try:
        return importlib.metadata.distribution("gkeflow").read_text(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def build_wheel(dest: Path) -> Path:
    """Repack the installed gkeflow package as a wheel in ``dest``; the same files give the
    same bytes (sorted entries, fixed timestamps), so an unchanged suite reuses the cached
    image layer."""
    dist_info = f"gkeflow-{VERSION}.dist-info"
    metadata = _dist_text("METADATA") or (
        f"Metadata-Version: 2.1\nName: gkeflow\nVersion: {VERSION}\n")
    entry_points = _dist_text("entry_points.txt") or (
        "[console_scripts]\ngkeflow = gkeflow.pipelines.cli.main:main\n")
    generated = {
        f"{dist_info}/METADATA": metadata.encode(),
        f"{dist_info}/WHEEL": (b"Wheel-Version: 1.0\n"
                               b"Generator: gkeflow.pipelines.targets.image_build\n"
                               b"Root-Is-Purelib: true\nTag: py3-none-any\n"),
        f"{dist_info}/entry_points.txt": entry_points.encode(),
        f"{dist_info}/top_level.txt": b"gkeflow\n",
    }
    entries = [(arc, path.read_bytes()) for package in PACKAGES
               for arc, path in _package_files(package)]
    entries += sorted(generated.items())
    record = []
    wheel = dest / f"gkeflow-{VERSION}-py3-none-any.whl"
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for arc, data in entries:
            _write_entry(archive, arc, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{arc},sha256={digest.decode()},{len(data)}")
        record.append(f"{dist_info}/RECORD,,")
        _write_entry(archive, f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode())
    return wheel


def _write_entry(archive: zipfile.ZipFile, arc: str, data: bytes) -> None:
    info = zipfile.ZipInfo(arc, date_time=_ZIP_TIME)
    info.external_attr = 0o644 << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(info, data)


def check_pins(requirements: Path, flavours: Sequence[str]) -> None:
    """Refuse, in one line, a requirement in ``requirements`` that the ``flavours`` images'
    locks do not satisfy (pip would find it only minutes into the build)."""
    text = _read_requirements(Path(requirements))
    for flavour in flavours:
        lock = image_locks.lock_path(images_dir(), flavour)
        if not lock.is_file():
            continue  # assemble_context names the missing lock
        problem = image_requirements.pin_conflict(requirements, text, flavour, lock)
        if problem:
            raise ImageBuildError(problem)


def _read_requirements(requirements: Path) -> str:
    try:
        return image_requirements.read_requirements(requirements)
    except image_requirements.RequirementsError as exc:
        raise ImageBuildError(str(exc)) from None


def _include_name(path: Path) -> str:
    if not path.exists():
        raise ImageBuildError(f"images.include: {path} does not exist; "
                              "list Python modules (.py) or package folders")
    name = path.stem if path.is_file() else path.name
    if path.is_file() and path.suffix != ".py":
        raise ImageBuildError(f"images.include: {path} is not a Python module (.py) or a folder")
    if not name.isidentifier() or name == "gkeflow":
        raise ImageBuildError(f"images.include: {path} cannot be imported as {name!r}; "
                              "rename it to a valid module name other than gkeflow")
    trouble = link_trouble(path) if path.is_dir() else ""
    if trouble:
        raise ImageBuildError(f"images.include: {trouble}; the build copies what links point "
                              "to, so remove the link or point it at a file or folder outside it")
    return name


def assemble_context(dest: Path, flavour: str, requirements: Path | None,
                     includes: Sequence[Path]) -> Path:
    """Write a self-contained build context for the ``flavour`` image into ``dest``.

    Args:
        dest: An empty or missing folder; the context is written there.
        flavour: ``slim``, ``cpu``, ``gpu``, ``tpu`` or ``serving`` (TensorFlow Serving for
            Vertex AI).
        requirements: A pip requirements file of extra packages, or None. They are installed
            after the locked packages, constrained to the lock's versions.
        includes: Python modules (``.py``) and package folders copied into the image and
            importable there.

    Returns:
        The path of the context's Dockerfile.

    Raises:
        ImageBuildError: Unknown flavour, a missing or unusable requirement or include, or a
            non-empty ``dest``.
    """
    if flavour not in FLAVOURS:
        raise ImageBuildError(
            f"unknown image flavour {flavour!r}; use one of {', '.join(FLAVOURS)}")
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise ImageBuildError(f"{dest} is not empty; give the build context an empty folder")
    extra = _read_requirements(Path(requirements)) if requirements else ""
    if requirements:
        check_pins(Path(requirements), [flavour])
    names = {}
    for path in includes:
        name = _include_name(Path(path))
        if name in names:
            raise ImageBuildError(f"images.include: {path} and {names[name]} are both "
                                  f"imported as {name!r}; keep one")
        names[name] = Path(path)

    source = images_dir()
    lock = image_locks.lock_path(source, flavour)
    if not lock.is_file():
        raise ImageBuildError(f"{lock} is missing; reinstall gkeflow or run: make locks")
    user = dest / "user"
    (user / "include").mkdir(parents=True)
    shutil.copyfile(source / f"{flavour}.Dockerfile", dest / "Dockerfile")
    shutil.copyfile(lock, dest / "requirements.lock")
    (dest / "build.lock").write_text(image_locks.build_requirements(lock), encoding="utf-8")
    shutil.copyfile(source / "prune.sh", dest / "prune.sh")
    build_wheel(dest / "dist")
    (user / "requirements.txt").write_text(extra, encoding="utf-8")
    (user / "constraints.txt").write_text(image_locks.constraints(lock), encoding="utf-8")
    (user / "modules.txt").write_text("".join(f"{n}\n" for n in sorted(names)), encoding="utf-8")
    (user / "include" / "README.txt").write_text(
        "The images.include modules and packages of gkeflow.yaml (on sys.path).\n",
        encoding="utf-8")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".*")
    for name, path in sorted(names.items()):
        target = user / "include" / (f"{name}.py" if path.is_file() else name)
        if path.is_file():
            shutil.copyfile(path, target)
        else:
            shutil.copytree(path, target, ignore=ignore)
    return dest / "Dockerfile"


def _json(text: str, what: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ImageBuildError(f"{what} printed no JSON: {text.strip()[:200]!r}") from exc


def find_digest(text: str, what: str) -> str:
    """The ``sha256:`` digest that ``what`` printed in ``text``; ImageBuildError if none."""
    found = _DIGEST_RE.search(text)
    if not found:
        raise ImageBuildError(f"{what} reported no sha256 digest: {text.strip()[:200]!r}")
    return found.group(0)


def _engine(builder: str) -> str:
    exe = "gcloud" if builder == "cloud-build" else builder
    found = shutil.which(exe)
    if not found:
        hint = {"podman": "apt-get install podman", "docker": "install Docker",
                "cloud-build": "install the Google Cloud CLI"}[builder]
        others = ", ".join(b for b in BUILDERS if b != builder)
        raise ImageBuildError(f"{exe} not found on PATH; {hint}, or use --builder {others}")
    return found


def _build_local(engine: str, builder: str, context: Path, reference: str, push: bool,
                 echo: Callable[[str], None], secret: Path, hide: Sequence[str] = ()) -> str:
    command = [engine, "build", "--file", str(context / "Dockerfile"), "--tag", reference,
               "--secret", f"id={image_requirements.PIP_SECRET},src={secret}"]
    if builder == "podman":
        # No OCI runtime needed: works as root in containers and CI runners.
        command += ["--isolation=chroot", "--layers"]
    try:
        # docker: BuildKit, which takes --secret (the legacy builder does not)
        env = {**os.environ, "DOCKER_BUILDKIT": "1"} if builder == "docker" else None
        run(command + [str(context)], f"{builder} build of {reference}", echo, hide=hide,
             env=env)
    except StepFailed as failure:
        problem = unpullable_base(failure, context / "Dockerfile", builder,
                                  images_dir() / "container-base.sh")
        if problem:
            raise ImageBuildError(problem) from failure
        raise
    prune_previous(engine, builder, context / "Dockerfile", echo)
    if builder == "podman":
        if not push:
            out = run([engine, "image", "inspect", "--format", "{{.Digest}}", reference],
                       "podman image inspect", echo)
            return find_digest(out, "podman image inspect")
        digest_file = context / "pushed.digest"
        echo(f"pushing {reference}")
        run([engine, "push", "--digestfile", str(digest_file), reference],
             f"podman push {reference}", echo)
        return find_digest(digest_file.read_text(encoding="utf-8"), "podman push")
    if not push:
        out = run([engine, "image", "inspect", "--format", "{{.Id}}", reference],
                   "docker image inspect", echo)
        return find_digest(out, "docker image inspect")
    echo(f"pushing {reference}")
    run([engine, "push", reference], f"docker push {reference}", echo)
    out = run([engine, "image", "inspect", "--format", "{{json .RepoDigests}}", reference],
               "docker image inspect", echo)
    repository = reference.rsplit(":", 1)[0] if ":" in reference.rsplit("/", 1)[-1] else reference
    for entry in _json(out or "[]", "docker image inspect") or []:
        if isinstance(entry, str) and entry.startswith(f"{repository}@"):
            return find_digest(entry, "docker push")
    raise ImageBuildError(f"docker pushed {reference} but reported no digest for it; "
                          f"check with: docker image inspect {reference}")


def cloudbuild_config(reference: str) -> dict:
    """The Cloud Build config that builds the context's Dockerfile and pushes ``reference``."""
    return {
        "steps": [{
            "id": "build",
            "name": "gcr.io/cloud-builders/docker",
            "env": ["DOCKER_BUILDKIT=1"],
            "args": ["build", "--file", "Dockerfile", "--tag", reference, "."],
        }],
        "images": [reference],
        "options": {"machineType": "E2_HIGHCPU_8", "diskSizeGb": 100,
                    "logging": "CLOUD_LOGGING_ONLY"},
        "timeout": "3600s",
    }


def _build_cloud(engine: str, context: Path, reference: str, push: bool, project: str | None,
                 echo: Callable[[str], None]) -> str:
    if not push:
        raise ImageBuildError("Cloud Build keeps no local image, so it always pushes; "
                              "drop --no-push or use --builder podman|docker")
    config = context / "cloudbuild.json"
    config.write_text(json.dumps(cloudbuild_config(reference), indent=2), encoding="utf-8")
    scope = [f"--project={project}"] if project else []
    echo(f"submitting {context.name} to Cloud Build")
    printed = run([engine, "builds", "submit", "--config", str(config), "--async",
                    "--format=value(id)", *scope, str(context)],
                   "gcloud builds submit", echo).split()
    if not printed:
        raise ImageBuildError("gcloud builds submit printed no build id; see `gcloud builds "
                              "list` for the build it may have started")
    build_id = printed[-1]
    echo(f"Cloud Build {build_id}: streaming its log")
    subprocess.run([engine, "builds", "log", "--stream", build_id, *scope], check=False)
    described = run([engine, "builds", "describe", build_id, "--format=json", *scope],
                     f"gcloud builds describe {build_id}", echo)
    build = _json(described, f"gcloud builds describe {build_id}")
    if build.get("status") != "SUCCESS":
        raise ImageBuildError(f"Cloud Build {build_id} ended {build.get('status')}; see: "
                              f"gcloud builds log {build_id}")
    for image in (build.get("results") or {}).get("images") or []:
        if image.get("name") == reference:
            return find_digest(image.get("digest", ""), f"Cloud Build {build_id}")
    raise ImageBuildError(f"Cloud Build {build_id} did not report a digest for {reference}")


def assemble_serving_context(dest: Path) -> Path:
    """Write the serving image's build context into ``dest``: ``Dockerfile``
    (images/serving.Dockerfile: TensorFlow Serving of the images' TensorFlow) and
    ``serving-entrypoint.sh``. images.requirements and images.include do not apply."""
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise ImageBuildError(f"{dest} is not empty; give the build context an empty folder")
    dest.mkdir(parents=True, exist_ok=True)
    source = images_dir()
    shutil.copyfile(source / "serving.Dockerfile", dest / "Dockerfile")
    shutil.copyfile(source / "serving-entrypoint.sh", dest / "serving-entrypoint.sh")
    return dest / "Dockerfile"


def build_image(flavour: str, reference: str, requirements: Path | None,
                includes: Sequence[Path], builder: str = "podman", push: bool = True,
                project: str | None = None, echo: Callable[[str], None] = print) -> str:
    """Build the ``flavour`` image as ``reference`` and push it unless ``push`` is False.

    Args:
        flavour: ``slim``, ``cpu``, ``gpu``, ``tpu`` or ``serving``.
        reference: The image's name and tag, e.g.
            ``europe-west4-docker.pkg.dev/my-project/ml/gkeflow-cpu:0.1.0``.
        requirements: A pip requirements file of extra packages, or None.
        includes: The user's modules and package folders copied into the image.
        builder: ``podman`` (``--isolation=chroot``, no daemon), ``docker`` or
            ``cloud-build`` (``gcloud builds submit``; always pushes).
        push: Push to the registry; False keeps the image local.
        project: The Google Cloud project Cloud Build runs in (default: gcloud's).
        echo: Receives one line per build step.

    Returns:
        ``sha256:<64 hex>``: the pushed manifest's digest, or the local image's with
        ``push=False``.

    Raises:
        ImageBuildError: A missing engine, a bad input, or a failed step (with the last
            lines of its log).
    """
    if builder not in BUILDERS:
        raise ImageBuildError(f"unknown builder {builder!r}; use one of {', '.join(BUILDERS)}")
    engine = _engine(builder)
    with tempfile.TemporaryDirectory(prefix=f"gkeflow-{flavour}-image-") as tmp:
        context = Path(tmp) / "context"
        if flavour == SERVING:
            assemble_serving_context(context)
            names = []
        else:
            assemble_context(context, flavour, requirements, includes)
            names = image_requirements.secret_variables(
                (context / "user" / "requirements.txt").read_text("utf-8"))
        if names and builder == "cloud-build":
            raise ImageBuildError(
                f"images.requirements names ${{{names[0]}}}: Cloud Build cannot receive it "
                "from this machine as a build secret; build with --builder podman or docker")
        # outside the context: never sent as one of its files
        secret = Path(tmp) / image_requirements.PIP_SECRET
        try:
            hide = image_requirements.write_secret(secret, names)
        except image_requirements.RequirementsError as exc:
            raise ImageBuildError(str(exc)) from None
        if names:
            echo(f"passing {', '.join(names)} to the requirements step as a build secret")
        echo(f"building {reference} ({flavour}) with {builder}")
        if builder == "cloud-build":
            digest = _build_cloud(engine, context, reference, push, project, echo)
        else:
            digest = _build_local(engine, builder, context, reference, push, echo, secret,
                                  hide=hide)
    echo(f"{reference} -> {digest}")
    return digest
