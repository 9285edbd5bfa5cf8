"""The images' hashed lock files, resolved from ``pyproject.toml`` and checked fresh.

Each image installs from one lock (``images/requirements-slim.lock``,
``images/requirements-cpu.lock``, ``images/requirements-gpu.lock``,
``images/requirements-tpu.lock``): every package pinned with its hashes for Python 3.11 on
linux x86_64, installed with ``pip install --require-hashes --no-deps``, so rebuilding a
release gives the same package versions.

The resolver's input is ``pyproject.toml``'s ``dependencies`` with TensorFlow swapped per
image (and XGBoost: ``xgboost-cpu``, in the GPU image ``xgboost`` with its CUDA kernels;
none in the slim image): ``tensorflow-cpu`` (same version range) in the CPU image, the
``gpu`` extra's ``tensorflow[and-cuda]`` in the GPU image (with the ``ray`` extra: a GKE Ray sweep's
head and trials run in it), ``tensorflow-cpu`` plus the ``tpu`` extra's
``jax[tpu]`` (JAX and the libtpu it names) in the TPU image (resolved for the TPU VM's
platform, manylinux_2_31: libtpu has no older wheels), and in the slim image (``gkeflow``) no
TensorFlow at all: :data:`TENSORFLOW_ONLY` (TensorFlow, TensorBoard and what only a
training step uses) is left out of its input. No image installs what only the ``gkeflow``
command uses on the user's machine (:data:`CLIENT_ONLY`, :data:`NOT_INSTALLED`).
``uv pip compile --generate-hashes`` resolves it; the existing lock is passed as the output
file, so uv keeps its pins unless ``pyproject.toml`` excludes them.

    python -m gkeflow.pipelines.targets.image_locks write  # make locks: re-resolve
    python -m gkeflow.pipelines.targets.image_locks check  # make check-locks: diff
"""

from __future__ import annotations

import difflib
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

from gkeflow.pipelines.settings.requirement_locks import lock_path, normalise, read_pins

FLAVOURS = ("slim", "cpu", "gpu", "tpu")
#: Direct dependencies the slim image leaves out: TensorFlow, TensorBoard, TensorFlow's
#: numeric types (ml-dtypes, held to a version that starts fast), NVML (read only while
#: training) and XGBoost (only train-model's gbdt uses it). Whatever only they require
#: drops out of its resolution with them.
TENSORFLOW_ONLY = ("tensorflow", "tensorboard", "ml-dtypes", "nvidia-ml-py",
                   "xgboost-cpu")
#: Direct dependencies no image installs: only the gkeflow command uses them (`gkeflow
#: prices refresh`, `gkeflow monitoring apply`), no step.
CLIENT_ONLY = ("google-cloud-billing", "google-cloud-monitoring")
PYTHON_VERSION = "3.11"
PYTHON_PLATFORM = "x86_64-manylinux_2_28"
#: Flavours resolved for another platform: libtpu publishes manylinux_2_31 wheels only (the
#: TPU VM images and the images' Debian bookworm base have glibc 2.31 or newer).
PLATFORMS = {"tpu": "x86_64-manylinux_2_31"}
#: The command the lock headers name (uv writes it instead of its own temporary paths).
COMPILE_COMMAND = "make locks"
#: Required by a dependency's metadata but never loaded by a step, so left out of every
#: image (each image's build imports what its steps load without them, and the image tests
#: run the compiled steps). libclang (61 MB): TensorFlow's binding for its C++ source tools.
#: google-genai: the Vertex AI SDK's generative AI part (images/prune.sh removes the SDK's
#: parts that need it); GitPython, gitdb, smmap: MLflow's optional git tags (the images
#: have no git; the MLflow client calls the steps make never import it); uvicorn: the
#: MLflow server; websockets: only google-genai uses it; pygments, markdown-it-py, mdurl:
#: rich's syntax, traceback and Markdown renderers, which neither the gkeflow CLI nor Keras
#: loads. databricks-sdk and fastapi stay: `import mlflow` needs them.
NOT_INSTALLED = ("libclang", "google-genai", "gitpython", "gitdb", "smmap", "uvicorn",
                 "websockets", "pygments", "markdown-it-py", "mdurl")


def not_installed(flavour: str) -> tuple[str, ...]:
    """The distributions the lock of ``flavour`` leaves out, whatever requires them."""
    if flavour not in FLAVOURS:
        raise LockError(f"unknown image flavour {flavour!r}; expected one of {FLAVOURS}")
    return NOT_INSTALLED


def left_out(flavour: str) -> tuple[str, ...]:
    """The distributions the image of ``flavour`` holds on purpose not: its lock's input
    drops them (:data:`CLIENT_ONLY`, :data:`TENSORFLOW_ONLY` for the slim image) or its lock
    never pins them (:data:`NOT_INSTALLED`). A dropped direct dependency that another
    package requires is still resolved in (its lock says so)."""
    dropped = CLIENT_ONLY + (TENSORFLOW_ONLY if flavour == "slim" else ())
    return tuple(dict.fromkeys(dropped + not_installed(flavour)))


