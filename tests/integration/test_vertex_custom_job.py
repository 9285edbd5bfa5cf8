"""The Vertex AI CustomJob launcher over real REST calls to a fake Vertex AI endpoint.

The payload is the one ``gkeflow compile --compute train-model.replicas=2 --compute
train-model.scheduling=spot`` writes, with the executor input substituted as Vertex AI
Pipelines does (JSON-escaped); every created CustomJob is parsed strictly.
"""

from __future__ import annotations

import json

import pytest
from google.auth.credentials import AnonymousCredentials

from gkeflow.components import yamlio
from gkeflow.components.cloud import follow as fl
from gkeflow.components.cloud.retry import RetryPolicy
from gkeflow.components.scaleout import vertex_launcher as vl
from gkeflow.pipelines.definitions.training import DEFAULT_COMPUTE
from gkeflow.pipelines.targets.compile import compile_pipeline
from tests.compile.customjob import custom_job_payload
from tests.integration.fake_vertex_jobs import FakeVertexJobs

PROJECT, LOCATION = "p", "us-central1"
PARENT = f"projects/{PROJECT}/locations/{LOCATION}"
PIPELINE_JOB = f"{PARENT}/pipelineJobs/gkeflow-training-20260101"
EXECUTOR_INPUT = {"inputs": {"parameterValues": {"epochs": 3, "model_type": "mlp"}},
                  "outputs": {"outputFile": "/gcs/root/train-model/executor_output.json"}}


@pytest.fixture(scope="module")
def payload(tmp_path_factory) -> dict:
    """The compiled payload after Vertex AI substituted the executor input into it."""

    compute = {"train-model": DEFAULT_COMPUTE["train-model"].with_overrides(
        replicas=2, scheduling="spot")}
    path = compile_pipeline("training", "vertex", tmp_path_factory.mktemp("v"), compute=compute)
    spec = next(yamlio.load_all(path.read_text()))
    container = spec["deploymentSpec"]["executors"]["exec-train-model"]["container"]
    raw = container["args"][container["args"].index("--payload") + 1]
    assert raw == json.dumps(custom_job_payload(spec), sort_keys=True)
    escaped = json.dumps(json.dumps(EXECUTOR_INPUT))[1:-1]
    return json.loads(raw.replace("{{$.json_escape[1]}}", escaped))


def run(fake, payload, gcp_resources="", task="train-model"):
    job_client, pipeline_client = vl.clients(LOCATION, fake.url, AnonymousCredentials())
    policy = RetryPolicy(call_timeout_s=5, budget_s=5, initial_s=0.01, maximum_s=0.05)
    return vl.run_custom_job(job_client, pipeline_client, PROJECT, LOCATION, payload,
                             PIPELINE_JOB, task, gcp_resources, poll_s=0.01, echo=lambda _: None,
                             policy=policy)


def test_creates_a_two_pool_spot_job_as_the_pipelines_service_account(payload, tmp_path):
    resources = tmp_path / "gcp_resources"
    with FakeVertexJobs(running_looks=2) as fake:
        job = run(fake, payload, str(resources))
    assert job.state.name == "JOB_STATE_SUCCEEDED"
    [created] = fake.created
    spec = created.job_spec
    assert [p.replica_count for p in spec.worker_pool_specs] == [1, 1]
    assert spec.scheduling.strategy.name == "SPOT"
    assert spec.scheduling.restart_job_on_worker_restart
    assert spec.service_account == "runner@p.iam.gserviceaccount.com"
    assert spec.network == "projects/123/global/networks/vpc"
    assert created.labels[vl.LAUNCH_LABEL] == vl.launch_key(PIPELINE_JOB, "train-model")
    args = list(spec.worker_pool_specs[0].container_spec.args)
    assert json.loads(args[args.index("--executor_input") + 1]) == EXECUTOR_INPUT
    document = json.loads(resources.read_text())
    assert document["resources"][0]["resourceType"] == "CustomJob"
    assert document["resources"][0]["resourceUri"].endswith(job.name)


def test_a_retried_launcher_follows_the_job_of_its_earlier_attempt(payload):
    from google.cloud import aiplatform_v1

    with FakeVertexJobs() as fake:
        earlier = aiplatform_v1.CustomJob(display_name="train-model", labels={
            vl.LAUNCH_LABEL: vl.launch_key(PIPELINE_JOB, "train-model")})
        name = fake.add_job(PARENT, earlier, "JOB_STATE_RUNNING")
        other = fake.add_job(PARENT, aiplatform_v1.CustomJob(labels={
            vl.LAUNCH_LABEL: vl.launch_key(PIPELINE_JOB, "other-task")}), "JOB_STATE_RUNNING")
        job = run(fake, payload)
    assert job.name == name != other and fake.created == []


def test_a_failed_earlier_job_is_replaced_and_a_failure_fails_the_step(payload):
    from google.cloud import aiplatform_v1

    with FakeVertexJobs(outcome="JOB_STATE_FAILED") as fake:
        fake.add_job(PARENT, aiplatform_v1.CustomJob(labels={
            vl.LAUNCH_LABEL: vl.launch_key(PIPELINE_JOB, "train-model")}), "JOB_STATE_FAILED")
        with pytest.raises(fl.JobFailed, match="workerpool1-0 exited"):
            run(fake, payload)
    assert len(fake.created) == 1


def test_main_ends_in_one_line_and_shows_the_traceback_only_when_debugging(
        payload, capsys, monkeypatch):
    monkeypatch.delenv("GKEFLOW_DEBUG", raising=False)
    argv = ["--payload", json.dumps(payload), "--project", PROJECT, "--location", LOCATION,
            "--pipeline_job", PIPELINE_JOB, "--task_name", "train-model", "--poll", "0.02",
            "--retry-budget", "5"]
    with FakeVertexJobs(outcome="JOB_STATE_FAILED") as fake:
        assert vl.main([*argv, "--api_endpoint", fake.url]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: CustomJob projects/p/")
        assert "workerpool1-0 exited" in err and "Traceback" not in err
        assert vl.main([*argv, "--api_endpoint", fake.url, "--debug"]) == 1
        assert "Traceback" in capsys.readouterr().err
    monkeypatch.setenv("GKEFLOW_CALL_TIMEOUT_S", "soon")
    assert vl.main([*argv, "--api_endpoint", "http://127.0.0.1:9"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == ("error: ValueError: GKEFLOW_CALL_TIMEOUT_S='soon' is not a number "
                           "of seconds (set GKEFLOW_DEBUG=1 for the traceback)")


def test_help_explains_the_reliability_options(capsys):
    with pytest.raises(SystemExit):
        vl.main(["--help"])
    text = capsys.readouterr().out
    for words in ("--call-timeout", "GKEFLOW_CALL_TIMEOUT_S", "--retry-budget",
                  "GKEFLOW_RETRY_BUDGET_S", "--debug", "cancel"):
        assert words in text


def test_an_unknown_field_in_the_payload_is_rejected_before_any_call(payload):
    bad = json.loads(json.dumps(payload))
    bad["job_spec"]["scheduling"]["preemptible"] = True
    with FakeVertexJobs() as fake:
        with pytest.raises(Exception, match="preemptible"):
            run(fake, bad)
    assert fake.created == [] and fake.calls == 0
