"""`gkeflow run --pipeline prediction` refuses, before any step, data that lacks the inputs of
the model it would score with: the message names that model and the --model to pass."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from click.testing import CliRunner

from gkeflow.components.register.local_registry import LocalRegistry
from gkeflow.pipelines.cli.common import REGISTRY_FILE
from gkeflow.pipelines.cli.main import main

PENGUIN_INPUTS = ["island", "bill_length_mm", "flipper_length_mm", "sex"]
LOAN_INPUTS = ["income", "amount", "term"]


def _register(output: Path, name: str, features: list[str], run_id: str) -> None:
    """A model directory with the metadata gkeflow's train step exports, registered in the
    local registry under ``output``."""
    model_dir = output / "models" / name
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "gkeflow_model.json").write_text(json.dumps({
        "label": "y", "label_vocabulary": ["a", "b"],
        "features": [{"name": f, "input": f, "type": "numeric"} for f in features]}))
    LocalRegistry(f"sqlite:///{output / REGISTRY_FILE}").register(
        name, str(model_dir), {"accuracy": 0.9}, run_id)


def _loans_csv(tmp_path: Path) -> Path:
    path = tmp_path / "loans.csv"
    path.write_text("income,amount,term,approved\n50000,1000,12,yes\n20000,5000,36,no\n")
    return path


def _run(output: Path, data: Path, *extra: str):
    return CliRunner().invoke(main, ["run", "--pipeline", "prediction", "--data", str(data),
                                     "--output", str(output), *extra])


def _refused(result, *fragments: str) -> str:
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def test_the_only_model_is_named_and_refused_before_any_step(tmp_path):
    output = tmp_path / "out"
    _register(output, "penguins-classifier", PENGUIN_INPUTS, "run-1")
    result = _run(output, _loans_csv(tmp_path))
    line = _refused(result, "the registry's only model penguins-classifier@1",
                    "loans.csv lacks: island, bill_length_mm, flipper_length_mm, sex",
                    "gkeflow run --data", "--label COLUMN")
    assert "drift" not in line
    assert not (output / "logs").exists() and "started" not in result.output


def test_another_registered_model_whose_inputs_match_is_suggested(tmp_path):
    output = tmp_path / "out"
    _register(output, "penguins-classifier", PENGUIN_INPUTS, "run-1")
    _register(output, "loans-classifier", LOAN_INPUTS, "run-2")
    result = _run(output, _loans_csv(tmp_path), "--model", "penguins-classifier")
    _refused(result, "penguins-classifier@1 takes columns", "pass --model loans-classifier@1")
    assert "registry's only model" not in result.stderr


def _stop_at_the_runner(monkeypatch) -> list[str]:
    """Stop the command where the local runner would start: the models it would score with."""
    from gkeflow.pipelines.targets import local

    reached: list[str] = []

    def stop(arguments, *args, **kwargs):
        reached.append(arguments["model_name"])
        raise local.LocalRunError("stopped before running")

    monkeypatch.setattr(local, "run_local", stop)
    return reached


def test_without_model_the_only_fitting_one_of_several_is_used_and_named(tmp_path,
                                                                          monkeypatch):
    output = tmp_path / "out"
    _register(output, "penguins-classifier", PENGUIN_INPUTS, "run-1")
    _register(output, "loans-classifier", LOAN_INPUTS, "run-2")
    reached = _stop_at_the_runner(monkeypatch)
    result = _run(output, _loans_csv(tmp_path))
    assert reached == ["loans-classifier"], result.output
    assert "with loans-classifier@1" in result.output
    assert "the only one of 2 registered models whose inputs the data holds" in result.output


def test_without_model_several_fitting_models_are_listed(tmp_path):
    output = tmp_path / "out"
    _register(output, "penguins-classifier", PENGUIN_INPUTS, "run-1")
    _register(output, "loans-classifier", LOAN_INPUTS, "run-2")
    _register(output, "loans-v2-classifier", LOAN_INPUTS, "run-3")
    result = _run(output, _loans_csv(tmp_path))
    assert result.exit_code == 2, result.output
    assert ("the data's columns fit 2 of them: pass --model with one of loans-classifier@1, "
            "loans-v2-classifier@1") in result.stderr


def test_parquet_data_is_checked_by_its_columns(tmp_path):
    output = tmp_path / "out"
    _register(output, "loans-classifier", LOAN_INPUTS, "run-1")
    data = tmp_path / "loans.parquet"
    pq.write_table(pa.table({"income": [1.0, 2.0], "amount": [3.0, 4.0]}), data)
    _refused(_run(output, data), "loans-classifier@1", "loans.parquet lacks: term")


def test_max_drift_one_lets_missing_columns_through_to_the_step(tmp_path, monkeypatch):
    """With max_drift=1 the step scores missing columns as missing: the check stands aside
    and the run goes on to the local runner (stopped here at its boundary)."""
    output = tmp_path / "out"
    _register(output, "penguins-classifier", PENGUIN_INPUTS, "run-1")
    reached = _stop_at_the_runner(monkeypatch)
    result = _run(output, _loans_csv(tmp_path), "--param", "max_drift=1")
    assert reached == ["penguins-classifier"], result.output
    assert "lacks" not in result.output


def test_without_model_data_no_registered_model_takes_says_to_train_one(tmp_path):
    output = tmp_path / "out"
    _register(output, "penguins-classifier", PENGUIN_INPUTS, "run-1")
    _register(output, "penguins-regressor", PENGUIN_INPUTS, "run-2")
    result = _run(output, _loans_csv(tmp_path))
    assert result.exit_code == 1, result.output
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("Error: no registered model takes this data: none of the 2 models "
                           "(penguins-classifier, penguins-regressor)")
    assert "train one on this data first (gkeflow run --data FILE --label COLUMN)" in line
    assert "--model is required" not in line


def test_an_empty_registry_says_a_model_registers_only_when_it_passes_the_gate(tmp_path):
    output = tmp_path / "out"
    output.mkdir()
    LocalRegistry(f"sqlite:///{output / REGISTRY_FILE}").list()  # created, no model in it
    assert (output / REGISTRY_FILE).exists()
    line = _refused(_run(output, _loans_csv(tmp_path)),
                    "the model registry holds no model yet",
                    "registers its model only when it passes the gate",
                    "gkeflow run --data FILE --label COLUMN", "--min-accuracy")
    assert "--model is required" not in line
