"""A scheduled training run that fails in train-model sends one webhook message naming the
step and its error, with a link to the run, on both targets.

The run is real as far as the fakes go: `schedule apply` (KFP) or `submit` (Vertex AI)
compiles the pipeline with notifications and ships it (every request contract-checked,
the spec and platform spec parsed strictly); the fake plays the run to a failure in
train-model. The exit task then runs as its pod would: its constant inputs read from the
shipped spec, the placeholders filled as the backend fills them, the webhook URL from the
Kubernetes Secret's environment variable (GKE) or from Secret Manager (Vertex AI), the
failed step from the fake's run API.
"""

from __future__ import annotations

import json

import pytest
import requests
from kfp import dsl

from gkeflow.components import yamlio
from gkeflow.components.notify.component import notify_run
from gkeflow.components.notify.logic import RunReport
from gkeflow.pipelines.targets.kfp import KfpBackend
from gkeflow.pipelines.targets.schedule import apply
from gkeflow.pipelines.targets.submit import submit
from gkeflow.pipelines.targets.vertex import VertexBackend
from tests.integration.conftest import FAST, TOKEN
from tests.integration.fake_runs import FakeKfpRuns, FakeVertexRuns
from tests.integration.webhook_receiver import WebhookReceiver

SECRET = "projects/my-project/secrets/gkeflow-webhook"
WEBHOOK = {"format": "slack", "gke_secret": "gkeflow-webhook", "vertex_secret": SECRET}


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


def _exit_inputs(spec: dict) -> dict:
    """The notify-run task's constant inputs, as compiled."""
    parameters = spec["root"]["dag"]["tasks"]["notify-run"]["inputs"]["parameters"]
    return {name: value["runtimeValue"]["constant"] for name, value in parameters.items()
            if "runtimeValue" in value}


def _vertex_run(config, vertex_runs, tmp_path, overrides=None):
    """Submit training to the fake Vertex AI and end the run there: the submission, the
    finished job and its pipeline spec as a dict."""
    from google.protobuf import json_format

    submission, _ = submit(config, "training", "vertex", environment="default",
                           overrides=overrides or {}, workdir=tmp_path,
                           backend=VertexBackend(config.targets.vertex, policy=FAST),
                           version="g1")
    job = vertex_runs.finish(submission.run_id)
    return submission, job, json_format.MessageToDict(job._pb.pipeline_spec)


def _run_exit_task(inputs: dict, **filled) -> None:
    values = {**inputs, **filled}
    notify_run.python_func(**{k: values[k] for k in (
        "status", "pipeline", "target", "run_name", "run_id", "link_template", "when",
        "webhook_format", "webhook_env", "webhook_secret", "parameters", "defaults",
        "run_api", "metadata_api", "step_rates")})


def test_a_scheduled_kfp_training_run_failing_in_train_model(
        kfp_runs, token_env, make_config, tmp_path, monkeypatch, capsys):
    weekly = {"name": "weekly", "target": "gke", "cron": "0 6 * * 1"}
    config = make_config(kfp_runs.url, None, schedules=[weekly],
                         notifications={"default": {"webhook": WEBHOOK}})
    apply(config, workdir=tmp_path, backends={"gke": KfpBackend(config.targets.gke,
                                                                policy=FAST)})
    (recurring_id,) = kfp_runs.recurring_runs
    (spec,) = kfp_runs.specs.values()
    kfp_runs.fail_task = "train-model"
    run_id = kfp_runs.fire(recurring_id)
    run = kfp_runs.finish(run_id)

    token_file = tmp_path / "sa-token"
    token_file.write_text(TOKEN)
    monkeypatch.setenv("KF_PIPELINES_SA_TOKEN_PATH", str(token_file))
    inputs = _exit_inputs(spec)
    assert inputs["run_api"] == "http://ml-pipeline.kubeflow:8888"  # in cluster
    with WebhookReceiver(slack=True) as hook:
        monkeypatch.setenv("GKEFLOW_WEBHOOK_URL", hook.url)  # what the Secret provides
        status = dsl.PipelineTaskFinalStatus(
            state="FAILED", pipeline_job_resource_name=run_id,
            pipeline_task_name="exit-handler-1", error_code=2,
            error_message="Task exit-handler-1 failed.")
        _run_exit_task(inputs, status=status, run_name=run["display_name"], run_id=run_id,
                       run_api=kfp_runs.url, parameters="epochs\x1f20")
    (message,) = hook.messages
    text = message["text"]
    assert "failed step: Train model" in text and kfp_runs.error_message in text
    assert f"<{kfp_runs.url}/#/runs/details/{run_id}|{run['display_name']}>" in text
    # the link names a run the API knows
    answer = requests.get(f"{kfp_runs.url}/apis/v2beta1/runs/{run_id}",
                          headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5)
    assert answer.status_code == 200 and answer.json()["state"] == "FAILED"
    output = capsys.readouterr()
    assert "notification sent (slack, HTTP 200)" in output.out
    for where in (json.dumps(spec), json.dumps(message), output.out + output.err):
        assert "T0P-SECRET" not in where and hook.url not in where


