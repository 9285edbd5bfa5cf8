"""Scoring on Vertex AI: a BatchPredictionJob for a model in the Vertex AI Model Registry.

The alternative to the ``predict_batch`` step on Vertex AI: Vertex AI reads the input
(Cloud Storage JSONL or a BigQuery table), serves the registered version with its
serving container on machines it starts, and writes predictions to Cloud Storage or
BigQuery. The request body is built here and checked with
``google.cloud.aiplatform_v1.BatchPredictionJob`` (unknown fields refused) before it is
sent. The job carries a label derived from the pipeline run and the model version, so a
retried step finds the job it created instead of starting a second one; the job is
followed by :func:`gkeflow.components.cloud.follow.follow` (transient errors retried,
SIGTERM or a final give-up cancels it).

The input is sent as objects keyed by column name (``instanceConfig.instanceType:
object``, only the model's features), which is what the exported model's raw-feature
signature takes (exported as ``serve`` and ``serving_default``). Vertex AI builds such
objects from JSONL files and BigQuery rows only, so CSV input is refused with a message;
columns must carry the model's input names.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from gkeflow.components.predict.resolve import PredictError

KIND = "BatchPredictionJob"
LAUNCH_LABEL = "gkeflow-launch"
_GCS = re.compile(r"^gs://[a-z0-9][a-z0-9._-]{1,220}/.*$")
_BQ = re.compile(r"^bq://[A-Za-z0-9_:.\-]+\.\w+(\.[\w\-$]+)?$")


@dataclass(frozen=True)
class BatchJobSpec:
    """What the job runs on: machine, GPUs, replicas."""

    machine_type: str = "n1-standard-4"
    accelerator_type: str = ""  # Vertex spelling, e.g. NVIDIA_TESLA_T4
    accelerator_count: int = 0
    starting_replica_count: int = 1
    max_replica_count: int = 1


def _input_config(data_uri: str) -> dict:
    if data_uri.startswith("bq://"):
        if not _BQ.match(data_uri):
            raise PredictError(f"malformed BigQuery input {data_uri!r}")
        return {"instancesFormat": "bigquery", "bigquerySource": {"inputUri": data_uri}}
    uris = [u.strip() for u in data_uri.split(",") if u.strip()]
    if not uris or not all(_GCS.match(u) for u in uris):
        raise PredictError(f"a Vertex AI batch prediction job reads gs:// files or a bq:// "
                           f"table; got {data_uri!r}")
    bad = [u for u in uris if not u.lower().endswith((".jsonl", ".jsonl*", "*.jsonl"))]
    if bad:
        raise PredictError(
            f"input {bad[0]!r}: a batch prediction job sends each row to the model as an "
            "object keyed by column name, which Vertex AI does for JSONL files (one object "
            "per line) and BigQuery tables, not for CSV; give .jsonl files or a bq:// table, "
            "or score CSV/Parquet with the in-pipeline step (use_batch_prediction_job=false)")
    return {"instancesFormat": "jsonl", "gcsSource": {"uris": uris}}


def _output_config(output_uri: str) -> dict:
    if output_uri.startswith("bq://"):
        if not _BQ.match(output_uri):
            raise PredictError(f"malformed BigQuery output {output_uri!r}")
        return {"predictionsFormat": "bigquery",
                "bigqueryDestination": {"outputUri": output_uri}}
    if not _GCS.match(output_uri.rstrip("/") + "/"):
        raise PredictError(f"a batch prediction job writes to a gs:// prefix or a bq:// "
                           f"project or dataset; got {output_uri!r}")
    return {"predictionsFormat": "jsonl",
            "gcsDestination": {"outputUriPrefix": output_uri.rstrip("/")}}


def job_display_name(model_name: str, run_id: str) -> str:
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:12]
    return f"gkeflow-score-{model_name}-{digest}"[:128]


def batch_prediction_job_body(
    display_name: str,
    model_resource: str,
    data_uri: str,
    output_uri: str,
    features: list[str],
    key_column: str = "",
    spec: BatchJobSpec = BatchJobSpec(),
    labels: dict[str, str] | None = None,
    service_account: str = "",
) -> dict[str, Any]:
    """The REST body of ``batchPredictionJobs.create``, checked against the API's type.

    Args:
        display_name: The job's name (carries the run's hash: see :func:`job_display_name`).
        model_resource: ``projects/p/locations/l/models/m@version``.
        data_uri: gs:// JSONL file(s) (comma-separated, globs allowed) or
            bq://project.dataset.table.
        output_uri: gs:// prefix or bq://project[.dataset].
        features: Columns sent to the model (its raw features).
        key_column: Column returned with each prediction to identify the row.
        spec: Machine, accelerators and replicas.
        labels: Labels on the job.
        service_account: The job's service account; empty: Vertex AI's default.
    """
    from google.cloud import aiplatform_v1

    if not re.match(r"^projects/[^/]+/locations/[^/]+/models/[^/@]+@\d+$", model_resource):
        raise PredictError(f"model resource {model_resource!r} must name a version: "
                           "projects/<p>/locations/<l>/models/<id>@<version>")
    if spec.max_replica_count < spec.starting_replica_count or spec.starting_replica_count < 1:
        raise PredictError("replicas: need 1 <= starting_replica_count <= max_replica_count")
    if bool(spec.accelerator_type) != bool(spec.accelerator_count):
        raise PredictError("give accelerator_type and accelerator_count together")
    machine: dict[str, Any] = {"machineType": spec.machine_type}
    if spec.accelerator_type:
        machine["acceleratorType"] = spec.accelerator_type
        machine["acceleratorCount"] = spec.accelerator_count
    instance: dict[str, Any] = {"instanceType": "object", "includedFields": list(features)}
    if key_column:
        instance["keyField"] = key_column
        instance["includedFields"] = [*features, key_column] if key_column not in features \
            else list(features)
    body: dict[str, Any] = {
        "displayName": display_name,
        "model": model_resource,
        "inputConfig": _input_config(data_uri),
        "instanceConfig": instance,
        "outputConfig": _output_config(output_uri),
        "dedicatedResources": {"machineSpec": machine,
                               "startingReplicaCount": spec.starting_replica_count,
                               "maxReplicaCount": spec.max_replica_count},
        "labels": dict(labels or {}),
    }
    if service_account:
        body["serviceAccount"] = service_account
    try:  # the API's own type: unknown fields and wrong types are refused here
        aiplatform_v1.BatchPredictionJob.from_json(json.dumps(body), ignore_unknown_fields=False)
    except Exception as exc:
        raise PredictError(f"invalid BatchPredictionJob body: {exc}") from exc
    return body


@dataclass
class BatchJobOutcome:
    job_name: str
    state: str
    created: bool
    output: str
    body: dict


def launch_label(run_id: str, model_resource: str) -> str:
    """The label value that marks this run's job for this model version on every attempt."""
    return hashlib.sha256(f"{run_id}\0{model_resource}".encode()).hexdigest()[:40]


