"""`gkeflow images build` and `gkeflow images list`, end to end, with a fake podman, docker and
gcloud on PATH (tests/cli/fake_builder.py): the real command, the real build-context
assembly, the real lock file next to gkeflow.yaml, then `gkeflow compile` and `gkeflow
submit --dry-run` reading it. The package runs from a read-only copy, so any write into it
fails the run; its tree is compared before and after as well."""

from __future__ import annotations

import compileall
import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import gkeflow.components
import gkeflow.images
import gkeflow.pipelines
from gkeflow.components import yamlio
from tests.cli import fake_builder

REGISTRY = "europe-west4-docker.pkg.dev/my-project/ml"
CPU = f"{REGISTRY}/gkeflow-cpu:0.1.0"
GPU = f"{REGISTRY}/gkeflow-gpu:0.1.0"
SERVING = f"{REGISTRY}/gkeflow-serving:0.1.0"
SLIM = f"{REGISTRY}/gkeflow:0.1.0"


def _tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def readonly_package(tmp_path_factory) -> Path:
    """A copy of the installed gkeflow package (components, pipelines, images), read-only."""
    root = tmp_path_factory.mktemp("site-packages")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name, module in (("components", gkeflow.components), ("pipelines", gkeflow.pipelines),
                         ("images", gkeflow.images)):
        shutil.copytree(Path(module.__path__[0]), root / "gkeflow" / name, ignore=ignore)
    # byte-compiled once here, as an installed wheel is: each command reads, never writes
    compileall.compile_dir(root, quiet=1, workers=1)
    for path in sorted(root.rglob("*"), reverse=True):
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    yield root
    for path in sorted(root.rglob("*")):
        path.chmod(path.stat().st_mode | stat.S_IWUSR)


@pytest.fixture
def project(tmp_path) -> Path:
    """A user's project: gkeflow.yaml with an images: section, extra requirements, own code."""
    (tmp_path / "my_features").mkdir()
    (tmp_path / "my_features" / "__init__.py").write_text("SCALE = 2\n")
    (tmp_path / "my_components.py").write_text("def double(x):\n    return 2 * x\n")
    (tmp_path / "requirements.txt").write_text("humanize==4.11.0\n")
    vertex = {"project": "my-project", "region": "europe-west4",
              "pipeline_root": "gs://my-bucket/root",
              "service_account": "pipelines@my-project.iam.gserviceaccount.com"}
    config = {"images": {"registry": REGISTRY, "requirements": "requirements.txt",
                         "include": ["my_features", "my_components.py"]},
              "targets": {"vertex": vertex}}
    (tmp_path / "gkeflow.yaml").write_text(yaml.safe_dump(config))
    return tmp_path


@pytest.fixture
def run(tmp_path_factory, readonly_package):
    """``run(*args, cwd=...)``: the gkeflow command from the read-only package, with the fake
    builders first on PATH; returns the process and the builders' calls so far."""
    scratch = tmp_path_factory.mktemp("fake-builder")
    bin_dir = fake_builder.install(scratch / "bin")
    log = scratch / "builder.log"

    def _run(*args: str, cwd: Path, env: dict | None = None):
        full_env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                    "PYTHONPATH": str(readonly_package), "FAKE_BUILDER_LOG": str(log),
                    "PYTHONDONTWRITEBYTECODE": "1", "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}
        result = subprocess.run(
            [sys.executable, "-c", "from gkeflow.pipelines.cli.main import main; main()", *args],
            cwd=cwd, env=full_env, capture_output=True, text=True, timeout=600, check=False)
        calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        return result, calls

    return _run


def _lock(project: Path) -> dict:
    return json.loads((project / "gkeflow.lock").read_text())["images"]


def test_the_command_runs_from_the_read_only_copy(run, project, readonly_package):
    result, _ = run("images", "--help", cwd=project)
    assert result.returncode == 0, result.stderr
    probe = subprocess.run(
        [sys.executable, "-c", "import gkeflow.pipelines.cli.main as c; print(c.__file__)"],
        env={**os.environ, "PYTHONPATH": str(readonly_package)}, capture_output=True,
        text=True, check=True)
    assert probe.stdout.strip().startswith(str(readonly_package))