def test_a_kfp_training_run_that_registers_names_its_version(
        kfp_runs, token_env, make_config, tmp_path, monkeypatch, capsys):
    """The registered version of a KFP run comes from ML Metadata (register-model's
    ``model_version`` output), read over gRPC-Web like the in-cluster envoy answers it."""
    config = make_config(kfp_runs.url, None,
                         notifications={"default": {"when": "always", "webhook": WEBHOOK}})
    submission, _ = submit(config, "training", "gke", environment="default", overrides={},
                           workdir=tmp_path, backend=KfpBackend(config.targets.gke,
                                                                policy=FAST),
                           version="g1")
    run = kfp_runs.finish(submission.run_id)
    (spec,) = kfp_runs.specs.values()
    inputs = _exit_inputs(spec)
    assert inputs["metadata_api"] == "http://metadata-envoy-service.kubeflow:9090"
    token_file = tmp_path / "sa-token"
    token_file.write_text(TOKEN)
    monkeypatch.setenv("KF_PIPELINES_SA_TOKEN_PATH", str(token_file))
    kfp_runs.inject("POST", "^/ml_metadata", 503, count=1)  # retried like every call
    with WebhookReceiver(slack=True) as hook:
        monkeypatch.setenv("GKEFLOW_WEBHOOK_URL", hook.url)
        status = dsl.PipelineTaskFinalStatus(
            state="SUCCEEDED", pipeline_job_resource_name=submission.run_id,
            pipeline_task_name="exit-handler-1", error_code=0, error_message="")
        _run_exit_task(inputs, status=status, run_name=run["display_name"],
                       run_id=submission.run_id, run_api=kfp_runs.url,
                       metadata_api=kfp_runs.url)
    (message,) = hook.messages
    assert "gate: passed: registered" in message["text"]
    assert "registered version: 1" in message["text"]
    assert len(kfp_runs.calls("POST", "GetExecutionsByID")) == 2
    output = capsys.readouterr()
    assert TOKEN not in output.out + output.err + json.dumps(message)


def test_a_vertex_training_run_failing_in_train_model(vertex_runs, make_config, tmp_path,
                                                      monkeypatch, capsys):
    config = make_config(None, vertex_runs.url,
                         notifications={"default": {"when": "always", "webhook": WEBHOOK}})
    vertex_runs.fail_task = "train-model"
    submission, _job, spec = _vertex_run(config, vertex_runs, tmp_path, {"epochs": "3"})
    inputs = _exit_inputs(spec)
    assert inputs["webhook_secret"] == SECRET and inputs["run_api"] == vertex_runs.url
    job_id = submission.run_id.rsplit("/", 1)[-1]
    with WebhookReceiver(slack=True) as hook:
        vertex_runs.secrets[SECRET] = hook.url
        monkeypatch.setenv("GKEFLOW_SECRET_MANAGER_ENDPOINT", vertex_runs.url)
        monkeypatch.delenv("GKEFLOW_WEBHOOK_URL", raising=False)
        status = dsl.PipelineTaskFinalStatus(
            state="FAILED", pipeline_job_resource_name=submission.run_id,
            pipeline_task_name="exit-handler-1", error_code=9,
            error_message="The DAG failed because some tasks failed. The failed tasks are: "
                          "[train-model].")
        _run_exit_task(inputs, status=status, run_name=job_id, run_id="uuid-1",
                       parameters="epochs\x1f3\x1eepochs_default\x1f1")
    (message,) = hook.messages
    assert vertex_runs.secret_reads == [f"{SECRET}/versions/latest"]
    text = message["text"]
    assert "train-model" in text and vertex_runs.error_message in text
    assert submission.url in text  # the Cloud console link gkeflow submit printed
    assert "epochs=3" in text
    output = capsys.readouterr()
    for where in (json.dumps(spec), json.dumps(message), output.out + output.err):
        assert hook.url not in where and "T0P-SECRET" not in where


