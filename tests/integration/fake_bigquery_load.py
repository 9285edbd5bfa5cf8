"""A local fake of BigQuery load jobs (REST v2), strict about requests.

It answers what ``google-cloud-bigquery`` sends for ``load_table_from_file`` with a known
size below 5 MiB (a multipart ``jobs.insert`` upload) and ``jobs.get``: the job
resource's fields are checked against an allow-list of the REST reference (unknown
fields are refused with 400), the uploaded bytes must be a Parquet file, a job id that
exists already gets 409 ALREADY_EXISTS (as BigQuery answers), and the table is replaced
(WRITE_TRUNCATE) or extended (WRITE_APPEND) atomically. Refusals are kept in
``violations``.
"""

from __future__ import annotations

import email
import email.policy
import io
import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
from werkzeug.wrappers import Request, Response

from tests.integration.wsgi_fake import WsgiFake

JOB_KEYS = {"jobReference", "configuration"}
REFERENCE_KEYS = {"projectId", "jobId", "location"}
LOAD_KEYS = {"destinationTable", "sourceFormat", "writeDisposition", "createDisposition",
             "schema", "autodetect", "parquetOptions", "schemaUpdateOptions"}
TABLE_KEYS = {"projectId", "datasetId", "tableId"}


class Refused(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class FakeBigQueryLoads(WsgiFake):
    def __init__(self, project: str):
        self.project = project
        self.tables: dict[str, pa.Table] = {}
        self.jobs: dict[str, dict] = {}
        self.violations: list[str] = []
        self.inserts = 0

    def _wsgi(self, environ, start_response):
        request = Request(environ)
        try:
            body = self._route(request)
            response = Response(json.dumps(body), status=200, content_type="application/json")
        except Refused as exc:
            if exc.status == 400:
                self.violations.append(exc.message)
            statuses = {400: "invalidQuery", 404: "notFound", 409: "duplicate"}
            response = Response(json.dumps({"error": {
                "code": exc.status, "message": exc.message,
                "errors": [{"reason": statuses.get(exc.status, "error"),
                            "message": exc.message}]}}),
                status=exc.status, content_type="application/json")
        return response(environ, start_response)

    def _route(self, request: Request) -> dict:
        upload = f"/upload/bigquery/v2/projects/{self.project}/jobs"
        if request.method == "POST" and request.path == upload:
            if request.args.get("uploadType") != "multipart":
                raise Refused(400, f"uploadType {request.args.get('uploadType')!r} not served")
            return self._insert(request)
        match = re.fullmatch(rf"/bigquery/v2/projects/{self.project}/jobs/([\w-]+)",
                             request.path)
        if request.method == "GET" and match:
            if match.group(1) not in self.jobs:
                raise Refused(404, f"Not found: Job {self.project}:{match.group(1)}")
            return self.jobs[match.group(1)]
        raise Refused(404, f"no such method: {request.method} {request.path}")

    def _insert(self, request: Request) -> dict:
        content_type = request.headers.get("Content-Type", "")
        message = email.message_from_bytes(
            b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + request.get_data(),
            policy=email.policy.HTTP)
        parts = list(message.iter_parts())
        if len(parts) != 2:
            raise Refused(400, "a multipart upload has a metadata part and a data part")
        job = json.loads(parts[0].get_content())
        data = parts[1].get_payload(decode=True)
        self._check(job)
        job_id = job["jobReference"]["jobId"]
        self.inserts += 1
        if job_id in self.jobs:
            raise Refused(409, f"Already Exists: Job {self.project}:{job_id}")
        load = job["configuration"]["load"]
        try:
            table = pq.read_table(io.BytesIO(data))
        except Exception as exc:  # noqa: BLE001 - the upload must be Parquet
            raise Refused(400, f"the uploaded data is not Parquet: {exc}") from None
        dest = load["destinationTable"]
        name = f"{dest['projectId']}.{dest['datasetId']}.{dest['tableId']}"
        if load.get("writeDisposition") == "WRITE_APPEND" and name in self.tables:
            table = pa.concat_tables([self.tables[name], table])
        self.tables[name] = table
        resource = {**job, "id": f"{self.project}:{job_id}", "kind": "bigquery#job",
                    "status": {"state": "DONE"},
                    "statistics": {"load": {"outputRows": str(table.num_rows)}}}
        self.jobs[job_id] = resource
        return resource

    def _check(self, job: dict) -> None:
        problems = []
        if set(job) - JOB_KEYS:
            problems.append(f"unknown job fields {sorted(set(job) - JOB_KEYS)}")
        if set(job.get("jobReference", {})) - REFERENCE_KEYS:
            problems.append("unknown jobReference fields")
        configuration = job.get("configuration", {})
        if set(configuration) != {"load"}:
            problems.append(f"expected a load configuration, got {sorted(configuration)}")
        load = configuration.get("load", {})
        if set(load) - LOAD_KEYS:
            problems.append(f"unknown load fields {sorted(set(load) - LOAD_KEYS)}")
        if load.get("sourceFormat") != "PARQUET":
            problems.append(f"sourceFormat {load.get('sourceFormat')!r}, expected PARQUET")
        if load.get("writeDisposition", "WRITE_APPEND") not in ("WRITE_TRUNCATE", "WRITE_APPEND",
                                                                "WRITE_EMPTY"):
            problems.append("invalid writeDisposition")
        if set(load.get("destinationTable", {})) != TABLE_KEYS:
            problems.append("destinationTable needs projectId, datasetId, tableId")
        if problems:
            raise Refused(400, "; ".join(problems))
