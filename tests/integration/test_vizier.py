"""engine: vizier: the HyperparameterTuningJob body, its submission over REST, its trials."""

from __future__ import annotations

import json
import math

import pytest
from google.auth.credentials import AnonymousCredentials

from gkeflow.components.cloud.follow import GaveUp
from gkeflow.components.sweep import vizier
from gkeflow.components.sweep.logic import select
from gkeflow.pipelines.compute.engines.vizier import tuning_spec
from gkeflow.pipelines.compute.profiles import ComputeError, ComputeProfile
from gkeflow.pipelines.settings.sweep_config import parse_sweep
from tests.integration.fake_tuning import FakeTuning

SWEEP = parse_sweep({"engine": "vizier", "max_trials": 6, "parallel_trials": 3, "parameters": {
    "learning_rate": {"type": "loguniform", "min": 1e-4, "max": 1e-1},
    "dropout": {"type": "uniform", "min": 0.0, "max": 0.5},
    "batch_size": {"type": "choice", "values": [64, 16, 32]},
    "epochs": {"type": "int", "min": 5, "max": 20},
    "early_stopping_patience": {"type": "int", "min": 0, "max": 6, "step": 3},
    "hidden_units": {"type": "choice", "values": ["64,32", "128"]}}})
T4 = ComputeProfile(cpu="7", memory="26G", accelerator="nvidia-tesla-t4", accelerator_count=1,
                    timeout_s=3600)


def _body(spec: str, **changes) -> dict:
    arguments = dict(display_name="gkeflow-sweep-run-1", image="us-docker.pkg.dev/p/r/gpu:1",
                     dataset_uri="gs://bucket/root/prepare/dataset",
                     schema_uri="gs://bucket/root/prepare/schema",
                     output_uri="gs://bucket/root/sweeps/run-1", run_id="Run_1",
                     require_gpu=True, fixed={"epochs": 3, "learning_rate": 0.01})
    arguments.update(changes)
    return vizier.build_job(json.loads(spec), **arguments)


def test_body_parses_strictly_as_a_hyperparameter_tuning_job():
    job = vizier.validate_job(_body(tuning_spec(SWEEP, T4)))
    assert job.max_trial_count == 6 and job.parallel_trial_count == 3
    assert job.max_failed_trial_count == 6  # the sweep fails only when every trial fails
    metric = job.study_spec.metrics[0]
    assert (metric.metric_id, metric.goal.name) == ("eval_accuracy", "MAXIMIZE")
    assert job.study_spec.algorithm.name == "RANDOM_SEARCH"
    params = {p.parameter_id: p for p in job.study_spec.parameters}
    assert params["learning_rate"].scale_type.name == "UNIT_LOG_SCALE"
    assert params["learning_rate"].double_value_spec.min_value == 1e-4
    assert params["dropout"].scale_type.name == "UNIT_LINEAR_SCALE"
    assert list(params["batch_size"].discrete_value_spec.values) == [16.0, 32.0, 64.0]
    assert params["epochs"].integer_value_spec.max_value == 20
    assert list(params["early_stopping_patience"].discrete_value_spec.values) == [0, 3, 6]
    assert list(params["hidden_units"].categorical_value_spec.values) == ["64,32", "128"]
    pool = job.trial_job_spec.worker_pool_specs[0]
    assert pool.machine_spec.machine_type == "n1-standard-8"
    assert pool.machine_spec.accelerator_type.name == "NVIDIA_TESLA_T4"
    assert pool.machine_spec.accelerator_count == 1 and pool.replica_count == 1
    assert list(pool.container_spec.command) == ["python", "-m",
                                                 "gkeflow.components.sweep.trial"]
    args = list(pool.container_spec.args)
    assert args[:4] == ["--dataset", "/gcs/bucket/root/prepare/dataset", "--schema",
                        "/gcs/bucket/root/prepare/schema"]
    assert "--epochs=3" in args and "--require-gpu" in args
    assert job.trial_job_spec.scheduling.strategy.name == "STANDARD"
    assert job.trial_job_spec.scheduling.timeout.seconds == 3600
    assert job.trial_job_spec.base_output_directory.output_uri_prefix == (
        "gs://bucket/root/sweeps/run-1")
    assert dict(job.labels) == {"gkeflow-run": "run_1"}


