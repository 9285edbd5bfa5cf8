"""gkeflow.pipelines.targets.image_build: the build context taken from the installed package, and
the podman, docker and Cloud Build paths driven through stand-in engines on PATH (small
scripts that answer like the real tools and record how they were called)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import stat
import zipfile
from pathlib import Path

import pytest

from gkeflow.components.images import VERSION
from gkeflow.pipelines.targets.image_build import (
    ImageBuildError,
    assemble_context,
    build_image,
    build_wheel,
    check_pins,
    cloudbuild_config,
)
from gkeflow.pipelines.targets.image_engine import base_images
from tests.conftest import REPO_ROOT

DIGEST = "sha256:" + "ab" * 32
REFERENCE = "europe-west4-docker.pkg.dev/my-project/ml/gkeflow-cpu:0.1.0"


@pytest.fixture
def user_code(tmp_path) -> dict[str, Path]:
    module = tmp_path / "code" / "my_model.py"
    package = tmp_path / "code" / "team_lib"
    (package / "__pycache__").mkdir(parents=True)
    module.write_text("def build_model(schema, hparams):\n    return None\n")
    (package / "__init__.py").write_text("NAME = 'team'\n")
    (package / "features.py").write_text("X = 1\n")
    (package / "__pycache__" / "features.cpython-311.pyc").write_bytes(b"\0")
    requirements = tmp_path / "code" / "requirements.txt"
    requirements.write_text("humanize==4.17.0\n")
    return {"module": module, "package": package, "requirements": requirements}


@pytest.mark.parametrize("flavour", ["cpu", "gpu"])
def test_the_context_holds_the_dockerfile_lock_wheel_and_user_code(flavour, tmp_path,
                                                                   user_code):
    dockerfile = assemble_context(tmp_path / "ctx", flavour, user_code["requirements"],
                                  [user_code["module"], user_code["package"]])
    ctx = dockerfile.parent
    assert dockerfile.read_text() == (REPO_ROOT / "images" / f"{flavour}.Dockerfile").read_text()
    lock = (REPO_ROOT / "images" / f"requirements-{flavour}.lock").read_text()
    assert (ctx / "requirements.lock").read_text() == lock
    # the lock's own build backend, with its hashes, builds its source-only packages
    build = (ctx / "build.lock").read_text()
    assert [line.split("==")[0] for line in build.splitlines() if "==" in line] == [
        "setuptools", "wheel"]
    for line in build.splitlines():
        if "==" in line:
            assert line.rstrip(" \\") in lock
        else:
            assert line.strip().rstrip(" \\") in lock and "--hash=sha256:" in line
    assert (ctx / "prune.sh").read_bytes() == (REPO_ROOT / "images" / "prune.sh").read_bytes()
    assert [p.name for p in (ctx / "dist").iterdir()] == [f"gkeflow-{VERSION}-py3-none-any.whl"]
    assert (ctx / "user" / "requirements.txt").read_text() == "humanize==4.17.0\n"
    assert (ctx / "user" / "modules.txt").read_text() == "my_model\nteam_lib\n"
    assert (ctx / "user" / "include" / "my_model.py").read_text().startswith("def build_model")
    included = sorted(p.name for p in (ctx / "user" / "include" / "team_lib").iterdir())
    assert included == ["__init__.py", "features.py"]
    pins = (ctx / "user" / "constraints.txt").read_text().splitlines()
    tensorflow = "tensorflow-cpu" if flavour == "cpu" else "tensorflow"
    assert any(line.startswith(f"{tensorflow}==") for line in pins)
    assert not any("--hash" in line for line in pins)


def test_no_extras_gives_empty_user_files(tmp_path):
    ctx = assemble_context(tmp_path / "ctx", "cpu", None, []).parent
    assert (ctx / "user" / "requirements.txt").read_text() == ""
    assert (ctx / "user" / "modules.txt").read_text() == ""
    assert [p.name for p in (ctx / "user" / "include").iterdir()] == ["README.txt"]


def test_the_wheel_is_the_installed_suite_and_reproducible(tmp_path):
    first = build_wheel(tmp_path / "a")
    second = build_wheel(tmp_path / "b")
    assert first.read_bytes() == second.read_bytes()
    with zipfile.ZipFile(first) as wheel:
        names = wheel.namelist()
        for name in ("gkeflow/components/train/component.py", "gkeflow/pipelines/cli/main.py",
                     "gkeflow/pipelines/targets/image_build.py", "gkeflow/images/cpu.Dockerfile",
                     "gkeflow/images/requirements-gpu.lock"):
            assert name in names
        assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
        assert not [n for n in names if not n.startswith("gkeflow")]
        dist_info = f"gkeflow-{VERSION}.dist-info"
        assert "gkeflow = gkeflow.pipelines.cli.main:main" in wheel.read(
            f"{dist_info}/entry_points.txt").decode()
        assert f"Version: {VERSION}" in wheel.read(f"{dist_info}/METADATA").decode()
        for line in wheel.read(f"{dist_info}/RECORD").decode().splitlines():
            name, digest, size = line.split(",")
            if not digest:
                continue
            data = wheel.read(name)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            assert digest == f"sha256={expected.decode()}" and int(size) == len(data)


@pytest.mark.parametrize("case, match", [
    ("flavour", "unknown image flavour 'rocm'"),
    ("not-empty", "is not empty"),
    ("missing-include", "does not exist"),
    ("not-python", "is not a Python module"),
    ("bad-name", "cannot be imported as 'my-model'"),
    ("gkeflow", "cannot be imported as 'gkeflow'"),
    ("twice", "are both imported as 'my_model'"),
    ("nested-requirements", r"requirements.txt:2: -r \S+ is not supported"),
    ("missing-requirements", "does not exist"),
    ("link-loop", r"images.include: \S+/my_pkg/up is a symbolic link loop"),
])
def test_unusable_inputs_are_refused_in_one_line(case, match, tmp_path, user_code):
    dest, flavour, requirements, includes = tmp_path / "ctx", "cpu", None, []
    if case == "flavour":
        flavour = "rocm"
    elif case == "not-empty":
        dest.mkdir()
        (dest / "left-over").write_text("x")
    elif case == "missing-include":
        includes = [tmp_path / "nowhere.py"]
    elif case == "not-python":
        (tmp_path / "notes.txt").write_text("x")
        includes = [tmp_path / "notes.txt"]
    elif case == "bad-name":
        (tmp_path / "my-model.py").write_text("x = 1\n")
        includes = [tmp_path / "my-model.py"]
    elif case == "gkeflow":
        (tmp_path / "gkeflow").mkdir()
        includes = [tmp_path / "gkeflow"]
    elif case == "twice":
        (tmp_path / "my_model").mkdir()
        includes = [user_code["module"], tmp_path / "my_model"]
    elif case == "nested-requirements":
        requirements = tmp_path / "requirements.txt"
        requirements.write_text("humanize\n-r other.txt\n")
    elif case == "missing-requirements":
        requirements = tmp_path / "absent.txt"
    elif case == "link-loop":
        (tmp_path / "my_pkg").mkdir()
        (tmp_path / "my_pkg" / "up").symlink_to(tmp_path)
        includes = [tmp_path / "my_pkg"]
    with pytest.raises(ImageBuildError, match=match) as raised:
        assemble_context(dest, flavour, requirements, includes)
    assert "\n" not in str(raised.value)
    if case != "not-empty":
        assert not dest.exists() or not any(dest.iterdir())


def _engine(bin_dir: Path, name: str, script: str) -> Path:
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def engines(tmp_path, monkeypatch) -> Path:
    """An empty PATH but for the stand-in engines the test writes into it (and sh's tools)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("cat", "cp", "dirname", "echo", "printf"):
        for folder in ("/usr/bin", "/bin"):
            if Path(folder, tool).exists():
                os.symlink(Path(folder, tool), bin_dir / tool)
                break
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("ENGINE_LOG", str(tmp_path / "calls.log"))
    return bin_dir


def _calls(tmp_path: Path) -> list[str]:
    return (tmp_path / "calls.log").read_text().splitlines()


PODMAN = f"""echo "$*" >> "$ENGINE_LOG"
case "$1" in
  build) [ -f "$(dirname "$3")/dist/gkeflow-{VERSION}-py3-none-any.whl" ] || exit 3
         echo "STEP 1/2: FROM python:3.11.11-slim-bookworm AS locked"
         echo "Collecting absl-py==2.5.1"; echo "STEP 2/2: RUN pip install"
         echo "COMMIT $5";;
  image) echo "{DIGEST}";;
  push) while [ "$#" -gt 0 ]; do [ "$1" = --digestfile ] && echo "{DIGEST}" > "$2"; shift; done;;
esac
"""


@pytest.mark.parametrize("push", [False, True])
def test_podman_builds_with_chroot_isolation_and_returns_the_digest(push, engines, tmp_path):
    _engine(engines, "podman", PODMAN)
    lines: list[str] = []
    digest = build_image("cpu", REFERENCE, None, [], builder="podman", push=push,
                         echo=lines.append)
    assert digest == DIGEST
    calls = _calls(tmp_path)
    assert calls[0].startswith("build --file ") and "--isolation=chroot" in calls[0]
    assert f"--tag {REFERENCE}" in calls[0]
    # the previous build of this image, untagged now, is removed: by gkeflow's label only
    assert calls[1] == "image prune --force --filter label=io.gkeflow.image=gkeflow-cpu"
    assert calls[2].startswith("push --digestfile" if push else "image inspect")
    assert "  STEP 1/2: FROM python:3.11.11-slim-bookworm AS locked" in lines
    assert not [line for line in lines if "Collecting" in line]
    assert lines[-1] == f"{REFERENCE} -> {DIGEST}"


def test_a_failed_step_names_it_with_the_last_lines_of_its_log(engines):
    _engine(engines, "podman", "\n".join(
        [f'echo "line {i}"' for i in range(30)]
        + ['echo "ERROR: No matching distribution found for humanize==99"', "exit 1", ""]))
    with pytest.raises(ImageBuildError) as raised:
        build_image("cpu", REFERENCE, None, [], push=False, echo=lambda _: None)
    message = str(raised.value)
    assert message.startswith(f"podman build of {REFERENCE} failed (exit 1): ")
    assert message.endswith("No matching distribution found for humanize==99")
    assert "line 29" in message and "line 5 " not in message and "\n" not in message


def test_a_failure_that_is_not_a_pull_keeps_its_own_line(engines):
    _engine(engines, "podman", 'echo "Error: short-name resolution of python:3.9 failed" >&2\n'
            'echo "ERROR: No matching distribution found for humanize==99" >&2; exit 1\n')
    with pytest.raises(ImageBuildError, match="failed \\(exit 1\\): .*humanize==99$"):
        build_image("cpu", REFERENCE, None, [], push=False, echo=lambda _: None)


@pytest.mark.parametrize("dockerfile, bases", [
    ("FROM python:3.11 AS locked\nRUN x\nFROM locked AS b\nFROM --platform=linux/amd64 "
     "nvidia/cuda:12\nCOPY --from=locked /a /a\n", ["python:3.11", "nvidia/cuda:12"]),
    ("# FROM not-this\nfrom gcr.io/p/base@sha256:ab\n", ["gcr.io/p/base@sha256:ab"]),
])
def test_base_images_are_the_from_lines_that_pull(dockerfile, bases, tmp_path):
    (tmp_path / "Dockerfile").write_text(dockerfile)
    assert base_images(tmp_path / "Dockerfile") == bases


@pytest.mark.parametrize("builder, tool", [("podman", "podman"), ("docker", "docker"),
                                           ("cloud-build", "gcloud")])
def test_a_missing_engine_is_one_line_with_the_fix(builder, tool, engines):
    with pytest.raises(ImageBuildError, match=rf"^{tool} not found on PATH; .*--builder"):
        build_image("cpu", REFERENCE, None, [], builder=builder, echo=lambda _: None)


def test_docker_pushes_and_reads_the_repository_digest(engines, tmp_path):
    repository = REFERENCE.rsplit(":", 1)[0]
    _engine(engines, "docker", f"""echo "$*" >> "$ENGINE_LOG"
[ "$1" = image ] && echo '["other/repo@sha256:{'cd' * 32}", "{repository}@{DIGEST}"]'
exit 0
""")
    assert build_image("gpu", REFERENCE, None, [], builder="docker", echo=lambda _: None) == DIGEST
    calls = _calls(tmp_path)
    assert calls[0].startswith("build --file") and "chroot" not in calls[0]
    assert calls[1] == "image prune --force --filter label=io.gkeflow.image=gkeflow-gpu"
    assert calls[2] == f"push {REFERENCE}"


def test_cloud_build_submits_a_generated_config_and_reads_the_pushed_digest(engines, tmp_path):
    build = {"id": "b-1", "status": "SUCCESS",
             "results": {"images": [{"name": REFERENCE, "digest": DIGEST}]}}
    saved = tmp_path / "submitted.json"
    _engine(engines, "gcloud", f"""echo "$*" >> "$ENGINE_LOG"
case "$2" in
  submit) cp "$4" "{saved}"; echo b-1;;
  log) echo "streamed";;
  describe) echo '{json.dumps(build)}';;
esac
""")
    digest = build_image("cpu", REFERENCE, None, [], builder="cloud-build", project="my-project",
                         echo=lambda _: None)
    assert digest == DIGEST
    assert json.loads(saved.read_text()) == cloudbuild_config(REFERENCE)
    calls = _calls(tmp_path)
    assert calls[0].startswith("builds submit --config") and "--project=my-project" in calls[0]
    assert calls[1:] == ["builds log --stream b-1 --project=my-project",
                         "builds describe b-1 --format=json --project=my-project"]


def test_cloud_build_cannot_keep_a_local_image(engines):
    _engine(engines, "gcloud", "exit 0\n")
    with pytest.raises(ImageBuildError, match="Cloud Build keeps no local image"):
        build_image("cpu", REFERENCE, None, [], builder="cloud-build", push=False,
                    echo=lambda _: None)


def test_a_digest_longer_than_sha256_is_not_cut_to_fit():
    from gkeflow.pipelines.targets.image_build import ImageBuildError, find_digest

    good = "sha256:" + "a" * 64
    assert find_digest(f"digest: {good} size: 1", "podman push") == good
    with pytest.raises(ImageBuildError, match="reported no sha256 digest"):
        find_digest("sha256:" + "a" * 65, "podman push")



@pytest.mark.parametrize("line, named", [
    ("-e ./x", "-e ./x"), ("-e./mypkg", "-e ./mypkg"), ("--editable=./mypkg", "--editable"),
    ("-rother.txt", "-r other.txt"), ("-r\tother.txt", "-r other.txt"),
    ("--requirement=other.txt", "--requirement other.txt"), ("./mypkg", "the local path"),
    ("--find-links ./wheels", "--find-links ./wheels"), ("file:///a.whl", "the local path"),
])
def test_requirements_pointing_at_local_files_are_refused(line, named, tmp_path, user_code):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"humanize==4.17.0\n{line}\n")
    with pytest.raises(ImageBuildError, match=f"requirements.txt:2: {re.escape(named)}"):
        assemble_context(tmp_path / "ctx", "cpu", requirements, [])