def test_a_vertex_schedule_carries_its_own_notifications_and_no_url(vertex_runs, make_config,
                                                                    tmp_path):
    nightly = {"name": "nightly", "target": "vertex", "cron": "0 2 * * *",
               "notifications": {"when": "always", "webhook": {"format": "google-chat",
                                                               "vertex_secret": SECRET}}}
    plain = {"name": "plain", "target": "vertex", "cron": "0 3 * * *"}
    config = make_config(None, vertex_runs.url, schedules=[nightly, plain])
    apply(config, workdir=tmp_path, backends={"vertex": VertexBackend(config.targets.vertex,
                                                                      policy=FAST)})
    from google.protobuf import json_format

    specs = {s.display_name: json_format.MessageToDict(
        s.create_pipeline_job_request.pipeline_job._pb.pipeline_spec)
        for s in vertex_runs.schedules.values()}
    inputs = _exit_inputs(specs["nightly"])
    assert (inputs["when"], inputs["webhook_format"], inputs["webhook_secret"]) == (
        "always", "google-chat", SECRET)
    assert "notify-run" not in specs["plain"]["root"]["dag"]["tasks"]

    # nightly fires and fails in train-model: one message names the step and its error
    vertex_runs.fail_task = "train-model"
    (schedule_name,) = [n for n, s in vertex_runs.schedules.items()
                        if s.display_name == "nightly"]
    job_name = vertex_runs.fire(schedule_name)
    vertex_runs.finish(job_name)
    job_id = job_name.rsplit("/", 1)[-1]
    with WebhookReceiver() as hook:
        vertex_runs.secrets[SECRET] = hook.url
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("GKEFLOW_SECRET_MANAGER_ENDPOINT", vertex_runs.url)
            _run_exit_task(inputs, status=dsl.PipelineTaskFinalStatus(
                state="FAILED", pipeline_job_resource_name=job_name,
                pipeline_task_name="exit-handler-1", error_code=9,
                error_message="The DAG failed because some tasks failed."),
                run_name=job_id, run_id="uuid-2", parameters="")
    (message,) = hook.messages
    assert "*gkeflow-training run nightly-" in message["text"]
    assert "failed step: train-model" in message["text"]
    assert vertex_runs.error_message in message["text"]
    assert f"pipelines/runs/{job_id}?project=my-project|{job_id}>" in message["text"]


def test_the_registered_version_is_found_when_the_backend_hangs_it_on_the_driver(
        kfp_runs, token_env, make_config, tmp_path, monkeypatch):
    from gkeflow.components.cloud.retry import RetryPolicy
    from gkeflow.components.cloud.run_api import apply_run, kfp_registered_version, kfp_run

    config = make_config(kfp_runs.url, None)
    submission, _ = submit(config, "training", "gke", environment="default", overrides={},
                           workdir=tmp_path, backend=KfpBackend(config.targets.gke,
                                                                policy=FAST),
                           version="g1")
    kfp_runs.finish(submission.run_id)
    token_file = tmp_path / "sa-token"
    token_file.write_text(TOKEN)
    monkeypatch.setenv("KF_PIPELINES_SA_TOKEN_PATH", str(token_file))
    policy = RetryPolicy(budget_s=5, call_timeout_s=5)
    started, tasks = kfp_run(kfp_runs.url, submission.run_id, policy)
    (register,) = [t for t in tasks if t["name"] == "Register model"]
    driver = {**register, "name": "register-model-driver", "metadata": {}}
    register["execution_id"] = ""  # only the driver names the execution
    tasks = [*tasks, driver]
    report = apply_run(RunReport(pipeline="training", run="r", target="gke", link="",
                                 state="SUCCEEDED"), started, tasks, now=0)
    assert report.gate == "passed: registered"
    assert kfp_registered_version(kfp_runs.url, tasks, policy) == "1"


