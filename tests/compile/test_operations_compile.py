"""Notifications compile to an exit handler around each pipeline, with the webhook URL in
a secret (a Kubernetes Secret on GKE, Secret Manager on Vertex AI), never in the YAML;
retention to PipelineConfig time-to-live on GKE; nothing changes without them."""

from __future__ import annotations

import json

import pytest
import yaml

from gkeflow.components import yamlio
from gkeflow.pipelines.definitions.operations import select
from gkeflow.pipelines.settings.config import ConfigError, GkeflowConfig
from gkeflow.pipelines.targets.backend_version import requirements_of_file
from gkeflow.pipelines.targets.compile import compile_pipeline
from tests.integration.fakes import parse_pipeline_spec_strict

WEBHOOK = {"format": "slack", "gke_secret": "gkeflow-webhook/hook",
           "vertex_secret": "projects/my-project/secrets/gkeflow-webhook/versions/3"}
TARGETS = {"gke": {"host": "https://kfp.example.com/pipeline"},
           "vertex": {"project": "my-project", "region": "europe-west4",
                      "pipeline_root": "gs://my-bucket/root",
                      "service_account": "p@my-project.iam.gserviceaccount.com"}}


def _config(**extra) -> GkeflowConfig:
    return GkeflowConfig.model_validate({"targets": TARGETS, **extra})


def _docs(path):
    return list(yamlio.load_all(path.read_text()))


@pytest.mark.parametrize("pipeline", ["training", "prediction", "sweep", "fanout-prepare"])
def test_each_pipeline_runs_inside_an_exit_handler_that_notifies(pipeline, tmp_path):
    config = select(_config(notifications={"default": {"webhook": WEBHOOK}}))
    for target in ("gke", "vertex"):
        path = compile_pipeline(pipeline, target, tmp_path / target, config=config)
        docs = _docs(path)
        spec = docs[0]
        parse_pipeline_spec_strict(spec, docs[1] if len(docs) > 1 else None)
        tasks = spec["root"]["dag"]["tasks"]
        assert set(tasks) == {"exit-handler-1", "notify-run"}
        notify = tasks["notify-run"]
        assert notify["triggerPolicy"]["strategy"] == "ALL_UPSTREAM_TASKS_COMPLETED"
        assert notify["dependentTasks"] == ["exit-handler-1"]
        inputs = notify["inputs"]["parameters"]
        assert inputs["status"]["taskFinalStatus"]["producerTask"] == "exit-handler-1"
        assert inputs["when"]["runtimeValue"]["constant"] == "failure"
        # each step's hourly list price, for the notification to give the run's cost
        rates = json.loads(inputs["step_rates"]["runtimeValue"]["constant"])["steps"]
        tasks_anywhere = {t for c in spec["components"].values()
                          for t in c.get("dag", {}).get("tasks", {})}
        # a launcher pod's rate rides under its step's name (`train-model (launcher)`)
        launched = {step.removesuffix(" (launcher)") for step in rates}
        assert rates and launched <= tasks_anywhere
        if pipeline == "fanout-prepare":  # no pipeline output from inside an exit handler
            assert "outputDefinitions" not in spec["root"]
            assert set(rates) == {"plan-prepare", "prepare-group", "merge-prepared"}
        text = path.read_text()
        assert "hooks." not in text and "https://hooks" not in text
        if target == "gke":
            assert len(docs) == 2
            executor = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"][
                "exec-notify-run"]
            (secret,) = executor["secretAsEnv"]
            assert secret["secretName"] == "gkeflow-webhook"
            assert secret["keyToEnv"] == [{"envVar": "GKEFLOW_WEBHOOK_URL", "secretKey": "hook"}]
            # the label Kubeflow's access-ml-pipeline PodDefault selects: a run-API token
            assert executor["podMetadata"]["labels"] == {"access-ml-pipeline": "true"}
            assert inputs["webhook_secret"]["runtimeValue"]["constant"] == ""
            link = inputs["link_template"]["runtimeValue"]["constant"]
            assert link == "https://kfp.example.com/pipeline/#/runs/details/{run_id}"
            names = [r.feature.name for r in requirements_of_file(path)]
            assert any("PipelineTaskFinalStatus" in n for n in names)
        else:
            assert len(docs) == 1  # Vertex AI loads one document only
            assert inputs["webhook_secret"]["runtimeValue"]["constant"] == WEBHOOK[
                "vertex_secret"]
            assert "locations/europe-west4/pipelines/runs/{run_name}?project=my-project" in \
                inputs["link_template"]["runtimeValue"]["constant"]