def follow_batch_job(body: dict, parent: str, run_id: str, *, api_endpoint: str = "",
                     credentials=None, policy=None, poll_s: float = 30.0,
                     timeout_s: float = 24 * 3600.0, gcp_resources_path: str = "",
                     echo=print) -> BatchJobOutcome:
    """Create (or find) the run's batch prediction job and follow it to its end.

    The job carries the label ``gkeflow-launch`` (from the run id and the model version), so
    a retried step follows the job its earlier attempt created. Every call is retried by
    ``policy`` (default: from the environment); SIGTERM, the ``timeout_s`` deadline or a
    final give-up cancels the job.

    Raises:
        gkeflow.components.cloud.follow.Ending: the job failed, or the launcher was
            cancelled or gave up; the message is one line.
    """
    from google.cloud import aiplatform_v1

    from gkeflow.components.cloud.retry import RetryPolicy
    from gkeflow.components.cloud.vertex import VertexJob, follow_vertex_job, job_client

    body = {**body, "labels": {**body.get("labels", {}),
                               LAUNCH_LABEL: launch_label(run_id, body["model"])}}
    message = aiplatform_v1.BatchPredictionJob.from_json(json.dumps(body),
                                                         ignore_unknown_fields=False)
    policy = policy or RetryPolicy.from_env()
    location = parent.split("/locations/", 1)[1]
    remote = VertexJob(job_client(location, api_endpoint, credentials), KIND, parent, message,
                       (LAUNCH_LABEL, body["labels"][LAUNCH_LABEL]), poll_s=poll_s,
                       sleep=policy.sleep)
    job = follow_vertex_job(remote, policy, echo, gcp_resources_path, deadline_s=timeout_s)
    info = job.output_info
    output = info.gcs_output_directory or info.bigquery_output_table or ""
    return BatchJobOutcome(job.name, job.state.name, remote.create_sent, output, body)


