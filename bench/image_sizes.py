"""Where a built image's bytes go, and the smallest image that could run the training step.

    .venv/bin/python bench/image_sizes.py [IMAGE [BASE]]
        # defaults: localhost/gkeflow-cpu:image-test (make image-test builds it) and the
        # FROM of images/cpu.Dockerfile; needs podman (root: podman image mount)
    .venv/bin/python bench/image_sizes.py --compare [SLIM CPU]
        # the slim and CPU images side by side (defaults: the image tests' tags), uncompressed
        # and as a node pulls them, and the slim image's share of the CPU image

Every file of the image's Python environment is attributed to the installed distribution
whose RECORD lists it (a module's bytecode to the distribution of its source). The floor is
the base image plus the requirement closure (Requires-Dist, markers evaluated for the
image's Python 3.11 on linux x86_64) of the distributions a training pipeline step cannot
do without: TensorFlow to train, pandas and pyarrow to prepare the data, kfp to run as a
step. No image that runs that step can be smaller, whatever else is removed.

Prints the image, its base, what a node pulls (its layers gzip-compressed, as a registry
stores them), the 15 largest distributions, and ``floor_gb`` with its ratio to the goal
(``floor_to_goal``) and to the image (``floor_to_image``), with and without the bytecode
the image carries.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement

from gkeflow.pipelines.targets.image_locks import normalise

IMAGE = "localhost/gkeflow-cpu:image-test"
SLIM_IMAGE = "localhost/gkeflow:image-test"
#: The slim image's goal: at most this share of the CPU image (issue 35).
SLIM_GOAL = 0.45
SITE = "opt/gkeflow/lib/python3.11/site-packages"
GOAL_BYTES = 1_200_000_000
#: What the training step needs: train (TensorFlow), prepare (pandas, pyarrow), run (kfp).
STEP_NEEDS = ("tensorflow", "pandas", "pyarrow", "kfp")
#: The image's interpreter and platform, for Requires-Dist markers.
IMAGE_ENVIRONMENT = {**default_environment(), "python_version": "3.11",
                     "python_full_version": "3.11.11", "sys_platform": "linux",
                     "platform_system": "Linux", "platform_machine": "x86_64",
                     "implementation_name": "cpython", "os_name": "posix"}


def _metadata(dist_info: Path) -> tuple[str, list[str]]:
    name, requires = "", []
    for line in (dist_info / "METADATA").read_text(encoding="utf-8").splitlines():
        if not line.strip():
            break  # the headers end at the first blank line; the description follows
        key, _, value = line.partition(":")
        if key == "Name":
            name = value.strip()
        elif key == "Requires-Dist":
            requires.append(value.strip())
    return normalise(name), requires


def distribution_sizes(site: Path) -> tuple[dict[str, int], dict[str, int], int]:
    """Bytes per installed distribution under ``site``, the part of them that is bytecode,
    and the bytes no RECORD lists."""
    owned: dict[Path, str] = {}
    for dist_info in site.glob("*.dist-info"):
        name, _ = _metadata(dist_info)
        with (dist_info / "RECORD").open(encoding="utf-8", newline="") as record:
            for row in csv.reader(record):
                if not row:
                    continue
                path = Path(row[0])
                if path.parts[0] == "..":
                    continue  # scripts in bin/: outside site-packages
                owned[path] = name
                if path.suffix == ".py":
                    cache = path.parent / "__pycache__"
                    for pyc in (site / cache).glob(f"{path.stem}.*.pyc"):
                        owned[pyc.relative_to(site)] = name
    sizes: dict[str, int] = {}
    bytecode: dict[str, int] = {}
    unowned = 0
    for file in site.rglob("*"):
        if file.is_symlink() or not file.is_file():
            continue
        size = file.stat().st_size
        owner = owned.get(file.relative_to(site))
        if owner is None:
            unowned += size
        else:
            sizes[owner] = sizes.get(owner, 0) + size
            if file.suffix == ".pyc":
                bytecode[owner] = bytecode.get(owner, 0) + size
    return sizes, bytecode, unowned


def requirement_closure(site: Path, roots: Iterable[str]) -> set[str]:
    """``roots`` and every installed distribution they require, transitively."""
    requires = {}
    for dist_info in site.glob("*.dist-info"):
        name, reqs = _metadata(dist_info)
        requires[name] = reqs
    seen: set[str] = set()
    pending = [normalise(r) for r in roots]
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        if name not in requires:
            raise SystemExit(f"{name} is not installed in the image")
        seen.add(name)
        for text in requires[name]:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({**IMAGE_ENVIRONMENT, "extra": ""}):
                if normalise(req.name) in requires:
                    pending.append(normalise(req.name))
    return seen


def _podman(*args: str) -> str:
    done = subprocess.run(["podman", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"podman {' '.join(args)}: {done.stderr.strip()[-300:]}")
    return done.stdout.strip()


def _image_bytes(image: str) -> int:
    return int(json.loads(_podman("image", "inspect", image))[0]["Size"])


def _pulled_bytes(image: str) -> int:
    """The image's layers as a registry stores them (gzip), from a copy in a directory."""
    with tempfile.TemporaryDirectory() as tmp:
        _podman("push", "--quiet", "--compress", "--compression-format", "gzip", image,
                f"dir:{tmp}/image")
        manifest = json.loads(Path(tmp, "image", "manifest.json").read_text())
    return sum(layer["size"] for layer in manifest["layers"])


