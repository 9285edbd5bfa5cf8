"""`gkeflow run` on a continuous label: the task is decided and said before any step, a
regressor is trained (on one device, and by two local workers), evaluated, registered and
scores new rows with numbers; labels that
are no class column are refused before any step; the compiled pipelines take the task."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from gkeflow.components import yamlio
from tests.gkeflow_cli import gkeflow

REPO = Path(__file__).resolve().parents[2]


def _loans(path: Path, rows: int = 900, seed: int = 2) -> pd.DataFrame:
    """A loans-like file whose income_eur is a number per applicant."""
    rng = np.random.default_rng(seed)
    age = rng.integers(21, 70, rows)
    years = np.clip(age - 21 - rng.integers(0, 6, rows), 0, None)
    sector = rng.choice(["retail", "tech", "health", "public"], rows)
    bonus = pd.Series(sector).map({"retail": 0, "tech": 14_000, "health": 6_000,
                                   "public": 3_000}).to_numpy()
    income = 21_000 + 900 * years + bonus + rng.normal(0, 3_500, rows)
    frame = pd.DataFrame({"applicant_id": [f"A{i:06d}" for i in range(rows)], "age": age,
                          "years_employed": years, "sector": sector,
                          "approved": rng.choice(["yes", "no"], rows),
                          "income_eur": income.round(0).astype(int)})
    frame.to_csv(path, index=False)
    return frame


def _vertex_experiments_config(path: Path, endpoint: str) -> Path:
    """gkeflow.yaml logging environment dev's runs to a Vertex AI experiment."""
    import yaml

    path.write_text(yaml.safe_dump({
        "parameters": {"dev": {}},
        "targets": {"vertex": {"project": "my-project", "region": "us-central1",
                               "pipeline_root": "gs://my-bucket/root",
                               "service_account": "runner@my-project.iam.gserviceaccount.com",
                               "api_endpoint": endpoint}},
        "tracking": {"dev": {"vertex_experiments": {"experiment": "loans-income",
                                                    "tensorboard": TENSORBOARD}}}}))
    return path


TENSORBOARD = "projects/my-project/locations/us-central1/tensorboards/4242"


@pytest.mark.slow
def test_a_continuous_label_trains_registers_and_scores_a_regressor(tmp_path):
    import json

    from tests.integration.fakes import FakeVertexServer

    frame = _loans(tmp_path / "loans.csv")
    out = tmp_path / "out"
    # trained by two local worker processes (MultiWorkerMirroredStrategy's custom loop),
    # its parameters and regression metrics logged to a Vertex AI experiment (the fake)
    with FakeVertexServer() as vertex:
        vertex.tensorboard.instances.add(TENSORBOARD)  # the team's TensorBoard instance
        config = _vertex_experiments_config(tmp_path / "gkeflow.yaml", vertex.url)
        result = gkeflow("run", "--data", str(tmp_path / "loans.csv"), "--label",
                         "income_eur", "--output", str(out), "--epochs", "15",
                         "--compute", "train-model.replicas=2", "--config", str(config),
                         "--env", "dev")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert not vertex.violations, vertex.violations
    (run_context,) = [c for c in vertex.metadata.contexts.values()
                      if c.schema_title == "system.ExperimentRun"]
    logged = json.loads(type(run_context).to_json(run_context))["metadata"]
    assert logged["_params"]["label_column"] == "income_eur"
    assert logged["_params"]["task"] == "regression"
    assert {"rmse", "mae", "r2"} <= set(logged["_metrics"]) and logged["_state"] == "COMPLETE"
    assert "accuracy" not in logged["_metrics"]
    assert 0 < logged["_metrics"]["rmse"] < logged["_metrics"]["baseline_rmse"]
    assert "logged to Vertex AI experiment 'loans-income'" in result.stdout
    # train-model's curves, epoch by epoch, as the experiment run's time series, linked to it
    (run,) = vertex.tensorboard.runs
    curves = vertex.tensorboard.curves(run)
    assert {"loss", "val_loss", "rmse", "learning_rate"} <= set(curves)
    steps = [step for step, _t, _v in curves["val_loss"]]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 2
    stamps = [t for _s, t, _v in curves["val_loss"]]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    store, run_id = run_context.name.split("/contexts/loans-income-")
    assert run == f"{TENSORBOARD}/experiments/loans-income/runs/{run_id}"
    (link,) = vertex.metadata.context_artifacts[run_context.name]  # how Vertex AI finds them
    artifact = vertex.metadata.artifacts[link]
    assert artifact.schema_title == "google.VertexTensorboardRun"
    assert artifact.metadata["resourceName"] == run
    experiment = vertex.metadata.contexts[f"{store}/contexts/loans-income"]
    assert experiment.metadata["backing_tensorboard_resource"] == TENSORBOARD
    lines = result.stdout.splitlines()
    task_line = next(i for i, line in enumerate(lines) if line.startswith("task: regression"))
    assert "'income_eur'" in lines[task_line] and "distinct values" in lines[task_line]
    assert task_line < next(i for i, line in enumerate(lines) if "started" in line)
    assert "Registered: loans-regressor version 1" in result.stdout
    assert "Gate: rmse" in result.stdout
    assert "MultiWorkerMirroredStrategy over 2 workers" in result.stdout

    new = frame.drop(columns=["income_eur"]).head(40)
    new.to_csv(tmp_path / "new.csv", index=False)
    scored = gkeflow("run", "--pipeline", "prediction", "--data", str(tmp_path / "new.csv"),
                     "--output", str(out))
    assert scored.returncode == 0, scored.stdout[-3000:] + scored.stderr[-3000:]
    [predictions] = out.glob("runs/gkeflow-prediction-*/predict-batch/predictions/"
                             "predictions.parquet")
    table = pq.read_table(predictions).to_pandas()
    # keyed by the identifier column preparation left out; a number per row, in euros
    assert table.columns.tolist() == ["applicant_id", "predicted_value", "model_name",
                                      "model_version"]
    assert table["applicant_id"].tolist() == new["applicant_id"].tolist()
    assert table["predicted_value"].between(10_000, 90_000).all()
    truth = frame.set_index("applicant_id").loc[table["applicant_id"], "income_eur"].to_numpy()
    assert np.corrcoef(table["predicted_value"], truth)[0, 1] > 0.8


