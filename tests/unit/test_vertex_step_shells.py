"""The KFP shells of the tuning and batch prediction steps end in one line, without a
traceback, when their launcher cannot start (run outside Vertex AI, a registry that is not
Vertex AI's); their bodies import what they use (GUIDE rule 3)."""

from __future__ import annotations

import pytest
from kfp import dsl


def test_batch_step_with_a_registry_that_is_not_vertex_ends_in_one_line(tmp_path, capsys,
                                                                         monkeypatch):
    from gkeflow.components.predict.vertex_component import batch_predict_vertex

    monkeypatch.delenv("GKEFLOW_DEBUG", raising=False)
    with pytest.raises(SystemExit) as info:
        batch_predict_vertex.python_func(
            batch_job=dsl.Artifact(uri=str(tmp_path / "job")),
            gcp_resources=str(tmp_path / "gcp_resources"), registry_uri="sqlite:///x.db",
            model="penguins", data_uri="gs://data/new.jsonl", output_uri="gs://out/preds",
            pipeline_run_id="run-1")
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Vertex AI Model Registry" in err
    assert "Traceback" not in err and not (tmp_path / "gcp_resources").exists()


def test_tuning_step_outside_vertex_ends_in_one_line(tmp_path, capsys, monkeypatch):
    from gkeflow.components.sweep.vizier_component import tune_with_vizier

    for name in ("CLOUD_ML_PROJECT_ID", "CLOUD_ML_REGION", "GOOGLE_CLOUD_REGION",
                 "GKEFLOW_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SystemExit) as info:
        tune_with_vizier.python_func(
            dataset=dsl.Dataset(uri="gs://b/d"), schema=dsl.Artifact(uri="gs://b/s"),
            best_model=dsl.Model(uri=str(tmp_path / "m")),
            trial_table=dsl.Markdown(uri=str(tmp_path / "t")),
            gcp_resources=str(tmp_path / "gcp_resources"), trials=[], spec="{}",
            pipeline_run_id="run-1", pipeline_root="gs://b/root")
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "runs on Vertex AI Pipelines only" in err