def test_spot_flex_start_grid_and_loss_map_to_vertex_fields():
    grid = parse_sweep({"algorithm": "grid", "metric": "eval_loss", "max_trials": 4,
                        "parameters": {"batch_size": {"type": "choice", "values": [16, 32]},
                                       "model_type": {"type": "choice",
                                                      "values": ["mlp", "wide_deep"]}}})
    spot = vizier.validate_job(_body(tuning_spec(grid, T4.with_overrides(scheduling="spot"))))
    assert spot.trial_job_spec.scheduling.strategy.name == "SPOT"
    assert spot.study_spec.algorithm.name == "GRID_SEARCH"
    assert spot.study_spec.metrics[0].goal.name == "MINIMIZE"
    l4 = ComputeProfile(cpu="7", memory="26G", accelerator="nvidia-l4", accelerator_count=1,
                        scheduling="flex-start", max_wait="2h")
    flex = vizier.validate_job(_body(tuning_spec(grid, l4)))
    assert flex.trial_job_spec.scheduling.strategy.name == "FLEX_START"
    assert flex.trial_job_spec.scheduling.max_wait_duration.seconds == 7200
    assert flex.trial_job_spec.worker_pool_specs[0].machine_spec.accelerator_type.name == (
        "NVIDIA_L4")


def test_unknown_fields_and_multi_replica_trials_are_refused():
    body = _body(tuning_spec(SWEEP, T4))
    body["trialJobSpec"]["workerPoolSpecs"][0]["machineSpec"]["gpus"] = 1
    with pytest.raises(Exception, match="gpus"):
        vizier.validate_job(body)
    with pytest.raises(ComputeError, match="replicas to 1"):
        tuning_spec(SWEEP, T4.with_overrides(replicas=2))


def test_submission_is_created_once_per_run_and_followed_to_the_end():
    def score(params: dict) -> float:
        if params["hidden_units"] == "128" and params["batch_size"] == 16.0:
            raise RuntimeError("out of memory")
        return 1.0 - abs(math.log10(params["learning_rate"]) + 2) / 3

    body = _body(tuning_spec(SWEEP, T4))
    lines: list[str] = []
    with FakeTuning(score=score) as fake:
        kwargs = dict(project=fake.project, location=fake.location, api_endpoint=fake.url,
                      credentials=AnonymousCredentials(), poll_s=0.01)
        job = vizier.submit_and_wait(body, echo=lines.append, **kwargs)
        again = vizier.submit_and_wait(body, echo=lines.append, **kwargs)  # a retried step
        assert len(fake.jobs) == 1 and not fake.violations
        assert [m for m, p in fake.requests if m == "POST"] == ["POST"]
    states = [line.rsplit(": ", 1)[1] for line in lines
              if line.startswith("HyperparameterTuningJob projects/")]
    assert states == ["JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_SUCCEEDED",
                      "JOB_STATE_SUCCEEDED"]  # the retried step finds it finished
    assert any(line.startswith("re-attaching to HyperparameterTuningJob") for line in lines)
    assert again["name"] == job["name"]
    trials, reports = vizier.outcomes(job, "eval_accuracy")
    assert [t["trial_id"] for t in trials] == [f"trial-{i:03d}" for i in range(1, 7)]
    selection = select(trials, reports, "eval_accuracy", "maximize")
    failed = [r for r in selection.rows if r["status"] == "failed"]
    assert failed and "out of memory" in failed[0]["error"]
    best = selection.best
    assert best.model_uri == f"gs://bucket/root/sweeps/run-1/{int(best.trial_id[-3:])}/model"
    values = [r["eval_accuracy"] for r in selection.rows if r["rank"]]
    assert values == sorted(values, reverse=True) and best.value("eval_accuracy") == values[0]


def test_a_body_the_service_rejects_is_reported():
    body = _body(tuning_spec(SWEEP, T4), output_uri="/local/path")
    with FakeTuning() as fake, pytest.raises(GaveUp, match="HTTP 400: baseOutputDirectory "
                                             ".*no HyperparameterTuningJob had been created"):
        vizier.submit_and_wait(body, project=fake.project, location=fake.location,
                               api_endpoint=fake.url, credentials=AnonymousCredentials(),
                               poll_s=0.01, echo=lambda _: None)


