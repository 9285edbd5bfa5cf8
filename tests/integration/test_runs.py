"""`gkeflow runs list|show|logs|cancel|retry` and `schedule list`'s last run, against the
fake KFP and Vertex servers (requests validated against the KFP swagger, aiplatform_v1 and
logging_v2 messages; see fake_runs.py): the same failed training run, seen on both."""

from __future__ import annotations

import json

import pytest

from gkeflow.pipelines.targets.backend_choice import reader
from gkeflow.pipelines.targets.kfp import KfpBackend
from gkeflow.pipelines.targets.runs import step_key
from gkeflow.pipelines.targets.schedule import apply
from gkeflow.pipelines.targets.submit import submit
from gkeflow.pipelines.targets.vertex import VertexBackend
from tests.integration.conftest import FAST, TOKEN, config_dict, gkeflow
from tests.integration.fake_runs import FakeKfpRuns, FakeVertexRuns

ERROR = "ValueError: label column 'species' has 1 class; need at least 2"


@pytest.fixture
def kfp_runs():
    with FakeKfpRuns(expected_token=TOKEN) as server:
        yield server
        assert not server.violations, "\n".join(server.violations)


@pytest.fixture
def vertex_runs():
    with FakeVertexRuns() as server:
        yield server
        assert not server.violations, "\n".join(server.violations)


def _backend(config, target):
    if target == "gke":
        return KfpBackend(config.targets.gke, policy=FAST)
    return VertexBackend(config.targets.vertex, policy=FAST)


def _failed_run(server, config, target, tmp_path) -> str:
    server.fail_task = "train-model"
    submission, _ = submit(config, "training", target, environment="default", overrides={},
                           workdir=tmp_path / target, backend=_backend(config, target),
                           version="gabc")
    server.finish(submission.run_id)
    return submission.run_id


@pytest.fixture
def both(kfp_runs, vertex_runs, token_env, make_config, tmp_path):
    config = make_config(kfp_runs.url, vertex_runs.url)
    runs = {"gke": _failed_run(kfp_runs, config, "gke", tmp_path),
            "vertex": _failed_run(vertex_runs, config, "vertex", tmp_path)}
    return config, runs


@pytest.mark.parametrize("target", ["gke", "vertex"])
def test_list_show_and_logs_name_the_failed_step_and_its_error(both, target):
    config, runs = both
    runs_reader = reader(config, target, _backend(config, target))
    (listed,) = runs_reader.list(pipeline="training", limit=5)
    assert listed.id == runs[target] and listed.state == "FAILED"
    assert step_key(listed.failed_step.name) == "train-model"  # KFP: "Train model"
    assert listed.url.endswith(runs[target]) or runs[target].rsplit("/", 1)[-1] in listed.url
    assert listed.duration_s == 1800

    shown = runs_reader.show(runs[target])
    states = {step_key(t.name): t.state for t in shown.tasks}
    assert states["train-model"] == "FAILED" and states["prepare-data"] == "SUCCEEDED"
    assert shown.failed_step.error == ERROR
    assert shown.failed_step.duration_s == 90
    assert shown.gate == ""  # evaluation never ran

    lines = [(step_key(step), line) for step, line in runs_reader.logs(runs[target],
                                                                       "train-model")]
    assert ("train-model", ERROR) in lines
    assert {step_key(step) for step, _ in runs_reader.logs(runs[target])} >= {
        "prepare-data", "train-model"}
    with pytest.raises(LookupError, match="no step 'trian-model'"):
        list(runs_reader.logs(runs[target], "trian-model"))


