"""gkeflow.yaml targets/parameters/schedules, parameter resolution, retry classification."""

from __future__ import annotations

import pytest

from gkeflow.pipelines.settings.config import EXAMPLE_CONFIG, ConfigError, load_config
from gkeflow.pipelines.settings.remote_config import normalise_gcs_uri
from gkeflow.pipelines.targets.transport import (
    RemoteError,
    RetryPolicy,
    call,
    redact,
    register_secret,
)


def write(tmp_path, text: str):
    path = tmp_path / "gkeflow.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_example_is_valid_and_keeps_the_compute_section_working(tmp_path):
    config = load_config(write(tmp_path, EXAMPLE_CONFIG + "\ncompute: {}\n"))
    assert config.targets.gke.auth.token_env == "KFP_TOKEN"
    assert config.targets.vertex.pipeline_root == "gs://my-bucket/vertex-root"
    assert config.parameters["prod"]["epochs"] == 50
    assert [s.name for s in config.schedules] == ["nightly-training", "weekly-training-gke",
                                                  "nightly-scoring"]
    assert config.schedules[2].pipeline == "prediction"
    assert config.compute == {}


def test_a_file_without_new_sections_still_loads(tmp_path):
    config = load_config(write(tmp_path, "compute: {}\n"))
    assert config.targets.gke is None and config.schedules == [] and config.parameters == {}


@pytest.mark.parametrize("change, message", [
    ({"targets": {"gke": {"host": "kfp.example.com"}}},
     "targets.gke.host: not an http(s) URL"),
    ({"targets": {"gke": {"host": "https://k", "auth": {"token_env": "eyJhbGciOi.x"}}}},
     "targets.gke.auth.token_env: is not an environment variable name"),
    ({"targets": {"gke": {"host": "https://admin:hunter2@kfp.example.com"}}},
     "targets.gke.host: must not hold a user name or password; give credentials in "
     "targets.gke.auth"),
    ({"targets": {"gke": {"host": "https://k", "timeout_s": 0}}},
     "targets.gke.timeout_s: Input should be greater than 0"),
    ({"targets": {"gke": {"host": "https://k", "colour": "red"}}},
     "targets.gke.colour: unknown key; remove or rename it (keys here: auth, autopilot, "
     "cpu_machine_family, experiment, host,"),
    ({"targets": {"vertex": {"project": "P", "region": "us-central1",
                             "pipeline_root": "gs://bucket", "service_account":
                                 "a@p.iam.gserviceaccount.com"}}},
     "targets.vertex.project: not a Google Cloud project id"),
    ({"targets": {"vertex": {"project": "my-project", "region": "us-central1",
                             "pipeline_root": "gs://bucket", "service_account": "me"}}},
     "targets.vertex.service_account: not a service account e-mail"),
    ({"targets": {"vertex": {"project": "my-project", "region": "us-central1",
                             "pipeline_root": "gs://bucket",
                             "service_account": "a@p.iam.gserviceaccount.com",
                             "encryption_key": "my-key"}}},
     "targets.vertex.encryption_key: not a Cloud KMS key"),
    ({"schedules": [{"name": "a", "target": "gke", "cron": "0 2 * * *"}]},
     "schedules.0.target: 'gke' is not configured under targets.gke"),
    ({"targets": {"gke": {"host": "https://k"}},
      "schedules": [{"name": "a", "target": "gke", "cron": "0 2 * * *"},
                    {"name": "a", "target": "gke", "cron": "0 3 * * *"}]},
     "schedules.1.name: 'a' is used by another schedule"),
    ({"targets": {"gke": {"host": "https://k"}},
      "schedules": [{"name": "a", "target": "gke", "cron": "0 2 * * *",
                     "pipeline": "inference"}]},
     "schedules.0.pipeline: unknown pipeline 'inference'"),
    ({"targets": {"gke": {"host": "https://k"}},
      "schedules": [{"name": "a", "target": "gke", "cron": "0 2 * * *",
                     "max_concurrency": 11}]},
     "schedules.0.max_concurrency: Input should be less than or equal to 10"),
])
def test_errors_name_the_file_the_key_and_the_problem(tmp_path, change, message):
    import yaml

    path = write(tmp_path, yaml.safe_dump(change))
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert f"{path}: {message}" in str(error.value)
    assert "hunter2" not in str(error.value) and "eyJhbGciOi" not in str(error.value)


def test_schedules_accept_every_pipeline_compile_builds(tmp_path):
    import yaml

    from gkeflow.pipelines.targets.compile import PIPELINES

    schedules = [{"name": f"s{i}", "target": "gke", "cron": "0 2 * * *", "pipeline": name}
                 for i, name in enumerate(PIPELINES)]
    config = load_config(write(tmp_path, yaml.safe_dump(
        {"targets": {"gke": {"host": "https://k"}}, "schedules": schedules})))
    assert [s.pipeline for s in config.schedules] == list(PIPELINES)


def test_gcs_roots_are_normalised():
    assert normalise_gcs_uri(" gs://my-bucket//a/b/ ") == "gs://my-bucket/a/b"
    assert normalise_gcs_uri("gs://my-bucket") == "gs://my-bucket"
    for bad in ("gs://", "s3://bucket/x", "gs://B/x", "/local/path"):
        with pytest.raises(ValueError, match="not a gs://BUCKET"):
            normalise_gcs_uri(bad)