def _documented_email_schedule() -> dict:
    """The weekly Vertex AI schedule with its own email, as docs/operating.md shows it."""
    import re
    from pathlib import Path


    page = (Path(__file__).parents[2] / "docs" / "operating.md").read_text(encoding="utf-8")
    blocks = [yamlio.load(b) for b in re.findall(r"```yaml\n(.*?)```", page, re.DOTALL)]
    (weekly,) = [s for b in blocks if isinstance(b, dict) for s in b.get("schedules") or []
                 if (s.get("notifications") or {}).get("email")]
    return weekly


def test_the_documented_email_schedule_applies_on_vertex(vertex_runs, make_config, tmp_path):
    weekly = _documented_email_schedule()
    assert weekly["target"] == "vertex"
    plain = {"name": "plain", "target": "vertex", "cron": "0 3 * * *"}
    config = make_config(None, vertex_runs.url, schedules=[weekly, plain],
                         notifications={"default": {"webhook": WEBHOOK}})
    backend = VertexBackend(config.targets.vertex, policy=FAST)
    first = apply(config, workdir=tmp_path / "1", backends={"vertex": backend})
    assert sorted(a.kind for a in first.actions) == ["create", "create", "note"]
    # Vertex AI writes the mail itself: that it carries no cost is said, for that schedule
    (note,) = [a for a in first.actions if a.kind == "note"]
    assert note.schedule == weekly["name"] and "carries no cost" in note.detail
    assert "a webhook notification carries the run's list-price cost" in note.detail
    from google.protobuf import json_format

    specs = {s.display_name: json_format.MessageToDict(
        s.create_pipeline_job_request.pipeline_job._pb.pipeline_spec)
        for s in vertex_runs.schedules.values()}
    email = specs[weekly["name"]]["root"]["dag"]["tasks"]["vertex-notification-email"]
    recipients = email["inputs"]["parameters"]["recipients"]["runtimeValue"]["constant"]
    assert recipients == weekly["notifications"]["email"]["recipients"]
    assert "notify-run" in specs["plain"]["root"]["dag"]["tasks"]  # the default's webhook
    # applied again unchanged: the same settings compile to the same schedule
    again = apply(config, workdir=tmp_path / "2", backends={"vertex": backend})
    assert sorted(a.kind for a in again.actions) == ["note", "unchanged", "unchanged"]


def test_the_documented_email_schedule_is_refused_on_gke_in_one_line(
        kfp_runs, token_env, make_config, tmp_path):
    from gkeflow.pipelines.settings.config import ConfigError

    weekly = {**_documented_email_schedule(), "target": "gke"}
    config = make_config(kfp_runs.url, None, schedules=[weekly])
    with pytest.raises(ConfigError) as refused:
        apply(config, workdir=tmp_path, backends={"gke": KfpBackend(config.targets.gke,
                                                                    policy=FAST)})
    message = str(refused.value)
    assert "\n" not in message and "Kubeflow Pipelines on GKE sends no email" in message
    assert message.startswith(f"schedules.0 ({weekly['name']}): notifications.email")
    assert not kfp_runs.recurring_runs


# PipelineTaskFinalStatus as each backend hands it to the exit task. KFP's driver
# (backend/src/v2/driver/resolve.go): the exit handler group's ML Metadata execution state,
# the group's task name, an empty error; RUNNING when the group holds a ParallelFor
# (kubeflow/pipelines#13321). Vertex AI: its task state, with an error on failure.
VERTEX_ENDS = {"succeeded": ("SUCCEEDED", None, None),
               "failed": ("FAILED", 9, "The DAG failed because some tasks failed. The failed "
                                       "tasks are: [train-model].")}


@pytest.mark.parametrize("end, state", [("succeeded", "COMPLETE"), ("failed", "FAILED"),
                                        ("succeeded", "RUNNING"), ("failed", "RUNNING")])