def test_build_no_push_then_compile_pins_both_targets(run, project, readonly_package):
    before = _tree(readonly_package)
    result, calls = run("images", "build", "--builder", "podman", "--no-push", cwd=project)
    assert result.returncode == 0, result.stderr
    assert _tree(readonly_package) == before, "nothing may be written into the package"
    assert sorted(p.name for p in project.iterdir()) == [
        "gkeflow.lock", "gkeflow.yaml", "my_components.py", "my_features",
        "requirements.txt"]

    builds = [c for c in calls if c["args"][0] == "build"]
    assert [c["args"][c["args"].index("--tag") + 1] for c in builds] == [SLIM, CPU, GPU, SERVING]
    # The serving image: TensorFlow Serving of the training TensorFlow, nothing of the user's.
    assert sorted(builds[3]["context"]) == ["Dockerfile", "serving-entrypoint.sh"]
    assert "gkeflow serving image" in builds[3]["dockerfile"]
    assert "gkeflow slim image" in builds[0]["dockerfile"]
    for build in builds[:3]:
        assert "--isolation=chroot" in build["args"]
        context = set(build["context"])
        assert {"Dockerfile", "requirements.lock", "user/requirements.txt",
                "user/include/my_components.py", "user/include/my_features/__init__.py",
                "user/modules.txt"} <= context
        assert any(p.startswith("dist/gkeflow-") and p.endswith(".whl") for p in context)
    assert not [c for c in calls if c["args"][0] == "push"]
    # each build removes its image's previous, untagged build: by gkeflow's label only
    assert [c["args"] for c in calls if c["args"][:2] == ["image", "prune"]] == [
        ["image", "prune", "--force", "--filter", f"label=io.gkeflow.image={name}"]
        for name in ("gkeflow", "gkeflow-cpu", "gkeflow-gpu", "gkeflow-serving")]

    lock = _lock(project)
    assert set(lock) == {SLIM, CPU, GPU, SERVING}
    for reference, entry in lock.items():
        assert entry["digest"] == fake_builder.digest(reference, pushed=False)
        assert entry["builder"] == "podman" and entry["pushed"] is False
        assert entry["built_at"].endswith("Z")

    compiled, _ = run("compile", "--output", "out", cwd=project)
    assert compiled.returncode == 0, compiled.stderr
    cpu = f"{REGISTRY}/gkeflow-cpu@{fake_builder.digest(CPU, pushed=False)}"
    gpu = f"{REGISTRY}/gkeflow-gpu@{fake_builder.digest(GPU, pushed=False)}"
    slim = f"{REGISTRY}/gkeflow@{fake_builder.digest(SLIM, pushed=False)}"
    for target in ("gke", "vertex"):
        text = (project / "out" / f"training.{target}.yaml").read_text()
        assert cpu in text and gpu in text and slim in text
        serving = f"{REGISTRY}/gkeflow-serving@{fake_builder.digest(SERVING, pushed=False)}"
        assert (serving in text) == (target == "vertex")  # registration on Vertex AI names it
        assert "us-docker.pkg.dev/gkeflow" not in text and ":0.1.0" not in text.replace(
            "gkeflow 0.1.0", "")
    assert _tree(readonly_package) == before

    # built but never pushed: a run could not pull them, so submit refuses (one line) ...
    refused, _ = run("submit", "--target", "vertex", cwd=project)
    assert refused.returncode == 1
    assert "refusing to send training to vertex" in refused.stderr
    assert "built with --no-push, never pushed" in refused.stderr
    assert "run `gkeflow images build`" in refused.stderr
    assert "Traceback" not in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    # ... while a dry run prints every request, the unpushed images flagged, and exits 0
    previewed, _ = run("submit", "--target", "vertex", "--dry-run", cwd=project)
    assert previewed.returncode == 0, previewed.stderr
    assert "refusing" not in previewed.stdout + previewed.stderr
    flagged = next(x for x in previewed.stdout.splitlines() if "images not pushed" in x)
    assert f"{CPU} was built with --no-push, never pushed" in flagged
    assert f"{GPU} was built with --no-push, never pushed" in flagged
    assert "a real send training to vertex is refused" in flagged
    assert "1 request(s) would be sent" in previewed.stdout
    assert "POST https://europe-west4-aiplatform.googleapis.com/v1/projects/my-project/" \
           "locations/europe-west4/pipelineJobs?pipelineJobId=" in previewed.stdout
    listed, _ = run("images", "list", cwd=project)
    assert "built with --no-push, not in " + REGISTRY in listed.stdout
    assert "not built for" not in listed.stdout

    # the same for schedules: apply refuses, apply --dry-run prints the create, flagged
    config = yamlio.load((project / "gkeflow.yaml").read_text())
    config["schedules"] = [{"name": "nightly", "target": "vertex", "cron": "0 2 * * *"}]
    (project / "gkeflow.yaml").write_text(yaml.safe_dump(config))
    refused, _ = run("schedule", "apply", cwd=project)
    assert refused.returncode == 1 and "refusing to send training to vertex" in refused.stderr
    previewed, _ = run("schedule", "apply", "--dry-run", cwd=project)
    assert previewed.returncode == 0, previewed.stderr
    assert "refusing" not in previewed.stdout + previewed.stderr
    assert f"{CPU} was built with --no-push, never pushed" in previewed.stdout
    assert "would create" in previewed.stdout and "/schedules" in previewed.stdout


