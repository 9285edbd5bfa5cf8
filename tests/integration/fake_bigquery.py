"""A local fake of the BigQuery REST API (v2) serving one table, strict about requests.

It answers the calls google-cloud-bigquery makes to read a table or run a query —
``tables.get``, ``tabledata.list``, ``jobs.query``, ``jobs.getQueryResults`` — and
checks each request: method and path, query parameters against an allow-list, JSON
bodies against the QueryRequest fields of the REST reference (unknown fields, wrong
types and legacy SQL are refused with 400). Every refusal is also kept in ``errors``
so a test fails even where the client would swallow it.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import jsonschema

from tests.integration.fake_http import SERVE_FOREVER

QUERY_REQUEST_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["query"],
    "properties": {
        "kind": {"type": "string"},
        "query": {"type": "string", "minLength": 1},
        "maxResults": {"type": "integer", "minimum": 1},
        "defaultDataset": {"type": "object"},
        "timeoutMs": {"type": "integer"},
        "jobTimeoutMs": {"type": ["integer", "string"]},
        "dryRun": {"type": "boolean"},
        "preserveNulls": {"type": "boolean"},
        "useQueryCache": {"type": "boolean"},
        "useLegacySql": {"const": False},
        "parameterMode": {"type": "string"},
        "queryParameters": {"type": "array"},
        "location": {"type": "string"},
        "formatOptions": {
            "type": "object", "additionalProperties": False,
            "properties": {"useInt64Timestamp": {"type": "boolean"},
                           "timestampOutputFormat": {"type": "string"}},
        },
        "connectionProperties": {"type": "array"},
        "labels": {"type": "object"},
        "maximumBytesBilled": {"type": "string"},
        "requestId": {"type": "string"},
        "createSession": {"type": "boolean"},
        "jobCreationMode": {"enum": ["JOB_CREATION_MODE_UNSPECIFIED", "JOB_CREATION_REQUIRED",
                                     "JOB_CREATION_OPTIONAL"]},
        "writeIncrementalResults": {"type": "boolean"},
    },
}
LIST_PARAMS = {"maxResults", "pageToken", "startIndex", "selectedFields",
               "formatOptions.useInt64Timestamp", "prettyPrint", "fields"}
QUERY_RESULT_PARAMS = LIST_PARAMS | {"location", "timeoutMs"}
TABLE_PARAMS = {"view", "prettyPrint", "fields", "selectedFields"}


class FakeBigQuery:
    """Serves ``rows`` (dicts) under ``project.dataset.table`` with ``schema`` fields
    [(name, BigQuery type)]; ``filter_fn(sql, rows)`` decides what a query returns."""

    def __init__(self, project, dataset, table, schema, rows, filter_fn=None):
        self.project, self.dataset, self.table = project, dataset, table
        self.schema = schema
        self.rows = rows
        self.filter_fn = filter_fn or (lambda sql, rows: rows)
        self.modified_ms = 1767225600000  # the table's lastModifiedTime (ms since epoch)
        self.requests: list[tuple[str, str, dict]] = []
        self.errors: list[str] = []
        self.queries: list[str] = []
        self._results: dict[str, list] = {}
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs=SERVE_FOREVER, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()

    # --- responses ---------------------------------------------------------------------
    def _schema_json(self):
        return {"fields": [{"name": n, "type": t, "mode": "NULLABLE"} for n, t in self.schema]}

    def _encode(self, rows):
        return [{"f": [{"v": None if r.get(n) is None else str(r[n])} for n, _ in self.schema]}
                for r in rows]

    def _page(self, rows, params):
        """One page: from the page token (the next row's index here; opaque to clients)
        or, on a first request, from ``startIndex``; at most ``maxResults`` rows."""
        if "pageToken" in params:
            start = int(params["pageToken"][0] or 0)
        else:
            start = int(params.get("startIndex", ["0"])[0] or 0)
        size = int(params.get("maxResults", [str(len(rows) or 1)])[0])
        page = rows[start:start + size]
        out = {"rows": self._encode(page), "totalRows": str(len(rows))}
        if start + size < len(rows):
            out["pageToken"] = str(start + size)
        return out

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _reply(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _refuse(self, message, status=400):
                fake.errors.append(f"{self.command} {self.path}: {message}")
                self._reply(status, {"error": {"code": status, "message": message,
                                               "errors": [{"reason": "invalid",
                                                           "message": message}]}})

            def _check_params(self, params, allowed):
                unknown = set(params) - allowed
                if unknown:
                    self._refuse(f"unknown query parameters {sorted(unknown)}")
                    return False
                if "pageToken" in params and "startIndex" in params:
                    # what the service answers (googleapis/nodejs-bigquery#1099)
                    self._refuse("When using a page token, you cannot specify an arbitrary "
                                 "startIndex")
                    return False
                for name in ("startIndex", "maxResults"):
                    if name in params and not (params[name][0].isdigit() and (
                            name == "startIndex" or int(params[name][0]) > 0)):
                        self._refuse(f"invalid {name} {params[name][0]!r}")
                        return False
                return True

            def do_GET(self):
                url = urlparse(self.path)
                params = parse_qs(url.query)
                fake.requests.append(("GET", url.path, params))
                base = f"/bigquery/v2/projects/{fake.project}"
                table_path = f"{base}/datasets/{fake.dataset}/tables/{fake.table}"
                if url.path == table_path:
                    if self._check_params(params, TABLE_PARAMS):
                        self._reply(200, {
                            "kind": "bigquery#table",
                            "tableReference": {"projectId": fake.project,
                                               "datasetId": fake.dataset,
                                               "tableId": fake.table},
                            "schema": fake._schema_json(), "numRows": str(len(fake.rows)),
                            "lastModifiedTime": str(fake.modified_ms), "type": "TABLE"})
                elif url.path == table_path + "/data":
                    if self._check_params(params, LIST_PARAMS):
                        self._reply(200, {"kind": "bigquery#tableDataList",
                                          **fake._page(fake.rows, params)})
                elif m := re.fullmatch(base + r"/queries/([\w\-]+)", url.path):
                    if not self._check_params(params, QUERY_RESULT_PARAMS):
                        return
                    if m[1] not in fake._results:
                        return self._refuse(f"unknown job {m[1]}", 404)
                    self._reply(200, {
                        "kind": "bigquery#getQueryResultsResponse", "jobComplete": True,
                        "jobReference": {"projectId": fake.project, "jobId": m[1]},
                        "schema": fake._schema_json(),
                        **fake._page(fake._results[m[1]], params)})
                elif m := re.fullmatch(base + r"/jobs/([\w\-]+)", url.path):
                    if not self._check_params(params, {"projection", "location", "prettyPrint"}):
                        return
                    if m[1] not in fake._results:
                        return self._refuse(f"unknown job {m[1]}", 404)
                    self._reply(200, {
                        "kind": "bigquery#job", "id": f"{fake.project}:{m[1]}",
                        "jobReference": {"projectId": fake.project, "jobId": m[1]},
                        "configuration": {"jobType": "QUERY", "query": {
                            "query": fake.queries[int(m[1].split("_")[1]) - 1],
                            "useLegacySql": False}},
                        "status": {"state": "DONE"},
                        "statistics": {"creationTime": "0", "startTime": "0", "endTime": "1",
                                       "query": {"totalBytesProcessed": "0"}}})
                elif url.path.startswith(f"{base}/datasets/"):
                    self._refuse("Not found: Table", 404)
                else:
                    self._refuse(f"unexpected GET {url.path}")

            def do_POST(self):
                url = urlparse(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                fake.requests.append(("POST", url.path, {}))
                if url.path != f"/bigquery/v2/projects/{fake.project}/queries":
                    return self._refuse(f"unexpected POST {url.path}")
                if self.headers.get("Content-Type", "").split(";")[0] != "application/json":
                    return self._refuse("the body must be application/json")
                try:
                    body = json.loads(raw)
                    jsonschema.validate(body, QUERY_REQUEST_SCHEMA)
                except (ValueError, jsonschema.ValidationError) as exc:
                    return self._refuse(f"invalid QueryRequest: {exc}")
                fake.queries.append(body["query"])
                job_id = f"job_{len(fake.queries)}"
                fake._results[job_id] = fake.filter_fn(body["query"], fake.rows)
                first = {"maxResults": [str(body["maxResults"])]} if "maxResults" in body else {}
                self._reply(200, {
                    "kind": "bigquery#queryResponse", "jobComplete": True,
                    "jobReference": {"projectId": fake.project, "jobId": job_id},
                    "schema": fake._schema_json(),
                    **fake._page(fake._results[job_id], first)})

        return Handler
