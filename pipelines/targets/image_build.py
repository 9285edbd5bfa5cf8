"""Build the suite's CPU and GPU images, with the user's packages and code, into a registry.

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
told not to, and returns the image's digest.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import hashlib
import importlib
import importlib.metadata
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path

from gkeflow.components.images import VERSION
from gkeflow.pipelines.images_config import link_trouble
from gkeflow.pipelines.targets import image_locks

FLAVOURS = ("cpu", "gpu")
BUILDERS = ("podman", "docker", "cloud-build")
#: The packages the wheel of the installed suite carries.
PACKAGES = ("gkeflow.components", "gkeflow.pipelines", "gkeflow.images")
#: Lines of a failed step's log quoted in the error.
LOG_TAIL = 12

_DIGEST_RE = re.compile(r"(?<![0-9a-f])sha256:[0-9a-f]{64}(?![0-9a-f])")
#: Progress lines of podman/buildah ("[1/2] STEP 3/5: RUN ..."), docker and BuildKit.
_PROGRESS_RE = re.compile(r"^(\[\d+/\d+\] )?(STEP \d|Step \d|COMMIT|Successfully tagged|"
                          r"#\d+ \[)")
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
_SKIP_DIRS = {"__pycache__", ".pytest_cache", ".ruff_cache"}


class ImageBuildError(RuntimeError):
    """An image cannot be built or pushed; the message is one line naming the problem and fix."""


class StepFailed(ImageBuildError):
    """A builder command exited non-zero; ``log`` holds the last lines of its output."""

    def __init__(self, message: str, log: Sequence[str]):
        super().__init__(message)
        self.log = list(log)


class Interrupted(BaseException):
    """SIGTERM or SIGINT arrived during a build (a BaseException, so that no ``except
    Exception`` on the way swallows it); ``signum`` is the signal."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def interruptible():
    """While the block runs, SIGTERM and SIGINT raise :class:`Interrupted` in the main
    thread: the running builder is stopped and the build context removed on the way out
    (the default SIGTERM would end the process and leave both behind)."""

    def interrupt(signum, _frame):
        raise Interrupted(signum)

    previous = {signum: signal.signal(signum, interrupt)
                for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


#: What podman/buildah, docker and BuildKit print when a FROM image cannot be pulled.
_PULL_FAILED_RE = re.compile(
    r"initializing source|pinging container registry|failed to resolve source metadata|"
    r"pull access denied|manifest unknown|error pulling image|unable to copy from source|"
    r"short-name resolution|toomanyrequests|Error response from daemon: (Get|Head) ",
    re.IGNORECASE)
#: The recipe for machines that cannot pull the base image.
BASE_RECIPE = "docs/image-recipes.md#without-a-pullable-base-image"


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


def _check_requirements(requirements: Path) -> str:
    if not requirements.is_file():
        raise ImageBuildError(f"images.requirements: {requirements} does not exist; "
                              "point it at a pip requirements file")
    try:
        text = requirements.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ImageBuildError(f"{requirements}: not UTF-8 text (byte {exc.start}); save it as "
                              "UTF-8") from exc
    for number, line in enumerate(text.splitlines(), 1):
        shown = plain_credential(line.split(" #", 1)[0].strip())
        if shown:
            raise ImageBuildError(
                f"{requirements}:{number}: {shown} holds a credential in plain text, which "
                "would stay in an image layer; write ${VARIABLE} in its place (e.g. https://"
                "__token__:${PYPI_TOKEN}@host/simple) and set that variable in the "
                "environment: it is passed to the build as a secret")
        problem = _local_reference(line.split(" #", 1)[0].strip())
        if problem:
            raise ImageBuildError(
                f"{requirements}:{number}: {problem} is not supported in images.requirements "
                "(only that file is copied into the build, not what it points to); list "
                "packages from an index, or put your own code in images.include")
    return text


#: The user information of a URL (``scheme://USERINFO@host``).
_USERINFO_RE = re.compile(r"\b([a-z][a-z0-9+.-]*)://([^/\s?#]*)@([^/\s?#]*)", re.IGNORECASE)
#: pip expands ``${NAME}`` (upper case, digits, ``_``) in requirements files.
_VARIABLE_RE = re.compile(r"\$\{([A-Z0-9_]+)\}")
#: The build secret carrying the variables a requirements file names.
PIP_SECRET = "gkeflow-pip-env"


def plain_credential(line: str) -> str:
    """The URL of ``line`` that carries a credential written out (shown as
    ``scheme://***@host``), or "": a password, or a user name standing alone (a token),
    that is not a ``${VARIABLE}``; ``git@`` (SSH) holds no secret."""
    if line.startswith("#"):
        return ""
    for scheme, userinfo, host in _USERINFO_RE.findall(line):
        user, _, password = userinfo.partition(":")
        secret = password if password else ("" if user == "git" else user)
        if secret and not _VARIABLE_RE.fullmatch(secret):
            return f"{scheme}://***@{host}"
    return ""


def secret_variables(text: str) -> list[str]:
    """The ``${NAME}`` variables the package lines of a requirements file name, in order."""
    names: list[str] = []
    for line in text.splitlines():
        if not line.lstrip().startswith("#"):
            names += [n for n in _VARIABLE_RE.findall(line.split(" #", 1)[0]) if n not in names]
    return names


def write_secret(path: Path, names: Sequence[str], environ=None) -> list[str]:
    """Write ``export NAME='value'`` lines for ``names`` (from the environment) into
    ``path``, readable by the owner only; returns the values (to hide from logs). Raises
    :class:`ImageBuildError` naming a variable that is not set."""
    environ = os.environ if environ is None else environ
    missing = [name for name in names if not environ.get(name)]
    if missing:
        raise ImageBuildError(f"images.requirements names ${{{missing[0]}}}, which is not set; "
                              f"export {missing[0]} before `gkeflow images build` (it is "
                              "passed to the build as a secret, never into a layer)")
    path.touch(mode=0o600)
    path.chmod(0o600)
    quoted = {name: environ[name].replace("'", "'\\''") for name in names}
    path.write_text("".join(f"export {name}='{value}'\n" for name, value in quoted.items()),
                    encoding="utf-8")
    return [environ[name] for name in names]


#: Options that name other files or folders on this machine.
_FILE_OPTIONS = re.compile(r"^(-r|-c|-e|-f|--requirement|--constraint|--editable|"
                           r"--find-links)(?:\s*=?\s*|(?=\S))(.*)$")


def _local_reference(line: str) -> str:
    """What in a requirements line points at this machine's files ("" when nothing)."""
    if not line or line.startswith("#"):
        return ""
    option = _FILE_OPTIONS.match(line)
    if option:
        target = option.group(2)
        if option.group(1) in ("-f", "--find-links") and re.match(r"^https?://", target):
            return ""  # a remote package index page
        return f"{option.group(1)} {target}".strip()
    if line.startswith(("./", "../", "/", "~", "file:")) or re.match(r"^[A-Za-z]:\\", line):
        return f"the local path {line.split()[0]}"
    return ""


def check_pins(requirements: Path, flavours: Sequence[str]) -> None:
    """Refuse, in one line, a requirement in ``requirements`` that the ``flavours`` images'
    locks do not satisfy (pip would find it only minutes into the build)."""
    text = _check_requirements(Path(requirements))
    for flavour in flavours:
        lock = image_locks.lock_path(images_dir(), flavour)
        if not lock.is_file():
            continue  # assemble_context names the missing lock
        for number, name, line, locked in image_locks.pin_conflicts(text, lock)[:1]:
            raise ImageBuildError(
                f"{requirements}:{number}: {line} conflicts with the {flavour} image's locked "
                f"{name} {locked}; allow {locked} or drop the pin (the images keep the "
                "lock's versions)")


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
        flavour: ``cpu`` or ``gpu``.
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
    extra = _check_requirements(Path(requirements)) if requirements else ""
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


def _run(command: list[str], what: str, echo: Callable[[str], None],
         cwd: Path | None = None, hide: Sequence[str] = (),
         env: dict[str, str] | None = None) -> str:
    """Run ``command``, echo its step lines, return its standard output (what is parsed:
    notices and warnings on standard error never mix into it); one-line error on failure,
    quoting the end of both streams. Any of ``hide`` (secret values) shows as ``***``."""
    tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL)
    lines: list[str] = []
    lock = threading.Lock()
    try:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, errors="replace")
    except FileNotFoundError as exc:
        raise ImageBuildError(f"{command[0]} not found; install it or pick another --builder "
                              f"({', '.join(BUILDERS)})") from exc

    def follow(stream, kept: list[str] | None) -> None:
        for raw in stream:
            line = raw.rstrip()
            for value in hide:
                line = line.replace(value, "***")
            with lock:
                tail.append(line)
            if kept is not None:
                kept.append(line)
            if _PROGRESS_RE.match(line):
                echo(f"  {line[:160]}")

    errors = threading.Thread(target=follow, args=(process.stderr, None), daemon=True)
    errors.start()
    try:
        follow(process.stdout, lines)
        errors.join()
        process.wait()
    except BaseException:  # interrupted: stop the builder before its context is removed
        _stop(process)
        raise
    if process.returncode != 0:
        shown = [line.strip() for line in tail if line.strip()]
        quoted = " | ".join([*(line[:200] for line in shown[:-1]), *shown[-1:]])
        raise StepFailed(f"{what} failed (exit {process.returncode}): {quoted}", shown)
    return "\n".join(lines)