@pytest.mark.parametrize("target", ["gke", "vertex"])
def test_a_training_run_shows_its_metrics_gate_and_registered_version(
        kfp_runs, vertex_runs, token_env, make_config, write_config, tmp_path, target):
    """KFP: the values come from ML Metadata over gRPC-Web (the UI server's proxy);
    Vertex AI: from the job's task details."""
    config = make_config(kfp_runs.url, vertex_runs.url)
    server = kfp_runs if target == "gke" else vertex_runs
    for run in ("first", "second"):  # the second run registers version 2
        submission, _ = submit(config, "training", target, environment="default",
                               overrides={}, workdir=tmp_path / run,
                               backend=_backend(config, target), version="g1")
        server.finish(submission.run_id)
    shown = reader(config, target, _backend(config, target)).show(submission.run_id)
    assert shown.state == "SUCCEEDED" and shown.note == ""
    assert shown.metrics == {"accuracy": 0.97, "log_loss": 0.12}  # no KFP bookkeeping
    assert shown.registered_version == "2"
    assert shown.gate == "passed: registered version 2"
    if target == "gke":
        calls = {c.path.rsplit("/", 1)[-1] for c in kfp_runs.calls("POST", "ml_metadata")}
        assert calls == {"GetArtifactsByID", "GetExecutionsByID"}
        path = write_config(config_dict(kfp_runs.url, vertex_runs.url))
        printed = gkeflow("runs", "show", submission.run_id, "--target", "gke", "--config",
                          str(path), cwd=tmp_path, env={"GKEFLOW_TEST_KFP_TOKEN": TOKEN})
        assert printed.returncode == 0, printed.stderr
        assert "metrics: accuracy 0.97, log_loss 0.12" in printed.stdout
        assert "gate: passed: registered version 2" in printed.stdout


@pytest.mark.parametrize("fault", [503, 404])
def test_kfp_run_details_without_ml_metadata(kfp_runs, token_env, make_config, tmp_path,
                                             fault):
    """ML Metadata down (503 on every try) or not proxied (404): the steps and the gate
    still show; the note says where the values were looked for and where to find them."""
    config = make_config(kfp_runs.url, None)
    submission, _ = submit(config, "training", "gke", environment="default", overrides={},
                           workdir=tmp_path, backend=_backend(config, "gke"), version="g1")
    kfp_runs.finish(submission.run_id)
    kfp_runs.inject("POST", "^/ml_metadata", fault, count=100)
    shown = reader(config, "gke", _backend(config, "gke")).show(submission.run_id)
    assert shown.state == "SUCCEEDED" and shown.gate == "passed: registered"
    assert shown.metrics == {} and shown.registered_version == ""
    assert f"HTTP {fault}" in shown.note and "Kubeflow Pipelines UI" in shown.note
    tries = len(kfp_runs.calls("POST", "^/ml_metadata"))
    assert tries == (3 if fault == 503 else 1)  # a short look-up: 503 retried, 404 not


def test_cancel_and_retry_on_kfp(kfp_runs, token_env, make_config, tmp_path):
    config = make_config(kfp_runs.url, None)
    run_id = _failed_run(kfp_runs, config, "gke", tmp_path)
    runs_reader = reader(config, "gke", _backend(config, "gke"))
    runs_reader.retry(run_id)
    assert runs_reader.show(run_id).state in ("RUNNING", "SUCCEEDED")
    assert kfp_runs.finish(run_id)["state"] == "SUCCEEDED"
    assert len(kfp_runs.runs) == 1  # retried in place, not a second run
    other, _ = submit(config, "training", "gke", environment="default", overrides={},
                      workdir=tmp_path / "b", backend=_backend(config, "gke"), version="g2")
    runs_reader.cancel(other.run_id)
    assert runs_reader.show(other.run_id).state == "CANCELLED"


def test_a_lost_vertex_retry_answer_makes_one_new_job(vertex_runs, make_config, tmp_path):
    config = make_config(None, vertex_runs.url)
    run_id = _failed_run(vertex_runs, config, "vertex", tmp_path)
    vertex_runs.inject("POST", r"/pipelineJobs$", status=503, after=True)
    message = reader(config, "vertex", _backend(config, "vertex")).retry(run_id)
    assert len(vertex_runs.jobs) == 2 and "retried as" in message
    new = [j for j in vertex_runs.jobs.values() if j.name != run_id][0]
    old = vertex_runs.jobs[run_id]
    assert new.labels["gkeflow-retry-of"] == run_id.rsplit("/", 1)[-1]
    assert dict(new.runtime_config.parameter_values) == dict(old.runtime_config.parameter_values)
    assert new.service_account == old.service_account
    reader(config, "vertex", _backend(config, "vertex")).cancel(new.name)
    assert vertex_runs.calls("POST", r":cancel$")


