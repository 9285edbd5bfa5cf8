"""`gkeflow run --data` takes what prepare takes; an unchanged input reuses preparation and
training, a changed one never does; `models list --output`; `--require-registered`;
`compile` writes into the current directory."""

from __future__ import annotations

import json
import re

import pytest

from gkeflow.pipelines.cli.run_inputs import RunInputError, default_model_name, resolve_data_uri
from tests.cli.test_cli import gkeflow
from tests.conftest import make_churn_csv


def _no_credentials(monkeypatch, tmp_path) -> None:
    for name in ("GOOGLE_APPLICATION_CREDENTIALS", "STORAGE_EMULATOR_HOST",
                 "BIGQUERY_API_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "no-gcloud"))
    monkeypatch.setenv("NO_GCE_CHECK", "true")


def test_data_uris_are_checked_and_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _no_credentials(monkeypatch, tmp_path)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")
    monkeypatch.setenv("BIGQUERY_API_ENDPOINT", "http://127.0.0.1:9")
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "a.csv").write_text("x,y\n1,a\n")
    assert resolve_data_uri("parts/*.csv") == str(tmp_path / "parts" / "*.csv")
    assert resolve_data_uri("parts") == str(tmp_path / "parts")
    for uri in ("gs://bucket/data/*.csv.gz", "bq://proj.ds.table", "embedded://penguins"):
        assert resolve_data_uri(uri) == uri
    for bad, message in (("parts/*.parquet", "no files match"), ("missing.csv", "not found"),
                         ("gs:///x", "malformed Cloud Storage URI"),
                         ("bq://proj.table", "malformed BigQuery URI"),
                         ("s3://b/k", "unsupported URI scheme")):
        with pytest.raises(RunInputError, match=message):
            resolve_data_uri(bad)
    assert default_model_name("data/customer churn.csv") == "customer-churn-classifier"
    assert default_model_name("data/parts/*.csv.gz") == "parts-classifier"
    assert default_model_name("bq://proj.ds.sales_2024") == "sales-2024-classifier"


@pytest.mark.parametrize("uri", ["gs://bucket/data/*.csv", "bq://proj.ds.table"])
def test_cloud_data_without_credentials_is_refused_in_one_line(tmp_path, monkeypatch, uri):
    _no_credentials(monkeypatch, tmp_path)
    with pytest.raises(RunInputError) as refused:
        resolve_data_uri(uri)
    message = str(refused.value)
    assert f"no Google credentials found for --data {uri}" in message
    assert "gcloud auth application-default login" in message and "\n" not in message
    result = gkeflow("run", "--data", uri, "--label", "y", "--output", str(tmp_path / "out"),
                     before_any_step=True, env={
                         "CLOUDSDK_CONFIG": str(tmp_path / "no-gcloud"), "NO_GCE_CHECK": "true",
                         "GOOGLE_APPLICATION_CREDENTIALS": "", "STORAGE_EMULATOR_HOST": "",
                         "BIGQUERY_API_ENDPOINT": ""})
    assert result.returncode == 2 and "gcloud auth application-default login" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()


def test_cloud_data_with_credentials_passes_through(tmp_path, monkeypatch):
    _no_credentials(monkeypatch, tmp_path)
    key = tmp_path / "adc.json"
    key.write_text(json.dumps({"type": "authorized_user", "client_id": "c",
                               "client_secret": "s", "refresh_token": "r"}))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    assert resolve_data_uri("gs://bucket/data.csv") == "gs://bucket/data.csv"


def test_unmatched_glob_is_a_usage_error_before_any_step(tmp_path):
    result = gkeflow("run", "--data", str(tmp_path / "nothing-*.csv"), "--label", "y",
                     "--output", str(tmp_path / "out"), before_any_step=True)
    assert result.returncode == 2 and "no files match" in result.stderr
    assert not (tmp_path / "out").exists()


def test_compile_writes_compiled_in_the_current_directory(tmp_path):
    result = gkeflow("compile", "--target", "vertex", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "compiled" / "training.vertex.yaml").is_file()


def _statuses(stdout: str) -> dict[str, str]:
    return dict(re.findall(r"[✓✗] (\S+) (success|cached|failure)", stdout))