def test_build_and_push_with_podman_lets_submit_through(run, project):
    result, calls = run("images", "build", "--builder", "podman", cwd=project)
    assert result.returncode == 0, result.stderr
    pushes = [c["args"] for c in calls if c["args"][0] == "push"]
    assert [p[-1] for p in pushes] == [SLIM, CPU, GPU, SERVING]
    assert all("--digestfile" in p for p in pushes)
    lock = _lock(project)
    assert {r: e["digest"] for r, e in lock.items()} == {
        r: fake_builder.digest(r, pushed=True) for r in (SLIM, CPU, GPU, SERVING)}
    assert all(e["pushed"] for e in lock.values())
    assert "Next: `gkeflow plan`" in result.stdout

    submitted, _ = run("submit", "--target", "vertex", "--dry-run", cwd=project)
    assert submitted.returncode == 0, submitted.stderr
    assert "1 request(s) would be sent" in submitted.stdout

    listed, _ = run("images", "list", cwd=project)
    assert listed.returncode == 0, listed.stderr
    for reference in (SLIM, CPU, GPU, SERVING):
        line = next(x for x in listed.stdout.splitlines() if reference in x)
        assert fake_builder.digest(reference, pushed=True) in line
        assert "podman" in line and "in use" in line
    assert "not built" not in listed.stdout and "--no-push" not in listed.stdout


@pytest.mark.parametrize("builder", ["docker", "cloud-build"])
def test_docker_and_cloud_build(run, project, builder):
    result, calls = run("images", "build", "--builder", builder, "--flavour", "cpu",
                        cwd=project)
    assert result.returncode == 0, result.stderr
    assert set(_lock(project)) == {CPU}
    assert _lock(project)[CPU] == {
        "digest": fake_builder.digest(CPU, pushed=True), "builder": builder, "pushed": True,
        "built_at": _lock(project)[CPU]["built_at"]}
    if builder == "cloud-build":
        (submit,) = [c for c in calls if c["args"][:2] == ["builds", "submit"]]
        assert submit["cloudbuild"]["images"] == [CPU]
        assert "--project=my-project" in submit["args"]  # from the Artifact Registry path
        assert "user/include/my_components.py" in submit["context"]