def test_runs_of_a_schedule_and_its_last_run(kfp_runs, token_env, make_config, tmp_path):
    from gkeflow.pipelines.targets.backend_choice import last_runs
    from gkeflow.pipelines.targets.schedule_list import list_schedules

    weekly = {"name": "weekly", "target": "gke", "cron": "0 6 * * 1"}
    config = make_config(kfp_runs.url, None, schedules=[weekly])
    apply(config, workdir=tmp_path, backends={"gke": _backend(config, "gke")})
    (recurring_id,) = kfp_runs.recurring_runs
    kfp_runs.fail_task = "train-model"
    fired = kfp_runs.fire(recurring_id)
    kfp_runs.finish(fired)
    submit(config, "training", "gke", environment="default", overrides={},
           workdir=tmp_path / "s", backend=_backend(config, "gke"), version="g")
    runs_reader = reader(config, "gke", _backend(config, "gke"))
    (scheduled,) = runs_reader.list(schedule="weekly")
    assert scheduled.id == fired and scheduled.schedule == "weekly"
    assert len(runs_reader.list()) == 2
    rows = list_schedules(config, backends={"gke": _backend(config, "gke")})
    last = last_runs(config, rows, readers={"gke": runs_reader})
    assert last[("gke", "weekly")].id == fired and last[("gke", "weekly")].state == "FAILED"


def test_the_cli_shows_the_same_run_on_both_targets(both, write_config, tmp_path):
    config, runs = both
    data = config_dict(config.targets.gke.host, config.targets.vertex.api_endpoint)
    path = write_config(data)
    env = {"GKEFLOW_TEST_KFP_TOKEN": TOKEN}
    listed = gkeflow("runs", "list", "--output", "json", "--config", str(path), cwd=tmp_path,
                     env=env)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert {(r["target"], r["state"], step_key(r["failed_step"])) for r in rows} == {
        ("gke", "FAILED", "train-model"), ("vertex", "FAILED", "train-model")}
    table = gkeflow("runs", "list", "--config", str(path), cwd=tmp_path, env=env)
    assert table.returncode == 0 and "train-model" in table.stdout  # Vertex
    assert "Train model" in table.stdout  # KFP reports display names
    for target, run_id in runs.items():
        shown = gkeflow("runs", "show", run_id, "--target", target, "--config", str(path),
                        cwd=tmp_path, env=env)
        assert shown.returncode == 0, shown.stderr
        assert ("train-model" in shown.stdout or "Train model" in shown.stdout)
        assert "1 class" in shown.stdout
        logs = gkeflow("runs", "logs", run_id, "train-model", "--target", target, "--config",
                       str(path), cwd=tmp_path, env=env)
        assert logs.returncode == 0 and ERROR in logs.stdout, logs.stderr
        assert TOKEN not in shown.stdout + shown.stderr + logs.stdout + logs.stderr
    missing = gkeflow("runs", "show", "run-999999", "--target", "gke", "--config", str(path),
                      cwd=tmp_path, env=env)
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    assert len([line for line in missing.stderr.splitlines() if line.strip()]) == 1


def test_logs_follow_a_running_step_until_the_run_ends(kfp_runs, token_env, make_config,
                                                       tmp_path):
    config = make_config(kfp_runs.url, None)
    submission, _ = submit(config, "training", "gke", environment="default", overrides={},
                           workdir=tmp_path, backend=_backend(config, "gke"), version="g")
    runs_reader = reader(config, "gke", _backend(config, "gke"))
    waits = []
    lines = list(runs_reader.logs(submission.run_id, "prepare-data", follow=True, poll_s=0,
                                  sleep=waits.append))
    assert waits, "the run was followed while it ran"
    assert [line for _, line in lines] == ["Prepare data: started", "Prepare data: working",
                                           "Prepare data: done"]  # each line once
    assert runs_reader.show(submission.run_id).state == "SUCCEEDED"


def test_errors_with_brackets_are_shown_as_written(kfp_runs, vertex_runs, token_env,
                                                    make_config, write_config, tmp_path):
    message = "FileNotFoundError: [/gcs/bucket/data.csv] not found; the failed tasks are: [x]"
    config = make_config(kfp_runs.url, vertex_runs.url)
    path = write_config(config_dict(config.targets.gke.host, config.targets.vertex.api_endpoint))
    for server, target in ((kfp_runs, "gke"), (vertex_runs, "vertex")):
        server.error_message = message
        run_id = _failed_run(server, config, target, tmp_path)
        shown = gkeflow("runs", "show", run_id, "--target", target, "--config", str(path),
                        cwd=tmp_path, env={"GKEFLOW_TEST_KFP_TOKEN": TOKEN})
        assert shown.returncode == 0, shown.stderr
        assert "[/gcs/bucket/data.csv]" in " ".join(shown.stdout.split())


