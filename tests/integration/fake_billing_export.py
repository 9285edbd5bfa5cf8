"""A local fake of BigQuery's ``jobs.query`` (REST v2) over a Cloud Billing export table,
strict about requests.

It answers ``POST /bigquery/v2/projects/{project}/queries`` as ``google-cloud-bigquery``'s
``query_and_wait`` sends it: body keys checked against the REST reference's ``QueryRequest``
(unknown keys refused with 400), GoogleSQL only, named parameters with their types, and a
query that reads the export table and filters by the run's label. It evaluates the query's
meaning on rows shaped like the export's schema (``labels`` and ``credits`` arrays,
``sku.description``, ``cost``, ``currency``, ``usage_start_time`` / ``usage_end_time``):
the rows carrying the run's label, since ``@since``, summed per step label value and SKU.
Every query is parsed as GoogleSQL by sqlglot's BigQuery dialect and its columns checked
against the export's schema (:func:`check_sql`); it must bound the scan by the ingestion-day
partition (``_PARTITIONTIME``), which the fake applies (a row's partition is the day of its
``export_time``). A second query shape, ``MAX(export_time)``, answers the export's newest
write. It fails as BigQuery does: 404 ``notFound`` for an unknown table, 403
``accessDenied``, 503 ``backendError`` (``fail_next``). Refusals are kept in ``violations``.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid

from werkzeug.wrappers import Request, Response

from tests.integration.billing_sql import SqlError, check_sql
from tests.integration.wsgi_fake import WsgiFake

QUERY_REQUEST_KEYS = {"kind", "query", "maxResults", "defaultDataset", "timeoutMs",
                      "jobTimeoutMs", "dryRun", "preserveNulls", "useQueryCache",
                      "useLegacySql", "parameterMode", "queryParameters", "location",
                      "formatOptions", "connectionProperties", "labels", "maximumBytesBilled",
                      "requestId", "createSession", "continuous", "writeIncrementalResults",
                      "jobCreationMode", "reservation"}
PARAMETERS = {"step_key": "STRING", "run_key": "STRING", "run_value": "STRING",
              "since": "TIMESTAMP"}
FRESHNESS_PARAMETERS = {"since": "TIMESTAMP"}
ROW_KEYS = {"billing_account_id", "service", "sku", "usage_start_time", "usage_end_time",
            "project", "labels", "system_labels", "location", "cost", "currency",
            "usage", "credits", "invoice", "cost_type", "resource", "export_time"}
SCHEMA = [{"name": "step", "type": "STRING", "mode": "NULLABLE"},
          {"name": "sku", "type": "STRING", "mode": "NULLABLE"},
          {"name": "cost", "type": "FLOAT", "mode": "NULLABLE"},
          {"name": "credits", "type": "FLOAT", "mode": "NULLABLE"},
          {"name": "currency", "type": "STRING", "mode": "NULLABLE"},
          {"name": "first_usage", "type": "TIMESTAMP", "mode": "NULLABLE"},
          {"name": "last_usage", "type": "TIMESTAMP", "mode": "NULLABLE"}]


class Refused(Exception):
    def __init__(self, status: int, reason: str, message: str):
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message


def export_row(*, labels, cost, sku="Nvidia Tesla T4 GPU running in Americas", credits=(),
               start, hours=1.0, currency="USD", service="Compute Engine", exported=None):
    """One row shaped like the usage cost export's schema, written (``export_time``, which
    also sets its partition) ``exported`` after its usage ends (default two hours)."""
    end = start + dt.timedelta(hours=hours)
    written = end + (dt.timedelta(hours=2) if exported is None else exported)
    return {"billing_account_id": "0123AB-4567CD-89EF01",
            "service": {"id": "6F81-5844-456A", "description": service},
            "sku": {"id": "5B6C-0E52-B5E4", "description": sku},
            "usage_start_time": start, "usage_end_time": end,
            "project": {"id": "my-project", "number": "123456789012", "name": "my-project"},
            "labels": [{"key": k, "value": v} for k, v in labels.items()],
            "location": {"location": "us-central1", "country": "US", "region": "us-central1"},
            "cost": cost, "currency": currency,
            "usage": {"amount": hours * 3600, "unit": "seconds"},
            "credits": [{"name": "Spot discount", "amount": amount, "type": "DISCOUNT"}
                        for amount in credits],
            "cost_type": "regular", "export_time": written}


class FakeBillingExport(WsgiFake):
    def __init__(self, table: str, rows: list[dict]):
        self.table = table
        self.project = table.split(".", 1)[0]
        for row in rows:
            unknown = set(row) - ROW_KEYS
            assert not unknown, f"not in the export schema: {sorted(unknown)}"
        self.rows = rows
        self.deny = False
        self.fail_next = 0
        self.queries: list[dict] = []
        self.violations: list[str] = []

    def _wsgi(self, environ, start_response):
        request = Request(environ)
        try:
            body = self._route(request)
            response = Response(json.dumps(body), status=200, content_type="application/json")
        except Refused as exc:
            if exc.status == 400:
                self.violations.append(exc.message)
            response = Response(json.dumps({"error": {
                "code": exc.status, "message": exc.message,
                "errors": [{"reason": exc.reason, "message": exc.message}],
                "status": {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED",
                           404: "NOT_FOUND", 503: "UNAVAILABLE"}[exc.status]}}),
                status=exc.status, content_type="application/json")
        return response(environ, start_response)

    def _route(self, request: Request) -> dict:
        match = re.fullmatch(r"/bigquery/v2/projects/([^/]+)/queries", request.path)
        if not match or request.method != "POST":
            raise Refused(400, "invalid", f"{request.method} {request.path} is not jobs.query")
        if self.fail_next:
            self.fail_next -= 1
            raise Refused(503, "backendError", "Error encountered during execution. Retrying "
                          "may solve the problem.")
        body = request.get_json()
        unknown = set(body) - QUERY_REQUEST_KEYS
        if unknown:
            raise Refused(400, "invalid", f"unknown QueryRequest fields {sorted(unknown)}")
        if body.get("useLegacySql") is not False:
            raise Refused(400, "invalidQuery", "the billing query must set useLegacySql false")
        if self.deny or match[1] != self.project:
            raise Refused(403, "accessDenied", f"Access Denied: Project {match[1]}: User does "
                          "not have bigquery.jobs.create permission")
        self.queries.append(body)
        query = body.get("query", "")
        tables = re.findall(r"FROM\s+`([^`]+)`", query)
        if not tables:
            raise Refused(400, "invalidQuery", "the query reads no backticked table")
        if tables[0] != self.table:
            raise Refused(404, "notFound", f"Not found: Table {tables[0].replace('.', ':', 1)} "
                          "was not found in location US")
        try:
            check_sql(query)
        except SqlError as exc:
            raise Refused(400, "invalidQuery", str(exc)) from None
        if "_PARTITIONTIME) >= DATE(@since)" not in query:
            raise Refused(400, "invalidQuery", "the billing query does not bound the partitions "
                          "it scans")
        if "MAX(e.export_time) AS latest" in query:
            return self._latest(self._parameters(body, FRESHNESS_PARAMETERS), body)
        for needed in ("UNNEST(e.labels)", "@run_key", "@run_value", "@since", "@step_key",
                       "SUM(e.cost)", "UNNEST(e.credits)", "GROUP BY"):
            if needed not in query:
                raise Refused(400, "invalidQuery", f"the billing query lacks {needed}")
        params = self._parameters(body)
        return self._answer(params, body)

    def _scanned(self, since: dt.datetime) -> list[dict]:
        """The rows in the partitions the query reads: ingestion day on or after ``since``'s."""
        return [row for row in self.rows if row["export_time"].date() >= since.date()]

    @staticmethod
    def _stamp(body: dict, value: dt.datetime) -> str:
        micros = int(value.timestamp() * 1_000_000)
        int64 = (body.get("formatOptions") or {}).get("useInt64Timestamp")
        return str(micros) if int64 else f"{micros / 1e6:.6f}"

    def _latest(self, params: dict, body: dict) -> dict:
        written = [row["export_time"] for row in self._scanned(params["since"])]
        value = self._stamp(body, max(written)) if written else None
        return {"kind": "bigquery#queryResponse",
                "schema": {"fields": [{"name": "latest", "type": "TIMESTAMP",
                                       "mode": "NULLABLE"}]},
                "jobReference": {"projectId": self.project, "jobId": f"job_{uuid.uuid4().hex}",
                                 "location": "US"},
                "totalRows": "1", "rows": [{"f": [{"v": value}]}], "totalBytesProcessed": "512",
                "jobComplete": True, "cacheHit": False}

    def _parameters(self, body: dict, expected: dict | None = None) -> dict:
        expected = PARAMETERS if expected is None else expected
        if body.get("parameterMode") != "NAMED":
            raise Refused(400, "invalidQuery", "parameterMode must be NAMED")
        found = {}
        for param in body.get("queryParameters", []):
            name, kind = param.get("name"), param.get("parameterType", {}).get("type")
            if expected.get(name) != kind:
                raise Refused(400, "invalidQuery", f"query parameter {name} of type {kind}")
            value = param.get("parameterValue", {}).get("value")
            if not isinstance(value, str):
                raise Refused(400, "invalidQuery", f"query parameter {name} has no value")
            found[name] = value
        if set(found) != set(expected):
            raise Refused(400, "invalidQuery", f"query parameters {sorted(found)}")
        since = found["since"].replace(" ", "T").replace("+00:00", "").rstrip("Z")
        found["since"] = dt.datetime.fromisoformat(since).replace(tzinfo=dt.UTC)
        return found

    def _answer(self, params: dict, body: dict) -> dict:
        groups: dict[tuple[str, str], dict] = {}
        for row in self._scanned(params["since"]):
            labels = {item["key"]: item["value"] for item in row["labels"]}
            if labels.get(params["run_key"]) != params["run_value"]:
                continue
            if row["usage_start_time"] < params["since"]:
                continue
            key = (labels.get(params["step_key"], ""), row["sku"]["description"])
            group = groups.setdefault(key, {"cost": 0.0, "credits": 0.0, "currency": "",
                                            "first": row["usage_start_time"],
                                            "last": row["usage_end_time"]})
            group["cost"] += row["cost"]
            group["credits"] += sum(c["amount"] for c in row["credits"])
            group["currency"] = group["currency"] or row["currency"]
            group["first"] = min(group["first"], row["usage_start_time"])
            group["last"] = max(group["last"], row["usage_end_time"])
        def stamp(value: dt.datetime) -> str:
            return self._stamp(body, value)

        rows = [{"f": [{"v": step}, {"v": sku}, {"v": repr(g["cost"])},
                       {"v": repr(g["credits"])}, {"v": g["currency"]},
                       {"v": stamp(g["first"])}, {"v": stamp(g["last"])}]}
                for (step, sku), g in sorted(groups.items())]
        return {"kind": "bigquery#queryResponse", "schema": {"fields": SCHEMA},
                "jobReference": {"projectId": self.project, "jobId": f"job_{uuid.uuid4().hex}",
                                 "location": "US"},
                "totalRows": str(len(rows)), "rows": rows, "totalBytesProcessed": "1024",
                "jobComplete": True, "cacheHit": False}