@pytest.mark.slow
def test_the_readme_body_mass_demo_runs_on_the_bundled_penguins(tmp_path):
    readme = (REPO / "README.md").read_text()
    assert "gkeflow run --label body_mass_g" in readme
    import json

    out = tmp_path / "out"
    result = gkeflow("run", "--label", "body_mass_g", "--output", str(out), "--epochs", "10",
                     "--deploy")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "task: regression of 'body_mass_g'" in result.stdout
    assert "Registered: penguins-regressor version 1" in result.stdout
    assert "rmse" in result.stdout and "accuracy" not in result.stdout
    # deployed behind the servability check, the local server answers in grams
    assert "Deployed:  penguins-regressor (local stand-in)" in result.stdout
    request = out / "requests" / "penguins-regressor.json"
    expected = json.loads(request.with_name("penguins-regressor.expected.json").read_text())
    asked = gkeflow("deploy", "local", "penguins-regressor", "--output", str(out),
                    "--request", str(request))
    assert asked.returncode == 0, asked.stderr
    answer = json.loads(asked.stdout)
    values = [row[0] for row in answer["predictions"]]
    assert values == pytest.approx(expected["values"], rel=1e-4)
    assert all(2_000 < v < 7_000 for v in values) and "classes" not in answer


@pytest.mark.parametrize("label,message", [
    ("row_id", "looks like a row identifier"),
    ("ticket", "has 400 classes, more than 100"),
    ("customer", "looks like an identifier"),
])
def test_a_label_that_is_no_class_column_is_refused_before_any_step(tmp_path, label, message):
    rng = np.random.default_rng(0)
    rows = 2000
    pd.DataFrame({"row_id": np.arange(1, rows + 1), "x": rng.normal(size=rows),
                  "ticket": [f"T{i % 400}" for i in range(rows)],
                  "customer": [f"C{i:05d}" for i in range(rows)],
                  "y": rng.choice(["a", "b"], rows)}).to_csv(tmp_path / "d.csv", index=False)
    result = gkeflow("run", "--data", str(tmp_path / "d.csv"), "--label", label, "--output",
                     str(tmp_path / "out"), before_any_step=True)
    assert result.returncode == 1, result.stdout + result.stderr
    [line] = result.stderr.strip().splitlines()
    assert message in line and "--task" in line
    assert not (tmp_path / "out").exists()


def test_forcing_the_task_is_checked_before_any_step(tmp_path):
    pd.DataFrame({"x": range(60), "y": ["a", "b", "c"] * 20}).to_csv(tmp_path / "d.csv",
                                                                     index=False)
    result = gkeflow("run", "--data", str(tmp_path / "d.csv"), "--label", "y", "--task",
                     "regression", "--output", str(tmp_path / "out"), before_any_step=True)
    assert result.returncode == 1
    assert "task regression needs a numeric label" in result.stderr


@pytest.mark.parametrize("name", ["training", "sweep"])
@pytest.mark.parametrize("target", ["gke", "vertex"])
def test_the_compiled_pipelines_take_the_task(name, target):
    spec = next(yamlio.load_all((REPO / "compiled" / f"{name}.{target}.yaml").read_text()))
    assert spec["root"]["inputDefinitions"]["parameters"]["task"]["defaultValue"] == "auto"
    tasks = spec["root"]["dag"]["tasks"]
    prepare = next(t for n, t in tasks.items() if n.startswith("prepare-data"))
    assert prepare["inputs"]["parameters"]["task"] == {"componentInputParameter": "task"}


@pytest.mark.slow
def test_a_regression_sweep_compares_trials_on_rmse_lower_first(tmp_path):
    import json

    out = tmp_path / "out"
    result = gkeflow("run", "--pipeline", "sweep", "--label", "body_mass_g", "--output",
                     str(out), "--epochs", "4", "--sweep-param", "learning_rate=0.001,0.05",
                     "--sweep-param", "hidden_units=16", "--search", "grid",
                     "--parallel-trials", "2")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "trials compared on eval_rmse (minimize)" in result.stdout
    assert "minimize eval_rmse" in result.stdout
    [table] = out.glob("runs/gkeflow-sweep-*/select-best-trial/executor_output.json")
    rows = json.loads(json.loads(table.read_text())["parameterValues"]["table"])
    values = [row["eval_rmse"] for row in rows if row.get("eval_rmse") is not None]
    assert len(values) == 2 and values == sorted(values)  # best (lowest) first
    assert "Registered: penguins-regressor" in result.stdout
