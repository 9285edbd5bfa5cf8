"""`gkeflow run --model-type gbdt` on files made here: gradient-boosted trees train, evaluate,
register and deploy behind the servability check (the local stand-in answers), and score new
rows in the prediction pipeline, for a classification and (by `--param model_type=gbdt`) a
regression label."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from tests.gkeflow_cli import gkeflow

pytestmark = pytest.mark.slow


def _claims(path: Path, rows: int = 1200, seed: int = 11) -> pd.DataFrame:
    """Insurance claims: a threshold rule over a number and a 40-value category, with gaps."""
    rng = np.random.default_rng(seed)
    garages = [f"G{i:02d}" for i in range(40)]
    garage = rng.choice(garages, rows)
    risky = {g for g in garages[::3]}
    amount = rng.gamma(2.0, 900.0, rows).round(2)
    age = rng.integers(0, 25, rows).astype(float)
    fraud = np.where((amount > 2500) & np.isin(garage, list(risky)) | (age > 21), "fraud", "ok")
    frame = pd.DataFrame({"claim_id": [f"C{i:05d}" for i in range(rows)], "amount": amount,
                          "car_age": age, "garage": garage, "outcome": fraud,
                          "repair_days": (amount / 300 + age * 0.5 + rng.normal(0, 0.5, rows))
                          .round(2)})
    holes = rng.random(rows) < 0.05
    frame.loc[holes, "car_age"] = np.nan
    frame.to_csv(path, index=False)
    return frame


def test_gbdt_trains_deploys_and_scores_for_a_class_and_a_number(tmp_path):
    frame = _claims(tmp_path / "claims.csv")
    out = tmp_path / "out"
    result = gkeflow("run", "--data", str(tmp_path / "claims.csv"), "--label", "outcome",
                     "--model-type", "gbdt", "--param", "exclude_columns=repair_days",
                     "--output", str(out), "--deploy")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Training:  xgboost hist on cpu" in result.stdout
    assert "Registered: claims-classifier version 1" in result.stdout
    accuracy = float(next(line.split("│")[2] for line in result.stdout.splitlines()
                          if line.startswith("│ accuracy ")))
    assert accuracy > 0.95  # the rule is learnable by trees
    assert "Deployed:  claims-classifier (local stand-in)" in result.stdout
    request = out / "requests" / "claims-classifier.json"
    expected = json.loads((out / "requests" / "claims-classifier.expected.json").read_text())
    asked = gkeflow("deploy", "local", "claims-classifier", "--output", str(out),
                    "--request", str(request), cwd=tmp_path)
    assert asked.returncode == 0, asked.stderr
    answer = json.loads(asked.stdout.strip().splitlines()[-1])
    assert answer["classes"] == expected["classes"]

    new = frame.drop(columns=["outcome", "repair_days"]).tail(50)
    new.to_csv(tmp_path / "new.csv", index=False)
    scored = gkeflow("run", "--pipeline", "prediction", "--data", str(tmp_path / "new.csv"),
                     "--output", str(out), "--model", "claims-classifier")
    assert scored.returncode == 0, scored.stdout[-3000:] + scored.stderr[-3000:]
    [predictions] = out.glob("runs/gkeflow-prediction-*/predict-batch/predictions/"
                             "predictions.parquet")
    table = pq.read_table(predictions).to_pandas()
    assert table["claim_id"].tolist() == new["claim_id"].tolist()
    truth = frame.set_index("claim_id").loc[table["claim_id"], "outcome"]
    assert (table["predicted_class"].to_numpy() == truth.to_numpy()).mean() > 0.9

    regression = gkeflow("run", "--data", str(tmp_path / "claims.csv"), "--label",
                         "repair_days", "--param", "model_type=gbdt", "--param",
                         "exclude_columns=outcome", "--output", str(out))
    assert regression.returncode == 0, regression.stdout[-3000:] + regression.stderr[-3000:]
    assert "task: regression of 'repair_days'" in regression.stdout
    assert "Training:  xgboost hist on cpu" in regression.stdout
    assert "Registered: claims-regressor version 1" in regression.stdout