def run_batch_prediction(
    registry_uri: str,
    model: str,
    data_uri: str,
    output_uri: str,
    run_id: str,
    key_column: str = "",
    model_version: int = 0,
    model_alias: str = "",
    spec: BatchJobSpec = BatchJobSpec(),
    service_account: str = "",
    api_endpoint: str = "",
    credentials=None,
    poll_s: float = 30.0,
    timeout_s: float = 24 * 3600.0,
    policy=None,
    gcp_resources_path: str = "",
    echo=print,
) -> BatchJobOutcome:
    """Resolve ``model`` in the Vertex AI Model Registry, then create (or find) the run's
    batch prediction job and follow it to its end (:func:`follow_batch_job`)."""
    from gkeflow.components.predict.resolve import parse_model_ref, resolve_version
    from gkeflow.components.register.backends import (
        RegistrySettings,
        backend_of,
        open_registry,
    )
    from gkeflow.components.register.vertex import parse_vertex_uri

    if backend_of(registry_uri) != "vertex":
        raise PredictError("a Vertex AI batch prediction job serves models from the Vertex AI "
                           f"Model Registry; registry_uri is {registry_uri!r}")
    if not run_id:
        raise PredictError("pipeline run id is empty")
    where = parse_vertex_uri(registry_uri)
    registry = open_registry(registry_uri, RegistrySettings(api_endpoint=api_endpoint),
                             credentials=credentials)
    ref = parse_model_ref(model, model_version, model_alias)
    version, _ = resolve_version(registry_uri, ref, registry=registry)
    features = _model_features(version)
    body = batch_prediction_job_body(
        job_display_name(version.name, run_id), version.resource_name, data_uri, output_uri,
        features, key_column, spec,
        labels={"gkeflow-model": label_value(version.name),
                "gkeflow-version": str(version.version)},
        service_account=service_account)
    outcome = follow_batch_job(body, where.parent, run_id, api_endpoint=api_endpoint,
                               credentials=credentials, policy=policy, poll_s=poll_s,
                               timeout_s=timeout_s, gcp_resources_path=gcp_resources_path,
                               echo=echo)
    outcome.output = outcome.output or output_uri
    return outcome


def label_value(text: str) -> str:
    return re.sub(r"[^a-z0-9_-]+", "-", text.lower()).strip("-")[:63] or "none"


def _model_features(version) -> list[str]:
    """The model's raw feature columns, from its gkeflow_model.json next to the SavedModel."""
    from gkeflow.components.predict.resolve import MODEL_METADATA_FILE, read_text

    text = read_text(f"{version.uri.rstrip('/')}/{MODEL_METADATA_FILE}")
    if text is None:
        raise PredictError(f"no {MODEL_METADATA_FILE} at {version.uri}: cannot tell which "
                           "columns the model takes")
    features = json.loads(text)["features"]
    renamed = [f"{f['name']!r} (model input {f['input']!r})" for f in features
               if f["name"] != f["input"]]
    if renamed:
        raise PredictError(
            "a batch prediction job passes columns to the model under their own names, but "
            "the model's inputs are named differently: " + ", ".join(renamed) + "; rename "
            "those columns in the input to the model's names, or use the in-pipeline step")
    return [f["name"] for f in features]
