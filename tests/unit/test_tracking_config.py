"""``tracking:`` in gkeflow.yaml: validated at the edge, secrets only by variable name."""

from __future__ import annotations

import pytest
import yaml

from gkeflow.pipelines.settings.config import EXAMPLE_CONFIG, ConfigError, load_config
from gkeflow.pipelines.settings.tracking_config import (
    MlflowCredentials,
    TrackingSettings,
    plan_lines,
    tracking_for,
)


def _load(tmp_path, tracking, **extra):
    path = tmp_path / "gkeflow.yaml"
    path.write_text(yaml.safe_dump({"tracking": tracking, **extra}))
    return load_config(path)


def test_an_environment_gets_its_own_tracking(tmp_path):
    config = _load(tmp_path, {"prod": {"mlflow": {"experiment": "penguins",
                                                  "tracking_uri": "http://mlflow:5000/"}},
                              "default": {"vertex_experiments": {"experiment": "penguins-1"}}},
                   parameters={"prod": {}})
    prod = tracking_for(config.tracking, "prod")
    assert prod.mlflow.tracking_uri == "http://mlflow:5000"
    assert prod.plugins_input() == {"mlflow": {"experiment_name": "penguins"}}
    assert tracking_for(config.tracking, "default").plugins_input() == {}
    assert tracking_for(config.tracking, "dev") == TrackingSettings()


@pytest.mark.parametrize("section, fragment", [
    ({"mlflow": {}}, "tracking.default.mlflow.experiment"),
    ({"mlflow": {"experiment": " "}}, "must not be empty"),
    ({"mlflow": {"experiment": "e", "tracking_uri": "mlflow:5000"}}, "not an http"),
    ({"mlflow": {"experiment": "e", "credentials": {"token_env": "s3cr3t-token!"}}},
     "not an environment variable name"),
    ({"mlflow": {"experiment": "e", "credentials": {"username_env": "U"}}}, "go together"),
    ({"mlflow": {"experiment": "e", "credentials": {"token_env": "T", "username_env": "U",
                                                    "password_env": "P"}}}, "not both"),
    ({"vertex_experiments": {"experiment": "Penguins"}}, "not a Vertex AI experiment name"),
    ({"wandb": {}}, "tracking.default.wandb: unknown key"),
])
def test_invalid_tracking_is_refused(tmp_path, section, fragment):
    with pytest.raises(ConfigError, match=fragment):
        _load(tmp_path, {"default": section})


def test_a_password_in_the_uri_is_refused_without_echoing_it(tmp_path):
    with pytest.raises(ConfigError) as refused:
        _load(tmp_path, {"default": {"mlflow": {
            "experiment": "e", "tracking_uri": "https://me:hunter2@mlflow.example.com"}}})
    assert "hunter2" not in str(refused.value)
    assert "credentials" in str(refused.value)


def test_an_unknown_environment_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="tracking.prod: no such environment"):
        _load(tmp_path, {"prod": {"mlflow": {"experiment": "e"}}})


def test_credentials_are_read_from_the_named_variables_only():
    creds = MlflowCredentials(username_env="MY_USER", password_env="MY_PASS")
    assert creds.environment({"MY_USER": "u", "MY_PASS": "p"}) == {
        "MLFLOW_TRACKING_USERNAME": "u", "MLFLOW_TRACKING_PASSWORD": "p"}
    with pytest.raises(ValueError, match=r"\$MY_PASS, which is not set"):
        creds.environment({"MY_USER": "u"})


def test_plan_says_where_each_environment_is_tracked():
    tracking = {"default": TrackingSettings.model_validate(
        {"mlflow": {"experiment": "penguins", "tracking_uri": "http://m:5000"}})}
    (gke,) = plan_lines(tracking, "gke")
    assert gke.startswith("tracking (default): MLflow experiment 'penguins'")
    assert ">= 2.17" in gke
    (local,) = plan_lines(tracking, "local")
    assert "at http://m:5000" in local
    assert plan_lines({}, "gke") == [
        "tracking: off (no tracking: for this environment in gkeflow.yaml)"]


def test_plan_says_how_each_target_logs_to_the_vertex_experiment():
    tracking = {"prod": TrackingSettings.model_validate(
        {"vertex_experiments": {"experiment": "penguins-prod"}})}
    (vertex,) = plan_lines(tracking, "vertex")
    assert vertex.startswith("tracking (prod): Vertex AI experiment 'penguins-prod' (the run "
                             "is submitted into it")
    (gke,) = plan_lines(tracking, "gke")
    assert gke.startswith("tracking (prod): Vertex AI experiment 'penguins-prod' (each step "
                          "adds its parameters and metrics")
    (local,) = plan_lines(tracking, "local")
    assert local.startswith("tracking (prod): Vertex AI experiment 'penguins-prod' (the run's "
                            "parameters and metrics")


def test_init_writes_tracking_commented_and_valid_when_uncommented(tmp_path):
    assert "# tracking:" in EXAMPLE_CONFIG
    block = EXAMPLE_CONFIG.split("# tracking:\n", 1)[1].split("\n\n", 1)[0]
    text = "tracking:\n" + "\n".join(line[2:] for line in block.splitlines())
    path = tmp_path / "gkeflow.yaml"
    path.write_text(text)
    settings = load_config(path).tracking["default"]
    assert settings.mlflow.experiment == "penguins"
    assert settings.vertex_experiments.experiment == "penguins"


def test_gkeflow_plan_prints_the_tracking_of_each_environment(tmp_path):
    from click.testing import CliRunner

    from gkeflow.pipelines.cli.main import main

    path = tmp_path / "gkeflow.yaml"
    path.write_text(yaml.safe_dump({"parameters": {"prod": {}}, "tracking": {
        "prod": {"mlflow": {"experiment": "penguins"}}}}))
    result = CliRunner().invoke(main, ["plan", "--target", "vertex", "--config", str(path)])
    assert result.exit_code == 0, result.output
    assert ("tracking (prod): not in MLflow: tracking.mlflow.tracking_uri is unset, which "
            "vertex runs need for MLflow experiment 'penguins'") in " ".join(result.output.split())