def test_a_failed_build_is_one_line_and_keeps_what_was_built(run, project):
    result, _ = run("images", "build", "--builder", "podman", cwd=project,
                    env={"FAKE_BUILDER_FAIL": "gkeflow-gpu"})
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "build of" in line and "gkeflow-gpu" in line and "no space left on device" in line
    assert set(_lock(project)) == {SLIM, CPU}  # built before the GPU image, and recorded


@pytest.mark.parametrize("builder", ["podman", "docker"])
def test_a_base_image_that_cannot_be_pulled_names_the_recipe(run, project, builder):
    result, _ = run("images", "build", "--builder", builder, "--flavour", "cpu", cwd=project,
                    env={"FAKE_BUILDER_NO_PULL": "1"})
    assert result.returncode == 1 and "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert f"{builder} build cannot pull its base image python:3.11.11-slim-bookworm" in line
    assert "no such host" in line and "let " + builder + " reach docker.io" in line
    assert "container-base.sh docker.io/library/python:3.11.11-slim-bookworm" in line
    assert "docs/image-recipes.md#without-a-pullable-base-image" in line
    assert not (project / "gkeflow.lock").exists()


def test_a_pin_the_gpu_lock_refuses_stops_before_the_cpu_build(run, project):
    (project / "requirements.txt").write_text("humanize==4.11.0\nnvidia-cublas-cu12<12\n")
    result, calls = run("images", "build", "--builder", "podman", cwd=project)
    assert result.returncode == 1 and not calls  # nothing built, not even the CPU image
    (line,) = result.stderr.strip().splitlines()
    assert "requirements.txt:2: nvidia-cublas-cu12<12 conflicts with the gpu image's locked " \
           "nvidia-cublas-cu12 12.9.3.13" in line
    assert not (project / "gkeflow.lock").exists()


TOKEN = "s3cr3t-'tok3n"  # a quote, as tokens may hold one


def test_index_credentials_reach_the_build_as_a_secret_only(run, project):
    (project / "requirements.txt").write_text(
        "--extra-index-url https://__token__:${PYPI_TOKEN}@pypi.example.com/simple\n"
        "humanize==4.11.0\n")
    result, calls = run("images", "build", "--builder", "podman", "--no-push", cwd=project,
                        env={"PYPI_TOKEN": TOKEN})
    assert result.returncode == 0, result.stderr
    builds = [c for c in calls if c["args"][0] == "build"]
    # slim, cpu, gpu and serving; the serving image installs nothing of yours
    assert len(builds) == 4
    serving_secret = builds[3]["secret"]["text"]
    assert TOKEN not in serving_secret and "PYPI_TOKEN" not in serving_secret
    for build in builds[:3]:
        option = build["args"][build["args"].index("--secret") + 1]
        assert option.startswith("id=gkeflow-pip-env,src=")
        secret = build["secret"]
        assert secret["text"] == "export PYPI_TOKEN='s3cr3t-'\\''tok3n'\n"
        assert secret["mode"] == "0o600" and secret["outside_context"]
        assert not secret["value_in_context"]
        assert TOKEN not in json.dumps(build["args"])
    assert "passing PYPI_TOKEN to the requirements step as a build secret" in result.stdout
    assert TOKEN not in result.stdout + result.stderr
    assert TOKEN not in (project / "gkeflow.lock").read_text()


@pytest.mark.parametrize("line, problem", [
    ("--index-url https://alice:hunter2@pypi.example.com/simple",
     "requirements.txt:2: https://***@pypi.example.com holds a credential in plain text"),
    ("-i https://ghp_hunter2@github.com/org/simple",
     "requirements.txt:2: https://***@github.com holds a credential in plain text"),
    ("mypkg @ https://user:hunter2@files.example.com/mypkg-1.0-py3-none-any.whl",
     "https://***@files.example.com holds a credential in plain text"),
    ("--extra-index-url https://__token__:${UNSET_TOKEN}@pypi.example.com/simple",
     "images.requirements names ${UNSET_TOKEN}, which is not set; export UNSET_TOKEN"),
])
def test_credentials_in_plain_text_or_unset_are_refused_before_building(
        run, project, line, problem):
    (project / "requirements.txt").write_text(f"humanize==4.11.0\n{line}\n")
    result, calls = run("images", "build", "--builder", "podman", cwd=project)
    assert result.returncode == 1 and not calls
    (message,) = result.stderr.strip().splitlines()
    assert problem in message and "hunter2" not in message


