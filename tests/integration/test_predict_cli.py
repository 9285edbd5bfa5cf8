"""`gkeflow submit prediction`, a prediction schedule and `gkeflow plan --pipeline prediction`
through the real console script against the strict fakes."""

from __future__ import annotations

from tests.gkeflow_cli import gkeflow
from tests.integration.conftest import TOKEN, config_dict

TOKEN_ENV = {"GKEFLOW_TEST_KFP_TOKEN": TOKEN}


def test_submit_prediction_to_both_targets_with_a_shared_environment(
        kfp_server, vertex_server, tmp_path, write_config):
    # parameters.default holds training's epochs: scoring ignores it, not fails on it
    path = write_config(config_dict(kfp_server.url, vertex_server.url))
    gke = gkeflow("submit", "prediction", "--target", "gke", "--param",
                  "data_uri=gs://data/new/*.csv", "--param", "max_drift=0.5",
                  "--config", str(path), cwd=tmp_path, env=TOKEN_ENV)
    assert gke.returncode == 0, gke.stdout + gke.stderr
    (run,) = kfp_server.runs.values()
    values = run["runtime_config"]["parameters"]
    assert values["data_uri"] == "gs://data/new/*.csv" and values["max_drift"] == 0.5
    assert "epochs" not in values
    vertex = gkeflow("submit", "prediction", "--target", "vertex", "--param",
                     "use_batch_prediction_job=true", "--config", str(path), cwd=tmp_path)
    assert vertex.returncode == 0, vertex.stdout + vertex.stderr
    (job,) = vertex_server.jobs.values()
    parameters = dict(job.runtime_config.parameter_values)
    assert parameters["registry_uri"] == "vertex://projects/my-project/locations/us-central1"
    assert parameters["use_batch_prediction_job"] is True and "epochs" not in parameters
    typo = gkeflow("submit", "prediction", "--target", "gke", "--param", "epoch=3",
                   "--config", str(path), cwd=tmp_path, env=TOKEN_ENV)
    assert typo.returncode == 1 and "prediction has no parameter 'epoch'" in typo.stderr


def test_a_nightly_scoring_schedule_is_applied(kfp_server, tmp_path, write_config):
    schedules = [{"name": "nightly-scoring", "pipeline": "prediction", "target": "gke",
                  "cron": "0 3 * * *", "parameters": {"data_uri": "gs://data/daily/*.csv",
                                                      "output_uri": "bq://p.scores.daily",
                                                      "bq_write_mode": "append"}}]
    path = write_config(config_dict(kfp_server.url, None, schedules=schedules))
    result = gkeflow("schedule", "apply", "--config", str(path), cwd=tmp_path, env=TOKEN_ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    (recurring,) = kfp_server.recurring_runs.values()
    assert recurring["trigger"]["cron_schedule"]["cron"] == "0 0 3 * * *"
    assert recurring["runtime_config"]["parameters"]["output_uri"] == "bq://p.scores.daily"


def test_plan_prediction_names_its_steps(tmp_path):
    result = gkeflow("plan", "--pipeline", "prediction", "--target", "vertex", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "predict-batch" in result.stdout and "batch-predict-vertex" in result.stdout
    assert "train-model" not in result.stdout
    gpu = gkeflow("plan", "prediction", "--compute", "predict-batch.accelerator=nvidia-l4",
                  "--compute", "predict-batch.accelerator_count=1", cwd=tmp_path)
    assert gpu.returncode == 0, gpu.stderr
    assert "gkeflow-gpu" in gpu.stdout and "nvidia-l4" in gpu.stdout
