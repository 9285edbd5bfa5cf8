"""Scoring with a model the KFP launcher imported: a version registered at a URI only the
launcher can read (the minio:// of a standard Kubeflow Pipelines install) is scored from the
imported files, and an import that no longer matches the registry is refused."""

from __future__ import annotations

import shutil

import pytest

from gkeflow.components.predict.logic import PredictError, predict
from gkeflow.components.register.local_registry import LocalRegistry
from tests.unit.test_predict import _penguins_csv

MINIO_URI = "minio://mlpipeline/v2/artifacts/gkeflow-training/run-1/train-model/7/model"


@pytest.fixture(scope="module")
def minio_registered(trained_penguins, tmp_path_factory):
    model_dir, _ = trained_penguins
    root = tmp_path_factory.mktemp("minio-registry")
    uri = f"sqlite:///{root / 'registry.db'}"
    LocalRegistry(uri).register("penguins-classifier", MINIO_URI, {}, run_id="run-1")
    imported = root / "minio" / "model"  # where the launcher put the downloaded files
    shutil.copytree(model_dir, imported)
    return uri, imported


def _score(tmp_path, registry_uri, model_files):
    _penguins_csv(tmp_path / "new.csv", rows=30)
    return predict(data_uri=str(tmp_path / "new.csv"), output_uri=str(tmp_path / "p.parquet"),
                   model="penguins-classifier", registry_uri=registry_uri,
                   rejects_path=tmp_path / "rejected.csv", report_path=tmp_path / "report.md",
                   workdir=tmp_path / "work", model_files=model_files)


@pytest.mark.slow
def test_a_minio_registered_model_is_scored_from_the_imported_files(tmp_path,
                                                                    minio_registered):
    registry_uri, imported = minio_registered
    with pytest.raises(PredictError, match="minio://"):  # not readable without the import
        _score(tmp_path, registry_uri, None)
    result = _score(tmp_path, registry_uri, (imported, MINIO_URI))
    assert (result.rows_read, result.rows_scored, result.model_version) == (30, 30, 1)


def test_an_import_the_registry_no_longer_names_is_refused(tmp_path, minio_registered):
    registry_uri, imported = minio_registered
    with pytest.raises(PredictError, match="registry changed while the run started"):
        _score(tmp_path, registry_uri, (imported, MINIO_URI.replace("run-1", "run-0")))