def test_cloud_build_cannot_take_a_secret_from_this_machine(run, project):
    (project / "requirements.txt").write_text(
        "--extra-index-url https://__token__:${PYPI_TOKEN}@pypi.example.com/simple\n")
    result, calls = run("images", "build", "--builder", "cloud-build", cwd=project,
                        env={"PYPI_TOKEN": TOKEN})
    assert result.returncode == 1 and not calls
    assert "Cloud Build cannot receive it from this machine" in result.stderr
    assert TOKEN not in result.stdout + result.stderr


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_during_the_build_stops_the_builder_and_removes_the_context(
        signum, code, project, readonly_package, tmp_path_factory):
    scratch = tmp_path_factory.mktemp("interrupted")
    bin_dir = fake_builder.install(scratch / "bin")
    (scratch / "tmp").mkdir()
    started = scratch / "started.json"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(readonly_package), "FAKE_BUILDER_LOG": str(scratch / "log"),
           "FAKE_BUILDER_HANG": str(started), "TMPDIR": str(scratch / "tmp"),
           "PYTHONDONTWRITEBYTECODE": "1"}
    process = subprocess.Popen(
        [sys.executable, "-c", "from gkeflow.pipelines.cli.main import main; main()",
         "images", "build", "--builder", "podman"], cwd=project, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(1200):  # until the builder runs (the context exists by then)
            if started.exists() or process.poll() is not None:
                break
            time.sleep(0.1)
        assert started.exists(), process.communicate()[1]
        builder = json.loads(started.read_text())
        assert Path(builder["context"]).is_dir()
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == code
    (line,) = stderr.strip().splitlines()
    assert f"{signal.Signals(signum).name} during the build of {SLIM}" in line
    assert "build context removed" in line and "Traceback" not in stderr
    assert not Path(builder["context"]).exists()
    assert list((scratch / "tmp").iterdir()) == []
    assert _gone(builder["pid"]), "the builder must not outlive the command"
    assert not (project / "gkeflow.lock").exists()


def test_build_without_a_registry_says_how_to_set_one(run, tmp_path):
    (tmp_path / "gkeflow.yaml").write_text("parameters: {default: {epochs: 1}}\n")
    result, calls = run("images", "build", cwd=tmp_path)
    assert result.returncode == 1 and not calls
    assert "images.registry is not set" in result.stderr
    assert "europe-west4-docker.pkg.dev/my-project/ml" in result.stderr
    assert not (tmp_path / "gkeflow.lock").exists()


def test_a_broken_lock_fails_before_building(run, project):
    (project / "gkeflow.lock").write_text("{not json")
    result, calls = run("images", "build", "--builder", "podman", cwd=project)
    assert result.returncode == 1 and not calls
    assert "gkeflow.lock: not a readable JSON lock file" in result.stderr


def test_list_before_any_build_says_what_to_run(run, project):
    listed, _ = run("images", "list", cwd=project)
    assert listed.returncode == 0, listed.stderr
    for reference in (SLIM, CPU, GPU):
        assert "not built" in next(x for x in listed.stdout.splitlines() if reference in x)
    assert (f"not built for {REGISTRY}: {CPU}, {GPU}, {SERVING}, {SLIM}; run "
            "`gkeflow images build`") in listed.stdout


@pytest.mark.parametrize("builder", ["docker", "cloud-build"])
def test_notices_on_stderr_do_not_reach_the_recorded_digest(run, project, builder):
    result, _ = run("images", "build", "--builder", builder, "--flavour", "cpu", cwd=project,
                    env={"FAKE_BUILDER_NOISE": "1"})
    assert result.returncode == 0, result.stderr
    assert _lock(project)[CPU]["digest"] == fake_builder.digest(CPU, True)


def test_a_push_without_a_repository_digest_is_one_line(run, project):
    result, _ = run("images", "build", "--builder", "docker", "--flavour", "cpu", cwd=project,
                    env={"FAKE_BUILDER_NO_REPO_DIGESTS": "1"})
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "docker pushed" in result.stderr and "reported no digest for it" in result.stderr
    assert not (project / "gkeflow.lock").exists()


def test_a_lock_that_cannot_be_written_fails_before_building(run, project):
    (project / "afile").write_text("not a folder\n")
    config = yamlio.load((project / "gkeflow.yaml").read_text())
    config["images"]["lock"] = "afile/gkeflow.lock"
    (project / "gkeflow.yaml").write_text(yaml.safe_dump(config))
    result, calls = run("images", "build", "--builder", "podman", cwd=project)
    assert result.returncode == 1 and not calls
    assert "cannot write the lock file" in result.stderr and "images.lock" in result.stderr


def test_list_shows_lock_text_as_text(run, project):
    (project / "gkeflow.lock").write_text(json.dumps({"images": {CPU: {
        "digest": fake_builder.digest(CPU, True), "builder": "[/]", "pushed": True}}}))
    listed, _ = run("images", "list", cwd=project)
    assert listed.returncode == 0, listed.stderr
    assert "[/]" in listed.stdout



TPU = f"{REGISTRY}/gkeflow-tpu:0.1.0"


def _train_on_a_tpu(project: Path) -> None:
    config = yamlio.load((project / "gkeflow.yaml").read_text())
    config["compute"] = {"train-model": {"accelerator": "tpu-v6e", "topology": "2x2"}}
    (project / "gkeflow.yaml").write_text(yaml.safe_dump(config))


def test_the_tpu_image_is_built_for_a_project_that_trains_on_a_tpu(run, project):
    _train_on_a_tpu(project)
    result, calls = run("images", "build", "--builder", "podman", "--no-push", cwd=project)
    assert result.returncode == 0, result.stderr
    builds = [c for c in calls if c["args"][0] == "build"]
    assert [c["args"][c["args"].index("--tag") + 1] for c in builds] == [
        SLIM, CPU, GPU, TPU, SERVING]
    dockerfile = builds[3]["dockerfile"]
    assert "gkeflow TPU image" in dockerfile and "JAX for Cloud TPUs" in dockerfile
    assert "requirements.lock" in builds[3]["context"]
    assert set(_lock(project)) == {SLIM, CPU, GPU, TPU, SERVING}


def test_the_tpu_image_alone_on_request_and_its_help(run, project):
    result, calls = run("images", "build", "--builder", "podman", "--no-push", "--flavour",
                        "tpu", cwd=project)
    assert result.returncode == 0, result.stderr
    assert [c["args"][c["args"].index("--tag") + 1] for c in calls
            if c["args"][0] == "build"] == [TPU]
    shown, _ = run("images", "build", "--help", cwd=project)
    assert "--flavour tpu" in " ".join(shown.stdout.split())
    assert "only when a step of gkeflow.yaml's compute asks for a TPU" in " ".join(
        shown.stdout.split())


def test_submit_refuses_an_unbuilt_tpu_image_and_names_the_build(run, project):
    _train_on_a_tpu(project)
    built, _ = run("images", "build", "--builder", "podman", "--flavour", "slim", cwd=project)
    assert built.returncode == 0, built.stderr
    submitted, _ = run("submit", "--target", "vertex", "--dry-run", cwd=project)
    said = " ".join((submitted.stdout + submitted.stderr).split())
    assert f"{TPU} was never built" in said
    assert "`gkeflow images build --flavour tpu`" in said
    listed, _ = run("images", "list", cwd=project)
    assert TPU in listed.stdout  # wanted by this project: listed as not built


def test_list_leaves_out_the_tpu_image_where_no_step_trains_on_a_tpu(run, project):
    listed, _ = run("images", "list", cwd=project)
    assert listed.returncode == 0, listed.stderr
    assert "gkeflow-tpu" not in listed.stdout
