"""`gkeflow models list|promote` on every backend, through the real entry point (a subprocess)
talking to the local fake registries."""

from __future__ import annotations

from gkeflow.components.register.backends import open_registry
from gkeflow.components.register.local_registry import LocalRegistry
from tests.cli.test_cli import gkeflow


def test_local_backend_from_config_file(tmp_path):
    db = tmp_path / "models.db"
    registry = LocalRegistry(db)
    registry.register("churn", "/m/1", {"accuracy": 0.8}, "run-1")
    registry.register("churn", "/m/2", {"accuracy": 0.9}, "run-2")
    config = tmp_path / "gkeflow.yaml"
    config.write_text(f"registry:\n  backend: local\n  path: {db}\n")

    promoted = gkeflow("models", "promote", "churn", "2", "--alias", "champion",
                       "--config", str(config))
    assert promoted.returncode == 0, promoted.stderr
    assert "churn version 2 is now 'champion'" in promoted.stdout
    listed = gkeflow("models", "list", "--config", str(config))
    assert listed.returncode == 0, listed.stderr
    assert "0.9000" in listed.stdout and "champion" in listed.stdout
    assert registry.get_by_alias("churn", "champion").version == 2


def test_config_errors_are_reported(tmp_path):
    config = tmp_path / "gkeflow.yaml"
    config.write_text("registry:\n  backend: vertex\n")
    result = gkeflow("models", "list", "--config", str(config))
    assert result.returncode == 1
    assert "registry.project is required" in result.stderr
    config.write_text("registry:\n  backend: azureml\n")
    result = gkeflow("models", "list", "--config", str(config))
    assert result.returncode == 1 and "registry.backend" in result.stderr
    config.write_text("registry:\n  backend: mlflow\n")
    result = gkeflow("models", "list", "--config", str(config))
    assert result.returncode == 1
    assert result.stderr.strip() == ("Error: registry.host is required for the mlflow backend "
                                     "(or set registry.uri: mlflow://host:port)")


def test_vertex_backend_with_flags(fake_vertex, vertex_uri, fast_retries):
    registry = open_registry(vertex_uri, fast_retries(api_endpoint=fake_vertex.endpoint))
    registry.register("churn", "gs://b/1", {"accuracy": 0.8}, "run-1")
    registry.register("churn", "gs://b/2", {"accuracy": 0.9}, "run-2")
    flags = ["--backend", "vertex", "--project", fake_vertex.project,
             "--location", fake_vertex.location, "--api-endpoint", fake_vertex.endpoint]

    promoted = gkeflow("models", "promote", "churn", "1", *flags)
    assert promoted.returncode == 0, promoted.stderr
    assert "churn version 1 is now 'champion'" in promoted.stdout
    assert registry.get_by_alias("churn", "champion").version == 1
    listed = gkeflow("models", "list", "--name", "churn", *flags)
    assert listed.returncode == 0, listed.stderr
    assert "gs://b/2" in listed.stdout and "champion" in listed.stdout
    missing = gkeflow("models", "promote", "churn", "5", *flags)
    assert missing.returncode == 1 and "has no version 5" in missing.stderr
    assert fake_vertex.violations == []


def test_kubeflow_backend_with_flags(fake_model_registry, fast_retries):
    uri = f"kubeflow://127.0.0.1:{fake_model_registry.port}"
    registry = open_registry(uri, fast_retries())
    registry.register("churn", "gs://b/1", {"accuracy": 0.8}, "run-1")
    flags = ["--backend", "kubeflow", "--host", "127.0.0.1",
             "--port", str(fake_model_registry.port)]

    promoted = gkeflow("models", "promote", "churn", "1", "--alias", "production", *flags)
    assert promoted.returncode == 0, promoted.stderr
    assert registry.get_by_alias("churn", "production").version == 1
    listed = gkeflow("models", "list", *flags)
    assert listed.returncode == 0, listed.stderr
    assert "production" in listed.stdout and "0.8000" in listed.stdout
    bad_alias = gkeflow("models", "promote", "churn", "1", "--alias", "Prod!", *flags)
    assert bad_alias.returncode == 1 and "invalid alias" in bad_alias.stderr


def test_registry_uri_flag_wins(fake_model_registry, fast_retries):
    uri = f"kubeflow://127.0.0.1:{fake_model_registry.port}"
    open_registry(uri, fast_retries()).register("churn", "gs://b/1", {}, "run-1")
    listed = gkeflow("models", "list", "--backend", "vertex", "--registry", uri)
    assert listed.returncode == 0, listed.stderr
    assert "churn" in listed.stdout


def test_list_wraps_long_uris_to_columns_and_prints_json(tmp_path):
    import json

    from click.testing import CliRunner

    from gkeflow.pipelines.cli.main import main

    db = tmp_path / "models.db"
    uri = "gs://a-long-bucket-name/pipeline-root/training-pipeline-20261201/train-model/model"
    LocalRegistry(db).register("churn", uri, {"accuracy": 0.8}, "run-1", labels={"team": "ml"})
    listed = CliRunner().invoke(main, ["models", "list", "--registry", f"sqlite:///{db}"],
                                env={"COLUMNS": "80"})
    assert listed.exit_code == 0, listed.output
    lines = listed.output.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in listed.output  # wrapped, not cut
    cells = "".join(line.split("│")[-2].strip() for line in lines if line.count("│") > 2)
    assert uri in cells
    assert "run id" not in listed.output
    wide = CliRunner().invoke(main, ["models", "list", "--registry", f"sqlite:///{db}",
                                     "--wide"], env={"COLUMNS": "200"})
    assert "run id" in wide.output and "team=ml" in wide.output

    as_json = CliRunner().invoke(main, ["models", "list", "--registry", f"sqlite:///{db}",
                                        "--format", "json"])
    [version] = json.loads(as_json.output)
    assert version["uri"] == uri and version["metrics"] == {"accuracy": 0.8}
    assert version["labels"] == {"team": "ml"} and version["version"] == 1


def test_models_list_shows_each_models_headline_metric_for_its_task(tmp_path):
    db = tmp_path / "models.db"
    registry = LocalRegistry(db)
    registry.register("churn", "/m/1", {"accuracy": 0.9123, "f1_macro": 0.8}, "run-1")
    registry.register("prices", "/m/2", {"rmse": 1234.5678, "r2": 0.8761, "mae": 900.0},
                      "run-2")
    config = tmp_path / "gkeflow.yaml"
    config.write_text(f"registry:\n  backend: local\n  path: {db}\n")
    listed = gkeflow("models", "list", "--config", str(config), env={"COLUMNS": "200"})
    assert listed.returncode == 0, listed.stderr
    rows = {line.split("│")[1].strip(): line for line in listed.stdout.splitlines()
            if line.startswith("│") and line.split("│")[1].strip()}
    assert "test metric" in listed.stdout
    assert "accuracy 0.9123" in rows["churn"]
    assert "rmse 1235, r2 0.876" in rows["prices"] and "accuracy" not in rows["prices"]