@pytest.mark.slow
def test_unchanged_data_reuses_prepare_and_train_changed_data_never_does(tmp_path):
    """Three runs of `gkeflow run` on a glob of CSVs unlike penguins (a folder name with a
    space): a cold run trains and registers; the same bytes again reuse preparation and
    training and register no copy; one changed row reuses nothing, and a gate that blocks
    exits 3 with --require-registered (model type and --param passed through)."""
    parts = tmp_path / "customer churn"
    parts.mkdir()
    header, *rows = make_churn_csv(tmp_path / "all.csv", rows=400).read_text().splitlines()
    for index in range(2):
        (parts / f"part-{index}.csv").write_text(
            "\n".join([header, *rows[index::2]]) + "\n")
    base = ("run", "--data", str(parts / "*.csv"), "--label", "status", "--epochs", "30",
            "--output", str(tmp_path / "out"))

    cold = gkeflow(*base, "--min-accuracy", "0.7")
    assert cold.returncode == 0, cold.stdout[-2000:] + cold.stderr
    # model_type auto (the default): each candidate trains in a step of its own, then
    # train-model chooses among them
    assert _statuses(cold.stdout) == {"fingerprint-data": "success", "prepare-data": "success",
                                      "train-gbdt": "success", "train-mlp": "success",
                                      "train-linear": "success",
                                      "train-model": "success", "evaluate-model": "success",
                                      "register-model": "success"}
    assert "Registered: customer-churn-classifier version 1" in cold.stdout
    assert "Gate: accuracy" in cold.stdout and "passed" in cold.stdout
    assert "✓ no champion registered: thresholds alone decide" in cold.stdout
    listed = gkeflow("models", "list", "--output", str(tmp_path / "out"))
    assert listed.returncode == 0 and "customer-churn-classifier" in listed.stdout

    # Same bytes: preparation and training are served from cache, evaluation is not; the
    # model passes the gate, and registration passes version 1 on instead of a copy.
    warm = gkeflow(*base, "--min-accuracy", "0.7", "--require-registered")
    assert warm.returncode == 0, warm.stdout[-2000:] + warm.stderr
    assert _statuses(warm.stdout) == {"fingerprint-data": "success", "prepare-data": "cached",
                                      "train-gbdt": "cached", "train-mlp": "cached",
                                      "train-linear": "cached",
                                      "train-model": "cached", "evaluate-model": "success",
                                      "register-model": "success"}
    assert "Registered: unchanged: same as customer-churn-classifier version 1" in warm.stdout
    # The cached steps' outputs are those of the cold run: the summary shows them the same.
    for line in ("Model:", "Training:", "Data:"):
        cold_line = next(x for x in cold.stdout.splitlines() if x.startswith(line))
        assert cold_line in warm.stdout.splitlines()
    listed = gkeflow("models", "list", "--output", str(tmp_path / "out"), "--format", "json")
    assert listed.returncode == 0, listed.stderr
    assert [v["version"] for v in json.loads(listed.stdout)] == [1]

    # One row changed in one file: nothing downstream of the data is reused. The model type
    # and a threshold no model meets (log_loss <= 0) reach the steps; the gate blocks
    # registration -> exit 3.
    part = parts / "part-1.csv"
    part.write_text(part.read_text().replace("stayed", "churned", 1))
    changed = gkeflow(*base, "--min-accuracy", "0", "--model-type", "wide_deep",
                      "--param", "thresholds=log_loss<=0", "--require-registered")
    assert changed.returncode == 3, changed.stdout[-2000:] + changed.stderr
    statuses = _statuses(changed.stdout)
    assert statuses["prepare-data"] == "success" and statuses["train-model"] == "success"
    assert "register-model" not in statuses and "NOT REGISTERED" in changed.stdout
    assert "log_loss" in changed.stdout and "Registered: nothing" in changed.stdout
    assert "--min-accuracy and --param thresholds=... set it" in changed.stdout
    models = sorted((tmp_path / "out" / "runs").glob("*/train-model/model/gkeflow_model.json"),
                    key=lambda path: path.stat().st_mtime)
    assert '"model": "wide_deep"' in models[-1].read_text()