def test_a_kfp_run_with_when_failure_notifies_only_when_it_failed(
        end, state, kfp_runs, token_env, make_config, tmp_path, monkeypatch, capsys):
    config = make_config(kfp_runs.url, None, notifications={"default": {"webhook": WEBHOOK}})
    if end == "failed":
        kfp_runs.fail_task = "train-model"
    submission, _ = submit(config, "training", "gke", environment="default", overrides={},
                           workdir=tmp_path, backend=KfpBackend(config.targets.gke,
                                                                policy=FAST),
                           version="g1")
    run = kfp_runs.finish(submission.run_id)
    (spec,) = kfp_runs.specs.values()
    inputs = _exit_inputs(spec)
    assert (inputs["target"], inputs["when"]) == ("gke", "failure")
    token_file = tmp_path / "sa-token"
    token_file.write_text(TOKEN)
    monkeypatch.setenv("KF_PIPELINES_SA_TOKEN_PATH", str(token_file))
    with WebhookReceiver(slack=True) as hook:
        monkeypatch.setenv("GKEFLOW_WEBHOOK_URL", hook.url)
        status = dsl.PipelineTaskFinalStatus(
            state=state, pipeline_job_resource_name=submission.run_id,
            pipeline_task_name="exit-handler-1", error_code=None, error_message=None)
        _run_exit_task(inputs, status=status, run_name=run["display_name"],
                       run_id=submission.run_id, run_api=kfp_runs.url, metadata_api="")
    output = capsys.readouterr().out
    if end == "succeeded":
        assert hook.messages == [] and hook.attempts == 0
        assert f"run succeeded ({state}): no notification (notifications on failure)" in output
        return
    (sent,) = hook.messages
    assert sent["text"].startswith(f":x: gkeflow-training run {run['display_name']} failed")
    assert "failed step: Train model" in sent["text"]
    assert kfp_runs.error_message in sent["text"]


@pytest.mark.parametrize("end", ["succeeded", "failed"])
def test_a_vertex_run_with_when_failure_notifies_only_when_it_failed(
        end, vertex_runs, make_config, tmp_path, monkeypatch, capsys):
    config = make_config(None, vertex_runs.url,
                         notifications={"default": {"webhook": WEBHOOK}})
    if end == "failed":
        vertex_runs.fail_task = "train-model"
    submission, job, spec = _vertex_run(config, vertex_runs, tmp_path)
    inputs = _exit_inputs(spec)
    assert (inputs["target"], inputs["when"]) == ("vertex", "failure")
    state, code, message = VERTEX_ENDS[end]
    with WebhookReceiver(slack=True) as hook:
        vertex_runs.secrets[SECRET] = hook.url
        monkeypatch.setenv("GKEFLOW_SECRET_MANAGER_ENDPOINT", vertex_runs.url)
        monkeypatch.delenv("GKEFLOW_WEBHOOK_URL", raising=False)
        status = dsl.PipelineTaskFinalStatus(
            state=state, pipeline_job_resource_name=submission.run_id,
            pipeline_task_name="exit-handler-1", error_code=code, error_message=message)
        _run_exit_task(inputs, status=status, run_name=submission.run_id.rsplit("/", 1)[-1],
                       run_id="uuid-1", parameters="")
    output = capsys.readouterr().out
    if end == "succeeded":
        assert hook.messages == [] and hook.attempts == 0 and vertex_runs.secret_reads == []
        assert "run succeeded (SUCCEEDED): no notification" in output
        return
    (sent,) = hook.messages
    assert sent["text"].startswith(":x: gkeflow-training run ")
    assert "failed step: train-model" in sent["text"]
    assert vertex_runs.error_message in sent["text"]


#: The step with train-model's compute: the Keras candidate of model_type auto (the default).
TRAINS = "train-mlp"


def _price_cache(directory, target: str, config) -> tuple[float, str]:
    """A price cache beside gkeflow.yaml pricing the step with train-model's compute (the
    Keras candidate of model_type auto, train-mlp) as compiled for ``target``; its hourly
    rate and the machine it prices."""
    from datetime import date

    from gkeflow.pipelines.cli.costs import pipeline_profiles
    from gkeflow.pipelines.compute.costing import machine_type, price_region
    from gkeflow.pipelines.compute.prices import CACHE_FILE, Price, write_prices

    profile = pipeline_profiles(config, "training", target)[TRAINS]
    machine, region = machine_type(profile, target), price_region(config)
    prefix = "vertex-" if target == "vertex" else ""
    rows = [Price(f"{prefix}machine", machine, profile.scheduling, region, 0.4, "test-src",
                  date.today()),
            Price(f"{prefix}gpu", profile.accelerator, profile.scheduling, region, 0.3,
                  "test-src", date.today())]
    write_prices(directory / CACHE_FILE, rows, "prices for a test")
    return rows[0].usd_per_hour + profile.accelerator_count * rows[1].usd_per_hour, machine


