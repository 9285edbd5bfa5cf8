"""No copies in the registry, for each backend (embedded SQLite, Vertex AI and Kubeflow
Model Registry against their strict fakes): a model trained on the same data, parameters and
code as an existing version is not registered again; that version is passed on."""

from __future__ import annotations

import pytest

from gkeflow.components.register.backends import open_registry
from gkeflow.components.register.logic import register_for_pipeline
from gkeflow.components.register.unchanged import training_key

INPUTS = "data=sha256:aa;code=;label_column=status;epochs=3;learning_rate=0.01"


@pytest.fixture(params=["local", "vertex", "kubeflow"])
def backend(request, tmp_path, fast_retries):
    """(registry URI, settings, fake server or None) for each backend."""
    if request.param == "local":
        yield f"sqlite:///{tmp_path / 'registry.db'}", fast_retries(), None
    elif request.param == "vertex":
        fake = request.getfixturevalue("fake_vertex")
        uri = f"vertex://projects/{fake.project}/locations/{fake.location}"
        yield uri, fast_retries(api_endpoint=fake.endpoint), fake
        assert fake.violations == []
    else:
        fake = request.getfixturevalue("fake_model_registry")
        yield f"kubeflow://127.0.0.1:{fake.port}", fast_retries(), fake


def _register(backend, saved_model_dir, run_id: str, model_uri: str, inputs: str = INPUTS,
              aliases: str = ""):
    uri, settings, _ = backend
    return register_for_pipeline(
        model_path=str(saved_model_dir), model_uri=model_uri, model_name="churn",
        metrics_metadata={"accuracy": 0.9}, run_id=run_id, task_key="register-model",
        registry_uri=uri, aliases=aliases, data_uri="gs://b/data.csv", settings=settings,
        training_inputs=inputs)


def test_same_training_inputs_pass_the_existing_version_on(backend, saved_model_dir):
    first = _register(backend, saved_model_dir, "run-1", "gs://b/run-1/model")
    again = _register(backend, saved_model_dir, "run-2", "gs://b/run-2/model",
                      aliases="candidate")
    assert first.created and not first.unchanged
    assert (again.created, again.unchanged) == (False, True)
    assert again.version.version == first.version.version == 1
    assert again.version.uri == "gs://b/run-1/model"
    assert again.message.startswith("unchanged: same as version 1 of churn")
    assert again.metadata["version"] == 1 and again.metadata["unchanged"] is True
    assert again.metadata["resourceName"] == first.metadata["resourceName"]
    # The aliases asked for point at the version passed on.
    assert again.version.aliases == ("candidate",)

    registry = open_registry(backend[0], backend[1])
    [only] = registry.list(name="churn")
    assert only.lineage["training_key"] == training_key(INPUTS)
    assert registry.get_by_alias("churn", "candidate").version == 1


def test_changed_inputs_or_code_make_a_new_version(backend, saved_model_dir):
    _register(backend, saved_model_dir, "run-1", "gs://b/run-1/model")
    changed = _register(backend, saved_model_dir, "run-2", "gs://b/run-2/model",
                        inputs=INPUTS.replace("epochs=3", "epochs=4"))
    unstated = _register(backend, saved_model_dir, "run-3", "gs://b/run-3/model", inputs="")
    assert (changed.created, changed.unchanged, changed.version.version) == (True, False, 2)
    assert (unstated.created, unstated.version.version) == (True, 3)
    # The suite's version is part of the key: new code, new version.
    assert training_key(INPUTS, "0.1.0") != training_key(INPUTS, "0.2.0")
    assert training_key("") == ""


def test_a_retried_step_is_not_reported_unchanged(backend, saved_model_dir):
    first = _register(backend, saved_model_dir, "run-1", "gs://b/run-1/model")
    retry = _register(backend, saved_model_dir, "run-1", "gs://b/run-1/model")
    assert first.created and (retry.created, retry.unchanged) == (False, False)
    assert retry.version.version == 1
    assert "already registered by this run and task" in retry.message


def test_a_lost_listing_is_retried_and_still_makes_no_copy(backend, saved_model_dir):
    uri, _, fake = backend
    _register(backend, saved_model_dir, "run-1", "gs://b/run-1/model")
    if fake is not None:
        # The look-up for an unchanged version fails once the way clouds fail.
        fake.fail(503, "backend unavailable", times=1, method="GET")
    again = _register(backend, saved_model_dir, "run-2", "gs://b/run-2/model")
    assert again.unchanged and again.version.version == 1
    assert [v.version for v in open_registry(uri, backend[1]).list(name="churn")] == [1]


def test_every_version_is_labelled_with_the_model_family_that_won(backend, saved_model_dir):
    import json

    (saved_model_dir / "gkeflow_model.json").write_text(json.dumps({"model_family": "gbdt"}))
    outcome = _register(backend, saved_model_dir, "run-1", "gs://b/run-1/model")
    assert outcome.created
    uri, settings, _ = backend
    [listed] = open_registry(uri, settings).list(name="churn")
    assert listed.labels.get("model_family") == "gbdt"
    # a model that names no family gets no such label
    (saved_model_dir / "gkeflow_model.json").write_text(json.dumps({"params": {}}))
    other = register_for_pipeline(
        model_path=str(saved_model_dir), model_uri="gs://b/run-2/model", model_name="plain",
        metrics_metadata={"accuracy": 0.9}, run_id="run-2", task_key="register-model",
        registry_uri=uri, settings=settings, training_inputs=INPUTS + ";x=1")
    [plain] = open_registry(uri, settings).list(name="plain")
    assert other.created and "model_family" not in plain.labels


def test_a_change_to_the_model_code_is_a_different_training(tmp_path, monkeypatch):
    import importlib

    from gkeflow.components.images import VERSION
    from gkeflow.components.register.unchanged import suite_code

    package = tmp_path / "recipe_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "model.py").write_text("LAYERS = (64, 32)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    before = suite_code(("recipe_pkg",))
    assert before.startswith(f"{VERSION} sha256:") and suite_code(("recipe_pkg",)) == before
    (package / "model.py").write_text("LAYERS = (256, 128)\n")  # a new recipe, same version
    suite_code.cache_clear()
    after = suite_code(("recipe_pkg",))
    assert after != before
    assert training_key(INPUTS, before) != training_key(INPUTS, after)
    assert suite_code(("no_such_package_xyz",)) == VERSION
    # the installed suite's key covers its own preparation and training source
    suite_code.cache_clear()
    assert training_key(INPUTS) == training_key(INPUTS, suite_code())
    assert suite_code() != VERSION
