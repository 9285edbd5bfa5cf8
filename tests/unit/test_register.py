"""The embedded registry: versions, aliases, idempotent retries, concurrent writers."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from gkeflow.components.register.local_registry import LocalRegistry, RegistryError, registry_path
from gkeflow.components.register.logic import check_model_dir, parse_labels, register


@pytest.fixture
def model_dir(tmp_path) -> Path:
    path = tmp_path / "model"
    path.mkdir()
    (path / "saved_model.pb").write_bytes(b"\x08\x01")
    return path


def test_versions_increment_and_retry_is_idempotent(tmp_path, model_dir):
    uri = f"sqlite:///{tmp_path / 'r.db'}"
    first, created1 = register(model_dir, "gs://b/m1", "churn", {"accuracy": 0.9}, "run-1", uri)
    retry, created2 = register(model_dir, "gs://b/m1", "churn", {"accuracy": 0.9}, "run-1", uri)
    second, created3 = register(model_dir, "gs://b/m2", "churn", {"accuracy": 0.8}, "run-2", uri)
    assert (first.version, created1) == (1, True)
    assert (retry.version, created2) == (1, False)
    assert (second.version, created3) == (2, True)
    versions = LocalRegistry(uri).list(name="churn")
    assert [v.version for v in versions] == [1, 2]
    assert versions[0].metrics == {"accuracy": 0.9} and versions[0].run_id == "run-1"


def test_alias_moves_between_versions(tmp_path):
    registry = LocalRegistry(tmp_path / "r.db")
    registry.register("m", "u1", {}, "r1")
    registry.register("m", "u2", {}, "r2")
    registry.set_alias("m", 1, "champion")
    assert registry.get_by_alias("m", "champion").version == 1
    registry.set_alias("m", 2, "champion")
    assert registry.get_by_alias("m", "champion").version == 2
    assert registry.get("m", 1).aliases == ()
    with pytest.raises(RegistryError, match="no version 9"):
        registry.set_alias("m", 9, "champion")
    assert registry.get_by_alias("m", "champion").version == 2


def _register_many(args):
    db, worker = args
    registry = LocalRegistry(db)
    return [registry.register("m", f"u{worker}-{i}", {}, f"run-{worker}-{i}")[0].version
            for i in range(10)]


def test_concurrent_writers_get_distinct_versions(tmp_path):
    db = str(tmp_path / "r.db")
    LocalRegistry(db)
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        results = pool.map(_register_many, [(db, w) for w in range(4)])
    versions = sorted(v for chunk in results for v in chunk)
    assert versions == list(range(1, 41))


@pytest.mark.parametrize("name", ["", "Upper", "with space", "1starts-with-digit", "x" * 64])
def test_invalid_model_names(tmp_path, model_dir, name):
    with pytest.raises(RegistryError, match="invalid model name"):
        register(model_dir, "u", name, {}, "r", f"sqlite:///{tmp_path / 'r.db'}")


def test_bad_model_dirs_fail_before_the_registry_is_touched(tmp_path):
    db = tmp_path / "r.db"
    with pytest.raises(RegistryError, match="does not exist"):
        register(tmp_path / "missing", "u", "m", {}, "r", f"sqlite:///{db}")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RegistryError, match="is empty"):
        check_model_dir(tmp_path / "empty")
    assert not db.exists()


def test_labels_and_uris():
    assert parse_labels("team=ml, env = dev") == {"team": "ml", "env": "dev"}
    with pytest.raises(RegistryError, match="key=value"):
        parse_labels("oops")
    assert registry_path("sqlite:////abs/r.db") == Path("/abs/r.db")
    assert registry_path("sqlite:///rel/r.db") == Path("rel/r.db")
    with pytest.raises(RegistryError):
        registry_path("postgres://x")


# -- lineage, aliases under contention, old databases ------------------------------------------


def test_lineage_and_aliases_are_recorded(tmp_path, model_dir):
    uri = f"sqlite:///{tmp_path / 'r.db'}"
    version, _ = register(model_dir, "/m/1", "churn", {"accuracy": 0.9}, "run-1", uri,
                          labels={"team": "ml"}, task_key="register-model",
                          aliases=("candidate",), lineage={"data_uri": "/data.csv"})
    assert version.lineage == {"data_uri": "/data.csv", "pipeline_task": "register-model"}
    assert version.aliases == ("candidate",) and version.labels == {"team": "ml"}
    assert version.resource_name == "local://churn/versions/1"


def test_databases_without_lineage_are_upgraded(tmp_path):
    import sqlite3

    db = tmp_path / "old.db"
    conn = sqlite3.connect(db)
    conn.executescript(
        "CREATE TABLE model_versions (name TEXT NOT NULL, version INTEGER NOT NULL, "
        "uri TEXT NOT NULL, metrics TEXT NOT NULL, labels TEXT NOT NULL, run_id TEXT NOT NULL, "
        "task_key TEXT NOT NULL, created_at REAL NOT NULL, PRIMARY KEY (name, version), "
        "UNIQUE (name, run_id, task_key));"
        "INSERT INTO model_versions VALUES ('m', 1, 'u', '{}', '{}', 'r1', 'register-model', 0);"
    )
    conn.commit()
    conn.close()
    registry = LocalRegistry(db)
    assert registry.get("m", 1).lineage == {}
    assert registry.register("m", "u2", {}, "r2")[0].version == 2


def _move_alias_many(args):
    db, worker = args
    registry = LocalRegistry(db)
    for i in range(15):
        registry.set_alias("m", 1 + (worker + i) % 3, "champion")
    return True


def test_concurrent_alias_moves_leave_exactly_one_holder(tmp_path):
    db = str(tmp_path / "r.db")
    registry = LocalRegistry(db)
    for i in range(3):
        registry.register("m", f"u{i}", {}, f"run-{i}")
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        assert all(pool.map(_move_alias_many, [(db, w) for w in range(3)]))
    holders = [v.version for v in registry.list(name="m") if "champion" in v.aliases]
    assert len(holders) == 1
    assert registry.get_by_alias("m", "champion").version == holders[0]


def _register_same_run(args):
    db, _ = args
    return LocalRegistry(db).register("m", "u", {}, "the-run", task_key="register-model")


def test_concurrent_retries_of_one_run_make_one_version(tmp_path):
    db = str(tmp_path / "r.db")
    LocalRegistry(db)
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        results = pool.map(_register_same_run, [(db, w) for w in range(4)])
    assert {version.version for version, _ in results} == {1}
    assert sum(created for _, created in results) == 1


def test_invalid_labels_and_aliases_fail_before_the_registry_is_created(tmp_path, model_dir):
    db = tmp_path / "r.db"
    for kwargs, message in (({"labels": {"Team": "x"}}, "invalid label key"),
                            ({"labels": {"team": "A B"}}, "invalid value"),
                            ({"aliases": ("1st",)}, "invalid alias")):
        with pytest.raises(RegistryError, match=message):
            register(model_dir, "u", "m", {}, "r", f"sqlite:///{db}", **kwargs)
    with pytest.raises(RegistryError, match="unknown registry URI scheme 'ftp'"):
        register(model_dir, "u", "m", {}, "r", "ftp://host")
    with pytest.raises(RegistryError, match="credentials do not belong in the MLflow"):
        register(model_dir, "u", "m", {}, "r", "mlflow+https://me:pw@host")
    assert not db.exists()


def test_pipeline_step_outcome_for_the_local_registry(tmp_path, model_dir):
    from gkeflow.components.register.logic import register_for_pipeline

    uri = f"sqlite:///{tmp_path / 'r.db'}"
    kwargs = {"model_path": str(model_dir), "model_uri": "/m", "model_name": "m",
              "metrics_metadata": {"accuracy": 0.5, "passed": 1.0, "ok": True},
              "run_id": "run-1", "task_key": "register-model", "registry_uri": uri,
              "aliases": "candidate, challenger", "labels": "team=ml", "data_uri": "/d.csv"}
    first = register_for_pipeline(**kwargs)
    retry = register_for_pipeline(**kwargs)
    assert first.created and not retry.created
    assert first.metadata == {**retry.metadata, "createdNow": True}
    assert first.metadata["resourceName"] == "local://m/versions/1"
    assert first.metadata["aliases"] == ["candidate", "challenger"]
    assert first.version.metrics == {"accuracy": 0.5, "passed": 1.0}
    assert "already registered by this run and task" in retry.message


# -- names, retries, URIs, config ----------------------------------------------------------------


def test_metric_labels_round_trip_exactly():
    from gkeflow.components.register.names import metric_from_label, metric_labels, metric_to_label

    for value in (0.0, 0.9123456789012345, 1e-07, -2.5, 123456.0):
        assert metric_from_label(metric_to_label(value)) == value
    labels = metric_labels({"accuracy": 0.5, "Top-K Acc": 0.7, "nan": float("nan")}, room=10)
    assert labels == {"metric-accuracy": "0_5", "metric-top-k-acc": "0_7"}
    assert len(metric_labels({f"m{i}": 1.0 for i in range(9)}, room=3)) == 3


def test_label_sanitising():
    from gkeflow.components.register.names import sanitise_label_key, sanitise_label_value

    assert sanitise_label_value("Training-Pipeline 2026/01/01") == "training-pipeline-2026-01-01"
    long = sanitise_label_value("x" * 100)
    assert len(long) <= 63 and long != sanitise_label_value("x" * 99)
    assert sanitise_label_key("9lives") == "k9lives"


def test_retries_transient_then_reports():
    from gkeflow.components.register.retrying import TransientRegistryError, with_retries

    calls, waits = [], []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise OSError("reset")
        return "ok"

    def classify(exc):
        return TransientRegistryError(str(exc)) if isinstance(exc, OSError) else None

    assert with_retries(flaky, classify, "x", sleep=waits.append) == "ok"
    assert waits == [0.5, 1.0]
    with pytest.raises(RegistryError, match="failed after 2 attempts: reset"):
        with_retries(lambda: (_ for _ in ()).throw(OSError("reset")), classify, "x",
                     attempts=2, sleep=waits.append)
    with pytest.raises(RegistryError, match="bad request"):
        with_retries(lambda: (_ for _ in ()).throw(ValueError("bad")),
                     lambda e: RegistryError("bad request"), "x", sleep=waits.append)


def test_backend_of_and_uri_parsing():
    from gkeflow.components.register.backends import backend_of
    from gkeflow.components.register.kubeflow import parse_kubeflow_uri
    from gkeflow.components.register.vertex import parse_vertex_uri

    assert backend_of("sqlite:///r.db") == backend_of("r.db") == "local"
    assert backend_of("vertex://projects/p/locations/l") == "vertex"
    assert backend_of("kubeflow://h:1") == backend_of("https://h") == "kubeflow"
    assert parse_vertex_uri("vertex://projects/my-proj/locations/europe-west4").parent == (
        "projects/my-proj/locations/europe-west4")
    assert parse_kubeflow_uri("kubeflow://mr.kubeflow.svc:8080") == (
        "http://mr.kubeflow.svc", 8080, False)
    assert parse_kubeflow_uri("https://mr.example.com") == ("https://mr.example.com", 443, True)
    for bad in ("vertex://projects/p", "vertex://projects/P Q/locations/l"):
        with pytest.raises(RegistryError, match="invalid Vertex AI registry URI"):
            parse_vertex_uri(bad)


def test_registry_config_section(tmp_path):
    from gkeflow.pipelines.settings.config import ConfigError, load_config

    path = tmp_path / "gkeflow.yaml"
    path.write_text("registry:\n  backend: vertex\n  project: p\n  location: europe-west4\n")
    assert load_config(path).registry.registry_uri() == (
        "vertex://projects/p/locations/europe-west4")
    path.write_text("registry:\n  backend: kubeflow\n  host: mr.kubeflow\n  port: 9090\n")
    assert load_config(path).registry.registry_uri() == "http://mr.kubeflow:9090"
    path.write_text("registry:\n  backend: mlflow\n  host: mlflow.example\n")
    assert load_config(path).registry.registry_uri() == "mlflow://mlflow.example:5000"
    path.write_text("registry:\n  backend: mlflow\n  host: h\n  port: 443\n  secure: true\n")
    assert load_config(path).registry.registry_uri() == "mlflow+https://h:443"
    path.write_text("registry:\n  backend: mlflow\n")
    with pytest.raises(ConfigError, match="registry.host is required for the mlflow"):
        load_config(path).registry.registry_uri()
    path.write_text("registry:\n  uri: sqlite:////tmp/x.db\n")
    assert load_config(path).registry.registry_uri() == "sqlite:////tmp/x.db"
    path.write_text("registry:\n  backend: kubeflow\n")
    with pytest.raises(ConfigError, match="registry.host is required"):
        load_config(path).registry.registry_uri()
    path.write_text("registry:\n  host: x\n  prot: 1\n")
    with pytest.raises(ConfigError, match="registry.prot"):
        load_config(path)
