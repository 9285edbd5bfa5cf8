"""The images' Dockerfiles, read statically: installs only from the hashed lock and the
suite's wheel, nothing resolved or fetched at run time, build tools kept out of the final
stage, a non-root user, and an import pass that fails the build rather than a run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILES = [REPO / "images" / f"{flavour}.Dockerfile" for flavour in ("cpu", "gpu")]


def _stages(dockerfile: Path) -> list[str]:
    """The stages' instructions, comments dropped and continuation lines joined."""
    lines = [line for line in dockerfile.read_text().splitlines()
             if not line.lstrip().startswith("#")]
    text = re.sub(r"[ \t]+", " ", re.sub(r"\\\n\s*", " ", "\n".join(lines)))
    return ["FROM " + stage for stage in re.split(r"^FROM ", text, flags=re.MULTILINE)[1:]]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_locked_stage_installs_the_hashed_lock_without_resolving(dockerfile):
    locked, final = _stages(dockerfile)
    assert locked.startswith("FROM python:3.11.11-slim-bookworm AS locked")
    assert "COPY requirements.lock build.lock prune.sh /tmp/" in locked
    installs = re.findall(r"pip --python /opt/gkeflow/bin/python install ([^&\n]*)", locked)
    # the build backend first, from the lock's hashes; then the lock, building its source-only
    # packages with that backend instead of one fetched unpinned into an isolated build
    assert [i.strip() for i in installs] == [
        "--require-hashes --no-deps --no-compile -r /tmp/build.lock",
        "--require-hashes --no-deps --no-compile --no-build-isolation -r /tmp/requirements.lock"]
    assert "venv --without-pip /opt/gkeflow" in locked
    assert 'sh /tmp/prune.sh "$site"' in locked
    assert final.startswith("FROM python:3.11.11-slim-bookworm\n")


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_final_stage_adds_only_the_suite_and_the_users_code(dockerfile):
    _, final = _stages(dockerfile)
    assert "COPY --from=locked /opt/gkeflow /opt/gkeflow" in final
    assert "apt-get" not in final and "binutils" not in final
    installs = re.findall(r"pip --python /opt/gkeflow/bin/python install ([^;\n]*)", final)
    assert installs == [
        "--no-cache-dir -c /tmp/gkeflow-user/constraints.txt "
        "-r /tmp/gkeflow-user/requirements.txt",
        "--no-deps --no-index --no-cache-dir --no-compile /tmp/gkeflow-dist/gkeflow-*.whl "
        "&& rm -rf /tmp/gkeflow-dist",
    ]
    # the wheel and the user's files are copied (a bind mount is not part of the layer cache
    # key: a changed suite would reuse a stale layer), and removed once installed
    assert "--mount=type=bind" not in final
    assert re.findall(r"^COPY (?!--from)(\S+)", final, flags=re.MULTILINE) == [
        "user/requirements.txt", "dist/", "user/include/"]
    assert "rm -rf /tmp/gkeflow-dist" in final and "rm -rf /tmp/gkeflow-user" in final
    assert "COPY user/include/ /opt/gkeflow/user/" in final
    assert "PIP_NO_INDEX=1" in final and "PATH=/opt/gkeflow/bin" in final
    # index credentials: a secret mounted for the requirements step only, read there
    (step,) = re.findall(r"^RUN --mount=type=secret,id=gkeflow-pip-env (.*?)\n(?!\s)", final,
                         flags=re.MULTILINE | re.DOTALL)
    assert ". /run/secrets/gkeflow-pip-env" in step and "-r /tmp/gkeflow-user/requirements.txt" \
        in step
    assert final.count("type=secret") == 1 and "ARG" not in final


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_the_build_fails_when_the_suite_or_the_users_code_cannot_be_imported(dockerfile):
    _, final = _stages(dockerfile)
    warm = "RUN HOME=/nonexistent python -m gkeflow.images.warm /tmp/gkeflow-user/modules.txt"
    assert warm in final
    # bytecode is written for what the steps import: not switched off
    assert "PYTHONDONTWRITEBYTECODE" not in final
    users = re.findall(r"^USER\s+(\S+)", final, flags=re.MULTILINE)
    assert users == ["10001:10001"]
    assert final.index("USER 10001:10001") > final.index(warm)
    assert final.index(warm) > final.index("COPY user/include/")
    # the last instruction labels the final image only, so a rebuild prunes the previous
    # one and never the cached stages
    flavour = dockerfile.name.split(".")[0]
    last = [x for x in final.splitlines() if x and not x.startswith("#")][-1]
    assert last == f"LABEL io.gkeflow.image=gkeflow-{flavour}"
    assert final.count("LABEL") == 1 and "LABEL" not in _stages(dockerfile)[0]


def test_the_images_differ_only_in_the_gpu_environment_and_what_is_stripped():
    cpu, gpu = (_stages(REPO / "images" / f"{f}.Dockerfile") for f in ("cpu", "gpu"))
    assert cpu[0] == gpu[0].replace(' "$site" "$site/nvidia"', ' "$site"')
    gpu_env = ("/usr/local/nvidia/bin:", " LD_LIBRARY_PATH=/usr/local/nvidia/lib64",
               " NVIDIA_VISIBLE_DEVICES=all", " NVIDIA_DRIVER_CAPABILITIES=compute,utility")
    stripped = gpu[1].replace("gkeflow-gpu", "gkeflow-cpu")  # the label naming each image
    for part in gpu_env:
        assert part in stripped
        stripped = stripped.replace(part, "")
    assert cpu[1] == stripped