def _seconds(start, end) -> float:
    from gkeflow.components.cloud.run_api import span_s

    return span_s(start, end)


def _kfp_exit_message(kfp_runs, inputs: dict, run: dict, run_id: str, tmp_path,
                      monkeypatch) -> dict:
    """The exit task of a finished KFP run, as in the cluster (the pod's service-account
    token, the in-cluster run API): the one webhook message it sends."""
    token_file = tmp_path / "sa-token"
    token_file.write_text(TOKEN)
    monkeypatch.setenv("KF_PIPELINES_SA_TOKEN_PATH", str(token_file))
    with WebhookReceiver() as hook:
        monkeypatch.setenv("GKEFLOW_WEBHOOK_URL", hook.url)
        status = dsl.PipelineTaskFinalStatus(
            state="SUCCEEDED", pipeline_job_resource_name=run_id,
            pipeline_task_name="exit-handler-1", error_code=0, error_message="")
        _run_exit_task(inputs, status=status, run_name=run["display_name"], run_id=run_id,
                       run_api=kfp_runs.url, metadata_api="")
    (message,) = hook.messages
    return message


def _vertex_exit_message(vertex_runs, inputs: dict, job: str, run_id: str,
                         monkeypatch) -> dict:
    """The exit task of a finished Vertex AI run (its webhook from Secret Manager, a Slack
    message): the one message it sends."""
    with WebhookReceiver(slack=True) as hook:
        vertex_runs.secrets[SECRET] = hook.url
        monkeypatch.setenv("GKEFLOW_SECRET_MANAGER_ENDPOINT", vertex_runs.url)
        monkeypatch.delenv("GKEFLOW_WEBHOOK_URL", raising=False)
        status = dsl.PipelineTaskFinalStatus(
            state="SUCCEEDED", pipeline_job_resource_name=job,
            pipeline_task_name="exit-handler-1", error_code=0, error_message="")
        _run_exit_task(inputs, status=status, run_name=job.rsplit("/", 1)[-1], run_id=run_id)
    (message,) = hook.messages
    return message


def _cost_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"cost of {TRAINS}"))


