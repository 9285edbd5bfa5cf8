"""`gkeflow plan` shows what the compiled YAML requests; compute overrides from file and flags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gkeflow.components import yamlio
from gkeflow.components.images import pin
from gkeflow.pipelines.cli.main import main
from gkeflow.pipelines.compute.plan import plan
from gkeflow.pipelines.compute.profiles import GKE_TO_VERTEX_ACCELERATOR
from gkeflow.pipelines.definitions.training import resolve_compute, step_images
from gkeflow.pipelines.settings.config import GkeflowConfig
from gkeflow.pipelines.settings.images_config import image_map
from tests.compile.customjob import custom_job_payload, strict_custom_job

REPO = Path(__file__).resolve().parents[2]


def _invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _compiled(target: str) -> tuple[dict, dict]:
    docs = [d for d in yamlio.load_all((REPO / "compiled" / f"training.{target}.yaml")
                                          .read_text()) if d]
    return docs[0], (docs[1] if len(docs) > 1 else {})


@pytest.mark.parametrize("target", ["gke", "vertex"])
def test_plan_rows_match_the_committed_compiled_yaml(target):
    spec, platform = _compiled(target)
    tasks = dict(spec["root"]["dag"]["tasks"])
    for component in spec["components"].values():
        tasks.update(component.get("dag", {}).get("tasks", {}))
    k8s = (platform.get("platforms", {}).get("kubernetes", {}).get("deploymentSpec", {})
           .get("executors", {}))
    lock = image_map(GkeflowConfig().images)  # the repository has no gkeflow.yaml
    profiles = resolve_compute(target)
    images = {step: pin(image, lock) for step, image in step_images(profiles).items()}
    rows = plan(profiles, target, images)
    assert [r.step for r in rows] == ["fingerprint-data", "prepare-data", "train-gbdt",
                                      "train-mlp", "train-linear", "train-model",
                                      "evaluate-model", "register-model", "deploy-model"]
    for row in rows:
        executor = spec["deploymentSpec"]["executors"][f"exec-{row.step}"]["container"]
        job = custom_job_payload(spec, row.step) if target == "vertex" else None
        if job is not None:  # the step launches a CustomJob: the plan shows the job's machines
            job = strict_custom_job(job).job_spec
            chief = job.worker_pool_specs[0]
            assert chief.container_spec.image_uri == row.image
            assert chief.machine_spec.machine_type == row.machine
            assert str(chief.machine_spec.accelerator_count) == row.count
            assert (chief.machine_spec.accelerator_type.name
                    if chief.machine_spec.accelerator_count else "-") == row.accelerator
            assert row.timeout == f"{int(job.scheduling.timeout.total_seconds()) // 3600}h"
            continue
        resources = executor["resources"]
        assert executor["image"] == row.image
        assert resources["resourceCpuLimit"] == row.cpu
        assert resources["resourceMemoryLimit"] == row.memory
        accelerator = resources.get("accelerator", {})
        assert accelerator.get("resourceCount", "0") == row.count
        if accelerator and target == "vertex":
            assert row.accelerator == accelerator["resourceType"]
            assert row.accelerator in GKE_TO_VERTEX_ACCELERATOR.values()
        elif accelerator:
            assert row.accelerator.startswith(accelerator["resourceType"])
            selector = k8s[f"exec-{row.step}"]["nodeSelector"]["labels"]
            assert row.accelerator == (
                f"nvidia.com/gpu ({selector['cloud.google.com/gke-accelerator']})")
        else:
            assert row.accelerator == "-"
        cached = tasks[row.step]["cachingOptions"].get("enableCache", False)
        assert row.caching == ("on" if cached else "off")
        retry = tasks[row.step].get("retryPolicy")
        assert row.retries.split(" ")[0] == str(retry["maxRetryCount"] if retry else 0)
        if target == "gke":
            seconds = int(k8s[f"exec-{row.step}"]["activeDeadlineSeconds"])
            assert row.timeout in {f"{seconds}s", f"{seconds // 60}m", f"{seconds // 3600}h"}
        else:
            assert row.timeout.startswith("not enforced")


def test_plan_command_prints_every_step_and_the_image_state():
    result = _invoke("plan", "--target", "vertex")
    assert result.exit_code == 0, result.output
    for text in ("training on vertex", "prepare-data", "train-model", "NVIDIA_TESLA_T4",
                 "n1-standard-8", "evaluate-model", "register-model", "gkeflow-gpu:0.1.0",
                 "tag only, not built: run `gkeflow images build`",
                 "note: timeout_s is not enforced on Vertex AI Pipelines"):
        assert text in result.output, text


def test_plan_names_each_steps_image_kind_and_its_pull_size(monkeypatch):
    from gkeflow.components.images import CPU_IMAGE, GPU_IMAGE, PULL_SIZES, SLIM_IMAGE

    monkeypatch.setenv("COLUMNS", "400")
    result = _invoke("plan", "--target", "gke")
    assert result.exit_code == 0, result.output
    lines = {line.split(" ", 2)[1]: line for line in result.output.splitlines()
             if line.startswith("image ")}
    assert set(lines) == {SLIM_IMAGE, CPU_IMAGE, GPU_IMAGE}
    assert lines[SLIM_IMAGE].endswith("): fingerprint-data, prepare-data, register-model")
    # the candidates of model_type auto on GPUs, the linear one and train-model (choosing
    # among them) on CPUs
    assert lines[CPU_IMAGE].endswith(
        "): train-linear, train-model, evaluate-model, deploy-model")
    assert lines[GPU_IMAGE].endswith("): train-gbdt, train-mlp")
    for image, flavour in ((SLIM_IMAGE, "slim"), (CPU_IMAGE, "cpu"), (GPU_IMAGE, "gpu")):
        size = PULL_SIZES[flavour]
        wanted = (f"pull about {size / 1e9:.2f} GB, measured: bench/RESULTS.md" if size
                  else "pull size unknown")
        assert wanted in lines[image], lines[image]


def test_plan_and_compile_explain_themselves():
    for command in ("plan", "compile"):
        result = _invoke(command, "--help")
        assert result.exit_code == 0
        assert "--compute STEP.FIELD=VALUE" in result.output
        assert "--config" in result.output
    assert "--release" in _invoke("compile", "--help").output


def test_plan_with_overrides_from_flags():
    result = _invoke("plan", "--wide", "--target", "gke", "--compute",
                     "train-model.accelerator=NVIDIA_L4",
                     "--compute", "train-model.accelerator_count=8", "--compute",
                     "train-model.cpu=90", "--compute", "train-model.memory=300G",
                     "--compute", "train-model.spot=true")
    assert result.exit_code == 0, result.output
    assert "nvidia.com/gpu (nvidia-l4)" in result.output
    assert "g2-standard-96 or larger" in result.output
    assert "143051Mi" in result.output  # half the memory as a memory-backed /dev/shm


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--compute", "train-model.accelerator_count=3"],
         ("train-model: nvidia-tesla-t4 x 3 fits no machine; the N1 family hosts "
         "nvidia-tesla-t4 in counts of 1, 2, 4")),
        (["--compute", "train-model.accelerator=nvidia-tesla-k80"],
         "train-model: unknown accelerator 'nvidia-tesla-k80'"),
        (["--compute", "evaluate-model.accelerator_count=1"],
         "evaluate-model: asks for 1 GPU but names no accelerator"),
    ],
)
def test_invalid_compute_is_refused_before_compiling(tmp_path, args, message):
    for command in (["plan"], ["compile", "--output", str(tmp_path)]):
        result = CliRunner().invoke(main, command + args)
        assert result.exit_code == 1, result.output
        assert message in result.output
    assert not list(tmp_path.iterdir())


def test_bad_override_syntax_is_a_usage_error():
    result = CliRunner().invoke(main, ["plan", "--compute", "train-model.gpus=2"])
    assert result.exit_code == 2
    assert "unknown compute field gpus" in result.output


def test_compute_from_gkeflow_yaml_then_flags(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("gkeflow.yaml").write_text(
        "compute:\n"
        "  train-model: {accelerator: nvidia-a100-80gb, accelerator_count: 2, cpu: '20',\n"
        "                memory: 160G, spot: true}\n"
    )
    out = tmp_path / "out"
    result = _invoke("compile", "--output", str(out), "--compute", "train-model.cpu=22")
    assert result.exit_code == 0, result.output
    # Training runs as a CustomJob on Vertex AI (it has a timeout), which honours spot.
    assert "spot is not applied on Vertex AI Pipelines" not in result.output
    vertex = yamlio.load((out / "training.vertex.yaml").read_text())
    job = strict_custom_job(custom_job_payload(vertex)).job_spec
    assert job.scheduling.strategy.name == "SPOT"
    assert job.worker_pool_specs[0].machine_spec.accelerator_type.name == "NVIDIA_A100_80GB"
    gke = (out / "training.gke.yaml").read_text()
    assert "cloud.google.com/gke-accelerator: nvidia-a100-80gb" in gke
    assert "cloud.google.com/gke-spot: 'true'" in gke
    # --check compares against what the same file and flags produce.
    check = ["compile", "--output", str(out), "--check"]
    assert _invoke(*check, "--compute", "train-model.cpu=22").exit_code == 0
    stale = CliRunner().invoke(main, check)
    assert stale.exit_code == 1 and "stale:" in stale.output


def test_invalid_gkeflow_yaml_names_the_step(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("gkeflow.yaml").write_text(
        "compute:\n  train-model: {accelerator: nvidia-tesla-a100, accelerator_count: 3}\n")
    result = CliRunner().invoke(main, ["plan"])
    assert result.exit_code == 1
    assert "train-model: nvidia-tesla-a100 x 3 fits no machine" in result.output
    Path("gkeflow.yaml").write_text("compute:\n  train-model: {spot: sometimes}\n")
    result = CliRunner().invoke(main, ["plan"])
    assert result.exit_code == 1
    assert "compute.train-model: spot must be true or false" in result.output


def test_release_compile_refuses_the_unbuilt_images(tmp_path):
    result = CliRunner().invoke(main, ["compile", "--release", "--output", str(tmp_path)])
    assert result.exit_code == 1
    assert "refusing a release build of training for gke" in result.output
    assert "referenced by tag only" in result.output


def test_plan_fits_columns_also_when_piped_wide_and_json_show_everything():
    from gkeflow.pipelines.compute.plan import PlanRow

    narrow = CliRunner().invoke(main, ["plan", "--target", "gke"], env={"COLUMNS": "100"})
    assert narrow.exit_code == 0, narrow.output
    lines = narrow.output.splitlines()
    assert max(len(line) for line in lines) <= 100
    table = [line for line in lines if line.startswith("│")]
    # one line per CPU step, no word cut in two: the table wraps at spaces
    for step in ("fingerprint-data", "prepare-data", "evaluate-model", "register-model"):
        [row] = [line for line in table if step in line]
        assert "any node pool" in row
    assert "nvidia-tesla-t4" in narrow.output and "image" not in table[0]
    assert "requested as nvidia.com/gpu" in narrow.output

    wide = CliRunner().invoke(main, ["plan", "--target", "gke", "--wide"], env={"COLUMNS": ""})
    header = next(line for line in wide.output.splitlines() if "step" in line)
    for column in ("image", "queue", "disk", "retries", "caching", "shm"):
        assert column in header, column
    assert len(wide.output.splitlines()) < len(lines) + 8  # one line per step, piped

    as_json = CliRunner().invoke(main, ["plan", "--target", "vertex", "--output", "json"])
    assert as_json.exit_code == 0, as_json.output
    data = json.loads(as_json.output)
    assert (data["pipeline"], data["target"]) == ("training", "vertex")
    assert [set(step) for step in data["steps"]] == [set(PlanRow.__dataclass_fields__)] * 9
    train = next(step for step in data["steps"] if step["step"] == "train-mlp")
    assert train["accelerator"] == "NVIDIA_TESLA_T4"
    assert any("timeout_s is not enforced" in note for note in data["notes"])
    assert "train-model" in data["images"]


def test_plan_counts_one_of_a_thing_in_the_singular(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    one_gpu = ("--compute", "train-model.accelerator=nvidia-l4",
               "--compute", "train-model.accelerator_count=1")
    vertex = _invoke("plan", "--target", "vertex", *one_gpu,
                     "--compute", "train-model.scheduling=spot")
    assert vertex.exit_code == 0, vertex.output
    assert "(1 x NVIDIA_L4 each, 1 GPU in all)" in vertex.output
    assert "GPUs in all" not in vertex.output
    Path("gkeflow.yaml").write_text(
        "sweep:\n  max_trials: 1\n  parallel_trials: 1\n  parameters:\n"
        "    learning_rate: {type: choice, values: [0.01]}\n")
    sweep = _invoke("plan", "sweep", *one_gpu)
    assert sweep.exit_code == 0, sweep.output
    assert "sweep: 1 trial, " in sweep.output
    assert ("sweep: 1 GPU per trial, at most 1 trial at once = at most 1 GPU in use at once"
            in sweep.output)
    two = _invoke("plan", "--target", "vertex", "--compute", "train-model.replicas=2",
                  *one_gpu)
    assert "(1 x NVIDIA_L4 each, 2 GPUs in all)" in two.output


def test_compute_errors_count_in_the_singular():
    from gkeflow.pipelines.compute.profiles import ComputeError, ComputeProfile
    from gkeflow.pipelines.definitions.sweep import resolve_sweep_compute

    with pytest.raises(ComputeError, match=r"^unknown step nosuch; steps are "):
        resolve_sweep_compute("gke", {"nosuch": ComputeProfile()})
    with pytest.raises(ComputeError, match=r"^unknown compute field gpus; valid"):
        ComputeProfile().with_overrides(gpus=1)
    one = CliRunner().invoke(main, ["plan", "--compute", "evaluate-model.accelerator_count=1"])
    assert "asks for 1 GPU but" in one.output and "GPU(s)" not in one.output


def test_the_tag_only_note_names_only_the_images_the_written_files_use(tmp_path):
    result = CliRunner().invoke(main, ["compile", "--output", str(tmp_path / "a")])
    assert result.exit_code == 0, result.output
    note = next(line for line in result.output.splitlines() if "referenced by tag only" in line)
    assert "/gkeflow-cpu:" in note and "/gkeflow:" in note
    # no step of these pipelines trains on a TPU: its image is in no file, nor in the note
    written = "".join(p.read_text() for p in (tmp_path / "a").rglob("*.yaml"))
    assert "/gkeflow-tpu:" not in written and "/gkeflow-tpu:" not in note


def test_plan_says_what_the_default_model_trains_and_where():
    from gkeflow.pipelines.cli.plan import candidates_note
    from gkeflow.pipelines.compute.profiles import ComputeProfile
    from gkeflow.pipelines.definitions.training import resolve_compute

    l4 = ComputeProfile(accelerator="nvidia-l4", accelerator_count=1, cpu="8", memory="32G")
    note = candidates_note(resolve_compute("gke", {"train-model": l4}))
    assert "side by side (train-gbdt, train-mlp, train-linear)" in note
    assert "train-model keeps the best on the eval split" in note
    four = l4.with_overrides(replicas=4)
    assert "the Keras MLP alone on 4 workers" in candidates_note(
        resolve_compute("gke", {"train-model": four}))
    result = _invoke("plan", "--target", "gke")
    assert "note: model_type auto (the default): the candidates train side by side" in " ".join(
        result.output.split())