def test_a_schedule_s_own_notifications_win_over_its_environment_s(tmp_path):
    config = _config(
        parameters={"prod": {"epochs": 5}},
        notifications={"prod": {"webhook": WEBHOOK}},
        schedules=[{"name": "nightly", "target": "gke", "cron": "0 2 * * *",
                    "environment": "prod",
                    "notifications": {"when": "always", "webhook": {"gke_secret": "other"}}},
                   {"name": "weekly", "target": "gke", "cron": "0 2 * * 1",
                    "environment": "prod"}])
    own = select(config, schedule=config.schedules[0])._notify
    inherited = select(config, schedule=config.schedules[1])._notify
    assert (own.when, own.webhook.gke_secret) == ("always", "other")
    assert inherited.webhook.gke_secret == "gkeflow-webhook/hook"
    assert select(config, "default")._notify is None


def test_the_fanout_pipeline_without_notifications_returns_its_dataset(tmp_path):
    path = compile_pipeline("fanout-prepare", "vertex", tmp_path, config=select(_config()))
    (spec,) = _docs(path)
    assert "exit-handler-1" not in spec["root"]["dag"]["tasks"]
    assert spec["root"]["outputDefinitions"]["artifacts"]["Output"]["artifactType"][
        "schemaTitle"] == "system.Dataset"


def test_without_notifications_the_pipeline_is_unchanged(tmp_path):
    plain = compile_pipeline("training", "gke", tmp_path / "a", config=_config())
    selected = compile_pipeline("training", "gke", tmp_path / "b", config=select(_config()))
    assert plain.read_text() == selected.read_text()
    assert "notify-run" not in plain.read_text()


def test_retention_is_a_time_to_live_on_gke_only(tmp_path):
    config = _config(retention={"days": 3})
    gke = _docs(compile_pipeline("prediction", "gke", tmp_path, config=config))
    assert gke[1]["platforms"]["kubernetes"]["pipelineConfig"] == {
        "resourceTtlOnCompletion": 3 * 86400}
    vertex = _docs(compile_pipeline("prediction", "vertex", tmp_path, config=config))
    assert len(vertex) == 1 and "resourceTtl" not in str(vertex)


@pytest.mark.parametrize("webhook, problem", [
    ({"gke_secret": "https://hooks.slack.com/services/T/B/X"}, "never the URL itself"),
    ({"vertex_secret": "my-secret"}, "projects/PROJECT/secrets/SECRET"),
    ({"gke_secret": "Bad_Name"}, "not a Kubernetes Secret"),
])
def test_bad_webhook_settings_are_refused_at_the_edge(tmp_path, webhook, problem):
    from gkeflow.pipelines.settings.config import load_config

    path = tmp_path / "gkeflow.yaml"
    path.write_text(yaml.safe_dump({"notifications": {"default": {"webhook": webhook}}}))
    with pytest.raises(ConfigError, match=problem) as refused:
        load_config(path)
    assert "hooks.slack.com" not in str(refused.value)


def test_a_target_without_its_secret_is_refused(tmp_path):
    config = select(_config(notifications={"default": {"webhook": {"gke_secret": "hook"}}}))
    with pytest.raises(ConfigError, match="webhook.vertex_secret"):
        compile_pipeline("training", "vertex", tmp_path, config=config)


def test_notifications_name_an_existing_environment():
    with pytest.raises(ValueError, match="notifications.prod: no such environment"):
        _config(notifications={"prod": {"webhook": WEBHOOK}})