def test_a_kfp_run_notification_gives_each_step_s_cost_and_the_total(
        kfp_runs, token_env, make_config, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    generic = {**WEBHOOK, "format": "generic"}  # every field of the report, as JSON
    config = make_config(kfp_runs.url, None,
                         notifications={"default": {"when": "always", "webhook": generic}})
    hourly, _machine = _price_cache(tmp_path, "gke", config)
    submission, _ = submit(config, "training", "gke", environment="default", overrides={},
                           workdir=tmp_path, backend=KfpBackend(config.targets.gke,
                                                                policy=FAST),
                           version="g1")
    run = kfp_runs.finish(submission.run_id)
    (spec,) = kfp_runs.specs.values()
    inputs = _exit_inputs(spec)
    rates = json.loads(inputs["step_rates"])
    assert rates["steps"][TRAINS]["usd_per_hour"] == pytest.approx(hourly)
    message = _kfp_exit_message(kfp_runs, inputs, run, submission.run_id, tmp_path,
                                monkeypatch)
    answer = requests.get(f"{kfp_runs.url}/apis/v2beta1/runs/{submission.run_id}",
                          headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5).json()
    (train,) = [t for t in answer["run_details"]["task_details"]
                if t["display_name"] == "Train mlp"]
    seconds = _seconds(train["start_time"], train["end_time"])
    assert message["step_durations"][TRAINS] == seconds
    usd = hourly * seconds / 3600
    assert _cost_line("\n".join(message["cost"])).endswith(f"/h = ${usd:,.2f}")
    head = message["cost"][0]  # every step priced: CPU steps at the e2 node pool's rates
    assert head.startswith("cost (estimate from list prices, us-central1): $")
    assert " in all; ceiling $" in head and head.endswith("(every step to its timeout)")
    assert any(line.startswith("prices: test-src (published, ") for line in message["cost"])


def test_a_kfp_run_notification_gives_the_expected_cost_from_the_earlier_runs(
        kfp_runs, token_env, make_config, tmp_path, monkeypatch):
    """The second run of the pipeline: its notification reads the first (same pipeline,
    succeeded) from the run API and gives the expected cost at its step durations."""
    monkeypatch.chdir(tmp_path)
    generic = {**WEBHOOK, "format": "generic"}
    config = make_config(kfp_runs.url, None,
                         notifications={"default": {"when": "always", "webhook": generic}})
    _price_cache(tmp_path, "gke", config)
    backend = KfpBackend(config.targets.gke, policy=FAST)
    first, _ = submit(config, "training", "gke", environment="default", overrides={},
                      workdir=tmp_path / "a", backend=backend, version="g1")
    kfp_runs.finish(first.run_id)
    second, _ = submit(config, "training", "gke", environment="default", overrides={},
                       workdir=tmp_path / "b", backend=backend, version="g1")
    run = kfp_runs.finish(second.run_id)
    (spec,) = kfp_runs.specs.values()
    inputs = _exit_inputs(spec)
    rates = json.loads(inputs["step_rates"])
    message = _kfp_exit_message(kfp_runs, inputs, run, second.run_id, tmp_path, monkeypatch)
    earlier = requests.get(f"{kfp_runs.url}/apis/v2beta1/runs/{first.run_id}",
                           headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5).json()
    from gkeflow.components.cloud.run_api import kfp_tasks, step_durations
    from gkeflow.components.notify.logic import expected_usd

    expected = expected_usd(rates, [step_durations(kfp_tasks(earlier))])
    assert expected is not None and expected > 0
    assert f"; expected ${expected:,.2f} (median step durations of 1 earlier run)" in \
        message["cost"][0]


def test_a_vertex_run_notification_gives_each_step_s_cost_and_the_run_fee(
        vertex_runs, make_config, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = make_config(None, vertex_runs.url,
                         notifications={"default": {"when": "always", "webhook": WEBHOOK}})
    hourly, _machine = _price_cache(tmp_path, "vertex", config)
    submission, job, spec = _vertex_run(config, vertex_runs, tmp_path)
    inputs = _exit_inputs(spec)
    message = _vertex_exit_message(vertex_runs, inputs, submission.run_id, "uuid-1",
                                   monkeypatch)
    (train,) = [t for t in job.job_detail.task_details if t.task_name == TRAINS]
    seconds = (train.end_time - train.start_time).total_seconds()
    assert _cost_line(message["text"]).endswith(f"/h = ${hourly * seconds / 3600:,.2f}")
    fee = json.loads(inputs["step_rates"])["run_fee_usd"]
    assert fee > 0 and f"with the run fee ${fee:,.2f}" in message["text"]
    assert "estimate from list prices" in message["text"]


def test_a_vertex_run_notification_gives_the_expected_cost_from_the_earlier_runs(
        vertex_runs, make_config, tmp_path, monkeypatch):
    """The earlier PipelineJob of the same gkeflow pipeline (label gkeflow-pipeline),
    succeeded, gives the second run's notification its expected cost."""
    monkeypatch.chdir(tmp_path)
    config = make_config(None, vertex_runs.url,
                         notifications={"default": {"when": "always", "webhook": WEBHOOK}})
    _price_cache(tmp_path, "vertex", config)
    first, first_job, _spec = _vertex_run(config, vertex_runs, tmp_path / "a")
    second, _job, spec = _vertex_run(config, vertex_runs, tmp_path / "b")
    inputs = _exit_inputs(spec)
    message = _vertex_exit_message(vertex_runs, inputs, second.run_id, "uuid-2", monkeypatch)
    from gkeflow.components.notify.logic import expected_usd

    durations = {t.task_name: (t.end_time - t.start_time).total_seconds()
                 for t in first_job.job_detail.task_details
                 if t.parent_task_id and t.task_name}
    expected = expected_usd(json.loads(inputs["step_rates"]), [durations])
    assert expected is not None
    assert f"; expected ${expected:,.2f} (median step durations of 1 earlier run)" in \
        message["text"]