def test_parameters_merge_and_coerce_by_the_pipelines_declared_types():
    from gkeflow.pipelines.settings.config import GkeflowConfig
    from gkeflow.pipelines.targets.backends import PreparedPipeline
    from gkeflow.pipelines.targets.submit import (
        SubmitError,
        parse_param_options,
        resolve_parameters,
    )

    prepared = PreparedPipeline("training", "gkeflow-training", "gke", "x.yaml", "0" * 64, "v",
                                {"epochs": "NUMBER_INTEGER", "learning_rate": "NUMBER_DOUBLE",
                                 "model_name": "STRING", "data_uri": "STRING",
                                 "flag": "BOOLEAN"}, 4)
    config = GkeflowConfig.model_validate(
        {"parameters": {"prod": {"epochs": 50, "model_name": "m", "learning_rate": 1}}})
    overrides = parse_param_options(["epochs=7", "flag=true", "data_uri=gs://b/x.csv?a=b"])
    assert resolve_parameters(config, prepared, "prod", overrides) == {
        "epochs": 7, "model_name": "m", "learning_rate": 1.0, "flag": True,
        "data_uri": "gs://b/x.csv?a=b"}
    # values a step would refuse are refused before anything is sent
    for bad, match in (({"epochs": "-5"}, "epochs must be >= 1; got -5"),
                       ({"learning_rate": "-1"}, "learning_rate must be in"),
                       ({"model_name": "Bad/Name"}, "model_name: invalid model name")):
        with pytest.raises(SubmitError, match=f"parameters of training: {match}"):
            resolve_parameters(config, prepared, "prod", bad)
    with pytest.raises(SubmitError, match="--param 'epochs': expected KEY=VALUE"):
        parse_param_options(["epochs"])
    with pytest.raises(SubmitError, match="'flag' expects true or false, got 'maybe'"):
        resolve_parameters(config, prepared, "prod", {"flag": "maybe"})
    with pytest.raises(SubmitError, match="'epochs' expects an integer, got 2.5"):
        resolve_parameters(config, prepared, "default", {"epochs": 2.5})


def _kfp_error(status: int, body: bytes):
    from kfp_server_api.exceptions import ApiException

    error = ApiException(status=status, reason="reason")
    error.body = body
    return error


def test_call_retries_5xx_then_succeeds_and_stops_on_4xx():
    sleeps = []
    answers = iter([_kfp_error(503, b'{"message": "busy"}'), _kfp_error(502, b""), "ok"])

    def flaky():
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    policy = RetryPolicy(attempts=5, base_delay_s=1.0, max_delay_s=3.0)
    assert call("thing", flaky, policy, sleep=sleeps.append) == "ok"
    assert len(sleeps) == 2 and 0.5 <= sleeps[0] <= 1.0 and 1.0 <= sleeps[1] <= 2.0

    def refused():
        raise _kfp_error(404, b'{"error": "x", "message": "pipeline p not found"}')

    with pytest.raises(RemoteError, match=r"thing was refused \(HTTP 404\): pipeline p not found"):
        call("thing", refused, policy, sleep=sleeps.append)
    assert len(sleeps) == 2


def test_call_gives_up_after_the_last_attempt_and_passes_other_errors_through():
    sleeps = []

    def down():
        raise _kfp_error(500, b'{"message": "internal"}')

    with pytest.raises(RemoteError, match=r"thing failed \(HTTP 500\): internal after 3 attempts"):
        call("thing", down, RetryPolicy(attempts=3), sleep=sleeps.append)
    assert len(sleeps) == 2

    def bug():
        raise KeyError("not a remote failure")

    with pytest.raises(KeyError):
        call("thing", bug, RetryPolicy(), sleep=sleeps.append)


def test_secrets_are_redacted_from_messages():
    register_secret("tok-8c1f2e")
    assert redact("Bearer tok-8c1f2e failed") == "Bearer *** failed"
    error = RemoteError("server said tok-8c1f2e is wrong")
    assert "tok-8c1f2e" not in str(error)


def test_configuration_errors_never_show_the_values_given(tmp_path):
    # a value may be a secret pasted in the wrong place: errors name the key and the rule
    marker = "S3cr3t-t0ken"
    text = f"""
targets:
  gke:
    host: "{marker}"
    pipeline_root: "gs://{marker}/r"
  vertex:
    project: "{marker}"
    region: "{marker}"
    pipeline_root: "{marker}"
    service_account: "{marker}"
    network: "{marker}"
    encryption_key: "{marker}"
images:
  registry: "{marker}"
  tag: "-{marker}"
tracking:
  dev:
    mlflow:
      tracking_uri: "{marker}"
operations:
  notify:
    email:
      recipients: ["{marker}"]
"""
    with pytest.raises(ConfigError) as raised:
        load_config(write(tmp_path, text))
    message = str(raised.value)
    assert message.count(":") >= 3 and "targets.vertex.project: not a Google Cloud" in message
    assert marker not in message and marker.lower() not in message
    # the keys are all named, the values none
    for key in ("targets.gke.host", "targets.vertex.encryption_key", "images.registry"):
        assert key in message