class LockError(RuntimeError):
    """A lock cannot be produced or is stale; the message says what to run."""


def _tensorflow_for(flavour: str, project: dict) -> list[Requirement]:
    base = next(Requirement(r) for r in project["dependencies"]
                if normalise(Requirement(r).name) == "tensorflow")
    if flavour == "cpu":
        swapped = Requirement(str(base))
        swapped.name = "tensorflow-cpu"
        return [swapped]
    if flavour == "tpu":  # Keras on JAX on the chips; TensorFlow (CPU) feeds and exports
        tpu = [Requirement(r) for r in project.get("optional-dependencies", {}).get("tpu", [])]
        if not any(normalise(r.name) == "jax" and "tpu" in r.extras for r in tpu):
            raise LockError("pyproject.toml: the 'tpu' extra must name jax[tpu]")
        swapped = Requirement(str(base))
        swapped.name = "tensorflow-cpu"
        return [swapped, *tpu]
    gpu = [Requirement(r) for r in project.get("optional-dependencies", {}).get("gpu", [])]
    found = next((r for r in gpu if normalise(r.name) == "tensorflow"), None)
    if found is None:
        raise LockError("pyproject.toml: the 'gpu' extra must name tensorflow[and-cuda]")
    return [found]


def resolver_input(pyproject: Path, flavour: str) -> list[str]:
    """The requirement lines the lock of ``flavour`` is resolved from, in pyproject order."""
    if flavour not in FLAVOURS:
        raise LockError(f"unknown image flavour {flavour!r}; expected one of {FLAVOURS}")
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    lines = []
    for line in project["dependencies"]:
        requirement = Requirement(line)
        name = normalise(requirement.name)
        if name in CLIENT_ONLY or (flavour == "slim" and name in TENSORFLOW_ONLY):
            continue
        if normalise(requirement.name) == "tensorflow":
            lines += [str(r) for r in _tensorflow_for(flavour, project)]
            continue
        if name == "xgboost-cpu" and flavour == "gpu":  # the build with CUDA kernels
            requirement.name = "xgboost"
        lines.append(str(requirement))
    if flavour == "gpu":  # the trials of a GKE Ray sweep run Ray Tune in the GPU image
        lines += project.get("optional-dependencies", {}).get("ray", [])
    if flavour == "slim":
        # TensorFlow's dependencies bring these into the other locks; the slim image
        # needs them to build its source-only packages (build_requirements)
        lines += [name for name in BUILD_BACKEND if name not in direct_names_of(lines)]
    return lines


def direct_names_of(lines: list[str]) -> set[str]:
    """Normalised names of requirement lines."""
    return {normalise(Requirement(line).name) for line in lines}


def direct_names(pyproject: Path, flavour: str) -> set[str]:
    """Normalised names of the packages the lock of ``flavour`` must pin."""
    return {normalise(Requirement(line).name) for line in resolver_input(pyproject, flavour)}


#: The images' platform, for evaluating environment markers of requirement lines.
MARKER_ENVIRONMENT = {"python_version": PYTHON_VERSION, "python_full_version": "3.11.11",
                      "sys_platform": "linux", "platform_system": "Linux",
                      "os_name": "posix", "platform_machine": "x86_64",
                      "implementation_name": "cpython",
                      "platform_python_implementation": "CPython"}


def requirement_lines(text: str):
    """(line number, requirement) for each package line of a pip requirements file: options
    and comments skipped, continuation lines joined, per-line options (``--hash``) dropped."""
    number, pending, start = 0, "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = (pending + line).strip(), ""
        if not line or line.startswith("-"):
            continue
        yield start, re.split(r"\s+--?[A-Za-z]", line, maxsplit=1)[0].strip()


def pin_conflicts(text: str, lock: Path) -> list[tuple[int, str, str, str]]:
    """(line number, package, the user's requirement, locked version) for each requirement
    in ``text`` that the lock's version of that package does not satisfy. A line that is
    not a requirement, a direct URL and a line whose marker excludes the images are left to
    pip."""
    from packaging.requirements import InvalidRequirement
    from packaging.version import InvalidVersion, Version

    pins = read_pins(lock)
    found = []
    for number, line in requirement_lines(text):
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if requirement.url or (requirement.marker and not requirement.marker.evaluate(
                MARKER_ENVIRONMENT)):
            continue
        name = normalise(requirement.name)
        if name not in pins and name == "tensorflow":
            # the CPU and TPU images' TensorFlow
            name = "tensorflow-cpu" if "tensorflow-cpu" in pins else name
        if name not in pins or not requirement.specifier:
            continue
        try:
            locked = Version(pins[name][0])
        except InvalidVersion:
            continue
        if not requirement.specifier.contains(locked, prereleases=True):
            found.append((number, name, line, str(locked)))
    return found


