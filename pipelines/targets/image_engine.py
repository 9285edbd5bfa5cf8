"""Running a builder (podman, docker, gcloud) for :mod:`gkeflow.pipelines.targets.image_build`:
its progress echoed, a failure quoted in one line, a base image that cannot be pulled named
with the fix, SIGTERM/SIGINT turned into :class:`Interrupted` (the builder stopped, the
build context removed on the way out), and the previous build of an image pruned by
gkeflow's own label.
"""

from __future__ import annotations

import collections
import contextlib
import re
import signal
import subprocess
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

BUILDERS = ("podman", "docker", "cloud-build")
#: Lines of a failed step's log quoted in the error.
LOG_TAIL = 12
#: Progress lines of podman/buildah ("[1/2] STEP 3/5: RUN ..."), docker and BuildKit.
_PROGRESS_RE = re.compile(r"^(\[\d+/\d+\] )?(STEP \d|Step \d|COMMIT|Successfully tagged|"
                          r"#\d+ \[)")


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


def run(command: list[str], what: str, echo: Callable[[str], None],
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
        stop(process)
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


def unpullable_base(failure: StepFailed, dockerfile: Path, builder: str,
                    stand_in_script: Path) -> str:
    """One line naming the base image a failed build could not pull and what to do (among
    it, ``stand_in_script``: images/container-base.sh), or "" when the failure was something
    else."""
    bases = base_images(dockerfile)
    for line in reversed(failure.log):
        if not _PULL_FAILED_RE.search(line):
            continue
        base = next((b for b in bases if b in line or _qualified(b) in line), None)
        if base is None:
            continue
        stand_in = f"bash {stand_in_script} {_qualified(base)}"
        return (f"{builder} build cannot pull its base image {base} ({line.strip()[-160:]}); "
                f"let {builder} reach {_qualified(base).split('/', 1)[0]} or a mirror of it, "
                f"or where nothing can be pulled tag a local stand-in with `{stand_in}` "
                f"(podman; see {BASE_RECIPE}), or build with --builder cloud-build")
    return ""


def stop(process: subprocess.Popen, grace_s: float = 10.0) -> None:
    """Terminate ``process``, then kill it if it outlives ``grace_s``."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


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
        run([engine, "image", "prune", "--force", "--filter",
             f"label={IMAGE_LABEL}={found.group(1)}"], f"{builder} image prune", echo)
    except ImageBuildError as exc:  # the image is built: a leftover is no reason to fail
        echo(f"note: the previous {found.group(1)} images were not removed: {exc}")
