"""`gkeflow run`: every option is honoured by each --pipeline it applies to and refused, in
one line with exit 2, by the others; a sweep takes the training run's --data forms,
columns, --compute, --config and --require-registered."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from gkeflow.pipelines.cli.main import main
from gkeflow.pipelines.cli.run import run
from gkeflow.pipelines.cli.run_options import APPLICABLE
from tests.cli.test_cli import gkeflow


def invoke(*args: str):
    return CliRunner().invoke(main, ["run", *args], catch_exceptions=False)


def _one_line_usage_error(result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_every_run_option_is_classified_for_every_pipeline():
    """A new option must say which pipelines take it, or it would be dropped silently."""
    known = set().union(*APPLICABLE.values())
    assert {p.name for p in run.params} <= known
    assert set(APPLICABLE) == set(run.params[0].type.choices)  # --pipeline's choices


@pytest.mark.parametrize("pipeline, args, message", [
    ("prediction", ["--epochs", "20"], "--epochs applies to --pipeline training and sweep, "
                                       "not prediction"),
    ("prediction", ["--label", "y"], "--label applies"),
    ("prediction", ["--require-registered"], "--require-registered applies"),
    ("prediction", ["--key", "id"], "--key applies"),
    ("prediction", ["--user-module", "m.py"], "--user-module applies"),
    ("prediction", ["--sweep-param", "learning_rate=0.1"], "--sweep-param applies to "
                                                           "--pipeline sweep, not prediction"),
    ("training", ["--max-trials", "3"], "--max-trials applies to --pipeline sweep, not training"),
    ("training", ["--search", "grid"], "--search applies"),
    ("training", ["--model", "m@2"], "--model applies to --pipeline prediction, not training"),
    ("sweep", ["--model", "m"], "--model applies to --pipeline prediction, not sweep"),
    ("sweep", ["--compute", "train-model.replicas=2"], "replicas=2 does not apply to "
                                                       "--pipeline sweep"),
    ("sweep", ["--compute", "predict-batch.cpu=2"], "predict-batch is not a step of "
                                                    "--pipeline sweep"),
    ("training", ["--compute", "select-best-trial.cpu=2"], "select-best-trial is not a step "
                                                           "of --pipeline training"),
    ("prediction", ["--compute", "train-model.cpu=2"], "train-model is not a step of "
                                                       "--pipeline prediction"),
])
def test_options_of_other_pipelines_are_refused_in_one_line(tmp_path, pipeline, args, message):
    out = tmp_path / "out"
    result = invoke("--pipeline", pipeline, *args, "--output", str(out))
    _one_line_usage_error(result, message)
    assert not out.exists()


def test_an_option_given_at_its_default_value_is_still_refused(tmp_path):
    result = invoke("--pipeline", "prediction", "--batch-size", "32", "--data", "x.csv",
                    "--output", str(tmp_path))
    _one_line_usage_error(result, "--batch-size applies")


@pytest.mark.parametrize("pipeline", ["training", "sweep"])
def test_sweep_checks_data_params_and_columns_like_training(tmp_path, write_csv, pipeline):
    out = tmp_path / "out"
    csv = write_csv("id,x,y\n1,0.5,a\n2,0.7,b\n")
    bad_bq = invoke("--pipeline", pipeline, "--data", "bq://nodots", "--label", "y",
                    "--output", str(out))
    assert bad_bq.exit_code == 2 and "malformed BigQuery URI" in bad_bq.output
    no_match = invoke("--pipeline", pipeline, "--data", str(tmp_path / "none-*.csv"),
                      "--label", "y", "--output", str(out))
    assert no_match.exit_code == 2 and "none-*.csv" in no_match.output
    bad_label = invoke("--pipeline", pipeline, "--data", str(csv), "--label", "nope",
                       "--output", str(out))
    assert bad_label.exit_code == 1 and "unknown column(s) 'nope'" in bad_label.output
    bad_policy = invoke("--pipeline", pipeline, "--data", str(csv), "--label", "y",
                        "--param", "thresholds=f1_macro>>0.9", "--output", str(out))
    assert bad_policy.exit_code == 1 and "f1_macro>>0.9" in bad_policy.output
    no_rows = invoke("--pipeline", pipeline, "--data", str(write_csv("id,x,y\n", "empty.csv")),
                     "--label", "y", "--output", str(out))
    assert no_rows.exit_code == 1, no_rows.output
    assert "data has a header but no data rows" in no_rows.output
    assert "fingerprint-data" not in no_rows.output and "Traceback" not in no_rows.output
    assert not out.exists()


@pytest.mark.parametrize("option, parameter", [("--key", "key_column"),
                                               ("--exclude", "exclude_columns"),
                                               ("--features", "feature_columns")])
@pytest.mark.parametrize("pipeline", ["training", "sweep"])
def test_column_options_reach_the_pipeline_or_are_refused(tmp_path, write_csv, pipeline,
                                                          option, parameter):
    """Columns are checked against the file's header when the pipeline takes them; a
    pipeline without the parameter refuses the option instead of dropping it."""
    from gkeflow.pipelines.definitions.sweep import build_sweep_pipeline
    from gkeflow.pipelines.definitions.training import training_pipeline

    csv = write_csv("id,x,y\n1,0.5,a\n2,0.7,b\n")
    result = invoke("--pipeline", pipeline, "--data", str(csv), "--label", "y",
                    option, "nosuch", "--output", str(tmp_path / "out"))
    built = training_pipeline if pipeline == "training" else build_sweep_pipeline("local")
    if parameter in built.component_spec.inputs:
        assert result.exit_code == 1 and "'nosuch'" in result.output, result.output
    else:
        _one_line_usage_error(result, f"{option} does not apply to --pipeline {pipeline}")


def test_sweep_compute_reaches_the_sweep_pipeline(tmp_path):
    """Only the sweep's own step list knows select-best-trial; its validation refuses
    several replicas for it."""
    result = invoke("--pipeline", "sweep", "--compute", "select-best-trial.replicas=2",
                    "--output", str(tmp_path / "out"))
    assert result.exit_code == 1
    assert "select-best-trial: replicas 2" in result.output and "Traceback" not in result.output


def test_sweep_reads_compute_and_sweep_from_config(tmp_path):
    other = tmp_path / "elsewhere"
    other.mkdir()
    config = other / "team.yaml"
    config.write_text("compute:\n  train-model:\n    replicas: 3\n")
    result = invoke("--pipeline", "sweep", "--config", str(config),
                    "--output", str(tmp_path / "out"))
    _one_line_usage_error(result, "train-model.replicas=3 does not apply to --pipeline sweep")
    config.write_text("sweep:\n  algorithm: grid\n  parameters:\n"
                      "    learning_rate: {type: uniform, min: 0.001, max: 0.1}\n")
    result = invoke("--pipeline", "sweep", "--config", str(config),
                    "--output", str(tmp_path / "out"))
    assert result.exit_code == 1 and "a uniform range has no grid" in result.output


def _parts(folder: Path, rows: int = 120) -> Path:
    """Two CSV files in one folder: a separable label over x1, x2."""
    folder.mkdir()
    rng = random.Random(5)
    for part in range(2):
        lines = ["x1,x2,label"]
        for _ in range(rows // 2):
            x1, x2 = rng.uniform(-1, 1), rng.uniform(-1, 1)
            lines.append(f"{x1:.4f},{x2:.4f},{'pos' if x1 + x2 > 0 else 'neg'}")
        (folder / f"part-{part}.csv").write_text("\n".join(lines) + "\n")
    return folder


@pytest.mark.slow
def test_tiny_sweep_on_a_folder_with_config_elsewhere_and_require_registered(tmp_path):
    """A real kfp.local sweep of one trial: a folder as --data, the sweep: section from a
    config in another directory, --compute honoured, exit 3 when the gate blocks."""
    data = _parts(tmp_path / "parts")
    other = tmp_path / "elsewhere"
    other.mkdir()
    config = other / "team.yaml"
    config.write_text("sweep:\n  algorithm: grid\n  parallel_trials: 1\n  parameters:\n"
                      "    learning_rate: {type: choice, values: [0.00001]}\n"
                      "    hidden_units: {type: choice, values: ['4']}\n")
    out = tmp_path / "out"
    result = gkeflow("run", "--pipeline", "sweep", "--data", str(data), "--label", "label",
                     "--config", str(config), "--compute", "train-model.caching=false",
                     "--epochs", "1", "--min-accuracy", "1.0", "--require-registered",
                     "--output", str(out), cwd=tmp_path)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "sweep of 1 trial, 1 at a time (grid search over learning_rate, hidden_units" in (
        result.stdout)
    assert "Best trial: trial-000" in result.stdout
    assert "NOT REGISTERED" in result.stdout
    run_dir = next((out / "runs").glob("gkeflow-sweep-*"))
    prepared = json.loads((run_dir / "prepare-data" / "executor_output.json").read_text())
    metadata = prepared["artifacts"]["dataset"]["artifacts"][0]["metadata"]
    assert metadata["rows_read"] == 120  # both files of the folder
    trained = json.loads(next(run_dir.glob("for-loop-*/train-model/executor_output.json"))
                         .read_text())
    assert json.loads(trained["parameterValues"]["Output"])["trial_id"] == "trial-000"


def test_prediction_compute_reaches_the_prediction_pipeline(tmp_path):
    result = invoke("--pipeline", "prediction", "--compute", "predict-batch.replicas=2",
                    "--output", str(tmp_path / "out"))
    assert result.exit_code == 1
    assert "predict-batch: replicas 2" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("pipeline, step", [("training", "prepare-data"),
                                            ("prediction", "predict-batch")])
def test_config_compute_reaches_training_and_prediction_runs(tmp_path, pipeline, step):
    """--config alone (no --compute) gives the run its compute: section."""
    config = tmp_path / "elsewhere.yaml"
    config.write_text(f"compute:\n  {step}:\n    replicas: 2\n")
    result = invoke("--pipeline", pipeline, "--config", str(config),
                    "--output", str(tmp_path / "out"))
    assert result.exit_code == 1, result.output
    assert f"{step}: replicas 2" in result.output and "Traceback" not in result.output


def test_a_task_decided_before_the_run_leaves_the_step_its_own_reason(tmp_path):
    # the run passes the task it decided to the prepare step, which finds the same in the
    # rows and writes the data's reason in its report, not "asked for (--task ...)"
    from gkeflow.components.prepare.logic import prepare
    from gkeflow.pipelines.cli.run_options import run_arguments
    from gkeflow.pipelines.definitions.training import training_pipeline

    data = tmp_path / "loans.csv"
    data.write_text("a,b,y\n" + "".join(f"{i},{i % 4},{i * 13 % 97 / 3:.2f}\n"
                                        for i in range(120)))
    notes, decided = [], {}
    arguments = run_arguments(
        training_pipeline, "training", data=str(data), label="y", output=tmp_path / "out",
        epochs=1, batch_size=8, learning_rate=0.01, train_ratio=0.7, eval_ratio=0.15,
        test_ratio=0.15, model_name=None, min_accuracy=0.8, model_type="auto",
        user_module=None, params=(), notes=notes, decided=decided)
    assert arguments["task"] == "regression" and decided == {"task": "regression"}
    assert notes[0].startswith("task: regression of 'y' (numbers with")
    prepared = prepare(str(data), tmp_path / "dataset", "y", task=arguments["task"])
    assert prepared.schema.task == "regression"
    assert "asked for" not in prepared.schema.task_reason


@pytest.mark.parametrize("value", ["0", "many"])
def test_steps_at_once_must_be_a_whole_number_of_at_least_one(tmp_path, value):
    out = tmp_path / "out"
    result = invoke("--steps-at-once", value, "--output", str(out))
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.strip().splitlines()[-1].startswith(
        "Error: Invalid value for '--steps-at-once'")
    assert not out.exists()
