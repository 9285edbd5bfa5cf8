"""``images:`` in gkeflow.yaml: validation at the edge, the lock file, one mapping applied to
every image reference of every compiled file, and the refusal of images never built."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import gkeflow.images
import gkeflow.pipelines
from gkeflow.components import yamlio
from gkeflow.components.images import (
    CPU_IMAGE,
    GPU_IMAGE,
    IMAGES,
    REGISTRY,
    SLIM_IMAGE,
    TPU_IMAGE,
    ImageLockError,
    map_references,
    pin,
)
from gkeflow.pipelines.settings.config import (
    EXAMPLE_CONFIG,
    ConfigError,
    GkeflowConfig,
    load_config,
)
from gkeflow.pipelines.settings.image_lock import LockEntry, load_lock, record
from gkeflow.pipelines.settings.images_config import ImagesNotBuilt, image_map, require_built
from gkeflow.pipelines.targets.compile import compile_pipeline, default_compute
from gkeflow.pipelines.targets.component_yaml import compile_components
from tests.compile.customjob import custom_job_payload

USER = "europe-west4-docker.pkg.dev/my-project/ml"
CPU_DIGEST = "sha256:" + "c" * 64
GPU_DIGEST = "sha256:" + "9" * 64
SLIM_DIGEST = "sha256:" + "5" * 64
#: Any reference to one of the suite's images, in YAML, JSON or JSON inside YAML strings.
IMAGE_RE = re.compile(r"[A-Za-z0-9.:_/-]*/gkeflow(?:-cpu|-gpu)?(?:[:@][A-Za-z0-9_.:-]+)")


def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "gkeflow.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def _entry(digest: str, pushed: bool = True) -> LockEntry:
    return LockEntry(digest=digest, built_at="2026-12-01T12:00:00Z", builder="podman",
                     pushed=pushed)


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(("images", "message"), [
    ({"registry": "https://europe-west4-docker.pkg.dev/p/ml"}, "no scheme, just HOST/PATH"),
    ({"registry": "europe-west4-docker.pkg.dev/p/ml:1.0"}, "without tag or digest"),
    ({"registry": "europe-west4-docker.pkg.dev"}, "add the repository path after the host"),
    ({"registry": "localhost:5000/ml@sha256:" + "0" * 64}, "without tag or digest"),
    ({"registry": "Europe-West4-docker.pkg.dev/p/ml"}, "not a registry path"),
    ({"registry": "myrepo/images"}, "not a registry path"),
    ({"registry": "europe-west4-docker.pkg.dev/p/ml/gkeflow-gpu"}, "drop /gkeflow-gpu"),
    ({"registry": "europe-west4-docker.pkg.dev/p/ml", "tag": "-bad"}, "not an image tag"),
    ({"requirements": "missing.txt"}, "requirements:"),
    ({"include": ["nowhere"]}, "include.0:"),
    ({"include": ["plain_dir"]}, "without __init__.py"),
    ({"include": ["notes.txt"]}, "neither a package directory nor a .py module"),
    ({"include": ["my-module.py"]}, "is not a Python identifier"),
    ({"include": ["broken.py"]}, "line 1: "),
    ({"include": ["gkeflow.py"]}, "'gkeflow' is also the gkeflow package in the images"),
    ({"include": ["json.py"]}, "'json' is also a module of Python's standard library"),
    ({"include": ["numpy"]}, "'numpy' is also the import name of the numpy package"),
    ({"include": ["pkg", "other/pkg"]}, "both importable as 'pkg'"),
    ({"registyr": "x"}, "images.registyr: unknown key (did you mean 'registry'?); remove "
                        "or rename it"),
    ({"registry": "oauth2accesstoken:ya29.hunter2@europe-west4-docker.pkg.dev/p/ml"},
     "holds a credential in plain text"),
    ({"registry": "https://ghp_hunter2@ghcr.io/org"}, "holds a credential in plain text"),
])
def test_invalid_images_sections_are_one_line_naming_the_key(tmp_path, images, message):
    (tmp_path / "plain_dir").mkdir()
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "my-module.py").write_text("x = 1\n")
    (tmp_path / "broken.py").write_text("def oops(:\n")
    (tmp_path / "gkeflow.py").write_text("x = 1\n")
    (tmp_path / "json.py").write_text("x = 1\n")
    for pkg in (tmp_path / "pkg", tmp_path / "other" / "pkg", tmp_path / "numpy"):
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
    path = _write(tmp_path, {"images": images})
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    text = str(raised.value)
    assert message in text and "images" in text and str(path) in text
    assert len(text.splitlines()) == 1 and "hunter2" not in text


@pytest.mark.parametrize(("make", "named"), [
    (lambda pkg: (pkg / "sub" / "up").symlink_to(".."), "sub/up is a symbolic link loop: "
                                                          "it points back to"),
    (lambda pkg: (pkg / "sub" / "top").symlink_to(pkg), "sub/top is a symbolic link loop"),
    (lambda pkg: (pkg / "self").symlink_to("self"), "self is a symbolic link loop"),
    (lambda pkg: (pkg / "gone").symlink_to("../nowhere"), "gone is a symbolic link to "
                                                           "../nowhere, which does not exist"),
])
def test_an_include_whose_links_cannot_be_copied_is_refused_at_load(tmp_path, make, named):
    """The build copies what links point to: a loop would fail only there, after minutes."""
    pkg = tmp_path / "feats"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    make(pkg)
    path = _write(tmp_path, {"images": {"include": ["feats"]}})
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    (line,) = str(raised.value).splitlines()
    assert "include.0: " in line and f"{pkg}/{named}" in line
    assert "remove the link" in line


def test_links_that_copy_fine_are_accepted(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "util.py").write_text("x = 1\n")
    pkg = tmp_path / "feats"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "util").symlink_to(shared)  # outside the package: copied as a folder
    (pkg / "again").symlink_to(shared)  # the same folder twice is no loop
    (pkg / ".git").mkdir()
    (pkg / ".git" / "loop").symlink_to("..")  # hidden: the copy leaves it out
    images = load_config(_write(tmp_path, {"images": {"include": ["feats"]}})).images
    assert images.include_paths == [pkg]


@pytest.mark.parametrize("registry", [
    USER, "localhost:5000/ml", "docker.io/my_org", "gcr.io/my-project/a/b",
    "registry.example.com:443/team/ml-images"])
def test_registries_that_are_accepted(tmp_path, registry):
    images = load_config(_write(tmp_path, {"images": {"registry": registry}})).images
    assert images.references()["gpu"] == f"{registry}/gkeflow-gpu:0.1.0"


@pytest.mark.parametrize("part", ["pipelines", "images"])
def test_lock_inside_the_installed_package_is_refused(tmp_path, part):
    folder = {"pipelines": gkeflow.pipelines, "images": gkeflow.images}[part].__path__[0]
    with pytest.raises(ConfigError, match="inside the installed gkeflow package"):
        load_config(_write(tmp_path, {"images": {"lock": str(Path(folder) / "gkeflow.lock")}}))
    (tmp_path / "link").symlink_to(folder)  # a way round through a link is no way round
    with pytest.raises(ConfigError, match="inside the installed gkeflow package"):
        load_config(_write(tmp_path, {"images": {"lock": "link/gkeflow.lock"}}))


def test_paths_are_relative_to_gkeflow_yaml_not_the_current_directory(tmp_path, monkeypatch):
    project = tmp_path / "project"
    (project / "src" / "feats").mkdir(parents=True)
    (project / "src" / "feats" / "__init__.py").write_text("")
    (project / "src" / "mod.py").write_text("VALUE = 1\n")
    (project / "reqs.txt").write_text("humanize\n")
    path = _write(project, {"images": {"registry": f"{USER}/", "tag": "2026.12.1",
                                       "requirements": "reqs.txt",
                                       "include": ["src/feats", "src/mod.py"]}})
    monkeypatch.chdir(tmp_path)
    images = load_config(Path("project/gkeflow.yaml")).images
    assert images.registry == USER  # trailing slash dropped
    assert images.requirements_path == path.parent.resolve() / "reqs.txt"
    assert images.include_paths == [path.parent.resolve() / "src" / "feats",
                                    path.parent.resolve() / "src" / "mod.py"]
    assert images.lock_path == path.parent.resolve() / "gkeflow.lock"
    assert images.references() == {"slim": f"{USER}/gkeflow:2026.12.1",
                                   "cpu": f"{USER}/gkeflow-cpu:2026.12.1",
                                   "gpu": f"{USER}/gkeflow-gpu:2026.12.1",
                                   "tpu": f"{USER}/gkeflow-tpu:2026.12.1"}
    # no images: section: the lock still lies next to gkeflow.yaml
    (tmp_path / "other").mkdir()
    bare = _write(tmp_path / "other", {})
    assert load_config(bare).images.lock_path == bare.parent.resolve() / "gkeflow.lock"


def test_init_writes_the_images_section_commented_and_it_validates_uncommented(tmp_path):
    block = EXAMPLE_CONFIG[EXAMPLE_CONFIG.index("# images:"):]
    block = block[:block.index("\n\n")]
    for key in ("registry:", "tag:", "requirements:", "include:", "lock: gkeflow.lock"):
        assert key in block
    assert all(line.startswith("#") for line in block.splitlines())
    assert GkeflowConfig.model_validate(yamlio.load(EXAMPLE_CONFIG)).images.registry == ""
    uncommented = "\n".join(line[2:] for line in block.splitlines()
                            if line.startswith(("# images:", "#   registry:")))
    images = load_config(_write(tmp_path, yamlio.load(uncommented))).images
    assert images.registry == USER
    result = subprocess.run([str(Path(sys.executable).parent / "gkeflow"), "init", "--path",
                             str(tmp_path / "new.yaml")], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert block in (tmp_path / "new.yaml").read_text()
    assert "set images.registry" in result.stdout and "`gkeflow images build`" in result.stdout


# --------------------------------------------------------------------------- lock file


def test_lock_round_trip_keeps_other_registries_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "gkeflow.lock"
    assert load_lock(path) == {}
    record(path, f"{USER}/gkeflow-cpu:1", _entry(CPU_DIGEST))
    record(path, "other.example.com/ml/gkeflow-cpu:1", _entry(GPU_DIGEST, pushed=False))
    record(path, f"{USER}/gkeflow-cpu:1", _entry(GPU_DIGEST))  # rebuilt: replaced
    assert load_lock(path) == {f"{USER}/gkeflow-cpu:1": _entry(GPU_DIGEST),
                               "other.example.com/ml/gkeflow-cpu:1": _entry(GPU_DIGEST, False)}
    assert [p.name for p in tmp_path.iterdir()] == ["gkeflow.lock"]


def test_a_bad_digest_is_refused_and_the_lock_untouched(tmp_path):
    path = tmp_path / "gkeflow.lock"
    record(path, f"{USER}/gkeflow-cpu:1", _entry(CPU_DIGEST))
    before = path.read_text()
    with pytest.raises(ImageLockError, match="not a sha256 digest"):
        record(path, f"{USER}/gkeflow-gpu:1", _entry("sha256:abc"))
    assert path.read_text() == before


@pytest.mark.parametrize(("text", "message"), [
    ("{", "not a readable JSON lock file"),
    ("[]", "expected an object with an 'images' mapping"),
    (json.dumps({"images": {"r": "x"}}), "images.r must be an object"),
    (json.dumps({"images": {"r": {"digest": "latest"}}}), "digest must be sha256"),
    (json.dumps({"images": {"r": {"digest": "sha256:" + "0" * 64, "pushed": "false"}}}),
     "images.r.pushed must be true or false; got 'false'"),
])
def test_a_malformed_lock_is_one_line_naming_the_file(tmp_path, text, message):
    path = tmp_path / "gkeflow.lock"
    path.write_text(text)
    with pytest.raises(ImageLockError, match=re.escape(message)) as raised:
        load_lock(path)
    assert str(path) in str(raised.value)


# --------------------------------------------------------------------------- the mapping


def test_without_an_images_section_the_release_references_stay():
    from gkeflow.components.images import SERVING_IMAGE

    assert image_map(GkeflowConfig().images, lock={}) == {
        SLIM_IMAGE: SLIM_IMAGE, CPU_IMAGE: CPU_IMAGE, GPU_IMAGE: GPU_IMAGE,
        TPU_IMAGE: TPU_IMAGE, SERVING_IMAGE: SERVING_IMAGE}


def test_the_mapping_pins_what_was_built_and_names_the_rest_by_tag(tmp_path):
    images = load_config(_write(tmp_path, {"images": {"registry": USER}})).images
    from gkeflow.components.images import SERVING_IMAGE

    lock = {f"{USER}/gkeflow-cpu:0.1.0": _entry(CPU_DIGEST),
            f"{USER}/gkeflow-serving:0.1.0": _entry(CPU_DIGEST)}
    assert image_map(images, lock) == {SLIM_IMAGE: f"{USER}/gkeflow:0.1.0",
                                       CPU_IMAGE: f"{USER}/gkeflow-cpu@{CPU_DIGEST}",
                                       GPU_IMAGE: f"{USER}/gkeflow-gpu:0.1.0",
                                       TPU_IMAGE: f"{USER}/gkeflow-tpu:0.1.0",
                                       SERVING_IMAGE: f"{USER}/gkeflow-serving@{CPU_DIGEST}"}
    # a bare digest keeps the repository (what `--release` tests pass)
    assert pin(CPU_IMAGE, {CPU_IMAGE: CPU_DIGEST}) == f"{REGISTRY}/gkeflow-cpu@{CPU_DIGEST}"


def test_map_references_leaves_other_images_alone():
    mapping = {CPU_IMAGE: f"{USER}/gkeflow-cpu@{CPU_DIGEST}"}
    text = (f'image: {CPU_IMAGE}\n"{{\\"image_uri\\": \\"{CPU_IMAGE}\\"}}"\n'
            f"x: {CPU_IMAGE}-rc1\ny: mirror.example.com/{CPU_IMAGE}\n")
    assert map_references(text, mapping) == (
        f'image: {USER}/gkeflow-cpu@{CPU_DIGEST}\n'
        f'"{{\\"image_uri\\": \\"{USER}/gkeflow-cpu@{CPU_DIGEST}\\"}}"\n'
        f"x: {CPU_IMAGE}-rc1\ny: mirror.example.com/{CPU_IMAGE}\n")


@pytest.fixture(scope="module")
def user_project(tmp_path_factory) -> Path:
    """A project whose images are built: a JobSet/CustomJob trainer, Vizier trials and GPU
    batch scoring, so every kind of launched workload is compiled."""
    root = tmp_path_factory.mktemp("user-project")
    path = _write(root, {
        "images": {"registry": USER},
        "compute": {"train-model": {"replicas": 2},
                    "predict-batch": {"accelerator": "nvidia-l4", "accelerator_count": 1}},
        "sweep": {"engine": "vizier", "max_trials": 4, "parallel_trials": 2,
                  "parameters": {"learning_rate": {"type": "loguniform", "min": 0.0001,
                                                   "max": 0.1}}},
    })
    record(root / "gkeflow.lock", f"{USER}/gkeflow-cpu:0.1.0", _entry(CPU_DIGEST))
    record(root / "gkeflow.lock", f"{USER}/gkeflow-gpu:0.1.0", _entry(GPU_DIGEST))
    record(root / "gkeflow.lock", f"{USER}/gkeflow:0.1.0", _entry(SLIM_DIGEST))
    return path


@pytest.fixture(scope="module")
def user_compiled(user_project, tmp_path_factory) -> dict[str, Path]:
    config = load_config(user_project)
    compute = config.compute_overrides(default_compute())
    out = tmp_path_factory.mktemp("compiled")
    paths = {}
    for pipeline in ("training", "sweep", "prediction", "fanout-prepare"):
        for target in ("gke", "vertex"):
            # Vizier trials run on one machine each: the sweep keeps the default compute
            paths[f"{pipeline}.{target}"] = compile_pipeline(
                pipeline, target, out, compute=None if pipeline == "sweep" else compute,
                release=True, config=config)
    for path in compile_components(out, image_map(config.images), release=True):
        paths[f"component {path.stem}"] = path
    return paths


def test_every_image_string_in_every_compiled_file_is_the_users_pinned_image(user_compiled):
    wanted = {f"{USER}/gkeflow-cpu@{CPU_DIGEST}", f"{USER}/gkeflow-gpu@{GPU_DIGEST}",
              f"{USER}/gkeflow@{SLIM_DIGEST}"}
    seen = set()
    for name, path in user_compiled.items():
        text = path.read_text()
        assert REGISTRY not in text, name
        found = set(IMAGE_RE.findall(text))
        assert found and found <= wanted, (name, found - wanted)
        seen |= found
    assert seen == wanted


def test_launched_workloads_name_the_users_gpu_image(user_compiled):
    gpu = f"{USER}/gkeflow-gpu@{GPU_DIGEST}"
    vertex = next(yamlio.load_all(user_compiled["training.vertex"].read_text()))
    pools = custom_job_payload(vertex)["job_spec"]["worker_pool_specs"]
    assert {p["container_spec"]["image_uri"] for p in pools} == {gpu}  # CustomJob trainer
    gke = next(yamlio.load_all(user_compiled["training.gke"].read_text()))
    templates = [json.loads(p["runtimeValue"]["constant"])
                 for component in [gke["root"], *gke["components"].values()]
                 for task in component.get("dag", {}).get("tasks", {}).values()
                 for key, p in task.get("inputs", {}).get("parameters", {}).items()
                 if key == "jobset_template"]
    (template,) = templates  # JobSet pods
    containers = [c for job in template["spec"]["replicatedJobs"]
                  for c in job["template"]["spec"]["template"]["spec"]["containers"]]
    assert containers and {c["image"] for c in containers} == {gpu}
    sweep = next(yamlio.load_all(user_compiled["sweep.vertex"].read_text()))
    trial_images = {p["runtimeValue"]["constant"]
                    for component in [sweep["root"], *sweep["components"].values()]
                    for task in component.get("dag", {}).get("tasks", {}).values()
                    for key, p in task.get("inputs", {}).get("parameters", {}).items()
                    if key == "trial_image"}
    assert trial_images == {gpu}  # Vizier trials
    prediction = next(yamlio.load_all(user_compiled["prediction.gke"].read_text()))
    scorer = prediction["deploymentSpec"]["executors"]["exec-predict-batch"]["container"]
    assert scorer["image"] == gpu  # batch scoring on a GPU


def test_component_yaml_defaults_and_header_name_the_users_image(user_compiled):
    text = user_compiled["component tune_with_vizier"].read_text()
    assert f"trial_image: str [Default: '{USER}/gkeflow-gpu@{GPU_DIGEST}']" in text
    (interface,) = next(yamlio.load_all(text))["components"].values()
    default = interface["inputDefinitions"]["parameters"]["trial_image"]["defaultValue"]
    assert default == f"{USER}/gkeflow-gpu@{GPU_DIGEST}"


def test_the_repository_compiles_to_the_release_registry():
    compiled = Path(__file__).resolve().parents[2] / "compiled"
    for path in [*compiled.glob("*.yaml"), *(compiled / "components").glob("*.yaml")]:
        assert set(IMAGE_RE.findall(path.read_text())) <= set(IMAGES), path


# --------------------------------------------------------------------------- refusal


def test_refusal_names_each_unbuilt_image_and_the_fix(tmp_path):
    images = load_config(_write(tmp_path, {"images": {"registry": USER}})).images
    text = f"image: {USER}/gkeflow-cpu:0.1.0\nimage: {USER}/gkeflow-gpu:0.1.0\n"
    with pytest.raises(ImagesNotBuilt) as raised:
        require_built(images, text, "send training to gke")
    message = str(raised.value)
    assert message.startswith("refusing to send training to gke: ")
    assert f"{USER}/gkeflow-cpu:0.1.0 was never built" in message
    assert f"{USER}/gkeflow-gpu:0.1.0 was never built" in message
    assert message.endswith("run `gkeflow images build` (it pushes and records the digests)")
    record(images.lock_path, f"{USER}/gkeflow-cpu:0.1.0", _entry(CPU_DIGEST, pushed=False))
    record(images.lock_path, f"{USER}/gkeflow-gpu:0.1.0", _entry(GPU_DIGEST))
    with pytest.raises(ImagesNotBuilt, match="gkeflow-cpu:0.1.0 was built with --no-push"):
        require_built(images, text, "send training to gke")
    record(images.lock_path, f"{USER}/gkeflow-cpu:0.1.0", _entry(CPU_DIGEST))
    require_built(images, text, "send training to gke")  # both built and pushed
    # a reference the mapping missed would be pulled from the release registry
    with pytest.raises(ImagesNotBuilt, match=re.escape(f"{GPU_IMAGE} is still named")):
        require_built(images, text + f"image: {GPU_IMAGE}\n", "send training to gke")
    # a pipeline that runs only the CPU image needs only the CPU image
    record(images.lock_path, f"{USER}/gkeflow-gpu:0.1.0", _entry(GPU_DIGEST, pushed=False))
    require_built(images, f"image: {USER}/gkeflow-cpu@{CPU_DIGEST}\n", "send x to gke")


def test_without_a_registry_the_refusal_says_to_set_one(tmp_path):
    images = load_config(_write(tmp_path, {})).images
    with pytest.raises(ImagesNotBuilt, match=r"set images.registry in gkeflow.yaml .* then run "
                                             r"`gkeflow images build`"):
        require_built(images, f"image: {CPU_IMAGE}\n", "send training to vertex")


@pytest.mark.parametrize("command", [["submit", "--target", "vertex"],
                                     ["schedule", "apply"]])
def test_submit_and_schedule_apply_refuse_images_never_built(tmp_path, command):
    vertex = {"project": "my-project", "region": "europe-west4",
              "pipeline_root": "gs://my-bucket/root",
              "service_account": "pipelines@my-project.iam.gserviceaccount.com"}
    path = _write(tmp_path, {"images": {"registry": USER}, "targets": {"vertex": vertex},
                             "schedules": [{"name": "nightly", "target": "vertex",
                                            "cron": "0 2 * * *"}]})
    result = subprocess.run([str(Path(sys.executable).parent / "gkeflow"), *command,
                             "--config", str(path)], cwd=tmp_path, capture_output=True,
                            text=True, check=False, timeout=300)
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert "refusing to send training to vertex" in line
    assert f"{USER}/gkeflow-cpu:0.1.0 was never built" in line
    assert "run `gkeflow images build`" in line and "Traceback" not in result.stderr
    # a dry run sends nothing: it prints every request with the unbuilt images flagged
    dry = subprocess.run([str(Path(sys.executable).parent / "gkeflow"), *command, "--dry-run",
                          "--config", str(path)], cwd=tmp_path, capture_output=True,
                         text=True, check=False, timeout=300)
    assert dry.returncode == 0, dry.stderr
    flagged = next(x for x in dry.stdout.splitlines() if "was never built" in x)
    assert f"{USER}/gkeflow-cpu:0.1.0 was never built" in flagged
    assert "a real send training to vertex is refused" in flagged
    assert "request(s) would be sent" in dry.stdout and "refusing" not in dry.stdout


def test_a_pipeline_of_your_own_gets_the_same_mapping(tmp_path, monkeypatch):
    """examples/feature_selection_pipeline.py compiles with kfp directly, then maps."""
    from examples import feature_selection_pipeline as example

    _write(tmp_path, {"images": {"registry": USER}})
    record(tmp_path / "gkeflow.lock", f"{USER}/gkeflow-cpu:0.1.0", _entry(CPU_DIGEST))
    record(tmp_path / "gkeflow.lock", f"{USER}/gkeflow-gpu:0.1.0", _entry(GPU_DIGEST))
    record(tmp_path / "gkeflow.lock", f"{USER}/gkeflow:0.1.0", _entry(SLIM_DIGEST))
    monkeypatch.chdir(tmp_path)
    text = example.compile_for("vertex", tmp_path / "fs.yaml").read_text()
    found = set(IMAGE_RE.findall(text))
    assert found == {f"{USER}/gkeflow-cpu@{CPU_DIGEST}", f"{USER}/gkeflow-gpu@{GPU_DIGEST}",
                     f"{USER}/gkeflow@{SLIM_DIGEST}"}