def base_images(dockerfile: Path) -> list[str]:
    """The images a Dockerfile's FROM lines pull (earlier stages of the file left out)."""
    bases: list[str] = []
    stages: set[str] = set()
    for line in dockerfile.read_text(encoding="utf-8").splitlines():
        words = line.split()
        if len(words) < 2 or words[0].upper() != "FROM":
            continue
        words = [w for w in words[1:] if not w.startswith("--")]
        if words and words[0].lower() not in stages and words[0] not in bases:
            bases.append(words[0])
        if len(words) == 3 and words[1].upper() == "AS":
            stages.add(words[2].lower())
    return bases


def _qualified(image: str) -> str:
    """``python:3.11`` -> ``docker.io/library/python:3.11`` (what engines pull)."""
    first = image.split("/", 1)[0]
    if "/" in image and ("." in first or ":" in first or first == "localhost"):
        return image
    return f"docker.io/{image}" if "/" in image else f"docker.io/library/{image}"


def unpullable_base(failure: StepFailed, dockerfile: Path, builder: str) -> str:
    """One line naming the base image a failed build could not pull and what to do, or ""
    when the failure was something else."""
    bases = base_images(dockerfile)
    for line in reversed(failure.log):
        if not _PULL_FAILED_RE.search(line):
            continue
        base = next((b for b in bases if b in line or _qualified(b) in line), None)
        if base is None:
            continue
        stand_in = f"bash {images_dir() / 'container-base.sh'} {_qualified(base)}"
        return (f"{builder} build cannot pull its base image {base} ({line.strip()[-160:]}); "
                f"let {builder} reach {_qualified(base).split('/', 1)[0]} or a mirror of it, "
                f"or where nothing can be pulled tag a local stand-in with `{stand_in}` "
                f"(podman; see {BASE_RECIPE}), or build with --builder cloud-build")
    return ""


