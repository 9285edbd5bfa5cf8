"""The embedded registry: versions, aliases, idempotent retries, concurrent writers."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from components.register.local_registry import LocalRegistry, RegistryError, registry_path
from components.register.logic import check_model_dir, parse_labels, register


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
