"""The `gkeflow` command through its real entry point (tests/gkeflow_cli.py). (Whole runs on
another CSV, with --model-type and --param: tests/cli/test_run_inputs_and_cache.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gkeflow_cli import gkeflow

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("command", [
    [], ["run"], ["compile"], ["models"], ["models", "list"], ["models", "promote"],
    ["prices"], ["prices", "list"], ["prices", "refresh"],
])
def test_every_command_has_help(command):
    result = gkeflow(*command, "--help")
    assert result.returncode == 0, result.stderr
    assert "Usage: gkeflow" in result.stdout
    assert len(result.stdout.splitlines()) > 3


def test_data_without_label_is_a_usage_error(tmp_path, churn_csv):
    result = gkeflow("run", "--data", str(churn_csv), "--output", str(tmp_path),
                     before_any_step=True)
    assert result.returncode == 2
    assert "--label is required" in result.stderr


def test_bad_ratios_are_a_usage_error(tmp_path):
    result = gkeflow("run", "--train-ratio", "0.9", "--output", str(tmp_path),
                     before_any_step=True)
    assert result.returncode == 2 and "sum to 1" in result.stderr


def test_unknown_columns_fail_before_any_step_listing_the_columns(tmp_path, churn_csv):
    result = gkeflow("run", "--data", str(churn_csv), "--label", "nope", "--output",
                     str(tmp_path), before_any_step=True)
    assert result.returncode == 1
    assert "label_column: unknown column(s) 'nope'; available columns:" in result.stderr
    assert "prepare-data" not in result.stdout and "Traceback" not in result.stderr
    header = churn_csv.read_text().splitlines()[0]
    for flag in ("--key", "--exclude", "--features"):
        result = gkeflow("run", "--data", str(churn_csv), "--label", "status", flag, "bogus",
                         "--output", str(tmp_path), before_any_step=True)
        assert result.returncode == 1, flag
        assert "unknown column(s) 'bogus'" in result.stderr
        assert f"available columns: {header.replace(',', ', ')}" in result.stderr


@pytest.mark.parametrize("param, message", [
    ("thresholds=f1_macro>>0.8", "invalid threshold 'f1_macro>>0.8'"),
    ("comparison_metric=speed", "unknown comparison_metric 'speed'"),
])
def test_policy_parameters_fail_before_any_step(tmp_path, param, message):
    result = gkeflow("run", "--param", param, "--output", str(tmp_path), before_any_step=True)
    assert result.returncode == 1 and message in result.stderr
    assert "prepare-data" not in result.stdout


@pytest.mark.slow
def test_a_data_error_in_a_step_is_a_short_message_traceback_with_debug(tmp_path, write_csv):
    # half the rows have no label: found only by reading every row, so the step refuses it
    data = write_csv("a,b,y\n" + "".join(f"{i},{i % 3},{'' if i % 2 else 'pq'[i % 4 // 2]}\n"
                                         for i in range(40)))
    result = gkeflow("run", "--data", str(data), "--label", "y", "--output",
                     str(tmp_path / "one"))
    assert result.returncode == 1
    assert "FAILED: step prepare-data" in result.stdout
    assert "20 of 40 rows rejected" in result.stdout
    assert "Traceback" not in result.stdout and "File \"" not in result.stdout
    debug = gkeflow("run", "--data", str(data), "--label", "y", "--debug", "--output",
                    str(tmp_path / "two"))
    assert debug.returncode == 1 and "Traceback" in debug.stdout
    assert "DataError" in debug.stdout


def test_models_list_without_registry(tmp_path):
    result = gkeflow("models", "list", "--registry", f"sqlite:///{tmp_path / 'none.db'}")
    assert result.returncode == 1 and "no registry" in result.stderr


def test_compile_writes_and_check_detects_drift(tmp_path):
    assert gkeflow("compile", "--output", str(tmp_path)).returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "components", "fanout-prepare.gke.yaml", "fanout-prepare.vertex.yaml",
        "prediction.gke.yaml", "prediction.vertex.yaml", "sweep.gke.yaml",
        "sweep.vertex.yaml", "training.gke.yaml", "training.vertex.yaml"]
    ok = gkeflow("compile", "--check", "--output", str(tmp_path))
    assert ok.returncode == 0, ok.stdout
    (tmp_path / "training.gke.yaml").write_text("stale\n")
    stale = gkeflow("compile", "--check", "--output", str(tmp_path))
    assert stale.returncode == 1
    assert "training.gke.yaml" in stale.stdout and "training.vertex.yaml" not in stale.stdout


def test_compile_check_passes_on_the_repository():
    result = gkeflow("compile", "--check", cwd=REPO)
    assert result.returncode == 0, result.stdout


def test_param_is_checked_against_the_pipeline(tmp_path):
    unknown = gkeflow("run", "--param", "bogus=1", "--output", str(tmp_path),
                      before_any_step=True)
    assert unknown.returncode == 2 and "KEY one of data_uri" in unknown.stderr
    mistyped = gkeflow("run", "--param", "epochs=many", "--output", str(tmp_path),
                       before_any_step=True)
    assert mistyped.returncode == 2 and "epochs must be of type Integer" in mistyped.stderr


def test_the_developer_docs_command_is_not_offered_to_users():
    from click.testing import CliRunner

    from gkeflow.pipelines.cli.main import main

    listing = CliRunner().invoke(main, ["--help"]).output
    assert "  docs " not in listing and "gkeflow docs" not in listing
    assert "  run " in listing
    assert CliRunner().invoke(main, ["docs", "--help"]).exit_code == 0  # still there for make