def _stop(process: subprocess.Popen, grace_s: float = 10.0) -> None:
    """Terminate ``process``, then kill it if it outlives ``grace_s``."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _json(text: str, what: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ImageBuildError(f"{what} printed no JSON: {text.strip()[:200]!r}") from exc


def _digest(text: str, what: str) -> str:
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
               "--secret", f"id={PIP_SECRET},src={secret}"]
    if builder == "podman":
        # No OCI runtime needed: works as root in containers and CI runners.
        command += ["--isolation=chroot", "--layers"]
    try:
        # docker: BuildKit, which takes --secret (the legacy builder does not)
        env = {**os.environ, "DOCKER_BUILDKIT": "1"} if builder == "docker" else None
        _run(command + [str(context)], f"{builder} build of {reference}", echo, hide=hide,
             env=env)
    except StepFailed as failure:
        problem = unpullable_base(failure, context / "Dockerfile", builder)
        if problem:
            raise ImageBuildError(problem) from failure
        raise
    prune_previous(engine, builder, context / "Dockerfile", echo)
    if builder == "podman":
        if not push:
            out = _run([engine, "image", "inspect", "--format", "{{.Digest}}", reference],
                       "podman image inspect", echo)
            return _digest(out, "podman image inspect")
        digest_file = context / "pushed.digest"
        echo(f"pushing {reference}")
        _run([engine, "push", "--digestfile", str(digest_file), reference],
             f"podman push {reference}", echo)
        return _digest(digest_file.read_text(encoding="utf-8"), "podman push")
    if not push:
        out = _run([engine, "image", "inspect", "--format", "{{.Id}}", reference],
                   "docker image inspect", echo)
        return _digest(out, "docker image inspect")
    echo(f"pushing {reference}")
    _run([engine, "push", reference], f"docker push {reference}", echo)
    out = _run([engine, "image", "inspect", "--format", "{{json .RepoDigests}}", reference],
               "docker image inspect", echo)
    repository = reference.rsplit(":", 1)[0] if ":" in reference.rsplit("/", 1)[-1] else reference
    for entry in _json(out or "[]", "docker image inspect") or []:
        if isinstance(entry, str) and entry.startswith(f"{repository}@"):
            return _digest(entry, "docker push")
    raise ImageBuildError(f"docker pushed {reference} but reported no digest for it; "
                          f"check with: docker image inspect {reference}")


#: The label the Dockerfiles' final stage sets: ``io.gkeflow.image=gkeflow-<flavour>``.
IMAGE_LABEL = "io.gkeflow.image"


def prune_previous(engine: str, builder: str, dockerfile: Path,
                   echo: Callable[[str], None]) -> None:
    """Remove the dangling images the Dockerfile's label marks: earlier builds of this image
    whose tag moved to the new one (GBs each). Only images carrying gkeflow's label, and
    only untagged ones no container uses, are removed; the cached stages stay."""
    found = re.search(rf"^LABEL\s+{re.escape(IMAGE_LABEL)}=(\S+)\s*$",
                      dockerfile.read_text(encoding="utf-8"), flags=re.MULTILINE)
    if not found:
        return
    try:
        _run([engine, "image", "prune", "--force", "--filter",
              f"label={IMAGE_LABEL}={found.group(1)}"], f"{builder} image prune", echo)
    except ImageBuildError as exc:  # the image is built: a leftover is no reason to fail
        echo(f"note: the previous {found.group(1)} images were not removed: {exc}")


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
    printed = _run([engine, "builds", "submit", "--config", str(config), "--async",
                    "--format=value(id)", *scope, str(context)],
                   "gcloud builds submit", echo).split()
    if not printed:
        raise ImageBuildError("gcloud builds submit printed no build id; see `gcloud builds "
                              "list` for the build it may have started")
    build_id = printed[-1]
    echo(f"Cloud Build {build_id}: streaming its log")
    subprocess.run([engine, "builds", "log", "--stream", build_id, *scope], check=False)
    described = _run([engine, "builds", "describe", build_id, "--format=json", *scope],
                     f"gcloud builds describe {build_id}", echo)
    build = _json(described, f"gcloud builds describe {build_id}")
    if build.get("status") != "SUCCESS":
        raise ImageBuildError(f"Cloud Build {build_id} ended {build.get('status')}; see: "
                              f"gcloud builds log {build_id}")
    for image in (build.get("results") or {}).get("images") or []:
        if image.get("name") == reference:
            return _digest(image.get("digest", ""), f"Cloud Build {build_id}")
    raise ImageBuildError(f"Cloud Build {build_id} did not report a digest for {reference}")


def build_image(flavour: str, reference: str, requirements: Path | None,
                includes: Sequence[Path], builder: str = "podman", push: bool = True,
                project: str | None = None, echo: Callable[[str], None] = print) -> str:
    """Build the ``flavour`` image as ``reference`` and push it unless ``push`` is False.

    Args:
        flavour: ``cpu`` or ``gpu``.
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
        assemble_context(context, flavour, requirements, includes)
        names = secret_variables((context / "user" / "requirements.txt").read_text("utf-8"))
        if names and builder == "cloud-build":
            raise ImageBuildError(
                f"images.requirements names ${{{names[0]}}}: Cloud Build cannot receive it "
                "from this machine as a build secret; build with --builder podman or docker")
        secret = Path(tmp) / PIP_SECRET  # outside the context: never sent as a file of it
        hide = write_secret(secret, names)
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