def _base_of_dockerfile() -> str:
    dockerfile = Path(__file__).resolve().parents[1] / "images" / "cpu.Dockerfile"
    froms = [line.split()[1] for line in dockerfile.read_text().splitlines()
             if line.upper().startswith("FROM ")]
    return froms[-1]


def share_line(slim: str, slim_bytes: int, slim_pulled: int, cpu: str, cpu_bytes: int,
               cpu_pulled: int) -> str:
    """One line: both images' sizes and the slim image's share of the CPU image."""
    gb = 1e9
    share = slim_bytes / cpu_bytes
    verdict = "meets" if share <= SLIM_GOAL else "misses"
    return (f"slim {slim}: {slim_bytes / gb:.2f} GB, a node pulls {slim_pulled / gb:.2f} GB; "
            f"CPU {cpu}: {cpu_bytes / gb:.2f} GB, a node pulls {cpu_pulled / gb:.2f} GB; "
            f"slim_to_cpu={share:.3f} (pulled {slim_pulled / cpu_pulled:.3f}), {verdict} the "
            f"goal of <= {SLIM_GOAL:.2f}")


def compare(argv: list[str]) -> None:
    slim, cpu = (argv + [SLIM_IMAGE, IMAGE][len(argv):])[:2]
    print(share_line(slim, _image_bytes(slim), _pulled_bytes(slim),
                     cpu, _image_bytes(cpu), _pulled_bytes(cpu)))


def main(argv: list[str]) -> None:
    if argv[:1] == ["--compare"]:
        compare(argv[1:])
        return
    image = argv[0] if argv else IMAGE
    base = argv[1] if len(argv) > 1 else _base_of_dockerfile()
    image_bytes, base_bytes = _image_bytes(image), _image_bytes(base)
    pulled = _pulled_bytes(image)
    root = Path(_podman("image", "mount", image))
    try:
        site = root / SITE
        sizes, bytecode, unowned = distribution_sizes(site)
        # the CPU and TPU images have TensorFlow as tensorflow-cpu, the GPU image as
        # tensorflow
        kind = next((k for k in ("cpu", "tpu") if list(site.glob(f"tensorflow_{k}-*.dist-info"))),
                    "")
        needs = [f"{name}-{kind}" if name == "tensorflow" and kind else name
                 for name in STEP_NEEDS]
        if not list(site.glob("tensorflow*.dist-info")):  # the slim image: no TensorFlow
            needs = [name for name in needs if name != "tensorflow"]
        floor_dists = requirement_closure(site, needs)
    finally:
        _podman("image", "umount", image)
    gb = 1e9
    print(f"image {image}: {image_bytes / gb:.2f} GB; base {base}: {base_bytes / gb:.2f} GB; "
          f"Python environment {(sum(sizes.values()) + unowned) / gb:.2f} GB; a node pulls "
          f"{pulled / gb:.2f} GB (pulled_to_image={pulled / image_bytes:.2f})")
    for name, size in sorted(sizes.items(), key=lambda item: -item[1])[:15]:
        print(f"  {name:32} {size / 1e6:7.1f} MB")
    floor = base_bytes + sum(sizes.get(name, 0) for name in floor_dists)
    floor_sources = floor - sum(bytecode.get(name, 0) for name in floor_dists)
    print(f"floor ({' + '.join(needs)} and their {len(floor_dists) - len(needs)} "
          f"requirements, on the base): floor_gb={floor / gb:.2f} "
          f"floor_to_goal={floor / GOAL_BYTES:.2f} floor_to_image={floor / image_bytes:.2f}")
    print(f"the same without bytecode: floor_gb={floor_sources / gb:.2f} "
          f"floor_to_goal={floor_sources / GOAL_BYTES:.2f}; the base's share: "
          f"{base_bytes / floor_sources:.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