def test_plan_states_the_oldest_backend_the_compiled_pipeline_needs(tmp_path):
    from click.testing import CliRunner

    from gkeflow.pipelines.cli.main import main

    def plan(*extra):
        path = tmp_path / "gkeflow.yaml"
        path.write_text(yaml.safe_dump({"targets": {"gke": TARGETS["gke"]}, **dict(extra)}))
        result = CliRunner().invoke(main, ["plan", "--target", "gke", "--config", str(path)],
                                    catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return [line for line in result.output.splitlines() if line.startswith("backend:")]

    assert plan() == ["backend: Kubeflow Pipelines >= 2.14 (run workspace "
                      "(PipelineConfig.workspace) 2.14)"]
    (line,) = plan(("retention", {"days": 2}), ("workspace", {"enabled": False}))
    assert line == "backend: Kubeflow Pipelines >= 2.17 (PipelineConfig time-to-live " \
                   "(retention) 2.17)"
    (line,) = plan(("compute", {"train-model": {"replicas": 2}}))
    assert ">= 2.15" in line and "TaskConfig pass-through (JobSet training) 2.15" in line


def test_email_on_vertex_is_the_backend_s_own_notification_task(tmp_path):
    from gkeflow.components.notify.email import GCPC_IMAGE

    config = select(_config(notifications={"default": {
        "when": "always", "email": {"recipients": ["ml-team@example.com", "oncall@example.com"]}}}))
    path = compile_pipeline("training", "vertex", tmp_path, config=config)
    (spec,) = _docs(path)
    parse_pipeline_spec_strict(spec, None)
    tasks = spec["root"]["dag"]["tasks"]
    assert set(tasks) == {"exit-handler-1", "vertex-notification-email"}
    email = tasks["vertex-notification-email"]
    assert email["triggerPolicy"]["strategy"] == "ALL_UPSTREAM_TASKS_COMPLETED"
    assert email["taskInfo"]["name"] == "Email"
    inputs = email["inputs"]["parameters"]
    assert inputs["recipients"]["runtimeValue"]["constant"] == [
        "ml-team@example.com", "oncall@example.com"]
    assert inputs["pipeline_task_final_status"]["taskFinalStatus"]["producerTask"] == \
        "exit-handler-1"
    # the container, command and arguments Vertex AI recognises (those of Google Cloud
    # Pipeline Components' VertexNotificationEmailOp), left as they are by image pinning
    container = spec["deploymentSpec"]["executors"]["exec-vertex-notification-email"][
        "container"]
    assert container["image"] == GCPC_IMAGE
    assert container["command"][-1] == (
        "google_cloud_pipeline_components.container.v1.vertex_notification_email.executor")
    assert container["args"] == ["--type", "VertexNotificationEmail", "--payload", ""]
    component = spec["components"][email["componentRef"]["name"]]
    assert component["inputDefinitions"]["parameters"]["pipeline_task_final_status"][
        "parameterType"] == "TASK_FINAL_STATUS"


def test_email_is_refused_on_gke_and_unless_every_end_is_wanted(tmp_path):
    email = {"when": "always", "email": {"recipients": ["ml-team@example.com"]}}
    config = select(_config(notifications={"default": email}))
    with pytest.raises(ConfigError, match="GKE sends no email; give GKE runs a webhook"):
        compile_pipeline("training", "gke", tmp_path, config=config)
    for settings, problem in [
        ({"email": {"recipients": ["ml-team@example.com"]}}, "set when: always"),
        ({"when": "always", "email": {"recipients": ["a@x.io", "b@x.io", "c@x.io", "d@x.io"]}},
         "at most 3 addresses"),
        ({"when": "always", "email": {"recipients": ["not an address"]}}, "not an email"),
        ({"when": "always", "email": {"recipients": []}}, "at least 1"),
        ({"when": "always"}, "give one channel"),
        ({"when": "always", "webhook": WEBHOOK, "email": {"recipients": ["a@x.io"]}},
         "give one channel"),
    ]:
        with pytest.raises(ValueError, match=problem):
            _config(notifications={"default": settings})


def test_the_pod_default_gives_the_labelled_step_a_run_api_token():
    from gkeflow.pipelines.definitions.operations import RUN_API_ACCESS_LABEL
    from tests.conftest import REPO_ROOT

    (pod_default,) = yamlio.load_all(
        (REPO_ROOT / "deploy" / "kubeflow" / "access-ml-pipeline.yaml").read_text())
    assert (pod_default["apiVersion"], pod_default["kind"]) == ("kubeflow.org/v1alpha1",
                                                                 "PodDefault")
    spec = pod_default["spec"]
    assert spec["selector"] == {"matchLabels": {RUN_API_ACCESS_LABEL: "true"}}
    (env,) = spec["env"]
    (volume,) = spec["volumes"]
    (mount,) = spec["volumeMounts"]
    (source,) = volume["projected"]["sources"]
    token = source["serviceAccountToken"]
    assert token["audience"] == "pipelines.kubeflow.org"
    assert mount["name"] == volume["name"] and mount["readOnly"] is True
    # the path the notification step reads its token from
    assert env == {"name": "KF_PIPELINES_SA_TOKEN_PATH",
                   "value": f"{mount['mountPath']}/{token['path']}"}


def _write(tmp_path, **extra):
    path = tmp_path / "gkeflow.yaml"
    path.write_text(yaml.safe_dump({"targets": TARGETS, "parameters": {"prod": {"epochs": 5}},
                                    **extra}))
    return str(path)


def test_compile_env_prod_carries_notifications_prod_and_retention(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from gkeflow.pipelines.cli.main import main

    monkeypatch.setenv("GKEFLOW_WEBHOOK_URL", "https://hooks.slack.com/services/T0P-SECRET")
    config = _write(tmp_path, notifications={"prod": {"webhook": WEBHOOK}},
                    retention={"days": 7})
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["compile", "--env", "prod", "--config", config,
                                       "--output", str(out)])
    assert result.exit_code == 0, result.output
    files = [out / f"{p}.{t}.yaml" for p in ("training", "prediction", "sweep", "fanout-prepare")
             for t in ("gke", "vertex")]
    for path in files:
        docs = _docs(path)
        parse_pipeline_spec_strict(docs[0], docs[1] if len(docs) > 1 else None)
        tasks = docs[0]["root"]["dag"]["tasks"]
        assert set(tasks) == {"exit-handler-1", "notify-run"}, path.name
        inputs = tasks["notify-run"]["inputs"]["parameters"]
        target = path.name.split(".")[1]
        assert inputs["target"]["runtimeValue"]["constant"] == target
        assert inputs["webhook_format"]["runtimeValue"]["constant"] == "slack"
        text = path.read_text()
        assert "T0P-SECRET" not in text and "hooks.slack.com" not in text
        if target == "gke":
            assert docs[1]["platforms"]["kubernetes"]["pipelineConfig"][
                "resourceTtlOnCompletion"] == 7 * 86400
            executor = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"][
                "exec-notify-run"]
            assert executor["secretAsEnv"][0]["secretName"] == "gkeflow-webhook"
        else:
            assert "resourceTtl" not in text
            assert inputs["webhook_secret"]["runtimeValue"]["constant"] == WEBHOOK[
                "vertex_secret"]
    # --check compares with what the same --env compiles; plain compile has no prod
    runner = CliRunner()
    check = ["compile", "--check", "--config", config, "--output", str(out)]
    assert runner.invoke(main, [*check, "--env", "prod"]).exit_code == 0
    plain = runner.invoke(main, check)
    assert plain.exit_code == 1 and "stale:" in plain.output