def test_a_trial_trains_with_vizier_arguments_reports_its_metric_and_logs_its_curves(
        prepared_penguins, tmp_path, monkeypatch, mlflow_server):
    from gkeflow.components.sweep import trial
    from gkeflow.components.tracking.client import PARENT_TAG, TASK_TAG
    from gkeflow.components.tracking.direct import start_pipeline_run
    from gkeflow.components.tracking.trials import trial_env

    dataset_dir, _ = prepared_penguins
    monkeypatch.setenv("AIP_MODEL_DIR", str(tmp_path / "model"))
    monkeypatch.setenv("CLOUD_ML_HP_METRIC_FILE", str(tmp_path / "hypertune" / "metrics"))
    monkeypatch.setenv("CLOUD_ML_TRIAL_ID", "3")
    # the environment tune-with-vizier gives its trials when the sweep is tracked
    parent = start_pipeline_run(mlflow_server.url, "vizier-trials", "vertex-sweep-run-1")
    for entry in trial_env({"uri": mlflow_server.url, "parent": parent}, {}):
        monkeypatch.setenv(entry["name"], entry["value"])
    # fixed values first, then the searched ones as Vertex AI appends them: the last wins
    code = trial.main(["--dataset", str(dataset_dir), "--schema", str(dataset_dir),
                       "--metric", "eval_loss", "--epochs=5", "--learning_rate=0.01",
                       "--epochs=2", "--batch_size=64", "--hidden_units=16",
                       "--early_stopping_patience=0"])
    assert code == 0
    assert (tmp_path / "model" / "saved_model.pb").is_file()
    lines = (tmp_path / "hypertune" / "metrics").read_text().splitlines()
    reported = json.loads(lines[-1])
    assert reported["trial"] == "3" and reported["global_step"] == "2"
    assert reported["eval_loss"] > 0 and math.isfinite(reported["eval_loss"])
    # the trial's own run under the pipeline run's parent, its curves epoch by epoch
    experiment_id = mlflow_server.run(parent)["info"]["experiment_id"]
    (found,) = mlflow_server.search_runs(experiment_id, f"tags.`{PARENT_TAG}` = '{parent}'")
    run = mlflow_server.run(found["info"]["run_id"])
    assert run["tags"][TASK_TAG] == "trial-003" and run["info"]["status"] == "FINISHED"
    assert run["params"]["epochs"] == "2" and run["params"]["hidden_units"] == "16"
    points = mlflow_server.metric_points(run["info"]["run_id"], "val_loss")
    assert [step for step, _t, _v in points] == [1, 2]
    assert points[-1][2] == pytest.approx(reported["eval_loss"])


def test_a_tracked_sweep_s_trials_get_the_server_and_parent_never_the_token():
    from gkeflow.components.tracking.trials import trial_env

    secret = "projects/my-project/secrets/mlflow-token/versions/2"
    env = trial_env({"uri": "https://mlflow.example.com", "parent": "abc123"},
                    {"GKEFLOW_MLFLOW_TOKEN_SECRET": secret, "MLFLOW_TRACKING_TOKEN": "t0ken"})
    job = vizier.validate_job(_body(tuning_spec(SWEEP, T4), env=env))
    container = job.trial_job_spec.worker_pool_specs[0].container_spec
    assert {e.name: e.value for e in container.env} == {
        "GKEFLOW_TRIAL_MLFLOW_URI": "https://mlflow.example.com",
        "GKEFLOW_TRIAL_MLFLOW_PARENT": "abc123", "GKEFLOW_MLFLOW_TOKEN_SECRET": secret}
    assert "t0ken" not in json.dumps(_body(tuning_spec(SWEEP, T4), env=env))
    assert trial_env({}, {}) == [] and "env" not in _body(tuning_spec(SWEEP, T4))[
        "trialJobSpec"]["workerPoolSpecs"][0]["containerSpec"]


def test_a_regression_sweep_compiled_for_accuracy_searches_on_rmse_downwards():
    """The task is decided from the data at run time: the step rewrites the study before the
    job is created, so Vizier minimises the regressors' RMSE and every trial reports it."""
    from gkeflow.components.sweep.logic import metric_for_task

    metric, direction = metric_for_task("eval_accuracy", "maximize", regression=True)
    assert (metric, direction) == ("eval_rmse", "minimize")
    assert metric_for_task("eval_loss", "minimize", regression=True) == ("eval_loss", "minimize")
    assert metric_for_task("eval_accuracy", "maximize", False) == ("eval_accuracy", "maximize")
    spec = vizier.searched_on(json.loads(tuning_spec(SWEEP, T4)), metric, direction)
    job = vizier.validate_job(vizier.build_job(
        spec, display_name="gkeflow-sweep-run-1", image="img", dataset_uri="gs://b/d",
        schema_uri="gs://b/s", output_uri="gs://b/o", run_id="run-1"))
    study = job.study_spec.metrics[0]
    assert (study.metric_id, study.goal.name) == ("eval_rmse", "MINIMIZE")
    args = list(job.trial_job_spec.worker_pool_specs[0].container_spec.args)
    assert args[args.index("--metric") + 1] == "eval_rmse"
    assert len(job.study_spec.parameters) == len(SWEEP.parameters)  # the space unchanged