def test_a_vertex_run_that_did_not_fail_is_not_retried(vertex_runs, make_config, tmp_path):
    from gkeflow.pipelines.targets.runs import RunStateError

    config = make_config(None, vertex_runs.url)
    submission, _ = submit(config, "training", "vertex", environment="default", overrides={},
                           workdir=tmp_path / "v", backend=_backend(config, "vertex"),
                           version="gabc")
    runs_reader = reader(config, "vertex", _backend(config, "vertex"))
    with pytest.raises(RunStateError, match="only a failed or cancelled run is retried"):
        runs_reader.retry(submission.run_id)  # still running
    vertex_runs.finish(submission.run_id)
    with pytest.raises(RunStateError, match="is succeeded; only a failed"):
        runs_reader.retry(submission.run_id)
    assert len(vertex_runs.jobs) == 1


def test_runs_of_a_deleted_pipeline_still_list_and_show(kfp_runs, token_env, make_config,
                                                       tmp_path):
    config = make_config(kfp_runs.url, None)
    run_id = _failed_run(kfp_runs, config, "gke", tmp_path)
    kfp_runs.pipelines.clear()  # deleted in the UI since
    runs_reader = reader(config, "gke", _backend(config, "gke"))
    (listed,) = runs_reader.list(limit=5)
    assert listed.id == run_id and listed.state == "FAILED" and listed.pipeline == ""
    assert runs_reader.show(run_id).failed_step.error == ERROR


@pytest.mark.parametrize("target", ["gke", "vertex"])
def test_cancelling_a_run_that_ended_says_so(both, target):
    from gkeflow.pipelines.targets.runs import RunStateError

    config, runs = both
    server_calls = reader(config, target, _backend(config, target))
    with pytest.raises(RunStateError, match="already ended \\(failed\\); nothing to cancel"):
        server_calls.cancel(runs[target])
    assert server_calls.show(runs[target]).state == "FAILED"


def test_a_replaced_kfp_schedule_keeps_its_run_history(kfp_runs, token_env, make_config,
                                                       tmp_path):
    weekly = {"name": "weekly", "target": "gke", "cron": "0 6 * * 1"}
    config = make_config(kfp_runs.url, None, schedules=[weekly])
    apply(config, workdir=tmp_path / "1", backends={"gke": _backend(config, "gke")})
    (first_id,) = kfp_runs.recurring_runs
    before = kfp_runs.fire(first_id)
    kfp_runs.finish(before)
    # A new cron, then new parameters: KFP cannot update a recurring run, so each replaces it.
    retimed = make_config(kfp_runs.url, None, schedules=[{**weekly, "cron": "0 7 * * 1"}])
    apply(retimed, workdir=tmp_path / "2", backends={"gke": _backend(retimed, "gke")})
    (second_id,) = kfp_runs.recurring_runs
    middle = kfp_runs.fire(second_id)
    kfp_runs.finish(middle)
    reparametrised = make_config(kfp_runs.url, None, schedules=[
        {**weekly, "cron": "0 7 * * 1", "parameters": {"epochs": 3}}])
    result = apply(reparametrised, workdir=tmp_path / "3",
                   backends={"gke": _backend(reparametrised, "gke")})
    assert [a.kind for a in result.actions if a.schedule == "weekly"] == ["replace"]
    (third_id,) = kfp_runs.recurring_runs
    assert len({first_id, second_id, third_id}) == 3
    after = kfp_runs.fire(third_id)
    kfp_runs.finish(after)

    runs = reader(config, "gke", _backend(config, "gke")).list(schedule="weekly")
    assert [r.id for r in runs] == [after, middle, before]
    assert {r.schedule for r in runs} == {"weekly"}
    (recurring,) = kfp_runs.recurring_runs.values()
    fields = json.loads(recurring["description"].split("; ", 1)[1])
    assert fields["previous"] == [first_id, second_id]