def test_plain_compile_carries_the_default_environment_s_notifications(tmp_path):
    from click.testing import CliRunner

    from gkeflow.pipelines.cli.main import main

    config = _write(tmp_path, notifications={"default": {"when": "always",
                                                         "webhook": WEBHOOK}})
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["compile", "--target", "gke", "--config", config,
                                       "--output", str(out)])
    assert result.exit_code == 0, result.output
    spec = _docs(out / "training.gke.yaml")[0]
    assert spec["root"]["dag"]["tasks"]["notify-run"]["inputs"]["parameters"]["when"][
        "runtimeValue"]["constant"] == "always"
    assert "resourceTtl" not in (out / "training.gke.yaml").read_text()


@pytest.mark.parametrize("args, settings, code, problem", [
    (["--env", "staging"], {"webhook": WEBHOOK}, 2,
     "'staging' is not an environment of gkeflow.yaml (environments: default, prod)"),
    (["--env", "prod"], {"webhook": {"format": "slack", "gke_secret": "gkeflow-webhook"}}, 1,
     "--env prod: notifications for target vertex: set webhook.vertex_secret"),
    (["--env", "prod", "--target", "gke"], {"when": "always", "email": {
        "recipients": ["ml-team@example.com"]}}, 1,
     "--env prod: notifications.email: Kubeflow Pipelines on GKE sends no email"),
])
def test_compile_refuses_notifications_it_cannot_compile_in_one_line(
        tmp_path, args, settings, code, problem):
    from click.testing import CliRunner

    from gkeflow.pipelines.cli.main import main

    config = _write(tmp_path, notifications={"prod": settings})
    result = CliRunner().invoke(main, ["compile", "--config", config,
                                       "--output", str(tmp_path / "out"), *args])
    assert result.exit_code == code
    assert problem in " ".join(result.output.split()) and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # a whole compile (every pipeline and component for Vertex AI)
def test_compile_and_submit_say_an_email_carries_no_cost(tmp_path):
    from click.testing import CliRunner

    from gkeflow.pipelines.cli.main import main
    from gkeflow.pipelines.definitions.operations import EMAIL_HAS_NO_COST, notification_notes

    email = {"when": "always", "email": {"recipients": ["ml-team@example.com"]}}
    config = _write(tmp_path, notifications={"default": email})
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["compile", "--target", "vertex", "--config", config,
                                       "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert f"note (vertex): {EMAIL_HAS_NO_COST}" in " ".join(result.output.split())
    # the same words in submit's notes (pipelines/targets/submit.py); none for a webhook
    assert notification_notes(select(_config(notifications={"default": email})),
                              "vertex") == [EMAIL_HAS_NO_COST]
    assert notification_notes(select(_config(notifications={"default": {
        "webhook": WEBHOOK}})), "vertex") == []
    assert notification_notes(select(_config()), "vertex") == []
