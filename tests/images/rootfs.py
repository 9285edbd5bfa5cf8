"""Run a command inside a built image without an OCI runtime.

``podman run`` is refused on machines that forbid its setrlimit (CI sandboxes), so a step
runs the way docs/image-recipes.md (the image test) describes: ``podman create`` a
container of the image, ``podman mount`` its root file system, bind-mount /proc, /dev and
the given host folders into it, and ``chroot`` as the image's user with the image's
environment and working directory. Each call gets a fresh container, as each pipeline step
gets a fresh pod.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

USER = "10001:10001"


def podman_can_build() -> str:
    """Empty when podman is here and can build images; else the reason it cannot."""
    if not shutil.which("podman"):
        return "podman is not installed (apt-get install podman mmdebstrap)"
    for tool in ("chroot", "mount", "umount"):
        if not shutil.which(tool):
            return f"{tool} is not installed"
    probe = subprocess.run(["podman", "info", "--format", "{{.Store.GraphRoot}}"],
                           capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"podman cannot run here: {probe.stderr.strip()[:200]}"
    return ""


def _podman(*args: str) -> str:
    done = subprocess.run(["podman", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args)} failed: {done.stderr.strip()[-500:]}")
    return done.stdout.strip()


@dataclass(frozen=True)
class ImageConfig:
    """What a container runtime takes from the image: environment, working directory, user."""

    env: tuple[str, ...]
    workdir: str
    user: str

    @classmethod
    def of(cls, image: str) -> ImageConfig:
        config = json.loads(_podman("image", "inspect", image))[0]["Config"]
        return cls(tuple(config.get("Env") or ()), config.get("WorkingDir") or "/",
                   config.get("User") or USER)


@contextmanager
def image_root(image: str) -> Iterator[Path]:
    """The image's root file system, mounted read-only for inspection."""
    root = Path(_podman("image", "mount", image))
    try:
        yield root
    finally:
        _podman("image", "umount", image)


def image_size(image: str) -> int:
    """The image's uncompressed size in bytes, as podman reports it."""
    return int(json.loads(_podman("image", "inspect", image))[0]["Size"])


def _home(root: Path, user: str) -> str:
    """The user's home from the image's /etc/passwd, as container runtimes set HOME."""
    uid = user.split(":")[0]
    for line in (root / "etc" / "passwd").read_text(encoding="utf-8").splitlines():
        fields = line.split(":")
        if len(fields) > 5 and uid in (fields[0], fields[2]):
            return fields[5]
    return "/"


def run_in_image(image: str, argv: Sequence[str], binds: dict[str, Path],
                 timeout: float = 900) -> subprocess.CompletedProcess:
    """Run ``argv`` inside ``image`` as its user, with ``binds`` (path in the image -> host
    folder) mounted; returns the finished process (stdout and stderr together)."""
    config = ImageConfig.of(image)
    container = _podman("create", image, "true")
    with ExitStack() as stack:
        stack.callback(_podman, "rm", "--force", container)
        root = Path(_podman("mount", container))
        stack.callback(_podman, "umount", container)
        mounts = {"/proc": Path("/proc"), "/dev": Path("/dev"), **binds}
        for inside, host in mounts.items():
            target = root / inside.lstrip("/")
            target.mkdir(parents=True, exist_ok=True)
            subprocess.run(["mount", "--bind", str(host), str(target)], check=True)
            stack.callback(subprocess.run, ["umount", "--lazy", str(target)], check=False)
        env = list(config.env)
        if not any(e.startswith("HOME=") for e in env):
            env.append(f"HOME={_home(root, config.user)}")
        command = ["chroot", f"--userspec={config.user}", str(root),
                   "/usr/bin/env", "-i", f"--chdir={config.workdir}", *env, *argv]
        return subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=timeout, check=False)
