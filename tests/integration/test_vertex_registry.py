"""Vertex AI Model Registry backend: the real aiplatform client against a local fake endpoint
that parses every body strictly with google.cloud.aiplatform_v1 types."""

from __future__ import annotations

import json

import pytest

from gkeflow.components.register.backends import champion_or_latest, open_registry
from gkeflow.components.register.local_registry import RegistryError
from gkeflow.components.register.logic import register, register_for_pipeline
from gkeflow.components.register.names import RETRY_KEY_LABEL, RUN_ID_LABEL
from gkeflow.components.register.vertex import DEFAULT_SERVING_IMAGE


def _uploads(fake) -> int:
    return sum(1 for method, path in fake.requests if method == "POST" and "models:upload" in path)


def test_first_version_creates_the_model_later_ones_use_parent_model(
        fake_vertex, vertex_uri, saved_model_dir, fast_retries):
    settings = fast_retries(api_endpoint=fake_vertex.endpoint)
    first, created1 = register(saved_model_dir, "gs://bucket/run-1/model", "churn",
                               {"accuracy": 0.91, "loss": 0.25}, "Run-1", vertex_uri,
                               labels={"team": "ml"}, aliases=("candidate",),
                               lineage={"data_uri": "gs://bucket/data.csv"}, settings=settings)
    first_request = fake_vertex.last_upload_request
    second, created2 = register(saved_model_dir, "gs://bucket/run-2/model", "churn",
                                {"accuracy": 0.93}, "run-2", vertex_uri, settings=settings)
    second_request = fake_vertex.last_upload_request

    assert (first.version, created1, second.version, created2) == (1, True, 2, True)
    assert first_request.parent_model == ""
    assert second_request.parent_model == first.resource_name.split("@")[0]
    assert list(fake_vertex.models) == [first.resource_name.split("/")[-1].split("@")[0]]
    # Explicit defaults and aliases: the SDK sends is_default_version as the "default" alias.
    assert sorted(first_request.model.version_aliases) == ["candidate", "default"]
    assert sorted(second_request.model.version_aliases) == ["default"]
    model = first_request.model
    assert model.artifact_uri == "gs://bucket/run-1/model"
    assert model.container_spec.image_uri == DEFAULT_SERVING_IMAGE
    assert model.labels["team"] == "ml"
    assert model.labels[RUN_ID_LABEL] == "run-1"  # sanitised to lower case
    assert model.labels["metric-accuracy"] == "0_91"
    assert json.loads(model.version_description.split("Lineage: ", 1)[1])["data_uri"] == (
        "gs://bucket/data.csv")
    # Read back: metrics from labels, exactly; lineage from the description.
    assert first.metrics == {"accuracy": 0.91, "loss": 0.25}
    assert first.lineage["data_uri"] == "gs://bucket/data.csv"
    assert first.run_id == "run-1" and first.aliases == ("candidate",)
    assert first.resource_name.endswith("@1")
    # The evaluation was imported on each new version.
    evaluations = fake_vertex.evaluations[first.resource_name.split("/")[-1]]
    assert evaluations[0].metrics["accuracy"] == 0.91
    assert evaluations[0].metrics_schema_uri.endswith("classification_metrics_1.0.0.yaml")
    assert fake_vertex.violations == []


def test_not_default_version_keeps_the_default(fake_vertex, vertex_uri, fast_retries):
    registry = open_registry(vertex_uri, fast_retries(api_endpoint=fake_vertex.endpoint))
    registry.register("churn", "gs://b/1", {}, "run-1")
    registry.register("churn", "gs://b/2", {}, "run-2", make_default=False)
    assert "default" not in fake_vertex.last_upload_request.model.version_aliases
    [versions] = fake_vertex.models.values()
    assert [v.version_id for v in versions if "default" in v.version_aliases] == ["1"]


def test_retry_of_the_same_run_and_task_returns_its_version(
        fake_vertex, vertex_uri, saved_model_dir, fast_retries):
    settings = fast_retries(api_endpoint=fake_vertex.endpoint)
    args = (saved_model_dir, "gs://b/m", "churn", {"accuracy": 0.9}, "run-1", vertex_uri)
    first, created = register(*args, settings=settings)
    again, created_again = register(*args, settings=settings)
    other_task, created_other = register(*args, task_key="register-model-2", settings=settings)
    assert (created, created_again, created_other) == (True, False, True)
    assert again.version == first.version == 1 and other_task.version == 2
    assert _uploads(fake_vertex) == 2
    labels = fake_vertex.last_upload_request.model.labels
    assert len(labels[RETRY_KEY_LABEL]) == 40


