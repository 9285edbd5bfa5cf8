"""`gkeflow run --pipeline sweep` errors and `gkeflow plan sweep`, through the console script."""

from __future__ import annotations

from gkeflow.components import yamlio
from tests.cli.test_cli import gkeflow


def test_plan_sweep_shows_trials_gpus_per_trial_and_at_once(tmp_path):
    (tmp_path / "gkeflow.yaml").write_text(
        "sweep:\n  max_trials: 6\n  parallel_trials: 3\n  parameters:\n"
        "    learning_rate: {type: loguniform, min: 0.0001, max: 0.1}\n")
    result = gkeflow("plan", "sweep", "--target", "vertex", "--compute",
                     "train-model.accelerator_count=2", "--compute", "train-model.cpu=14",
                     "--compute", "train-model.memory=52G", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "select-best-trial" in result.stdout and "NVIDIA_TESLA_T4" in result.stdout
    assert "sweep: 6 trials, random search over learning_rate" in result.stdout
    assert ("sweep: 2 GPUs per trial, at most 3 trials at once = at most 6 GPUs in use "
            "at once") in result.stdout


def test_invalid_sweeps_are_reported_before_anything_runs(tmp_path):
    bad_flag = gkeflow("run", "--pipeline", "sweep", "--sweep-param", "momentum=0.1,0.9",
                       "--output", str(tmp_path / "out"), cwd=tmp_path,
                       before_any_step=True)
    assert bad_flag.returncode == 2
    assert "sweep.parameters.momentum: not a tunable hyperparameter" in bad_flag.stderr
    assert "Traceback" not in bad_flag.stderr and not (tmp_path / "out").exists()
    (tmp_path / "gkeflow.yaml").write_text(
        "sweep:\n  algorithm: grid\n  parameters:\n"
        "    learning_rate: {type: uniform, min: 0.001, max: 0.1}\n")
    bad_file = gkeflow("run", "--pipeline", "sweep", "--output", str(tmp_path / "out"),
                       cwd=tmp_path, before_any_step=True)
    assert bad_file.returncode == 1
    assert "gkeflow.yaml: sweep: parameters.learning_rate: a uniform range has no grid" in (
        bad_file.stderr)
    plan = gkeflow("plan", "sweep", cwd=tmp_path)
    assert plan.returncode == 1 and "a uniform range has no grid" in plan.stderr


def test_run_help_lists_the_pipelines_and_sweep_flags():
    result = gkeflow("run", "--help")
    assert result.returncode == 0
    assert "[training|prediction|sweep]" in result.stdout and "--sweep-param" in result.stdout


def test_compile_takes_the_sweep_of_the_config_given_not_the_one_here(tmp_path):
    """`gkeflow compile --config` (and --check) read the sweep: section of that file, not
    ./gkeflow.yaml."""

    (tmp_path / "gkeflow.yaml").write_text(
        "sweep:\n  algorithm: grid\n  parameters:\n"
        "    learning_rate: {type: choice, values: [0.0999]}\n")
    (tmp_path / "elsewhere").mkdir()
    config = tmp_path / "elsewhere" / "team.yaml"
    config.write_text("sweep:\n  algorithm: grid\n  parallel_trials: 2\n  parameters:\n"
                      "    learning_rate: {type: choice, values: [0.0123, 0.0456]}\n")
    out = tmp_path / "compiled"
    result = gkeflow("compile", "--target", "gke", "--config", str(config),
                     "--output", str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    spec = next(yamlio.load_all((out / "sweep.gke.yaml").read_text()))
    trials = spec["root"]["inputDefinitions"]["parameters"]["trials"]["defaultValue"]
    assert [t["learning_rate"] for t in trials] == [0.0123, 0.0456]
    fresh = gkeflow("compile", "--check", "--target", "gke", "--config", str(config),
                    "--output", str(out), cwd=tmp_path)
    assert fresh.returncode == 0, fresh.stdout
    other = gkeflow("compile", "--check", "--target", "gke", "--output", str(out),
                    cwd=tmp_path)
    assert other.returncode == 1 and "stale: " in other.stdout
    assert "sweep.gke.yaml" in other.stdout and "training.gke.yaml" not in other.stdout


def test_submit_dry_run_validates_the_compute_of_the_config_given(tmp_path):
    """`gkeflow submit` compiles with the --config file's compute: section, refusing what
    the target cannot host in one line, before any request."""
    (tmp_path / "elsewhere").mkdir()
    config = tmp_path / "elsewhere" / "team.yaml"
    config.write_text(
        "targets:\n  vertex:\n    project: my-project\n    region: us-central1\n"
        "    pipeline_root: gs://my-bucket/root\n"
        "    service_account: pipelines@my-project.iam.gserviceaccount.com\n"
        "compute:\n  train-model: {accelerator_count: 3}\n")
    result = gkeflow("submit", "sweep", "--target", "vertex", "--dry-run", "--config",
                     str(config), cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "Error: invalid compute for target vertex: - train-model: nvidia-tesla-t4 x 3 fits no "
        "machine; the N1 family hosts nvidia-tesla-t4 in counts of 1, 2, 4"]
