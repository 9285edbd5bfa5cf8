"""``images:`` in gkeflow.yaml: which registry the pipelines' images live in, and what they carry.

Example::

    images:
      registry: europe-west4-docker.pkg.dev/my-project/ml   # your Artifact Registry repository
      tag: 0.1.0                    # default: the gkeflow version
      requirements: requirements.txt  # extra packages, installed into every image
      include: [my_features, my_components.py]   # your code, importable in every step
      lock: gkeflow.lock            # built digests; default: next to gkeflow.yaml

Paths are relative to the directory of gkeflow.yaml. Everything is checked when the file
is loaded: the registry's syntax, that the requirements file exists, that every include
is an importable package (a directory with ``__init__.py``) or module (``name.py``) whose
Python compiles, and that the lock file lies outside the installed gkeflow package.

:func:`image_map` turns the section and the lock file into the one mapping that compiling
applies to every image reference (steps, launched workloads, defaults); :func:`unbuilt`
says which of the images a compiled pipeline names were never built and pushed, which
`gkeflow submit` and `gkeflow schedule apply` refuse (:func:`require_built`).
"""

from __future__ import annotations

import errno
import functools
import keyword
import os
import re
import stat
import sys
from collections.abc import Mapping
from pathlib import Path

from pydantic import (
    BaseModel,
    ConfigDict,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gkeflow.components.images import (
    FLAVOURS,
    IMAGES,
    REGISTRY,
    SERVING_IMAGE,
    TPU,
    VERSION,
    reference,
    repository,
    serving_reference,
)

DEFAULT_LOCK = "gkeflow.lock"
#: Context key under which :func:`gkeflow.pipelines.settings.config.load_config` passes the
#: directory of gkeflow.yaml.
BASE_DIR = "config_dir"

_HOST = r"(?:localhost|[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)+)"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REGISTRY_RE = re.compile(rf"^{_HOST}(?::[0-9]{{1,5}})?(?:/{_PATH_COMPONENT})+$")
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_EXAMPLE = "europe-west4-docker.pkg.dev/my-project/ml"


class ImagesNotBuilt(ValueError):
    """A pipeline names images that were never built (and pushed) for the configured registry."""


#: The installed package's top-level subpackages (setup.py's folders).
PACKAGE_PARTS = ("components", "pipelines", "images")


@functools.cache
def _package_dirs() -> tuple[Path, ...]:
    """The installed gkeflow package's directories and its metadata (nothing is ever
    written there): each subpackage's folder (from a clone, the repository's components/,
    pipelines/ and images/) and the distribution's .dist-info or .egg-info. Read once per
    process: every load of gkeflow.yaml asks."""
    import importlib
    import importlib.metadata

    dirs = [Path(p).resolve() for part in PACKAGE_PARTS
            for p in importlib.import_module(f"gkeflow.{part}").__path__]
    try:
        files = importlib.metadata.distribution("gkeflow").files or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    dirs += {Path(str(f.locate())).resolve().parent for f in files
             if f.parts and f.parts[0].endswith((".dist-info", ".egg-info"))}
    return tuple(dirs)


class ImagesConfig(BaseModel):
    """``images:``: the registry the pipelines' images are built into and pulled from.

    Attributes:
        registry: ``HOST[:PORT]/PATH``, e.g. ``europe-west4-docker.pkg.dev/my-project/ml``;
            the images are ``REGISTRY/gkeflow:TAG`` (slim), ``REGISTRY/gkeflow-cpu:TAG``
            and ``REGISTRY/gkeflow-gpu:TAG``.
            Unset: the project's release registry (whose images you cannot build or push).
        tag: Image tag; default: the gkeflow version.
        requirements: A pip requirements file of extra packages for every image.
        include: Local packages (directories with ``__init__.py``) or modules (``.py``
            files) of your code, copied into every image and importable in every step.
        lock: The built-images lock file; default ``gkeflow.lock`` next to gkeflow.yaml.
    """

    model_config = ConfigDict(extra="forbid")

    registry: str = ""
    tag: str = ""
    requirements: str = ""
    include: list[str] = []
    lock: str = DEFAULT_LOCK
    _base: Path | None = PrivateAttr(default=None)

    @field_validator("registry")
    @classmethod
    def _registry(cls, value: str) -> str:
        value = value.strip().rstrip("/")
        if not value:
            return value
        if "@" in value.split("://", 1)[-1].split("/", 1)[0]:  # user[:password]@host
            raise ValueError("holds a credential in plain text (USER:PASSWORD@ before the "
                             "host); remove it and log in with your engine instead (gcloud "
                             "auth configure-docker, or podman/docker login)")
        if "://" in value:
            raise ValueError(f"no scheme, just HOST/PATH, e.g. {_EXAMPLE}")
        if "/" not in value:
            raise ValueError(f"add the repository path after the host, e.g. "
                             f"{_EXAMPLE}")
        if "@" in value or ":" in value.split("/", 1)[-1]:
            raise ValueError(f"a registry is HOST[:PORT]/PATH without tag or "
                             f"digest, e.g. {_EXAMPLE}")
        if not _REGISTRY_RE.match(value):
            raise ValueError(f"not a registry path: lowercase host (with a dot, "
                             "or localhost) and path components of letters, digits, '.', "
                             f"'_' or '-', e.g. {_EXAMPLE}")
        if value.rsplit("/", 1)[-1] in {f"gkeflow-{f}" for f in FLAVOURS}:
            raise ValueError(f"name the repository, not the image (drop "
                             f"/{value.rsplit('/', 1)[-1]})")
        return value

    @field_validator("tag")
    @classmethod
    def _tag(cls, value: str) -> str:
        if value and not _TAG_RE.match(value):
            raise ValueError("not an image tag: up to 128 letters, digits, "
                             "'_', '.' or '-', not starting with '.' or '-'")
        return value

    @model_validator(mode="after")
    def _paths(self, info: ValidationInfo):
        context = info.context if isinstance(info.context, dict) else {}
        base = context.get(BASE_DIR)
        self._base = Path(base) if base is not None else None
        if self.requirements:
            path = self.requirements_path
            if not path.is_file():
                problem = "is a directory" if path.is_dir() else "does not exist"
                raise ValueError(f"requirements: {path} {problem}; name a pip requirements "
                                 "file of extra packages")
        names: dict[str, str] = {}
        for index, entry in enumerate(self.include):
            name = _importable(self._resolve(entry), f"include.{index}")
            if name in names:
                raise ValueError(f"include.{index}: {entry!r} and {names[name]!r} are both "
                                 f"importable as {name!r}; keep one")
            names[name] = entry
        lock = self.lock_path.resolve()
        for package in _package_dirs():
            if lock == package or package in lock.parents:
                raise ValueError(f"lock: {lock} is inside the installed gkeflow package; "
                                 f"keep the lock next to gkeflow.yaml (default {DEFAULT_LOCK})")
        return self

    # ----------------------------------------------------------------- resolved values

    @property
    def base_dir(self) -> Path:
        """The directory relative paths start from: gkeflow.yaml's (else the current one)."""
        return self._base if self._base is not None else Path.cwd()

    def _resolve(self, value: str) -> Path:
        path = Path(value).expanduser()
        return path if path.is_absolute() else self.base_dir / path

    @property
    def registry_or_default(self) -> str:
        return self.registry or REGISTRY

    @property
    def tag_or_default(self) -> str:
        return self.tag or VERSION

    @property
    def lock_path(self) -> Path:
        return self._resolve(self.lock or DEFAULT_LOCK)

    @property
    def requirements_path(self) -> Path | None:
        return self._resolve(self.requirements) if self.requirements else None

    @property
    def include_paths(self) -> list[Path]:
        return [self._resolve(entry) for entry in self.include]

    def serving_reference(self) -> str:
        """The serving image built and pulled: ``REGISTRY/gkeflow-serving:TAG``."""
        return serving_reference(self.registry_or_default, self.tag_or_default)

    def references(self) -> dict[str, str]:
        """Flavour -> the tag reference built and pulled: ``REGISTRY/gkeflow-FLAVOUR:TAG``."""
        return {flavour: reference(flavour, self.registry_or_default, self.tag_or_default)
                for flavour in FLAVOURS}


@functools.cache
def _names_taken_in_images() -> dict[str, str]:
    """Import name -> what holds it in the images: Python's standard library and the
    packages of the images' locks (their import names as installed here)."""
    import importlib.metadata

    import gkeflow.images
    from gkeflow.pipelines.settings.requirement_locks import lock_path, normalise, read_pins

    images_dir = Path(gkeflow.images.__path__[0])
    locked: set[str] = set()
    for flavour in FLAVOURS:
        if lock_path(images_dir, flavour).is_file():
            locked |= set(read_pins(lock_path(images_dir, flavour)))
    taken = {name: "a module of Python's standard library" for name in sys.stdlib_module_names}
    for module, distributions in importlib.metadata.packages_distributions().items():
        held = [d for d in distributions if normalise(d) in locked]
        if held and module.isidentifier():
            taken.setdefault(module, f"the import name of the {held[0]} package")
    taken.update(gkeflow="the gkeflow package", tensorflow="TensorFlow's package")
    return taken


def link_trouble(root: Path) -> str:
    """What in the folder ``root`` stops a copy that follows symbolic links (as the image
    build copies images.include): a link looping back to a folder above it (or to itself),
    or a link to nothing; "" when there is none. Hidden entries and caches, which the copy
    leaves out, are not looked at."""

    def walk(folder: Path, chain: tuple[tuple[int, int], ...]) -> str:
        try:
            entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
        except OSError as exc:
            return f"{folder} cannot be read ({exc.strerror})"
        for entry in entries:
            if entry.name.startswith(".") or entry.name == "__pycache__":
                continue
            path = Path(entry.path)
            try:
                info = os.stat(path)  # follows links
            except OSError as exc:
                if not entry.is_symlink():
                    return f"{path} cannot be read ({exc.strerror})"
                if exc.errno == errno.ELOOP:
                    return f"{path} is a symbolic link loop"
                return f"{path} is a symbolic link to {os.readlink(path)}, which does not exist"
            if not stat.S_ISDIR(info.st_mode):
                continue
            if (info.st_dev, info.st_ino) in chain:
                return (f"{path} is a symbolic link loop: it points back to "
                        f"{os.path.realpath(path)}, a folder it is in")
            found = walk(path, (*chain, (info.st_dev, info.st_ino)))
            if found:
                return found
        return ""

    real = Path(os.path.realpath(root))
    above = tuple((info.st_dev, info.st_ino)
                  for info in (os.stat(folder) for folder in (real, *real.parents)))
    return walk(Path(root), above)


def _importable(path: Path, key: str) -> str:
    """The import name of ``path`` (a package directory or a ``.py`` module); raises
    ValueError naming ``key`` when it is neither or does not compile."""
    if not path.exists():
        raise ValueError(f"{key}: {path} does not exist")
    if path.is_dir():
        name = path.name
        if not (path / "__init__.py").is_file():
            raise ValueError(f"{key}: {path} is a directory without __init__.py; include a "
                             "package (add __init__.py) or its modules")
        trouble = link_trouble(path)
        if trouble:
            raise ValueError(f"{key}: {trouble}; the build copies what links point to, so "
                             "remove the link or point it at a file or folder outside it")
        sources = sorted(path.rglob("*.py"))
    elif path.suffix == ".py":
        name, sources = path.stem, [path]
    else:
        raise ValueError(f"{key}: {path} is neither a package directory nor a .py module")
    if not name.isidentifier() or keyword.iskeyword(name):
        raise ValueError(f"{key}: {path.name!r} cannot be imported: {name!r} is not a Python "
                         "identifier; rename it")
    taken = _names_taken_in_images()
    if name in taken:
        raise ValueError(f"{key}: {name!r} is also {taken[name]} in the images, which Python "
                         "would import instead of yours; rename it")
    for source in sources:
        try:
            compile(source.read_bytes(), str(source), "exec")
        except SyntaxError as exc:
            raise ValueError(f"{key}: {source}: line {exc.lineno}: {exc.msg}; it would fail "
                             "to import in every step") from None
    return name


# --------------------------------------------------------------------------- mapping


def image_map(images: ImagesConfig, lock: Mapping | None = None) -> dict[str, str]:
    """Declared reference (:data:`gkeflow.components.images.IMAGES`) -> the reference the
    compiled pipelines name: the configured registry and tag, pinned to the digest the lock
    file records for it (the tag reference when nothing was built)."""
    from gkeflow.pipelines.settings.image_lock import load_lock

    lock = load_lock(images.lock_path) if lock is None else lock
    mapping = {}
    for flavour, target in images.references().items():
        entry = lock.get(target)
        mapping[reference(flavour)] = (f"{repository(target)}@{entry.digest}" if entry
                                       else target)
    # The serving image (Vertex AI registration) the same way; unbuilt, the tag reference,
    # which registration refuses for a model no prebuilt container serves.
    serving = images.serving_reference()
    entry = lock.get(serving)
    mapping[SERVING_IMAGE] = f"{repository(serving)}@{entry.digest}" if entry else serving
    return mapping


def unbuilt(images: ImagesConfig, text: str, lock: Mapping | None = None) -> list[str]:
    """The configured images ``text`` (a compiled pipeline) names that were never built and
    pushed: one ``REFERENCE was ...`` per image."""
    from gkeflow.pipelines.settings.image_lock import load_lock

    lock = load_lock(images.lock_path) if lock is None else lock
    problems = []
    for target in images.references().values():
        if repository(target) + "@" not in text and repository(target) + ":" not in text:
            continue  # the pipeline does not run this image
        entry = lock.get(target)
        if entry is None:
            problems.append(f"{target} was never built")
        elif not entry.pushed:
            problems.append(f"{target} was built with --no-push, never pushed")
    if images.registry_or_default != REGISTRY:
        problems += [f"{declared} is still named (not mapped to {images.registry})"
                     for declared in IMAGES if declared in text]
    return problems


def describe_unbuilt(images: ImagesConfig, text: str) -> str:
    """One line naming the images ``text`` (a compiled pipeline) names that were never built
    and pushed for the configured registry, and the fix; "" when there are none."""
    problems = unbuilt(images, text)
    if not problems:
        return ""
    # the TPU image is built on request only (`images build` builds it by default when
    # gkeflow.yaml's compute gives a step a TPU, not for a --compute given elsewhere)
    tpu = images.references()[TPU]
    others = [p for p in problems if not p.startswith(f"{tpu} ")]
    build = " and ".join(
        (["`gkeflow images build`"] if others else [])
        + ([f"`gkeflow images build --flavour {TPU}`"] if len(others) < len(problems) else []))
    if images.registry:
        fix = f"run {build} (it pushes and records the digests)"
    else:
        fix = (f"set images.registry in gkeflow.yaml to a registry you can push to (e.g. "
               f"{_EXAMPLE}), then run {build}")
    return f"{'; '.join(problems)} (per {images.lock_path}); {fix}"


def require_built(images: ImagesConfig, text: str, where: str) -> None:
    """Raise :class:`ImagesNotBuilt` (one line with the fix) when ``text`` names images that
    were never built and pushed for the configured registry."""
    problem = describe_unbuilt(images, text)
    if problem:
        raise ImagesNotBuilt(f"refusing to {where}: {problem}")