def test_alias_moves_between_versions_and_champion_lookup(fake_vertex, vertex_uri,
                                                          fast_retries):
    registry = open_registry(vertex_uri, fast_retries(api_endpoint=fake_vertex.endpoint))
    assert champion_or_latest(registry, "churn") is None
    registry.register("churn", "gs://b/1", {"accuracy": 0.8}, "run-1", aliases=("candidate",))
    registry.register("churn", "gs://b/2", {"accuracy": 0.9}, "run-2", aliases=("candidate",))
    assert registry.get_by_alias("churn", "candidate").version == 2
    assert champion_or_latest(registry, "churn").version == 2  # no champion yet: the newest
    registry.set_alias("churn", 1, "champion")
    assert champion_or_latest(registry, "churn").version == 1
    moved = registry.set_alias("churn", 2, "champion")
    assert moved.aliases == ("candidate", "champion")
    assert registry.get("churn", 1).aliases == ()
    assert [(v.version, v.aliases) for v in registry.list(name="churn")] == [
        (1, ()), (2, ("candidate", "champion"))]
    with pytest.raises(RegistryError, match="no version 7"):
        registry.set_alias("churn", 7, "champion")
    assert fake_vertex.violations == []


def test_server_errors_are_retried(fake_vertex, vertex_uri, fast_retries, capsys):
    registry = open_registry(vertex_uri, fast_retries(api_endpoint=fake_vertex.endpoint))
    fake_vertex.fail(503, "backend unavailable", times=2, method="POST",
                     path_contains="models:upload")
    version, created = registry.register("churn", "gs://b/1", {}, "run-1")
    assert (version.version, created) == (1, True)
    assert _uploads(fake_vertex) == 3
    assert len(fake_vertex.models) == 1
    assert "backend unavailable" in capsys.readouterr().out


def test_client_errors_are_reported_with_the_server_message(fake_vertex, vertex_uri,
                                                            fast_retries):
    registry = open_registry(vertex_uri, fast_retries(api_endpoint=fake_vertex.endpoint))
    fake_vertex.fail(403, "Permission 'aiplatform.models.upload' denied on project",
                     method="POST", path_contains="models:upload")
    with pytest.raises(RegistryError, match=r"\(403\).*aiplatform.models.upload' denied"):
        registry.register("churn", "gs://b/1", {}, "run-1")
    assert _uploads(fake_vertex) == 1  # not retried


def test_persistent_server_errors_give_up_with_the_last_message(fake_vertex, vertex_uri,
                                                                fast_retries):
    registry = open_registry(vertex_uri, fast_retries(api_endpoint=fake_vertex.endpoint))
    fake_vertex.fail(500, "internal error 42", times=100)
    with pytest.raises(RegistryError, match="failed after 5 attempts.*internal error 42"):
        registry.list()


@pytest.mark.parametrize(
    "change, message",
    [
        ({"model_uri": "/local/model"}, "must start with gs://"),
        ({"labels": {"Team": "ml"}}, "invalid label key 'Team'"),
        ({"labels": {"team": "ML Ops"}}, "invalid value 'ML Ops'"),
        ({"labels": {"gkeflow-run-id": "x"}}, "reserved prefix"),
        ({"aliases": ("Champion",)}, "invalid alias"),
        ({"model_name": "Churn Model"}, "invalid model name"),
        ({"registry_uri": "vertex://my-project"}, "invalid Vertex AI registry URI"),
    ],
)
def test_bad_input_fails_before_any_request(fake_vertex, vertex_uri, saved_model_dir,
                                            fast_retries, change, message):
    args = {"model_dir": saved_model_dir, "model_uri": "gs://b/m", "model_name": "churn",
            "metrics": {}, "run_id": "run-1", "registry_uri": vertex_uri,
            "settings": fast_retries(api_endpoint=fake_vertex.endpoint), **change}
    with pytest.raises(RegistryError, match=message):
        register(**args)
    assert fake_vertex.requests == []


def test_missing_or_empty_model_dir_fails_before_any_request(fake_vertex, vertex_uri,
                                                            tmp_path, fast_retries):
    (tmp_path / "empty").mkdir()
    for model_dir, message in ((tmp_path / "missing", "does not exist"),
                               (tmp_path / "empty", "is empty")):
        with pytest.raises(RegistryError, match=message):
            register(model_dir, "gs://b/m", "churn", {}, "run-1", vertex_uri,
                     settings=fast_retries(api_endpoint=fake_vertex.endpoint))
    assert fake_vertex.requests == []


def test_pipeline_step_outputs_a_vertex_model_resource(fake_vertex, vertex_uri,
                                                       saved_model_dir, fast_retries):
    outcome = register_for_pipeline(
        model_path=str(saved_model_dir), model_uri="gs://b/m", model_name="churn",
        metrics_metadata={"accuracy": 0.9, "passed": True, "note": "text"}, run_id="run-1",
        task_key="register-model", registry_uri=vertex_uri, aliases="candidate",
        labels="team=ml", settings=fast_retries(api_endpoint=fake_vertex.endpoint))
    resource = outcome.metadata["resourceName"]
    assert resource.startswith("projects/test-project/locations/us-central1/models/")
    assert resource.endswith("@1")
    assert outcome.artifact_uri == f"https://us-central1-aiplatform.googleapis.com/v1/{resource}"
    assert outcome.metadata["version"] == 1 and outcome.metadata["backend"] == "vertex"
    assert outcome.version.metrics == {"accuracy": 0.9}  # booleans and text are not metrics