def constraints(lock: Path) -> str:
    """``name==version`` lines (no hashes) that keep extra packages off the locked versions."""
    return "".join(f"{name}=={version}\n" for name, (version, _) in sorted(read_pins(lock).items()))


#: What builds the locked packages published only as source (kfp-server-api): installed
#: first, from the lock's own pins and hashes, and used with ``--no-build-isolation``.
BUILD_BACKEND = ("setuptools", "wheel")


def build_requirements(lock: Path) -> str:
    """The lock's pins of :data:`BUILD_BACKEND`, with their hashes, as a requirements file."""
    pins = read_pins(lock)
    missing = [name for name in BUILD_BACKEND if name not in pins]
    if missing:
        raise LockError(f"{lock} pins no {', '.join(missing)}, which build its source-only "
                        "packages; run: make locks")
    lines = []
    for name in BUILD_BACKEND:
        version, hashes = pins[name]
        lines.append(" \\\n    ".join([f"{name}=={version}",
                                         *(f"--hash=sha256:{h}" for h in hashes)]) + "\n")
    return "".join(lines)


def _uv() -> str:
    here = Path(sys.executable).parent / "uv"
    found = str(here) if here.exists() else shutil.which("uv")
    if not found:
        raise LockError("uv not found; install the dev extras: pip install -e '.[dev]'")
    return found


def compile_lock(pyproject: Path, flavour: str, output: Path) -> None:
    """Resolve the lock of ``flavour`` into ``output``, keeping pins already there."""
    workdir = output.parent
    source = workdir / f"requirements-{flavour}.in"
    source.write_text("\n".join(resolver_input(pyproject, flavour)) + "\n", encoding="utf-8")
    command = [
        _uv(), "pip", "compile", "--quiet", "--generate-hashes", "--no-config",
        "--python-version", PYTHON_VERSION,
        "--python-platform", PLATFORMS.get(flavour, PYTHON_PLATFORM),
        "--custom-compile-command", COMPILE_COMMAND, "--annotation-style", "line",
        "--index-url", "https://pypi.org/simple",
        *[arg for name in not_installed(flavour) for arg in ("--no-emit-package", name)],
        "--output-file", output.name, source.name,
    ]
    try:
        done = subprocess.run(command, cwd=workdir, capture_output=True, text=True, check=False)
    finally:
        source.unlink(missing_ok=True)
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        raise LockError(f"uv could not resolve the {flavour} lock: {tail}")


def write_locks(pyproject: Path, images_dir: Path) -> list[Path]:
    """Re-resolve every lock in place (``make locks``)."""
    written = []
    for flavour in FLAVOURS:
        target = lock_path(images_dir, flavour)
        with tempfile.TemporaryDirectory() as tmp:
            staged = Path(tmp) / target.name
            if target.exists():
                shutil.copyfile(target, staged)
            compile_lock(pyproject, flavour, staged)
            shutil.copyfile(staged, target)
        written.append(target)
    return written


def stale_locks(pyproject: Path, images_dir: Path) -> list[str]:
    """Unified diffs of each lock against a fresh resolution; empty when all are fresh."""
    diffs = []
    for flavour in FLAVOURS:
        target = lock_path(images_dir, flavour)
        if not target.exists():
            diffs.append(f"{target}: missing")
            continue
        with tempfile.TemporaryDirectory() as tmp:
            staged = Path(tmp) / target.name
            shutil.copyfile(target, staged)
            compile_lock(pyproject, flavour, staged)
            fresh = staged.read_text(encoding="utf-8").splitlines(keepends=True)
        current = target.read_text(encoding="utf-8").splitlines(keepends=True)
        if fresh != current:
            diffs.append("".join(difflib.unified_diff(
                current, fresh, str(target), f"{target} (resolved now)")))
    return diffs


def main(argv: list[str] | None = None) -> int:
    """``write`` or ``check`` the locks of the project in the current directory."""
    argv = sys.argv[1:] if argv is None else argv
    if argv not in (["write"], ["check"]):
        print("usage: python -m gkeflow.pipelines.targets.image_locks write|check", file=sys.stderr)
        return 2
    pyproject, images_dir = Path("pyproject.toml"), Path("images")
    try:
        if argv == ["write"]:
            for path in write_locks(pyproject, images_dir):
                print(f"wrote {path}")
            return 0
        diffs = stale_locks(pyproject, images_dir)
    except LockError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if diffs:
        sys.stdout.write("\n".join(diffs))
        print("error: the image locks are stale against pyproject.toml; run: make locks",
              file=sys.stderr)
        return 1
    print("image locks are fresh")
    return 0


if __name__ == "__main__":
    sys.exit(main())