def test_requirements_from_an_index_pass(tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("# extras\nhumanize>=4 # a comment\n--index-url https://pypi.org/"
                            "simple\n-f https://example.com/wheels\n")
    assemble_context(tmp_path / "ctx", "cpu", requirements, [])


@pytest.mark.parametrize("text, named", [
    ("humanize==4.11.0\nnumpy<2  # old code\n", "requirements.txt:2: numpy<2 conflicts with "
     "the cpu image's locked numpy 2.4.6; allow 2.4.6 or drop the pin"),
    ("tensorflow==2.15.* \\\n    --hash=sha256:" + "0" * 64 + "\n",
     "requirements.txt:1: tensorflow==2.15.* conflicts with the cpu image's locked "
     "tensorflow-cpu 2.21.0"),
    ("Pandas[performance]>=4,<5 ; sys_platform == 'linux'\n",
     "requirements.txt:1: Pandas[performance]>=4,<5 ; sys_platform == 'linux' conflicts "
     "with the cpu image's locked pandas 3.1.1"),
])
def test_pins_the_lock_does_not_satisfy_are_refused_before_building(text, named, tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(text)
    with pytest.raises(ImageBuildError) as raised:
        assemble_context(tmp_path / "ctx", "cpu", requirements, [])
    message = str(raised.value)
    assert message.startswith(f"{tmp_path}/{named}") and "\n" not in message
    assert message.endswith("(the images keep the lock's versions)")
    assert not (tmp_path / "ctx").exists()


def test_pins_the_lock_satisfies_or_pip_decides_pass(tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(
        "numpy>=2,<3\ntensorflow-cpu~=2.21.0\npandas<2 ; python_version < '3.10'\n"
        "humanize==4.11.0\nmypkg @ https://example.com/mypkg-1.0-py3-none-any.whl\n"
        "--extra-index-url https://example.com/simple\n# numpy<2\n")
    assemble_context(tmp_path / "ctx", "cpu", requirements, [])
    check_pins(requirements, ["cpu", "gpu"])
    requirements.write_text("nvidia-cublas-cu12<12\n")  # only the GPU image holds it
    check_pins(requirements, ["cpu"])
    with pytest.raises(ImageBuildError, match="the gpu image's locked nvidia-cublas-cu12 12"):
        check_pins(requirements, ["cpu", "gpu"])


def test_a_prune_that_fails_leaves_the_build_standing(engines, tmp_path):
    _engine(engines, "podman", PODMAN.replace('  image) echo', '  image) [ "$2" = prune ] && '
                                              '{ echo "Error: image is in use" >&2; exit 2; }\n'
                                              '         echo'))
    lines: list[str] = []
    assert build_image("cpu", REFERENCE, None, [], push=False, echo=lines.append) == DIGEST
    assert any(x.startswith("note: the previous gkeflow-cpu images were not removed: ")
               and "image is in use" in x for x in lines)
